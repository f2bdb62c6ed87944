// AdminClient against an AdminServer in this process, over real HTTP on
// loopback: every typed call, server-side validation reaching the caller as
// invalid_argument, and a port that is taken.
#include "test_support.hpp"

#include <conveyor/admin_client.hpp>
#include <conveyor/admin_server.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/validation.hpp>

#include <gtest/gtest.h>

#include <filesystem>

namespace conveyor {
namespace {

using test::free_port;

class AdminClientTest : public ::testing::Test {
 protected:
  AdminClientTest() { engine_ = std::make_unique<Engine>(test::sqlite_config(dir_)); }
  ~AdminClientTest() override {
    server_.reset();
    engine_.reset();
  }
  void serve(const std::string& token) {
    ServerConfig s;
    s.admin_token = token;
    for (int attempt = 0; attempt < 3; ++attempt) {
      s.listen = "127.0.0.1:" + std::to_string(free_port());
      server_ = std::make_unique<AdminServer>(*engine_, s);
      try {
        server_->start();
        url_ = "http://" + s.listen;
        return;
      } catch (const ServerStartError&) {
      }
    }
    FAIL() << "no free port";
  }

  test::TempDir dir_;  // removed after the engine
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AdminServer> server_;
  std::string url_;
};

TEST_F(AdminClientTest, EveryTypedCall) {
  serve("tok");
  AdminClient client(url_ + "/", "tok");
  EXPECT_EQ(client.url(), url_);

  const RateLimitOverride o = client.set_rate_limit("email", RateLimit{50, 10});
  EXPECT_EQ(o.queue, "email");
  EXPECT_EQ(o.limit, (RateLimit{50, 10}));
  EXPECT_GT(o.updated_at_us, 0);

  const RateLimit fleet{4, 2, LimitScope::kFleet};
  EXPECT_EQ(client.set_rate_limit("push", fleet).limit, fleet);

  api::RateLimitListing l = client.list_rate_limits();
  EXPECT_TRUE(l.enabled);
  EXPECT_EQ(l.enabled_source, SwitchSource::kConfig);
  EXPECT_FALSE(l.default_limit);
  ASSERT_EQ(l.overrides.size(), 2u);
  EXPECT_EQ(l.overrides[0].updated_at_us, o.updated_at_us);
  EXPECT_EQ(l.overrides[1].limit, fleet);
  EXPECT_TRUE(client.delete_rate_limit("push"));

  // The kill switch: stored, and the answer is the state in force.
  EXPECT_EQ(client.set_rate_limiting_enabled(false),
            (RateLimitingState{false, SwitchSource::kStorage}));
  l = client.list_rate_limits();
  EXPECT_FALSE(l.enabled);
  EXPECT_EQ(l.enabled_source, SwitchSource::kStorage);
  EXPECT_EQ(client.set_rate_limiting_enabled(true),
            (RateLimitingState{true, SwitchSource::kStorage}));

  JobRequest job;
  job.queue = "email";
  job.kind = "noop";
  job.delay_s = 3600;
  job.cost = 4;
  JobRequest keyed = job;
  keyed.key = "tenant-\xc3\xa9";
  const auto ids = client.enqueue_batch({job, keyed});
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[1], ids[0] + 1);
  const auto got = client.get_job(ids[0]);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->queue, "email");
  EXPECT_EQ(got->state, JobState::kScheduled);
  EXPECT_EQ(got->cost, 4);
  EXPECT_EQ(got->key, "");
  EXPECT_EQ(client.get_job(ids[1])->key, "tenant-\xc3\xa9");
  JobQuery query;
  query.queue = "email";
  const JobPage page = client.list_jobs(query);
  ASSERT_EQ(page.jobs.size(), 2u);
  EXPECT_EQ(page.jobs[1].key, "tenant-\xc3\xa9");
  EXPECT_FALSE(client.get_job(ids[1] + 100));

  client.set_queue_paused("email", true);
  auto queues = client.list_queues();
  ASSERT_EQ(queues.size(), 1u);
  EXPECT_TRUE(queues[0].stats.paused);
  EXPECT_EQ(queues[0].stats.scheduled, 2);
  EXPECT_EQ(queues[0].limit, (EffectiveLimit{RateLimit{50, 10}, LimitSource::kOverride}));
  client.set_queue_paused("email", false);
  EXPECT_FALSE(client.list_queues()[0].stats.paused);

  EXPECT_TRUE(client.delete_rate_limit("email"));
  EXPECT_FALSE(client.delete_rate_limit("email"));
}

// A key's own limit, every key's limit and a key's weight over HTTP: the
// answers are what storage recorded, ListRateLimits and ListKeys show them,
// and a delete of nothing is false.
TEST_F(AdminClientTest, KeySettingCalls) {
  serve("tok");
  AdminClient client(url_, "tok");
  const KeyOverride a = client.set_key_rate_limit("tenants", "a", RateLimit{2, 3});
  EXPECT_EQ(a.queue, "tenants");
  EXPECT_EQ(a.key, "a");
  EXPECT_EQ(a.limit, (RateLimit{2, 3}));
  EXPECT_EQ(a.weight, std::nullopt);
  EXPECT_GT(a.updated_at_us, 0);
  const KeyOverride every =
      client.set_key_rate_limit("tenants", std::nullopt, RateLimit{1, 1, LimitScope::kFleet});
  EXPECT_EQ(every.key, std::nullopt);
  EXPECT_EQ(every.limit, (RateLimit{1, 1, LimitScope::kFleet}));
  // The weight joins a's limit in one setting.
  const KeyOverride weighted = client.set_key_weight("tenants", "a", 5);
  EXPECT_EQ(weighted.limit, (RateLimit{2, 3}));
  EXPECT_EQ(weighted.weight, 5u);
  EXPECT_EQ(client.set_key_weight("tenants", "", 2).key, "");  // the empty key

  const api::RateLimitListing l = client.list_rate_limits();
  ASSERT_EQ(l.key_settings.size(), 3u);
  EXPECT_EQ(l.key_settings[0].key, "");
  EXPECT_EQ(l.key_settings[1].key, "a");
  EXPECT_EQ(l.key_settings[1].weight, 5u);
  EXPECT_EQ(l.key_settings[2].key, std::nullopt);
  EXPECT_TRUE(l.overrides.empty());

  JobRequest job;
  job.queue = "tenants";
  job.kind = "noop";
  job.delay_s = 0;
  job.key = "a";
  JobRequest other = job;
  other.key = "b";
  client.set_queue_paused("tenants", true);
  client.enqueue_batch({job, other});
  const KeysReport keys = client.list_keys("tenants", 0);
  ASSERT_EQ(keys.keys.size(), 2u);
  EXPECT_EQ(keys.keys[0].key, "a");
  EXPECT_EQ(keys.keys[0].limit, (RateLimit{2, 3}));
  EXPECT_EQ(keys.keys[0].limit_source, LimitSource::kOverride);
  EXPECT_EQ(keys.keys[0].weight, 5u);
  EXPECT_EQ(keys.keys[1].limit, (RateLimit{1, 1, LimitScope::kFleet}));
  EXPECT_EQ(keys.keys[1].limit_source, LimitSource::kEveryKeyOverride);
  EXPECT_EQ(keys.keys[1].weight, 1u);
  EXPECT_EQ(keys.limit_source, LimitSource::kEveryKeyOverride);

  EXPECT_TRUE(client.delete_key_rate_limit("tenants", "a"));
  EXPECT_FALSE(client.delete_key_rate_limit("tenants", "a"));
  EXPECT_TRUE(client.delete_key_rate_limit("tenants", std::nullopt));
  EXPECT_FALSE(client.delete_key_rate_limit("tenants", std::nullopt));
  EXPECT_TRUE(client.delete_key_weight("tenants", "a"));
  EXPECT_FALSE(client.delete_key_weight("tenants", "a"));
  const KeysReport after = client.list_keys("tenants", 0);
  EXPECT_EQ(after.keys[0].limit, std::nullopt);
  EXPECT_EQ(after.keys[0].limit_source, LimitSource::kNone);
  EXPECT_EQ(after.keys[0].weight, 1u);
  try {
    client.set_key_weight("tenants", "a", 1001);
    ADD_FAILURE() << "weight 1001 was taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "weight: weight must be 1..1000, got 1001");
  }
}

TEST_F(AdminClientTest, ServerErrorsKeepTheirCodeAndMessage) {
  serve("tok");
  AdminClient client(url_, "tok");
  try {
    client.set_rate_limit("email", RateLimit{0, 1});  // the client does not validate
    FAIL() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).rfind("ratePerSec: rate must be", 0), 0u) << e.what();
  }
  AdminClient wrong(url_, "nope");
  try {
    wrong.list_queues();
    FAIL() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), ApiCode::kUnauthenticated);
    EXPECT_STREQ(e.what(), "wrong admin token");
  }
}

TEST_F(AdminClientTest, UnreachableAndMalformedUrls) {
  AdminClient client("http://127.0.0.1:" + std::to_string(free_port()), "");
  try {
    client.list_queues();
    FAIL() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), ApiCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("cannot reach conveyor server at http://127.0.0.1:"),
              std::string::npos);
  }
  for (const char* bad : {"127.0.0.1:8080", "http://host:8080/path", "ftp://host", ""})
    EXPECT_THROW(AdminClient(bad, ""), ValidationError) << bad;
  EXPECT_NO_THROW(AdminClient("https://[::1]:8443", ""));
}

TEST_F(AdminClientTest, ATakenPortFailsToStartNamingTheAddress) {
  serve("tok");
  ServerConfig s;
  s.listen = url_.substr(7);  // "127.0.0.1:PORT"
  s.admin_token = "tok";
  AdminServer second(*engine_, s);
  try {
    second.start();
    FAIL() << "two servers on one port";
  } catch (const ServerStartError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot listen on " + s.listen + ": Address already in use");
  }
}

TEST_F(AdminClientTest, JobCallsOverHttp) {
  serve("tok");
  AdminClient client(url_, "tok");
  const int64_t a = engine_->enqueue("q", "noop");
  EnqueueOptions in_an_hour;
  in_an_hour.delay = std::chrono::hours(1);
  const int64_t later = engine_->enqueue("q", "noop", "{}", in_an_hour);

  JobPage page = client.list_jobs(JobQuery{.queue = "q", .limit = 1});
  ASSERT_EQ(page.jobs.size(), 1u);
  EXPECT_EQ(page.jobs[0].id, a);
  EXPECT_EQ(page.next_after_id, a);
  page = client.list_jobs(JobQuery{.queue = "q", .states = {JobState::kScheduled}, .limit = 0});
  ASSERT_EQ(page.jobs.size(), 1u);
  EXPECT_EQ(page.jobs[0].id, later);
  EXPECT_EQ(page.next_after_id, 0);

  const Job cancelled = client.cancel_job(later);
  EXPECT_EQ(cancelled.id, later);
  EXPECT_EQ(cancelled.state, JobState::kCancelled);
  try {
    client.cancel_job(later);
    ADD_FAILURE() << "a final job was cancelled";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), ApiCode::kFailedPrecondition);
  }
  try {
    client.cancel_job(987654);
    ADD_FAILURE() << "an unknown job was cancelled";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), ApiCode::kNotFound);
  }

  const std::vector<int64_t> ids = {later, a, 987654};
  std::vector<JobOutcome> r = client.retry_jobs(ids);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].status, JobOutcome::Status::kOk);
  EXPECT_EQ(r[1].status, JobOutcome::Status::kWrongState);
  EXPECT_EQ(r[2].id, 987654);
  EXPECT_EQ(r[2].status, JobOutcome::Status::kNotFound);

  client.cancel_job(later);
  const RetryBatch batch = client.retry_jobs_bulk("q", JobState::kCancelled, 0, 0);
  EXPECT_EQ(batch.retried, 1);
  EXPECT_EQ(batch.next_after_id, 0);

  client.cancel_job(a);
  r = client.delete_jobs(ids);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].status, JobOutcome::Status::kWrongState);  // available again: not final
  EXPECT_EQ(r[1].status, JobOutcome::Status::kOk);
  EXPECT_EQ(r[2].status, JobOutcome::Status::kNotFound);
  EXPECT_FALSE(client.get_job(a));

  try {
    client.list_jobs(JobQuery{.queue = "q", .limit = 5000});
    ADD_FAILURE() << "limit 5000 accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), ApiCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).rfind("limit: must be 1..1000", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace conveyor
