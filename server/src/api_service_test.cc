// The API's methods on a real engine over the real SQLite plugin, without
// HTTP: what each returns and how each refuses bad input. Requests and
// answers are written here as JSON through the JSON codec.
#include "api_service.hpp"
#include "api_codec.hpp"
#include "test_support.hpp"

#include <conveyor/api_messages.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>

#include <gtest/gtest.h>

#include <optional>

#include <mutex>

#include <condition_variable>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

namespace conveyor {
namespace {

using nlohmann::json;

class ApiServiceTest : public ::testing::Test {
 protected:
  ApiServiceTest() {
    Config c = test::sqlite_config(dir_);
    c.engine.rate_limit_rate_per_sec = 100;
    c.engine.rate_limit_burst = 5;
    engine_ = std::make_unique<Engine>(c);
    api_ = std::make_unique<ApiService>(*engine_);
  }
  ~ApiServiceTest() override {
    api_.reset();
    engine_.reset();
  }

  json call(const std::string& method, const json& request) {
    const auto* m = api_->find(method);
    if (!m) throw std::runtime_error("no method " + method);
    const auto message = m->new_request();
    api::decode(api::Codec::kJson, request.dump(), *message);
    return json::parse(api::encode(api::Codec::kJson, *api_->call(*m, *message)));
  }
  // The ApiError a call raises.
  ApiError error(const std::string& method, const json& request) {
    try {
      call(method, request);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << method << " did not fail";
    return ApiError(ApiCode::kUnknown, "");
  }

  static constexpr const char* kSet = "/conveyor.v1.AdminService/SetQueueRateLimit";
  static constexpr const char* kDelete = "/conveyor.v1.AdminService/DeleteQueueRateLimit";
  static constexpr const char* kList = "/conveyor.v1.AdminService/ListRateLimits";
  static constexpr const char* kSwitch = "/conveyor.v1.AdminService/SetRateLimitingEnabled";
  static constexpr const char* kQueues = "/conveyor.v1.AdminService/ListQueues";
  static constexpr const char* kPause = "/conveyor.v1.AdminService/PauseQueue";
  static constexpr const char* kResume = "/conveyor.v1.AdminService/ResumeQueue";
  static constexpr const char* kEnqueue = "/conveyor.v1.TaskService/Enqueue";
  static constexpr const char* kBatch = "/conveyor.v1.TaskService/EnqueueBatch";
  static constexpr const char* kGet = "/conveyor.v1.TaskService/GetJob";
  static constexpr const char* kListJobs = "/conveyor.v1.AdminService/ListJobs";
  static constexpr const char* kListKeys = "/conveyor.v1.AdminService/ListKeys";
  static constexpr const char* kRetry = "/conveyor.v1.AdminService/RetryJobs";
  static constexpr const char* kCancel = "/conveyor.v1.AdminService/CancelJob";
  static constexpr const char* kDeleteJobs = "/conveyor.v1.AdminService/DeleteJobs";
  static constexpr const char* kWeight = "/conveyor.v1.AdminService/SetKeyWeight";
  static constexpr const char* kDeleteWeight = "/conveyor.v1.AdminService/DeleteKeyWeight";

  int64_t enqueue(const std::string& queue, const std::string& kind, double delay_s = 0) {
    json r =
        call(kEnqueue, {{"job", {{"queue", queue}, {"kind", kind}, {"delaySeconds", delay_s}}}});
    return std::stoll(r["id"].get<std::string>());
  }
  std::string state_of(int64_t id) { return call(kGet, {{"id", id}})["job"]["state"]; }
  // Polls until pred holds (the engine works in its own threads); false after 20 s.
  template <typename Pred>
  static bool eventually(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  // The message of the invalid_argument a call raises.
  std::string invalid(const std::string& method, const json& request) {
    ApiError e = error(method, request);
    EXPECT_EQ(e.code(), ApiCode::kInvalidArgument) << e.what();
    return e.what();
  }
  static std::vector<int64_t> ids_of(const json& jobs) {
    std::vector<int64_t> out;
    for (const auto& j : jobs) out.push_back(std::stoll(j["id"].get<std::string>()));
    return out;
  }

  test::TempDir dir_;  // removed after the engine
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiService> api_;
};

TEST_F(ApiServiceTest, MethodsAndWhichOnesMutate) {
  EXPECT_EQ(api_->paths().size(), 24u);
  for (const char* m :
       {"/conveyor.v1.AdminService/CancelJobs", "/conveyor.v1.AdminService/DeleteQueue"}) {
    ASSERT_NE(api_->find(m), nullptr) << m;
    EXPECT_TRUE(api_->find(m)->mutates) << m;
  }
  for (const char* m : {"Claim", "Complete", "Fail", "Heartbeat", "Release"}) {
    const std::string path = std::string("/conveyor.v1.WorkerService/") + m;
    ASSERT_NE(api_->find(path), nullptr) << path;
    EXPECT_TRUE(api_->find(path)->mutates) << path;  // refused by a read-only server
  }
  EXPECT_TRUE(api_->find("/conveyor.v1.WorkerService/Claim")->call_async);
  for (const char* m : {kSet, kDelete, kPause, kResume, kEnqueue, kBatch, kRetry, kCancel,
                        kDeleteJobs, kSwitch, kWeight, kDeleteWeight})
    EXPECT_TRUE(api_->find(m)->mutates) << m;
  for (const char* m : {kList, kQueues, kGet, kListJobs, kListKeys})
    EXPECT_FALSE(api_->find(m)->mutates) << m;
  EXPECT_EQ(api_->find("/conveyor.v1.AdminService/Nope"), nullptr);
}

TEST_F(ApiServiceTest, SetListDeleteRateLimit) {
  json r = call(kSet, {{"queue", "email"}, {"ratePerSec", 50}, {"burst", 10}});
  EXPECT_EQ(r["override"]["queue"], "email");
  EXPECT_EQ(r["override"]["ratePerSec"], 50.0);
  EXPECT_EQ(r["override"]["burst"], 10);
  EXPECT_EQ(r["override"]["scope"], "process");  // the default
  EXPECT_FALSE(r["override"]["updatedAt"].get<std::string>().empty());
  call(kSet, {{"queue", "sms"}, {"rate_per_sec", "2.5"}, {"burst", "3"}});  // .proto names, strings
  r = call(kSet, {{"queue", "push"}, {"ratePerSec", 4}, {"burst", 2}, {"scope", "fleet"}});
  EXPECT_EQ(r["override"]["scope"], "fleet");

  r = call(kList, json::object());
  EXPECT_EQ(r["enabled"], true);
  EXPECT_EQ(r["enabledSource"], "config");  // nothing stored yet
  EXPECT_EQ(r["defaultLimit"], json::parse(R"({"ratePerSec":100.0,"burst":5,"scope":"process"})"));
  ASSERT_EQ(r["overrides"].size(), 3u);
  EXPECT_EQ(r["overrides"][0]["queue"], "email");
  EXPECT_EQ(r["overrides"][0]["scope"], "process");
  EXPECT_EQ(r["overrides"][1]["queue"], "push");
  EXPECT_EQ(r["overrides"][1]["scope"], "fleet");
  EXPECT_EQ(r["overrides"][2]["queue"], "sms");
  EXPECT_EQ(r["overrides"][2]["ratePerSec"], 2.5);

  r = call(kQueues, json::object());
  ASSERT_EQ(r["queues"].size(), 3u);
  EXPECT_EQ(r["queues"][0]["queue"], "email");
  EXPECT_EQ(r["queues"][0]["limit"],
            json::parse(R"({"ratePerSec":50.0,"burst":10,"scope":"process","source":"override"})"));
  EXPECT_EQ(r["queues"][1]["queue"], "push");
  EXPECT_EQ(r["queues"][1]["limit"],
            json::parse(R"({"ratePerSec":4.0,"burst":2,"scope":"fleet","source":"override"})"));
  // Set again as process: the scope is replaced with the rest.
  call(kSet, {{"queue", "push"}, {"ratePerSec", 4}, {"burst", 2}, {"scope", "process"}});
  EXPECT_EQ(call(kList, json::object())["overrides"][1]["scope"], "process");

  EXPECT_EQ(call(kDelete, {{"queue", "email"}}), json::object());
  ApiError e = error(kDelete, {{"queue", "email"}});
  EXPECT_EQ(e.code(), ApiCode::kNotFound);
  EXPECT_STREQ(e.what(), "queue email has no rate-limit override");
  EXPECT_EQ(call(kList, json::object())["overrides"].size(), 2u);
}

TEST_F(ApiServiceTest, TheKillSwitchIsStoredAndAnswersItsState) {
  call(kSet, {{"queue", "email"}, {"ratePerSec", 50}, {"burst", 10}});
  json r = call(kSwitch, {{"enabled", false}});
  EXPECT_EQ(r, json::parse(R"({"enabled":false,"enabledSource":"storage"})"));
  r = call(kList, json::object());
  EXPECT_EQ(r["enabled"], false);
  EXPECT_EQ(r["enabledSource"], "storage");
  EXPECT_EQ(r["overrides"].size(), 1u);  // kept
  EXPECT_EQ(call(kQueues, json::object())["queues"][0]["limit"]["source"], "disabled");
  // Another engine on the same storage reads the stored switch, not its config's.
  {
    Engine other(test::sqlite_config(dir_));
    EXPECT_EQ(other.rate_limiting(), (RateLimitingState{false, SwitchSource::kStorage}));
  }
  r = call(kSwitch, {{"enabled", true}});
  EXPECT_EQ(r, json::parse(R"({"enabled":true,"enabledSource":"storage"})"));
  r = call(kList, json::object());
  EXPECT_EQ(r["enabled"], true);
  EXPECT_EQ(r["enabledSource"], "storage");
  EXPECT_EQ(call(kQueues, json::object())["queues"][0]["limit"]["source"], "override");
  EXPECT_EQ(invalid(kSwitch, {{"enabled", "off"}}).rfind("enabled: ", 0), 0u);
}

// The kill switch turns every limit off on every process: enabled must be
// sent, and be a JSON boolean. Anything else (absent, null, a string, a
// number) is refused, saying what to send, and changes nothing.
TEST_F(ApiServiceTest, TheKillSwitchNeedsAnExplicitBoolean) {
  const auto* m = api_->find(kSwitch);
  ASSERT_NE(m, nullptr);
  // The invalid_argument message of a call with this body in codec.
  const auto refused = [&](api::Codec codec, const std::string& body) -> std::string {
    try {
      const auto request = m->new_request();
      api::decode(codec, body, *request);
      api_->call(*m, *request);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.code(), ApiCode::kInvalidArgument) << body << ": " << e.what();
      return e.what();
    }
    ADD_FAILURE() << "accepted: " << body;
    return {};
  };
  const std::string required =
      R"(enabled: is required; send {"enabled": true} or {"enabled": false})";
  const auto expect_all_refused = [&] {
    for (const char* body : {"{}", "", R"({"enabled":null})"})
      EXPECT_EQ(refused(api::Codec::kJson, body), required) << body;
    EXPECT_EQ(refused(api::Codec::kJson, R"({"enabled":"no"})"),
              R"(enabled: must be true or false (a JSON boolean), got "no")");
    EXPECT_EQ(refused(api::Codec::kJson, R"({"enabled":"false"})"),
              R"(enabled: must be true or false (a JSON boolean), got "false")");
    EXPECT_EQ(refused(api::Codec::kJson, R"({"enabled":"true"})"),
              R"(enabled: must be true or false (a JSON boolean), got "true")");
    EXPECT_EQ(refused(api::Codec::kJson, R"({"enabled":0})"),
              "enabled: must be true or false (a JSON boolean), got 0");
    EXPECT_EQ(refused(api::Codec::kJson, R"({"enabled":1})"),
              "enabled: must be true or false (a JSON boolean), got 1");
    // libprotobuf's JSON parser alone took these too ("yes", "1", "t", ...).
    EXPECT_EQ(refused(api::Codec::kJson, R"({"enabled":"yes"})"),
              R"(enabled: must be true or false (a JSON boolean), got "yes")");
    // libprotobuf's parser alone also read these as false.
    for (const char* body : {"{'enabled':'no'}", R"({enabled:"no"})", R"({"enabled":"no",})",
                             R"({"enabled":"no","enabled":null})"})
      EXPECT_EQ(refused(api::Codec::kJson, body).rfind("body is not valid JSON: ", 0), 0u) << body;
    // Binary: an empty message (what a client without presence sends for
    // false), and field 1 as a string (not a bool: kept as an unknown field).
    EXPECT_EQ(refused(api::Codec::kProto, ""), required);
    EXPECT_EQ(refused(api::Codec::kProto, std::string("\x0a\x02no", 4)), required);
  };
  // From the config's state: none of them turns rate limiting off.
  expect_all_refused();
  EXPECT_EQ(engine_->rate_limiting(), (RateLimitingState{true, SwitchSource::kConfig}));
  EXPECT_EQ(call(kList, json::object())["enabledSource"], "config");

  // false and true, as JSON booleans and as binary with the field present.
  EXPECT_EQ(call(kSwitch, {{"enabled", false}}),
            json::parse(R"({"enabled":false,"enabledSource":"storage"})"));
  EXPECT_EQ(engine_->rate_limiting(), (RateLimitingState{false, SwitchSource::kStorage}));
  // Stored off: none of them turns it back on.
  expect_all_refused();
  EXPECT_EQ(engine_->rate_limiting(), (RateLimitingState{false, SwitchSource::kStorage}));
  EXPECT_EQ(call(kSwitch, {{"enabled", true}}),
            json::parse(R"({"enabled":true,"enabledSource":"storage"})"));
  EXPECT_EQ(engine_->rate_limiting(), (RateLimitingState{true, SwitchSource::kStorage}));

  const auto binary = [&](const std::string& body) {
    const auto request = m->new_request();
    api::decode(api::Codec::kProto, body, *request);
    v1::SetRateLimitingEnabledResponse response;
    response.CopyFrom(*api_->call(*m, *request));
    return response.enabled();
  };
  v1::SetRateLimitingEnabledRequest request;
  request.set_enabled(false);
  EXPECT_EQ(request.SerializeAsString(), std::string("\x08\x00", 2));  // present, though false
  EXPECT_FALSE(binary(request.SerializeAsString()));
  EXPECT_EQ(engine_->rate_limiting(), (RateLimitingState{false, SwitchSource::kStorage}));
  request.set_enabled(true);
  EXPECT_TRUE(binary(request.SerializeAsString()));
  EXPECT_EQ(engine_->rate_limiting(), (RateLimitingState{true, SwitchSource::kStorage}));
}

TEST_F(ApiServiceTest, CostRoundTripsAndIsChecked) {
  json r =
      call(kEnqueue,
           {{"job", {{"queue", "costly"}, {"kind", "noop"}, {"cost", 3}, {"delaySeconds", 3600}}}});
  json job = call(kGet, {{"id", r["id"]}})["job"];
  EXPECT_EQ(job["cost"], 3);
  r = call(kEnqueue, {{"job", {{"queue", "costly"}, {"kind", "noop"}, {"delaySeconds", 3600}}}});
  EXPECT_EQ(call(kGet, {{"id", r["id"]}})["job"]["cost"], 1);  // the default
  r = call(kBatch,
           {{"jobs",
             {{{"queue", "costly"}, {"kind", "noop"}, {"cost", 2}, {"delaySeconds", 3600}},
              {{"queue", "costly"}, {"kind", "noop"}, {"cost", 5}, {"delaySeconds", 3600}}}}});
  ASSERT_EQ(r["ids"].size(), 2u);
  json page = call(kListJobs, {{"queue", "costly"}})["jobs"];
  ASSERT_EQ(page.size(), 4u);
  std::vector<int> costs;
  for (const auto& j : page) costs.push_back(j["cost"]);
  EXPECT_EQ(costs, (std::vector<int>{3, 1, 2, 5}));

  EXPECT_EQ(invalid(kEnqueue, {{"job", {{"queue", "q"}, {"kind", "noop"}, {"cost", -1}}}}),
            "job.cost: cost must be a whole number of tokens from 1 to 1000000, got -1");
  EXPECT_EQ(invalid(kBatch, {{"jobs",
                              {{{"queue", "q"}, {"kind", "noop"}},
                               {{"queue", "q"}, {"kind", "noop"}, {"cost", 1000001}}}}}),
            "jobs[1].cost: cost must be a whole number of tokens from 1 to 1000000, got 1000001");
  // More than the queue's burst (the default limit's 5 here) could never
  // start: refused at enqueue, naming cost.
  const std::string over =
      invalid(kEnqueue, {{"job", {{"queue", "q"}, {"kind", "noop"}, {"cost", 6}}}});
  EXPECT_EQ(over.rfind("cost: ", 0), 0u) << over;
  EXPECT_EQ(call(kListJobs, {{"queue", "q"}})["jobs"].size(), 0u);  // nothing stored
}

// A job's key (issue 36): stored as enqueued, answered by GetJob and
// ListJobs; absent is the empty key; a bad one is refused naming the field.
TEST_F(ApiServiceTest, KeyRoundTripsAndIsChecked) {
  json r = call(
      kEnqueue,
      {{"job",
        {{"queue", "keyed"}, {"kind", "noop"}, {"key", "tenant-42"}, {"delaySeconds", 3600}}}});
  EXPECT_EQ(call(kGet, {{"id", r["id"]}})["job"]["key"], "tenant-42");
  r = call(kEnqueue, {{"job", {{"queue", "keyed"}, {"kind", "noop"}, {"delaySeconds", 3600}}}});
  EXPECT_EQ(call(kGet, {{"id", r["id"]}})["job"]["key"], "");  // the empty key
  const std::string longest(kMaxJobKeyBytes, 'k');
  r = call(kBatch, {{"jobs",
                     {{{"queue", "keyed"}, {"kind", "noop"}, {"key", "caf\xc3\xa9"}},
                      {{"queue", "keyed"}, {"kind", "noop"}, {"key", longest}},
                      {{"queue", "keyed"}, {"kind", "noop"}, {"key", ""}}}}});
  ASSERT_EQ(r["ids"].size(), 3u);
  json page = call(kListJobs, {{"queue", "keyed"}})["jobs"];
  ASSERT_EQ(page.size(), 5u);
  std::vector<std::string> keys;
  for (const auto& j : page) keys.push_back(j["key"]);
  EXPECT_EQ(keys, (std::vector<std::string>{"tenant-42", "", "caf\xc3\xa9", longest, ""}));

  const std::string too_long =
      invalid(kEnqueue, {{"job", {{"queue", "q"}, {"kind", "noop"}, {"key", longest + "k"}}}});
  EXPECT_EQ(too_long.rfind("job.key: key is 201 bytes; the longest is 200 bytes (UTF-8)", 0), 0u)
      << too_long;
  EXPECT_EQ(invalid(kBatch, {{"jobs",
                              {{{"queue", "q"}, {"kind", "noop"}, {"key", "a"}},
                               {{"queue", "q"}, {"kind", "noop"}, {"key", 7}}}}}),
            "jobs[1].key: must be a string, got 7");
  EXPECT_EQ(invalid(kBatch, {{"jobs",
                              {{{"queue", "q"}, {"kind", "noop"}, {"key", "a"}},
                               {{"queue", "q"}, {"kind", "noop"}, {"key", longest + "k"}}}}})
                .rfind("jobs[1].key: ", 0),
            0u);
  EXPECT_EQ(call(kListJobs, {{"queue", "q"}})["jobs"].size(), 0u);  // nothing stored
}

// ListKeys (issue 36): storage's ready keys with the running engine's
// running counts, busiest first, limited; the per-key limit and its source.
TEST_F(ApiServiceTest, ListKeysShowsReadyAndRunningKeysBusiestFirst) {
  test::TempDir dir;
  Config c = test::sqlite_config(dir);
  c.engine.poll_interval_ms = 20;
  c.engine.shutdown_timeout_ms = 2000;
  c.queues["keyed"].key_max_workers = 1;
  c.queues["keyed"].key_rate_limit = RateLimit{50, 10};
  Engine engine(c);
  ApiService api(engine);
  const auto list = [&](const json& request) {
    const auto* m = api.find(kListKeys);
    auto message = m->new_request();
    api::decode(api::Codec::kJson, request.dump(), *message);
    return json::parse(api::encode(api::Codec::kJson, *api.call(*m, *message)));
  };
  std::atomic<bool> release{false};
  engine.register_handler("hold", [&](const Job&) {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  std::vector<NewJob> jobs;
  const auto job = [](const char* kind, const char* key) {
    NewJob j;
    j.queue = "keyed";
    j.kind = kind;
    j.key = key;
    return j;
  };
  for (int i = 0; i < 3; ++i) jobs.push_back(job("hold", "a"));
  jobs.push_back(job("hold", "b"));
  jobs.push_back(job("wait", "c"));  // no handler here: c's jobs stay ready
  jobs.push_back(job("wait", "c"));
  engine.enqueue_batch(std::move(jobs));

  // Not started: ready from storage, running unknown.
  json r = list({{"queue", "keyed"}});
  EXPECT_EQ(r["live"], false) << r;
  ASSERT_EQ(r["keys"].size(), 3u) << r;
  EXPECT_EQ(r["keys"][0]["key"], "a");
  EXPECT_EQ(r["keys"][0]["ready"], "3");
  EXPECT_EQ(r["keys"][1]["key"], "c");
  EXPECT_EQ(r["keys"][2]["key"], "b");
  EXPECT_EQ(r["totalKeys"], "3");
  EXPECT_EQ(r["complete"], true);
  EXPECT_EQ(r["fairness"], "fair");
  EXPECT_EQ(r["limit"], json({{"ratePerSec", 50.0},
                              {"burst", 10},
                              {"scope", "process"},
                              {"maxWorkers", 1},
                              {"source", "queue-config"}}));

  // Running: one job of a and of b (key_max_workers 1); c has no handler here.
  engine.start();
  ASSERT_TRUE(eventually([&] {
    r = list({{"queue", "keyed"}});
    return r["keys"].size() == 3 && r["keys"][0]["running"] == "1" &&
           r["keys"][2]["running"] == "1";
  })) << r;
  EXPECT_EQ(r["live"], true);
  // Each key's limit (key_rate_limit here), its source and its weight.
  const json limit = {{"ratePerSec", 50.0}, {"burst", 10}, {"scope", "process"}};
  EXPECT_EQ(r["keys"][0], json({{"key", "a"},
                                {"ready", "2"},
                                {"readyCapped", false},
                                {"running", "1"},
                                {"throttled", false},
                                {"limit", limit},
                                {"limitSource", "queue-config"},
                                {"weight", 1}}));
  EXPECT_EQ(r["keys"][1]["key"], "c");
  EXPECT_EQ(r["keys"][1]["ready"], "2");
  // None ready, one running.
  EXPECT_EQ(r["keys"][2], json({{"key", "b"},
                                {"ready", "0"},
                                {"readyCapped", false},
                                {"running", "1"},
                                {"throttled", false},
                                {"limit", limit},
                                {"limitSource", "queue-config"},
                                {"weight", 1}}));
  // limit: the busiest only; totalKeys still counts them all.
  r = list({{"queue", "keyed"}, {"limit", 1}});
  ASSERT_EQ(r["keys"].size(), 1u);
  EXPECT_EQ(r["keys"][0]["key"], "a");
  EXPECT_EQ(r["totalKeys"], "3");
  // A queue without keyed settings: no per-key limit.
  r = list({{"queue", "nothing-here"}});
  EXPECT_EQ(r["keys"], json::array());
  EXPECT_EQ(r["limit"]["source"], "none");
  release = true;
  engine.stop();

  // Bad input names the field.
  const auto refused = [&](const json& request) {
    try {
      list(request);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("not refused");
  };
  EXPECT_EQ(refused(json::object()).rfind("queue: invalid queue name", 0), 0u);
  EXPECT_EQ(refused({{"queue", "keyed"}, {"limit", 1001}}),
            "limit: must be 1..1000 (0: 20), got 1001");
}

TEST_F(ApiServiceTest, RateLimitValidationNamesTheField) {
  struct Case {
    json request;
    std::string message_start;
  };
  const Case cases[] = {
      {{{"queue", "bad queue"}, {"ratePerSec", 1}, {"burst", 1}},
       "queue: invalid queue name \"bad queue\""},
      {{{"ratePerSec", 1}, {"burst", 1}}, "queue: invalid queue name \"\""},
      {{{"queue", "q"}, {"ratePerSec", 0}, {"burst", 1}},
       "ratePerSec: rate must be a finite number greater than 0, got 0"},
      {{{"queue", "q"}, {"ratePerSec", -2}, {"burst", 1}},
       "ratePerSec: rate must be a finite number greater than 0, got -2"},
      // A rate given as a string reads as --rate does: plain decimal only.
      {{{"queue", "q"}, {"ratePerSec", "NaN"}, {"burst", 1}},
       "ratePerSec: must be a plain decimal number of jobs per second from 0.001"},
      {{{"queue", "q"}, {"ratePerSec", "Infinity"}, {"burst", 1}},
       "ratePerSec: must be a plain decimal number of jobs per second from 0.001"},
      {{{"queue", "q"}, {"ratePerSec", "fast"}, {"burst", 1}},
       "ratePerSec: must be a plain decimal number of jobs per second from 0.001"},
      {{{"queue", "q"}, {"ratePerSec", "0x10"}, {"burst", 1}},
       "ratePerSec: must be a plain decimal number of jobs per second from 0.001"},
      {{{"queue", "q"}, {"ratePerSec", "1e-320"}, {"burst", 1}}, "ratePerSec: rate must be"},
      // Out of uint32's range: refused by the JSON codec, naming the field.
      {{{"queue", "q"}, {"ratePerSec", 5}},
       "burst: burst must be a whole number from 1 to 4294967295, got 0"},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", 0}},
       "burst: burst must be a whole number from 1 to 4294967295, got 0"},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", -1}},
       "burst: must be a whole number from 0 to 4294967295, got -1"},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", 2.5}},
       "burst: must be a whole number from 0 to 4294967295, got 2.5"},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", 4294967296}},
       "burst: must be a whole number from 0 to 4294967295, got 4294967296"},
      {{{"queue", 7}, {"ratePerSec", 5}, {"burst", 1}}, "queue: must be a string, got 7"},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", 1}, {"scope", "galaxy"}}, "scope: "},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", 1}, {"scope", "Fleet"}}, "scope: "},
      {{{"queue", "q"}, {"ratePerSec", 5}, {"burst", 1}, {"bursts", 2}},
       "bursts: unknown field of SetQueueRateLimitRequest (known: queue, ratePerSec, burst, "
       "scope, key, perKey)"},
  };
  for (const Case& c : cases) {
    ApiError e = error(kSet, c.request);
    EXPECT_EQ(e.code(), ApiCode::kInvalidArgument) << c.request;
    EXPECT_EQ(std::string(e.what()).rfind(c.message_start, 0), 0u) << e.what();
  }
  EXPECT_TRUE(call(kList, json::object())["overrides"].empty());  // nothing stored
}

TEST_F(ApiServiceTest, EnqueueGetJobAndBatchAllOrNone) {
  json r = call(kEnqueue, {{"job",
                            {{"queue", "email"},
                             {"kind", "noop"},
                             {"payload", R"({"to":"x"})"},
                             {"priority", 2},
                             {"maxAttempts", 3},
                             {"delaySeconds", 3600}}}});
  ASSERT_TRUE(r["id"].is_string());
  const std::string id = r["id"];
  json job = call(kGet, {{"id", id}})["job"];
  EXPECT_EQ(job["id"], id);
  EXPECT_EQ(job["queue"], "email");
  EXPECT_EQ(job["payload"], R"({"to":"x"})");
  EXPECT_EQ(job["state"], "scheduled");
  EXPECT_EQ(job["priority"], 2);
  EXPECT_EQ(job["maxAttempts"], 3);
  EXPECT_EQ(call(kGet, {{"id", std::stoll(id)}})["job"]["id"], id);  // number form too

  r = call(
      kBatch,
      {{"jobs", {{{"queue", "bulk"}, {"kind", "noop"}}, {{"queue", "bulk"}, {"kind", "noop"}}}}});
  ASSERT_EQ(r["ids"].size(), 2u);
  EXPECT_EQ(call(kGet, {{"id", r["ids"][1]}})["job"]["maxAttempts"], 25);  // engine default
  EXPECT_EQ(call(kBatch, {{"jobs", json::array()}})["ids"], json::array());

  ApiError e =
      error(kBatch,
            {{"jobs", {{{"queue", "bulk"}, {"kind", "noop"}}, {{"queue", "bulk"}, {"kind", ""}}}}});
  EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
  EXPECT_EQ(std::string(e.what()).rfind("jobs[1].kind: invalid job kind", 0), 0u) << e.what();
  json queues = call(kQueues, json::object())["queues"];
  ASSERT_EQ(queues.size(), 2u);
  EXPECT_EQ(queues[0]["queue"], "bulk");
  EXPECT_EQ(queues[0]["pending"], "2");  // the failed batch stored nothing

  e = error(kEnqueue, {{"job", {{"queue", "q"}, {"kind", "noop"}, {"payload", "{nope"}}}});
  EXPECT_EQ(std::string(e.what()).rfind("job.payload: payload is not valid JSON", 0), 0u)
      << e.what();
  e = error(kEnqueue, json::object());
  EXPECT_EQ(std::string(e.what()).rfind("job.queue: invalid queue name", 0), 0u) << e.what();
  // An http job must name its request (this server's config has no [queues.hooks.http]).
  EXPECT_EQ(invalid(kEnqueue, {{"job",
                                {{"queue", "hooks"},
                                 {"kind", "http"},
                                 {"payload", R"({"url": "http://x/", "method": "get"})"}}}}),
            "job.payload: http job payload: method must be an HTTP method in upper case (GET, "
            "POST, PUT, PATCH, DELETE, ...), got \"get\"");
  EXPECT_EQ(invalid(kBatch, {{"jobs", {{{"queue", "hooks"}, {"kind", "http"}}}}})
                .rfind("jobs[0].payload: http job payload: must be a JSON object", 0),
            0u);

  e = error(kGet, {{"id", 999999}});
  EXPECT_EQ(e.code(), ApiCode::kNotFound);
  EXPECT_STREQ(e.what(), "job 999999 not found");
  e = error(kGet, json::object());
  EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
  EXPECT_STREQ(e.what(), "id: must be a job id (a whole number >= 1), got 0");
}

TEST_F(ApiServiceTest, PauseAndResumeShowInListQueues) {
  call(kEnqueue, {{"job", {{"queue", "email"}, {"kind", "noop"}}}});
  EXPECT_EQ(call(kPause, {{"queue", "email"}}), json::object());
  EXPECT_EQ(call(kQueues, json::object())["queues"][0]["paused"], true);
  call(kResume, {{"queue", "email"}});
  EXPECT_EQ(call(kQueues, json::object())["queues"][0]["paused"], false);
  EXPECT_EQ(error(kPause, {{"queue", "no way"}}).code(), ApiCode::kInvalidArgument);
}

TEST_F(ApiServiceTest, ListJobsPagesByStateAndKind) {
  std::vector<int64_t> now_ids, later_ids, other_ids;
  for (int i = 0; i < 3; ++i) now_ids.push_back(enqueue("q", "noop"));
  for (int i = 0; i < 2; ++i) later_ids.push_back(enqueue("q", "sleep", 3600));
  other_ids.push_back(enqueue("other", "noop"));

  json r = call(kListJobs, {{"queue", "q"}});
  std::vector<int64_t> all = now_ids;
  all.insert(all.end(), later_ids.begin(), later_ids.end());
  EXPECT_EQ(ids_of(r["jobs"]), all);
  EXPECT_EQ(r["nextAfterId"], "0");  // 5 < the default 100: the last page
  EXPECT_EQ(r["jobs"][0]["queue"], "q");
  EXPECT_EQ(r["jobs"][0]["state"], "available");
  EXPECT_EQ(r["jobs"][0]["leaseExpiresAt"], "");  // not running

  // "pending" is "available"; states combine; a duplicate is harmless.
  EXPECT_EQ(ids_of(call(kListJobs, {{"queue", "q"}, {"states", {"pending"}}})["jobs"]), now_ids);
  EXPECT_EQ(ids_of(call(kListJobs, {{"queue", "q"}, {"states", {"scheduled"}}})["jobs"]),
            later_ids);
  EXPECT_EQ(ids_of(call(kListJobs, {{"queue", "q"},
                                    {"states", {"scheduled", "available", "pending"}}})["jobs"]),
            all);
  EXPECT_EQ(ids_of(call(kListJobs, {{"queue", "q"}, {"kind", "sleep"}})["jobs"]), later_ids);
  EXPECT_TRUE(call(kListJobs, {{"queue", "q"}, {"states", {"failed"}}})["jobs"].empty());
  EXPECT_TRUE(call(kListJobs, {{"queue", "nobody"}})["jobs"].empty());

  // Pages of two: the cursor of a full page is its last id; the short last page says 0.
  std::vector<int64_t> seen;
  std::string after = "0";
  int pages = 0;
  do {
    r = call(kListJobs, {{"queue", "q"}, {"limit", 2}, {"afterId", after}});
    for (int64_t id : ids_of(r["jobs"])) seen.push_back(id);
    after = r["nextAfterId"];
    ++pages;
  } while (after != "0" && pages < 10);
  EXPECT_EQ(seen, all);
  EXPECT_EQ(pages, 3);
  // A page that is exactly full says "maybe more"; the next is empty and says 0.
  r = call(kListJobs, {{"queue", "q"}, {"limit", 5}});
  EXPECT_EQ(r["nextAfterId"], std::to_string(all.back()));
  r = call(kListJobs, {{"queue", "q"}, {"limit", 5}, {"afterId", r["nextAfterId"]}});
  EXPECT_TRUE(r["jobs"].empty());
  EXPECT_EQ(r["nextAfterId"], "0");
  EXPECT_EQ(call(kListJobs, {{"queue", "q"}, {"limit", 1000}})["jobs"].size(), 5u);
}

TEST_F(ApiServiceTest, ListJobsRefusesBadInputNamingTheField) {
  EXPECT_EQ(invalid(kListJobs, json::object()).rfind("queue: invalid queue name", 0), 0u);
  EXPECT_EQ(invalid(kListJobs, {{"queue", "no way"}}).rfind("queue: invalid queue name", 0), 0u);
  EXPECT_EQ(invalid(kListJobs, {{"queue", "q"}, {"states", {"failed", "dead"}}}),
            "states[1]: unknown job state \"dead\" (known: available or pending, scheduled, "
            "running, completed, failed, cancelled)");
  EXPECT_EQ(invalid(kListJobs, {{"queue", "q"}, {"kind", "bad kind"}}).rfind("kind: ", 0), 0u);
  EXPECT_EQ(invalid(kListJobs, {{"queue", "q"}, {"limit", 1001}}),
            "limit: must be 1..1000 (0: 100), got 1001: page with afterId for more");
  EXPECT_EQ(invalid(kListJobs, {{"queue", "q"}, {"afterId", -1}})
                .rfind("afterId: must be a job "
                       "id >= 0",
                       0),
            0u);
  // The codec refuses what is not a number at all.
  EXPECT_EQ(error(kListJobs, {{"queue", "q"}, {"afterId", "abc"}}).code(),
            ApiCode::kInvalidArgument);
}

TEST_F(ApiServiceTest, RetryCancelDeleteByIdsReportEachId) {
  std::atomic<bool> broken{true};
  engine_->register_handler("boom", [&](const Job&) {
    if (broken) throw PermanentError("downstream is gone");
  });
  const int64_t a = enqueue("q", "boom"), b = enqueue("q", "boom");
  const int64_t done = enqueue("q", "noop");
  const int64_t later = enqueue("q", "noop", 3600);
  register_builtin_handlers(*engine_);
  engine_->start();
  ASSERT_TRUE(eventually([&] {
    return state_of(a) == "failed" && state_of(b) == "failed" && state_of(done) == "completed";
  }));
  json failed = call(kListJobs, {{"queue", "q"}, {"states", {"failed"}}})["jobs"];
  ASSERT_EQ(ids_of(failed), (std::vector<int64_t>{a, b}));
  EXPECT_EQ(failed[0]["lastError"], "downstream is gone");
  EXPECT_NE(failed[0]["finalizedAt"], "");

  // Cancel: a job not final is cancelled and returned; a final one and an
  // unknown one are refused with their own codes.
  json c = call(kCancel, {{"id", later}})["job"];
  EXPECT_EQ(c["state"], "cancelled");
  EXPECT_EQ(c["id"], std::to_string(later));
  ApiError e = error(kCancel, {{"id", done}});
  EXPECT_EQ(e.code(), ApiCode::kFailedPrecondition);
  EXPECT_EQ(std::string(e.what()), "job " + std::to_string(done) +
                                       " is already completed: only jobs that are not final "
                                       "(available, scheduled, running) can be cancelled");
  e = error(kCancel, {{"id", 987654321}});
  EXPECT_EQ(e.code(), ApiCode::kNotFound);
  EXPECT_STREQ(e.what(), "job 987654321 not found");
  EXPECT_EQ(invalid(kCancel, json::object()), "id: must be a job id (a whole number >= 1), got 0");

  // Retry: failed and cancelled jobs run again; others are reported, unchanged.
  broken = false;
  json r = call(kRetry, {{"ids", {a, done, 987654321, later}}});
  EXPECT_EQ(r["retried"], "2");
  EXPECT_EQ(r["nextAfterId"], "0");
  ASSERT_EQ(r["outcomes"].size(), 4u);
  const std::vector<std::string> want = {"ok", "wrong_state", "not_found", "ok"};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r["outcomes"][i]["outcome"], want[i]) << i;
  EXPECT_EQ(r["outcomes"][2]["id"], "987654321");
  ASSERT_TRUE(eventually([&] { return state_of(a) == "completed"; }));
  EXPECT_EQ(state_of(b), "failed");  // not asked for

  // Delete: final jobs go; a job not final stays (wrong_state).
  const int64_t waiting = enqueue("q", "noop", 3600);
  r = call(kDeleteJobs, {{"ids", {b, waiting, 987654321}}});
  EXPECT_EQ(r["deleted"], "1");
  ASSERT_EQ(r["outcomes"].size(), 3u);
  EXPECT_EQ(r["outcomes"][0]["outcome"], "ok");
  EXPECT_EQ(r["outcomes"][1]["outcome"], "wrong_state");
  EXPECT_EQ(r["outcomes"][2]["outcome"], "not_found");
  EXPECT_EQ(error(kGet, {{"id", b}}).code(), ApiCode::kNotFound);
  EXPECT_EQ(state_of(waiting), "scheduled");
  engine_->stop();  // before the handler's flag goes out of scope
}

TEST_F(ApiServiceTest, RetryAndDeleteRefuseBadInputNamingTheField) {
  EXPECT_EQ(invalid(kRetry, json::object()),
            "queue: give ids, or queue and state (failed or cancelled) to retry a queue's jobs in "
            "batches");
  EXPECT_EQ(invalid(kRetry, {{"ids", {1}}, {"queue", "q"}}),
            "ids: give either ids or queue + state (bulk), not both; afterId and limit belong to "
            "the bulk form");
  EXPECT_EQ(invalid(kRetry, {{"ids", {1}}, {"limit", 5}}).rfind("ids: give either", 0), 0u);
  EXPECT_EQ(invalid(kRetry, {{"ids", {5, 0}}}),
            "ids[1]: must be a job id (a whole number >= 1), got 0");
  EXPECT_EQ(invalid(kRetry, {{"queue", "q"}}),
            "state: must be \"failed\" or \"cancelled\" (the states a retry takes), got \"\"");
  EXPECT_EQ(invalid(kRetry, {{"queue", "q"}, {"state", "running"}}).rfind("state: must be", 0), 0u);
  EXPECT_EQ(invalid(kRetry, {{"queue", "q q"}, {"state", "failed"}}).rfind("queue: ", 0), 0u);
  EXPECT_EQ(invalid(kRetry, {{"queue", "q"}, {"state", "failed"}, {"limit", 1001}}),
            "limit: must be 1..1000 (0: 1000), got 1001: page with afterId for more");
  EXPECT_EQ(invalid(kRetry, {{"queue", "q"}, {"state", "failed"}, {"afterId", -5}})
                .rfind("afterId: must be a job id >= 0", 0),
            0u);
  json many = json::array();
  for (int i = 1; i <= 1001; ++i) many.push_back(i);
  EXPECT_EQ(invalid(kRetry, {{"ids", many}}),
            "ids: at most 1000 ids per call, got 1001: send them in batches");
  EXPECT_EQ(invalid(kDeleteJobs, {{"ids", many}}),
            "ids: at most 1000 ids per call, got 1001: send them in batches");
  EXPECT_EQ(invalid(kDeleteJobs, json::object()), "ids: give at least one job id");
  EXPECT_EQ(invalid(kDeleteJobs, {{"ids", {-3}}}),
            "ids[0]: must be a job id (a whole number >= 1), got -3");
  // 1000 unknown ids are fine: each is reported.
  many.erase(many.end() - 1);
  json r = call(kDeleteJobs, {{"ids", many}});
  EXPECT_EQ(r["deleted"], "0");
  ASSERT_EQ(r["outcomes"].size(), 1000u);
  EXPECT_EQ(r["outcomes"][999]["outcome"], "not_found");
}

// A built-in sleep job's payload is checked at enqueue, as an http job's is:
// a bad one is refused naming the field, nothing enqueued.
TEST_F(ApiServiceTest, SleepPayloadIsCheckedAtEnqueue) {
  for (const char* payload :
       {R"({"ms":-1})", R"({"ms":"5"})", R"({"ms":3600001})", R"({"ms":1.5})", "[5]", "5"}) {
    const std::string m =
        invalid(kEnqueue, {{"job", {{"queue", "s"}, {"kind", "sleep"}, {"payload", payload}}}});
    EXPECT_EQ(m.rfind("job.payload: sleep job payload: ", 0), 0u) << payload << ": " << m;
  }
  EXPECT_EQ(invalid(kBatch, {{"jobs",
                              {{{"queue", "s"}, {"kind", "sleep"}},
                               {{"queue", "s"}, {"kind", "sleep"}, {"payload", R"({"ms":-1})"}}}}}),
            "jobs[1].payload: sleep job payload: ms must be a whole number from 0 to 3600000 "
            "(milliseconds), got -1");
  EXPECT_TRUE(call(kQueues, json::object())["queues"].empty());  // nothing enqueued
  for (const char* payload : {R"({"ms":0})", R"({"ms":5.0})", "{}", R"({"ms":3600000,"x":1})"})
    call(kEnqueue, {{"job", {{"queue", "s"}, {"kind", "sleep"}, {"payload", payload}}}});
}

// CancelJobs, DeleteJobs with a queue and DeleteQueue: one bounded batch per
// call with the cursor; a missing queue, a wrong state and an unknown queue
// refused naming what to fix.
TEST_F(ApiServiceTest, BulkCancelDeleteAndDeleteQueue) {
  static constexpr const char* kCancelJobs = "/conveyor.v1.AdminService/CancelJobs";
  static constexpr const char* kDeleteQueue = "/conveyor.v1.AdminService/DeleteQueue";
  for (int i = 0; i < 5; ++i) enqueue("q", "noop", 3600);
  const int64_t other = enqueue("o", "noop", 3600);
  EXPECT_EQ(invalid(kCancelJobs, json::object()),
            "queue: give the queue whose jobs to cancel (a bulk cancel acts on one queue, never "
            "on every queue)");
  EXPECT_NE(invalid(kCancelJobs, {{"queue", "q"}, {"states", {"failed"}}}).rfind("states: ", 0),
            std::string::npos);
  EXPECT_EQ(invalid(kDeleteJobs, {{"queue", "q"}}).rfind("states: give the final states", 0), 0u);
  EXPECT_EQ(invalid(kDeleteJobs, {{"queue", "q"}, {"states", {"scheduled"}}})
                .rfind("states: a delete takes final jobs", 0),
            0u);
  EXPECT_EQ(invalid(kDeleteJobs, {{"ids", {1}}, {"queue", "q"}}).rfind("ids: give either", 0), 0u);
  json r = call(kCancelJobs, {{"queue", "q"}, {"limit", 2}});
  EXPECT_EQ(r["cancelled"], "2");
  EXPECT_EQ(r["nextAfterId"], "2");
  r = call(kCancelJobs, {{"queue", "q"}, {"states", {"scheduled"}}, {"afterId", 2}});
  EXPECT_EQ(r["cancelled"], "3");
  EXPECT_EQ(r["nextAfterId"], "0");
  r = call(kDeleteJobs, {{"queue", "q"}, {"states", {"cancelled"}}, {"limit", 4}});
  EXPECT_EQ(r["deleted"], "4");
  EXPECT_EQ(r["refused"], "0");
  EXPECT_EQ(r["nextAfterId"], "4");
  r = call(kDeleteJobs, {{"queue", "q"}, {"states", {"cancelled"}}, {"afterId", 4}});
  EXPECT_EQ(r["deleted"], "1");
  EXPECT_EQ(state_of(other), "scheduled");
  // DeleteQueue.
  EXPECT_EQ(error(kDeleteQueue, {{"queue", "nope"}}).code(), ApiCode::kNotFound);
  call(kSet, {{"queue", "o"}, {"ratePerSec", 2}, {"burst", 2}});
  r = call(kDeleteQueue, {{"queue", "o"}});
  EXPECT_EQ(r["deleted"], "1");
  EXPECT_EQ(r["cancelled"], "1");
  EXPECT_EQ(r["overrideRemoved"], true);
  EXPECT_EQ(r["nextAfterId"], "0");
  EXPECT_EQ(error(kGet, {{"id", other}}).code(), ApiCode::kNotFound);
  EXPECT_TRUE(call(kList, json::object())["overrides"].empty());
}

TEST_F(ApiServiceTest, BulkRetryGoesInBoundedBatchesWithACursor) {
  std::atomic<bool> broken{true};
  engine_->register_handler("boom", [&](const Job&) {
    if (broken) throw PermanentError("no");
  });
  std::vector<int64_t> ids;
  for (int i = 0; i < 7; ++i) ids.push_back(enqueue("q", "boom"));
  const int64_t elsewhere = enqueue("other", "boom");
  engine_->start();
  ASSERT_TRUE(eventually([&] {
    return call(kListJobs, {{"queue", "q"}, {"states", {"failed"}}})["jobs"].size() == 7 &&
           state_of(elsewhere) == "failed";
  }));
  broken = false;
  // Batches of 3: 3, 3, then 1 with the cursor 0 (done).
  std::vector<std::string> retried;
  std::string after = "0";
  int calls = 0;
  do {
    json r = call(kRetry, {{"queue", "q"}, {"state", "failed"}, {"limit", 3}, {"afterId", after}});
    EXPECT_TRUE(r["outcomes"].empty());
    retried.push_back(r["retried"]);
    after = r["nextAfterId"];
    if (calls == 0) {
      EXPECT_EQ(after, std::to_string(ids[2]));
    }
    ++calls;
  } while (after != "0" && calls < 10);
  EXPECT_EQ(retried, (std::vector<std::string>{"3", "3", "1"}));
  ASSERT_TRUE(eventually([&] {
    return call(kListJobs, {{"queue", "q"}, {"states", {"completed"}}})["jobs"].size() == 7;
  }));
  EXPECT_EQ(state_of(elsewhere), "failed");  // another queue: untouched
  // Nothing left: retried 0, done.
  json r = call(kRetry, {{"queue", "q"}, {"state", "failed"}});
  EXPECT_EQ(r["retried"], "0");
  EXPECT_EQ(r["nextAfterId"], "0");
  // Cancelled jobs too.
  const int64_t c = enqueue("q", "noop", 3600);
  call(kCancel, {{"id", c}});
  r = call(kRetry, {{"queue", "q"}, {"state", "cancelled"}});
  EXPECT_EQ(r["retried"], "1");
  // Due now: the dispatcher may claim it and give it back (no handler for
  // "noop" here), so it is "running" for a moment.
  EXPECT_TRUE(eventually([&] { return state_of(c) == "available"; })) << state_of(c);
  engine_->stop();
}

TEST_F(ApiServiceTest, RunningJobShowsItsLeaseAndCanBeCancelled) {
  std::atomic<bool> release{false};
  engine_->register_handler("hold", [&](const Job&) {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  const int64_t id = enqueue("q", "hold");
  engine_->start();
  ASSERT_TRUE(eventually([&] { return state_of(id) == "running"; }));
  json job = call(kListJobs, {{"queue", "q"}, {"states", {"running"}}})["jobs"][0];
  ASSERT_TRUE(job["leaseExpiresAt"].is_string());
  const int64_t lease = api::parse_rfc3339(job["leaseExpiresAt"].get<std::string>(), "t");
  EXPECT_GT(lease, SystemClock::instance().wall_now_us());
  // GetJob shows the same lease, or a later end if a heartbeat ran between the calls.
  const int64_t got =
      api::parse_rfc3339(call(kGet, {{"id", id}})["job"]["leaseExpiresAt"].get<std::string>(), "t");
  EXPECT_GE(got, lease);
  EXPECT_LT(got, lease + 60'000'000);
  json cancelled = call(kCancel, {{"id", id}})["job"];
  EXPECT_EQ(cancelled["state"], "cancelled");
  EXPECT_EQ(cancelled["leaseExpiresAt"], "");  // no lease on a final job
  release = true;
  engine_->stop();
}

// SetQueueRateLimit and DeleteQueueRateLimit with key or perKey, and the
// weights: stored, answered as stored, listed, shown by ListKeys with their
// source; the engine follows them at once.
TEST_F(ApiServiceTest, KeySettingsThroughTheRateLimitMethodsAndTheWeights) {
  json r = call(kSet, {{"queue", "tenants"}, {"key", "a"}, {"ratePerSec", 2}, {"burst", 3}});
  EXPECT_FALSE(r.contains("override"));
  EXPECT_EQ(r["keySetting"]["queue"], "tenants");
  EXPECT_EQ(r["keySetting"]["key"], "a");
  EXPECT_EQ(r["keySetting"]["limit"],
            json::parse(R"({"ratePerSec":2.0,"burst":3,"scope":"process"})"));
  EXPECT_FALSE(r["keySetting"]["updatedAt"].get<std::string>().empty());
  r = call(kSet, {{"queue", "tenants"}, {"perKey", true}, {"ratePerSec", 1}, {"burst", 1}});
  EXPECT_FALSE(r["keySetting"].contains("key"));  // every key
  EXPECT_EQ(r["keySetting"]["limit"]["ratePerSec"], 1.0);
  r = call(kWeight, {{"queue", "tenants"}, {"key", "b"}, {"weight", 3}});
  EXPECT_EQ(r["keySetting"]["weight"], 3);
  EXPECT_FALSE(r["keySetting"].contains("limit"));
  // The queue's own override is apart from them.
  EXPECT_TRUE(EngineInternals::limits(*engine_).overrides().empty());

  r = call(kList, json::object());
  ASSERT_EQ(r["keySettings"].size(), 3u) << r.dump();
  EXPECT_EQ(r["keySettings"][0]["key"], "a");
  EXPECT_EQ(r["keySettings"][1]["key"], "b");
  EXPECT_FALSE(r["keySettings"][2].contains("key"));

  call(kPause, {{"queue", "tenants"}});
  for (const char* key : {"a", "b", "c"})
    call(kEnqueue, {{"job", {{"queue", "tenants"}, {"kind", "noop"}, {"key", key}}}});
  r = call(kListKeys, {{"queue", "tenants"}});
  ASSERT_EQ(r["keys"].size(), 3u) << r.dump();
  EXPECT_EQ(r["keys"][0]["limitSource"], "override");
  EXPECT_EQ(r["keys"][0]["limit"]["burst"], 3);
  EXPECT_EQ(r["keys"][0]["weight"], 1);
  EXPECT_EQ(r["keys"][1]["limitSource"], "per-key-override");
  EXPECT_EQ(r["keys"][1]["weight"], 3);
  EXPECT_EQ(r["keys"][2]["limitSource"], "per-key-override");
  EXPECT_EQ(r["limit"]["source"], "per-key-override");

  call(kDelete, {{"queue", "tenants"}, {"key", "a"}});
  ApiError e = error(kDelete, {{"queue", "tenants"}, {"key", "a"}});
  EXPECT_EQ(e.code(), ApiCode::kNotFound);
  EXPECT_STREQ(e.what(), "queue tenants key \"a\" has no rate limit of its own");
  call(kDelete, {{"queue", "tenants"}, {"perKey", true}});
  e = error(kDelete, {{"queue", "tenants"}, {"perKey", true}});
  EXPECT_EQ(e.code(), ApiCode::kNotFound);
  EXPECT_STREQ(e.what(), "queue tenants has no rate limit for every key");
  call(kDeleteWeight, {{"queue", "tenants"}, {"key", "b"}});
  e = error(kDeleteWeight, {{"queue", "tenants"}, {"key", "b"}});
  EXPECT_EQ(e.code(), ApiCode::kNotFound);
  EXPECT_STREQ(e.what(), "queue tenants key \"b\" has no weight set: its weight is the default, 1");
  r = call(kListKeys, {{"queue", "tenants"}});
  for (const json& k : r["keys"]) {
    EXPECT_EQ(k["limitSource"], "none") << k.dump();
    EXPECT_EQ(k["weight"], 1) << k.dump();
  }
  EXPECT_TRUE(call(kList, json::object())["keySettings"].empty());

  // Refusals name the field.
  EXPECT_EQ(
      invalid(
          kSet,
          {{"queue", "tenants"}, {"key", "a"}, {"perKey", true}, {"ratePerSec", 1}, {"burst", 1}}),
      "perKey: give key (one key's own limit) or perKey (the limit of every key of the "
      "queue), not both");
  EXPECT_EQ(
      invalid(kDelete, {{"queue", "tenants"}, {"key", "a"}, {"perKey", true}}).rfind("perKey: ", 0),
      0u);
  EXPECT_EQ(
      invalid(
          kSet,
          {{"queue", "tenants"}, {"key", std::string(201, 'k')}, {"ratePerSec", 1}, {"burst", 1}})
          .rfind("key: key is 201 bytes; the longest is 200 bytes", 0),
      0u);
  EXPECT_EQ(invalid(kSet, {{"queue", "tenants"}, {"perKey", true}, {"ratePerSec", 0}, {"burst", 1}})
                .rfind("ratePerSec: ", 0),
            0u);
  EXPECT_EQ(invalid(kWeight, {{"queue", "tenants"}, {"key", "b"}, {"weight", 0}}),
            "weight: weight must be 1..1000, got 0");
  EXPECT_EQ(invalid(kWeight, {{"queue", "tenants"}, {"key", "b"}, {"weight", 1001}}),
            "weight: weight must be 1..1000, got 1001");
  EXPECT_TRUE(engine_->key_overrides().empty());  // nothing refused was stored
}

// A queue with fairness = "fifo" has no turns between keys: a key setting
// is refused naming the queue, nothing stored.
TEST(ApiServiceFifo, KeySettingsOfAFifoQueueAreRefused) {
  test::TempDir dir;
  Config c = test::sqlite_config(dir);
  c.queues["plain"].fairness = Fairness::kFifo;
  Engine engine(c);
  ApiService api(engine);
  for (const auto& [path, body] : std::vector<std::pair<const char*, std::string>>{
           {"/conveyor.v1.AdminService/SetQueueRateLimit",
            R"({"queue":"plain","key":"a","ratePerSec":1,"burst":1})"},
           {"/conveyor.v1.AdminService/SetQueueRateLimit",
            R"({"queue":"plain","perKey":true,"ratePerSec":1,"burst":1})"},
           {"/conveyor.v1.AdminService/SetKeyWeight",
            R"({"queue":"plain","key":"a","weight":2})"}}) {
    const auto* m = api.find(path);
    const auto message = m->new_request();
    api::decode(api::Codec::kJson, body, *message);
    try {
      api.call(*m, *message);
      ADD_FAILURE() << body << " was taken";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.code(), ApiCode::kInvalidArgument) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("queue: queue plain has fairness = \"fifo\"", 0), 0u)
          << e.what();
    }
  }
  EXPECT_TRUE(engine.key_overrides().empty());
}

TEST(ApiServiceAbi10, JobMethodsOnAnAbi10PluginSayWhatToUpgrade) {
  Config c;
  c.storage.plugin = CONVEYOR_ABI_V1_0_PLUGIN;
  c.storage.options = {{"name", "api_abi10"}};
  Engine engine(c);
  ApiService api(engine);
  const auto run = [&](const char* path, const std::string& body) {
    const auto* m = api.find(path);
    const auto message = m->new_request();
    api::decode(api::Codec::kJson, body, *message);
    try {
      api.call(*m, *message);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << path << " did not fail";
    return ApiError(ApiCode::kUnknown, "");
  };
  for (const auto& [path, body] : std::vector<std::pair<const char*, std::string>>{
           {"/conveyor.v1.AdminService/ListJobs", R"({"queue":"q"})"},
           {"/conveyor.v1.AdminService/RetryJobs", R"({"ids":[1]})"},
           {"/conveyor.v1.AdminService/RetryJobs", R"({"queue":"q","state":"failed"})"},
           {"/conveyor.v1.AdminService/DeleteJobs", R"({"ids":[1]})"}}) {
    const ApiError e = run(path, body);
    EXPECT_EQ(e.code(), ApiCode::kUnimplemented) << path << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("implements ABI 1.0"), std::string::npos) << e.what();
  }
  // Cancel is a 1.0 slot: it works (not_found here).
  EXPECT_EQ(run("/conveyor.v1.AdminService/CancelJob", R"({"id":1})").code(), ApiCode::kNotFound);
  // Fleet limits and the live switch need ABI 1.2: refused, naming what to upgrade.
  const ApiError fleet = run("/conveyor.v1.AdminService/SetQueueRateLimit",
                             R"({"queue":"q","ratePerSec":1,"burst":1,"scope":"fleet"})");
  EXPECT_EQ(fleet.code(), ApiCode::kInvalidArgument) << fleet.what();
  EXPECT_EQ(std::string(fleet.what()).rfind("scope: ", 0), 0u) << fleet.what();
  EXPECT_NE(std::string(fleet.what()).find("1.0"), std::string::npos) << fleet.what();
  EXPECT_TRUE(EngineInternals::limits(engine).overrides().empty());  // nothing stored
  const ApiError off =
      run("/conveyor.v1.AdminService/SetRateLimitingEnabled", R"({"enabled":false})");
  EXPECT_EQ(off.code(), ApiCode::kUnimplemented) << off.what();
  EXPECT_NE(std::string(off.what()).find("1.0"), std::string::npos) << off.what();
  EXPECT_EQ(engine.rate_limiting(), (RateLimitingState{true, SwitchSource::kConfig}));
  // Settings of keys need ABI 1.5: unimplemented, naming the plugin's ABI.
  for (const auto& [path, body] : std::vector<std::pair<const char*, std::string>>{
           {"/conveyor.v1.AdminService/SetQueueRateLimit",
            R"({"queue":"q","key":"a","ratePerSec":1,"burst":1})"},
           {"/conveyor.v1.AdminService/SetQueueRateLimit",
            R"({"queue":"q","perKey":true,"ratePerSec":1,"burst":1})"},
           {"/conveyor.v1.AdminService/DeleteQueueRateLimit", R"({"queue":"q","key":"a"})"},
           {"/conveyor.v1.AdminService/SetKeyWeight", R"({"queue":"q","key":"a","weight":2})"},
           {"/conveyor.v1.AdminService/DeleteKeyWeight", R"({"queue":"q","key":"a"})"}}) {
    const ApiError e = run(path, body);
    EXPECT_EQ(e.code(), ApiCode::kUnimplemented) << body << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("1.0"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(engine.key_overrides().empty());
  // A job key needs ABI 1.4: a non-empty one is refused naming key; the
  // empty key (absent) is every older plugin's.
  const ApiError keyed = run("/conveyor.v1.TaskService/Enqueue",
                             R"({"job":{"queue":"q","kind":"noop","key":"tenant-42"}})");
  EXPECT_EQ(keyed.code(), ApiCode::kInvalidArgument) << keyed.what();
  EXPECT_EQ(std::string(keyed.what()).rfind("key: ", 0), 0u) << keyed.what();
  const auto* enqueue = api.find("/conveyor.v1.TaskService/Enqueue");
  const auto message = enqueue->new_request();
  api::decode(api::Codec::kJson, R"({"job":{"queue":"q","kind":"noop","key":""}})", *message);
  const json id = json::parse(api::encode(api::Codec::kJson, *api.call(*enqueue, *message)));
  const auto* get = api.find("/conveyor.v1.TaskService/GetJob");
  const auto get_request = get->new_request();
  api::decode(api::Codec::kJson, json{{"id", id["id"]}}.dump(), *get_request);
  EXPECT_EQ(
      json::parse(api::encode(api::Codec::kJson, *api.call(*get, *get_request)))["job"]["key"], "");
}

// The worker methods through the API's messages: a long-poll claim (the
// asynchronous path), then a backpressure fail, and ListQueues showing the
// hold.
TEST_F(ApiServiceTest, WorkerClaimAndABackpressureFailShowTheHoldInListQueues) {
  engine_->start();
  const int64_t id = std::stoll(
      call(kEnqueue, {{"job", {{"queue", "api"}, {"kind", "py"}}}})["id"].get<std::string>());
  const auto* claim = api_->find("/conveyor.v1.WorkerService/Claim");
  ASSERT_NE(claim, nullptr);
  auto request = claim->new_request();
  api::decode(api::Codec::kJson,
              R"({"queues":[{"queue":"api"}],"kinds":["py"],"maxJobs":5,"waitSeconds":5})",
              *request);
  std::mutex mu;
  std::condition_variable cv;
  std::optional<json> answer;
  api_->start(*claim, *request, [&](std::unique_ptr<google::protobuf::Message> m) {
    std::lock_guard lock(mu);
    answer = json::parse(api::encode(api::Codec::kJson, *m));
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return answer.has_value(); }));
  }
  ASSERT_EQ((*answer)["jobs"].size(), 1u);
  const json lease = (*answer)["jobs"][0]["lease"];
  EXPECT_EQ(std::stoll(lease["jobId"].get<std::string>()), id);
  // An unkeyed job: its refusal holds the queue (a keyed job's holds only
  // its key: RemoteWorkersTest.ABackpressureFailOfAKeyedJobHoldsOnlyItsKey).
  EXPECT_EQ((*answer)["jobs"][0]["job"].value("key", std::string()), "");
  EXPECT_EQ((*answer)["jobs"][0]["job"]["state"], "running");
  json failed = call("/conveyor.v1.WorkerService/Fail", {{"lease", lease},
                                                         {"error", "HTTP 429"},
                                                         {"retryAfterSeconds", 120},
                                                         {"backpressure", true}});
  EXPECT_EQ(failed["willRetry"], true);
  EXPECT_EQ(state_of(id), "available");
  const json queues = call(kQueues, json::object());
  ASSERT_EQ(queues["queues"].size(), 1u);
  EXPECT_EQ(queues["queues"][0]["limit"]["source"], "backoff");
  const std::string until = queues["queues"][0]["limit"]["backoffUntil"];
  EXPECT_GT(api::parse_rfc3339(until, "backoffUntil"),
            SystemClock::instance().wall_now_us() + 100'000'000);
  // A stale lease's backpressure fail is refused like any late result.
  ApiError stale = error("/conveyor.v1.WorkerService/Fail",
                         {{"lease", lease}, {"error", "late"}, {"backpressure", true}});
  EXPECT_EQ(stale.code(), ApiCode::kFailedPrecondition) << stale.what();
  engine_->stop();
}

}  // namespace
}  // namespace conveyor
