// Named worker tokens through handle_api_request, on a real engine over
// SQLite: each worker method allowed on the token's queues and refused
// (permission_denied, naming the token, never its secret) elsewhere, before
// anything changes; a backpressure Fail bounded by max_backpressure_s with
// an answer that tells when the job can run again.
#include "api_request.hpp"
#include "auth.hpp"
#include "test_support.hpp"

#include "conveyor/v1/worker.pb.h"

#include <conveyor/api_messages.hpp>
#include <conveyor/engine.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <future>

namespace conveyor {
namespace {

using nlohmann::json;

constexpr const char* kAdmin = "admin-s3cret";
constexpr const char* kClaim = "/conveyor.v1.WorkerService/Claim";
constexpr const char* kComplete = "/conveyor.v1.WorkerService/Complete";
constexpr const char* kFail = "/conveyor.v1.WorkerService/Fail";
constexpr const char* kHeartbeat = "/conveyor.v1.WorkerService/Heartbeat";
constexpr const char* kRelease = "/conveyor.v1.WorkerService/Release";
constexpr const char* kEnqueue = "/conveyor.v1.TaskService/Enqueue";
constexpr const char* kBatch = "/conveyor.v1.TaskService/EnqueueBatch";
constexpr const char* kGet = "/conveyor.v1.TaskService/GetJob";
constexpr const char* kQueues = "/conveyor.v1.AdminService/ListQueues";

WorkerTokenConfig token(std::string name, std::string secret, std::vector<std::string> queues,
                        uint32_t methods = kWorkerRunMethods) {
  WorkerTokenConfig t;
  t.name = std::move(name);
  t.sha256 = sha256_hex(secret);
  t.every_queue = queues.empty();
  t.queues = std::move(queues);
  std::sort(t.queues.begin(), t.queues.end());
  t.methods = methods;
  return t;
}

class WorkerScopeTest : public ::testing::Test {
 protected:
  WorkerScopeTest() {
    Config c = test::sqlite_config(dir_);
    c.engine.poll_interval_ms = 20;
    c.engine.max_backoff_s = 30 * 86400;  // the engine allows a 30-day hold
    engine_ = std::make_unique<Engine>(c);
    api_ = std::make_unique<ApiService>(*engine_);
    config_.listen = "127.0.0.1:0";
    config_.admin_token = kAdmin;
    // "mailer" works email; "sms" works sms; "ops" may also enqueue and read.
    config_.worker_tokens = {
        token("mailer", "mailer-s3cret", {"email"}),
        token("sms", "sms-s3cret", {"sms"}),
        token("ops", "ops-s3cret", {"email"},
              kWorkerRunMethods | method_bit(WorkerMethod::kEnqueue) |
                  method_bit(WorkerMethod::kGetJob)),
    };
    engine_->start();
  }
  ~WorkerScopeTest() override {
    engine_->stop();
    api_.reset();
    engine_.reset();
  }

  ApiResponse call(const std::string& secret, std::string_view path, const json& body) {
    const std::string text = body.dump();
    const std::string auth = "Bearer " + secret;
    ApiRequest r;
    r.path = path;
    r.authorization = auth;
    r.content_type = "application/json";
    r.body = text;
    r.remote_addr = "127.0.0.1";
    std::promise<ApiResponse> answer;
    handle_api_request_async(*api_, config_, r,
                             [&answer](ApiResponse response) { answer.set_value(response); });
    auto future = answer.get_future();
    EXPECT_EQ(future.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    return future.get();
  }
  json ok(const std::string& secret, std::string_view path, const json& body) {
    const ApiResponse r = call(secret, path, body);
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    return json::parse(r.body, nullptr, false);
  }
  // A refusal: 403 permission_denied with text in its message, never a secret.
  void refused(const std::string& secret, std::string_view path, const json& body,
               const std::string& text) {
    const ApiResponse r = call(secret, path, body);
    EXPECT_EQ(r.status, 403) << path << ": " << r.body;
    const json error = json::parse(r.body, nullptr, false);
    EXPECT_EQ(error.value("code", ""), "permission_denied") << r.body;
    EXPECT_NE(error.value("message", "").find(text), std::string::npos)
        << path << ": expected '" << text << "' in " << r.body;
    EXPECT_EQ(r.body.find("s3cret"), std::string::npos) << "a secret in " << r.body;
  }

  int64_t enqueue(const std::string& queue) {
    return std::stoll(ok(kAdmin, kEnqueue, {{"job", {{"queue", queue}, {"kind", "k"}}}})["id"]
                          .get<std::string>());
  }
  std::string state(int64_t id) { return to_string(engine_->get_job(id)->state); }
  // Claims one job of queue with secret's token: its lease.
  json claim(const std::string& secret, const std::string& queue) {
    const json answer = ok(
        secret, kClaim,
        {{"queues", {{{"queue", queue}}}}, {"kinds", {"k"}}, {"maxJobs", 1}, {"waitSeconds", 10}});
    EXPECT_EQ(answer["jobs"].size(), 1u) << answer.dump();
    return answer["jobs"].empty() ? json() : answer["jobs"][0]["lease"];
  }

  test::TempDir dir_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiService> api_;
  ServerConfig config_;
};

TEST_F(WorkerScopeTest, ClaimIsAllowedOnTheTokensQueuesOnly) {
  const int64_t sms = enqueue("sms");
  const int64_t email = enqueue("email");
  refused("mailer-s3cret", kClaim,
          {{"queues", {{{"queue", "sms"}}}}, {"kinds", {"k"}}, {"waitSeconds", 0}},
          "worker token \"mailer\" may not claim from queue \"sms\" (its queues: email)");
  // One queue out of scope refuses the whole claim: nothing is granted.
  refused("mailer-s3cret", kClaim,
          {{"queues", {{{"queue", "email"}}, {{"queue", "sms"}}}},
           {"kinds", {"k"}},
           {"waitSeconds", 0}},
          "may not claim from queue \"sms\"");
  EXPECT_EQ(state(sms), "available");
  EXPECT_EQ(state(email), "available");
  const json lease = claim("mailer-s3cret", "email");
  EXPECT_EQ(std::stoll(lease["jobId"].get<std::string>()), email);
  EXPECT_EQ(state(sms), "available");
}

TEST_F(WorkerScopeTest, LeasesOfAnotherQueuesJobAreRefusedBeforeAnythingChanges) {
  const int64_t id = enqueue("sms");
  const json lease = claim("sms-s3cret", "sms");
  const json leases = {{"leases", {lease}}};
  refused("mailer-s3cret", kComplete, leases,
          "worker token \"mailer\" may not complete a job of queue \"sms\"");
  refused("mailer-s3cret", kHeartbeat, leases, "may not heartbeat a job of queue \"sms\"");
  refused("mailer-s3cret", kRelease, leases, "may not release a job of queue \"sms\"");
  refused("mailer-s3cret", kFail, {{"lease", lease}, {"error", "x"}},
          "may not fail a job of queue \"sms\"");
  refused("mailer-s3cret", kFail, {{"lease", lease}, {"error", "429"}, {"backpressure", true}},
          "may not fail a job of queue \"sms\"");
  EXPECT_EQ(state(id), "running") << "a refused call changed the job";
  EXPECT_EQ(engine_->get_job(id)->attempt, 1);
  // The token of the job's queue may do each of them.
  EXPECT_EQ(ok("sms-s3cret", kHeartbeat, leases)["results"][0]["code"], "ok");
  EXPECT_EQ(ok("sms-s3cret", kRelease, leases)["results"][0]["code"], "ok");
  EXPECT_EQ(state(id), "available");
  const json again = claim("sms-s3cret", "sms");
  EXPECT_EQ(ok("sms-s3cret", kFail, {{"lease", again}, {"error", "boom"}})["willRetry"], true);
  // Due again after the engine's backoff (about 1 s): the claim waits for it.
  const json third = claim("sms-s3cret", "sms");
  EXPECT_EQ(ok("sms-s3cret", kComplete, {{"leases", {third}}})["results"][0]["code"], "ok");
  EXPECT_EQ(state(id), "completed");
}

TEST_F(WorkerScopeTest, EnqueueAndGetJobNeedTheirMethodsAndTheQueue) {
  const json email_job = {{"job", {{"queue", "email"}, {"kind", "k"}}}};
  refused("mailer-s3cret", kEnqueue, email_job,
          "worker token \"mailer\" lacks the method enqueue (its methods: claim, complete, fail, "
          "heartbeat, release)");
  refused("mailer-s3cret", kBatch, {{"jobs", {email_job["job"]}}}, "lacks the method enqueue");
  const int64_t sms = enqueue("sms");
  refused("mailer-s3cret", kGet, {{"id", sms}}, "lacks the method get_job");
  // ops may enqueue and read, on email only.
  refused("ops-s3cret", kEnqueue, {{"job", {{"queue", "sms"}, {"kind", "k"}}}},
          "worker token \"ops\" may not enqueue to queue \"sms\"");
  refused("ops-s3cret", kBatch, {{"jobs", {email_job["job"], {{"queue", "sms"}, {"kind", "k"}}}}},
          "may not enqueue to queue \"sms\"");
  refused("ops-s3cret", kGet, {{"id", sms}}, "worker token \"ops\" may not read job");
  EXPECT_EQ(engine_->queue_stats().size(), 1u) << "a refused batch stored a job";
  const int64_t id = std::stoll(ok("ops-s3cret", kEnqueue, email_job)["id"].get<std::string>());
  EXPECT_EQ(ok("ops-s3cret", kGet, {{"id", id}})["job"]["queue"], "email");
  EXPECT_EQ(ok("ops-s3cret", kBatch, {{"jobs", {email_job["job"]}}})["ids"].size(), 1u);
  // The admin token reads any job.
  EXPECT_EQ(ok(kAdmin, kGet, {{"id", sms}})["job"]["queue"], "sms");
}

TEST_F(WorkerScopeTest, AdminMethodsAreRefusedToAWorkerToken) {
  refused("mailer-s3cret", kQueues, json::object(),
          "worker token \"mailer\" may call only the worker methods");
  EXPECT_EQ(call("wrong-s3cret", kClaim, json::object()).status, 401);
}

// The Fail answer's retryAt is when the queue's hold ends, and a token's
// max_backpressure_s bounds it (the legacy 30-day ask held for 30 days
// while answering "now").
TEST_F(WorkerScopeTest, BackpressureIsBoundedPerTokenAndTheRetryTimeIsTheHoldsEnd) {
  config_.worker_tokens[0].max_backpressure_s = 2;
  enqueue("email");
  const json lease = claim("mailer-s3cret", "email");
  const int64_t before = SystemClock::instance().wall_now_us();
  const json failed = ok("mailer-s3cret", kFail,
                         {{"lease", lease},
                          {"error", "HTTP 429"},
                          {"backpressure", true},
                          {"retryAfterSeconds", 30 * 86400}});
  const int64_t after = SystemClock::instance().wall_now_us();
  ASSERT_EQ(failed["willRetry"], true) << failed.dump();
  const int64_t retry_at = api::parse_rfc3339(failed["retryAt"].get<std::string>(), "retryAt");
  EXPECT_GE(retry_at, before + 2'000'000 - 1000) << failed.dump();
  EXPECT_LE(retry_at, after + 2'000'000 + 1000) << failed.dump();
  const json queues = ok(kAdmin, kQueues, json::object());
  ASSERT_EQ(queues["queues"].size(), 1u);
  EXPECT_EQ(queues["queues"][0]["limit"]["source"], "backoff");
  EXPECT_EQ(api::parse_rfc3339(queues["queues"][0]["limit"]["backoffUntil"].get<std::string>(),
                               "backoffUntil"),
            retry_at)
      << "the answer and the hold disagree";
}

TEST_F(WorkerScopeTest, WithoutABoundTheRetryTimeIsStillTheHoldsEnd) {
  enqueue("email");
  const json lease = claim("mailer-s3cret", "email");
  const int64_t before = SystemClock::instance().wall_now_us();
  const json failed =
      ok("mailer-s3cret", kFail,
         {{"lease", lease}, {"error", "429"}, {"backpressure", true}, {"retryAfterSeconds", 120}});
  const int64_t retry_at = api::parse_rfc3339(failed["retryAt"].get<std::string>(), "retryAt");
  EXPECT_GE(retry_at, before + 119'000'000) << failed.dump();
  EXPECT_LE(retry_at, SystemClock::instance().wall_now_us() + 120'000'000) << failed.dump();
}

TEST(WorkerScopePaths, EachWorkerPathIsItsMethod) {
  EXPECT_EQ(worker_method_of(kClaim), WorkerMethod::kClaim);
  EXPECT_EQ(worker_method_of(kComplete), WorkerMethod::kComplete);
  EXPECT_EQ(worker_method_of(kFail), WorkerMethod::kFail);
  EXPECT_EQ(worker_method_of(kHeartbeat), WorkerMethod::kHeartbeat);
  EXPECT_EQ(worker_method_of(kRelease), WorkerMethod::kRelease);
  EXPECT_EQ(worker_method_of(kEnqueue), WorkerMethod::kEnqueue);
  EXPECT_EQ(worker_method_of(kBatch), WorkerMethod::kEnqueue);
  EXPECT_EQ(worker_method_of(kGet), WorkerMethod::kGetJob);
  EXPECT_FALSE(worker_method_of(kQueues));
  EXPECT_FALSE(worker_method_of("/conveyor.v1.WorkerService/Other"));
}

}  // namespace
}  // namespace conveyor
