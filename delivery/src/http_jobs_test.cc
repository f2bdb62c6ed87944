// The http job kind: requests built from payloads and queue targets, and an
// engine (the in-memory example plugin, real loader) delivering to a real
// cpp-httplib server on 127.0.0.1, each outcome ending its job as documented.
#include "conveyor/http_jobs.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "testing/fault_injecting_storage.hpp"
#include "testing/hmac_hex.hpp"
#include "testing/sync.hpp"

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using http_delivery::testing::hmac_hex;
using testing::eventually;

Job job_with(std::string queue, std::string payload) {
  Job j;
  j.id = 7;
  j.queue = std::move(queue);
  j.kind = "http";
  j.payload = std::move(payload);
  return j;
}

std::string request_error(const std::string& payload) {
  try {
    http_request_for(job_with("q", payload), nullptr, "");
  } catch (const PermanentError& e) {
    return e.what();
  }
  return "";
}

TEST(HttpRequestFor, ThePayloadNamesTheRequest) {
  const auto r =
      http_request_for(job_with("q", R"({"url": "https://api.example.com/x", "method": "PUT",
                        "headers": {"Authorization": "Bearer t"}, "body": {"a": 1},
                        "timeout_ms": 1500, "follow_redirects": true})"),
                       nullptr, "");
  EXPECT_EQ(r.url, "https://api.example.com/x");
  EXPECT_EQ(r.method, "PUT");
  EXPECT_EQ(r.body, R"({"a":1})") << "a JSON body is sent as JSON";
  EXPECT_EQ(r.timeout, 1500ms);
  EXPECT_TRUE(r.follow_redirects);
  EXPECT_TRUE(r.secret.empty());
  using H = std::pair<std::string, std::string>;
  EXPECT_EQ(r.headers,
            (std::vector<H>{{"Authorization", "Bearer t"}, {"Content-Type", "application/json"}}));
}

TEST(HttpRequestFor, DefaultsAndAStringBodyAsIs) {
  const auto r = http_request_for(job_with("q", R"({"url": "http://a.example/", "body": "x=1",
                        "headers": {"content-type": "text/plain"}})"),
                                  nullptr, "");
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.body, "x=1");
  EXPECT_EQ(r.timeout, 30000ms);
  EXPECT_FALSE(r.follow_redirects);
  ASSERT_EQ(r.headers.size(), 1u) << "a Content-Type given in any case is kept, not doubled";
}

TEST(HttpRequestFor, TheQueueTargetMakesThePayloadTheBody) {
  HttpTargetConfig target;
  target.url = "https://hooks.example/in";
  target.method = "PATCH";
  target.timeout_ms = 900;
  target.headers = {{"X-Team", "billing"}};
  const auto r = http_request_for(job_with("q", R"({"order": 42})"), &target, "s3cret");
  EXPECT_EQ(r.url, target.url);
  EXPECT_EQ(r.method, "PATCH");
  EXPECT_EQ(r.body, R"({"order": 42})") << "the payload, byte for byte";
  EXPECT_EQ(r.timeout, 900ms);
  EXPECT_EQ(r.secret, "s3cret");
  EXPECT_EQ(r.headers.size(), 2u);
}

TEST(HttpRequestFor, ABadPayloadSaysWhichFieldAndWhatItTakes) {
  EXPECT_NE(request_error("not json").find("it is not JSON"), std::string::npos);
  EXPECT_NE(request_error("[1]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(request_error("{}").find("it has no url"), std::string::npos);
  EXPECT_EQ(request_error(R"({"url": "ftp://x/"})"),
            "http job payload: url must be an http:// or https:// URL with a host, got "
            "\"ftp://x/\"");
  EXPECT_EQ(request_error(R"({"url": 5})"), "http job payload: url must be a string, got number");
  EXPECT_EQ(request_error(R"({"url": "http://x/", "method": "get"})"),
            "http job payload: method must be an HTTP method in upper case (GET, POST, PUT, "
            "PATCH, DELETE, ...), got \"get\"");
  EXPECT_EQ(request_error(R"({"url": "http://x/", "headers": {"A": 1}})"),
            "http job payload: headers.A must be a string, got number");
  EXPECT_EQ(request_error(R"({"url": "http://x/", "headers": {"A": "x\ny"}})"),
            "http job payload: header A: value must not contain CR, LF or NUL, got "
            "\"x\\x0ay\"");
  EXPECT_EQ(request_error(R"({"url": "http://x/", "timeout_ms": 0})"),
            "http job payload: timeout_ms must be an integer from 1 to 3600000, got 0");
  EXPECT_EQ(request_error(R"({"url": "http://x/", "uri": "y"})"),
            "http job payload: \"uri\" is not a request field (url, method, headers, body, "
            "timeout_ms, follow_redirects)");
}

// ---- an engine delivering to a real server ------------------------------------

class HttpJobsTest : public ::testing::Test {
 protected:
  HttpJobsTest() {
    config.engine.poll_interval_ms = 20;
    config.engine.retry_backoff_base_ms = 10;
    config.engine.backoff_base_ms = 10;
    config.engine.shutdown_timeout_ms = 2000;
    server.Post("/ok", [&](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu);
      bodies.push_back(req.body);
      if (req.has_header("Conveyor-Signature"))
        signatures.push_back({req.get_header_value("Conveyor-Timestamp"),
                              req.get_header_value("Conveyor-Signature")});
      res.set_content("fine", "text/plain");
    });
    server.Post("/missing", [](const httplib::Request&, httplib::Response& res) {
      res.status = 404;
      res.set_content("no such hook", "text/plain");
    });
    // Fails with 500 the first time, then succeeds.
    server.Post("/flaky", [&](const httplib::Request&, httplib::Response& res) {
      res.status = flaky_calls++ == 0 ? 500 : 200;
    });
    // Busy (429, Retry-After: 1) the first time, then succeeds.
    server.Post("/busy", [&](const httplib::Request&, httplib::Response& res) {
      if (busy_calls++ == 0) {
        res.status = 429;
        res.set_header("Retry-After", "1");
      }
    });
    // "Retry later: now" (Retry-After: 0) the first six times, then succeeds.
    server.Post("/now", [&](const httplib::Request&, httplib::Response& res) {
      if (now_calls++ < 6) {
        res.status = 429;
        res.set_header("Retry-After", "0");
      }
    });
    port = server.bind_to_any_port("127.0.0.1");
    listener = std::thread([this] { server.listen_after_bind(); });
    // A stop() before the loop runs would be lost and join() would hang.
    EXPECT_TRUE(eventually([&] { return server.is_running(); }));
  }
  ~HttpJobsTest() override {
    server.stop();
    listener.join();
  }
  std::string url(const std::string& path) const {
    return fmt::format("http://127.0.0.1:{}{}", port, path);
  }
  std::unique_ptr<Engine> make() {
    return EngineInternals::make(config, SystemClock::instance(), storage);
  }
  std::string payload_for(const std::string& path) const {
    return fmt::format(R"({{"url": "{}", "body": {{"n": 1}}}})", url(path));
  }
  Job finished(Engine& e, int64_t id) {
    EXPECT_TRUE(eventually(
        [&] {
          const JobState s = e.get_job(id).value().state;
          return s == JobState::kCompleted || s == JobState::kFailed;
        },
        20s));
    return e.get_job(id).value();
  }

  Config config;
  std::shared_ptr<testing::FaultInjectingStorage> storage =
      std::make_shared<testing::FaultInjectingStorage>(testing::open_memory_storage());
  httplib::Server server;
  int port = 0;
  std::thread listener;
  std::mutex mu;
  std::vector<std::string> bodies;                              // mu
  std::vector<std::pair<std::string, std::string>> signatures;  // mu
  std::atomic<int> flaky_calls{0}, busy_calls{0}, now_calls{0};
};

TEST_F(HttpJobsTest, EachResponseEndsItsJobAsTheOutcomeTableSays) {
  config.http.allow_hosts = {"127.0.0.1"};
  auto engine = make();
  HttpJobs http(*engine);
  const int64_t ok = engine->enqueue("hooks", "http", payload_for("/ok"));
  const int64_t missing = engine->enqueue("hooks", "http", payload_for("/missing"));
  const int64_t flaky = engine->enqueue("hooks", "http", payload_for("/flaky"));
  const int64_t bad = engine->enqueue("hooks", "http", R"({"url": "gopher://x/"})");
  engine->start();

  const Job done = finished(*engine, ok);
  EXPECT_EQ(done.state, JobState::kCompleted);
  EXPECT_EQ(done.attempt, 1);
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(bodies, std::vector<std::string>{R"({"n":1})"});
  }
  const Job gone = finished(*engine, missing);
  EXPECT_EQ(gone.state, JobState::kFailed) << "a 404 is not retried";
  EXPECT_EQ(gone.attempt, 1);
  EXPECT_EQ(gone.last_error, "HTTP 404: no such hook");
  const Job retried = finished(*engine, flaky);
  EXPECT_EQ(retried.state, JobState::kCompleted);
  EXPECT_EQ(retried.attempt, 2) << "a 500 is a failed attempt, retried";
  const Job refused = finished(*engine, bad);
  EXPECT_EQ(refused.state, JobState::kFailed);
  EXPECT_NE(refused.last_error.find("url must be an http:// or https:// URL"), std::string::npos)
      << refused.last_error;
  engine->stop();
}

TEST_F(HttpJobsTest, A429GivesTheAttemptBackAndHoldsTheQueueForRetryAfter) {
  config.http.allow_hosts = {"127.0.0.1"};
  auto engine = make();
  HttpJobs http(*engine);
  const int64_t id = engine->enqueue("hooks", "http", payload_for("/busy"));
  engine->start();
  ASSERT_TRUE(eventually([&] { return busy_calls.load() == 1; }));
  ASSERT_TRUE(eventually([&] { return EngineInternals::backoffs(*engine).count("hooks") == 1; }));
  const int64_t until = EngineInternals::backoffs(*engine).at("hooks");
  const int64_t now = SystemClock::instance().wall_now_us();
  EXPECT_GT(until, now + 500'000) << "held for Retry-After: 1";
  EXPECT_LE(until, now + 1'000'000);
  const Job done = finished(*engine, id);
  EXPECT_EQ(done.state, JobState::kCompleted);
  EXPECT_EQ(done.attempt, 1) << "the 429 spent no attempt";
  EXPECT_GE(SystemClock::instance().wall_now_us(), until) << "not retried before the hold ended";
  EXPECT_EQ(EngineInternals::metrics(*engine).queue("hooks").backoffs.load(), 1u);
  engine->stop();
}

// Retry-After: 0 means "now": each is a hold of zero. Before, it read as
// "no delay named" and doubled from backoff_base_ms: 1 + 2 + 4 + 8 + 16 + 32
// s before the seventh request.
TEST_F(HttpJobsTest, RetryAfterZeroIsAHoldOfZeroThatNeverGrows) {
  config.http.allow_hosts = {"127.0.0.1"};
  config.engine.backoff_base_ms = 1000;
  auto engine = make();
  HttpJobs http(*engine);
  const int64_t id = engine->enqueue("hooks", "http", payload_for("/now"));
  const auto start = std::chrono::steady_clock::now();
  engine->start();
  const Job done = finished(*engine, id);  // within 20 s
  EXPECT_EQ(done.state, JobState::kCompleted);
  EXPECT_EQ(done.attempt, 1) << "no 429 spent an attempt";
  EXPECT_EQ(now_calls.load(), 7);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_EQ(EngineInternals::metrics(*engine).queue("hooks").backoffs.load(), 6u)
      << "each refusal of a request sent after the last hold is a hold";
  engine->stop();
}

TEST_F(HttpJobsTest, APrivateTargetIsRefusedUnlessAllowedSayingWhatToSet) {
  auto engine = make();  // no [http] allowance
  HttpJobs http(*engine);
  const int64_t id = engine->enqueue("hooks", "http", payload_for("/ok"));
  engine->start();
  const Job refused = finished(*engine, id);
  EXPECT_EQ(refused.state, JobState::kFailed);
  EXPECT_EQ(refused.attempt, 1) << "refused at once, not retried";
  EXPECT_NE(refused.last_error.find("127.0.0.1 is a loopback address; set [http] allow_private = "
                                    "true or list the host in [http] allow_hosts"),
            std::string::npos)
      << refused.last_error;
  std::lock_guard lock(mu);
  EXPECT_TRUE(bodies.empty()) << "nothing reached the server";
}

TEST_F(HttpJobsTest, AQueueTargetSendsThePayloadAsTheBodySigned) {
  config.http.allow_private = true;
  HttpTargetConfig target;
  target.url = url("/ok");
  target.secret_env = "HOOKS_SECRET";
  config.queues["hooks"].http = target;
  auto engine = make();
  HttpJobs http(*engine, [](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "HOOKS_SECRET") return "s3cret";
    return std::nullopt;
  });
  const int64_t id = engine->enqueue("hooks", "http", R"({"order": 42})");
  engine->start();
  EXPECT_EQ(finished(*engine, id).state, JobState::kCompleted);
  std::lock_guard lock(mu);
  ASSERT_EQ(bodies, std::vector<std::string>{R"({"order": 42})"});
  ASSERT_EQ(signatures.size(), 1u);
  const auto& [timestamp, signature] = signatures[0];
  EXPECT_EQ(signature, "v1=" + hmac_hex("s3cret", timestamp + "." + bodies[0]));
}

TEST_F(HttpJobsTest, AnUnsetSecretVariableIsAConfigErrorNamingIt) {
  HttpTargetConfig target;
  target.url = url("/ok");
  target.secret_env = "HOOKS_SECRET";
  config.queues["hooks"].http = target;
  config.source = "conveyor.toml";
  auto engine = make();
  try {
    HttpJobs http(*engine, [](const char*) -> std::optional<std::string> { return std::nullopt; });
    FAIL() << "started without its secret";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "conveyor.toml: queues.hooks.http.secret_env: environment variable HOOKS_SECRET is "
              "not set (set it to the secret that signs the queue's requests, or remove "
              "secret_env to send them unsigned)");
  }
}

}  // namespace
}  // namespace conveyor
