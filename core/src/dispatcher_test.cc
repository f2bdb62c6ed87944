// The dispatcher's poll path, driven by a ManualClock against the real SQLite
// plugin loaded through the real loader: permits, then tokens, then claim,
// refund of unused tokens, throttling and exact wake-up times.
#include "dispatcher.hpp"

#include <conveyor/config.hpp>
#include <conveyor/storage.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

namespace conveyor {
namespace {

using namespace std::chrono_literals;

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("conveyor-dispatcher-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir_);
    StorageConfig sc;
    sc.plugin = "sqlite";
    sc.plugin_dir = CONVEYOR_TEST_PLUGIN_DIR;
    sc.options = {{"path", (dir_ / "q.db").string()}};
    storage_ = open_storage(sc);
  }
  void TearDown() override {
    dispatcher_.reset();
    storage_.reset();
    std::filesystem::remove_all(dir_);
  }

  void make(EngineConfig engine = {}, Dispatcher::Options options = {}) {
    resolver_ = std::make_unique<LimitResolver>(engine, std::map<std::string, QueueConfig>{});
    dispatcher_ = std::make_unique<Dispatcher>(
        *storage_, *resolver_, clock_, metrics_, options,
        [this](QueueRunner& r, std::vector<Job>&& jobs) {
          runner_ = &r;
          for (Job& j : jobs) claimed_.push_back(std::move(j));
        });
  }

  void enqueue(const std::string& queue, int n) {
    std::vector<NewJob> jobs(n);
    for (auto& j : jobs) {
      j.queue = queue;
      j.kind = "noop";
      j.run_at_us = clock_.wall_now_us();
    }
    storage_->enqueue(jobs, clock_.wall_now_us());
  }

  // Finishes every claimed job (frees permits), as workers would.
  void finish_all() {
    for (size_t i = 0; i < claimed_.size(); ++i) dispatcher_->job_finished(*runner_);
    claimed_.clear();
  }

  std::filesystem::path dir_;
  std::shared_ptr<Storage> storage_;
  ManualClock clock_;
  Metrics metrics_;
  std::unique_ptr<LimitResolver> resolver_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::vector<Job> claimed_;
  QueueRunner* runner_ = nullptr;
};

TEST_F(DispatcherTest, UnlimitedQueueClaimsUpToFreePermitsThenParks) {
  make();
  enqueue("bulk", 50);
  dispatcher_->add_queue("bulk", 20);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 20u);
  // No permit free: the queue parks (no timer) until a job finishes.
  EXPECT_EQ(dispatcher_->run_due(clock_.steady_now()), SteadyTime::max());
  EXPECT_EQ(claimed_.size(), 20u);
  dispatcher_->job_finished(*runner_);
  // One permit back on a busy queue: it waits the coalescing window for more.
  SteadyTime next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 20u);
  EXPECT_EQ(next - clock_.steady_now(), std::chrono::microseconds(1000));
  dispatcher_->job_finished(*runner_);
  clock_.advance(std::chrono::microseconds(1000));
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 22u);  // both freed permits, in one claim
}

TEST_F(DispatcherTest, BatchIsCappedByClaimBatchMax) {
  Dispatcher::Options o;
  o.claim_batch_max = 7;
  make({}, o);
  enqueue("bulk", 50);
  dispatcher_->add_queue("bulk", 100);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 7u);
}

TEST_F(DispatcherTest, LimitedQueueTakesBurstThenWakesExactlyWhenTheNextTokenIsDue) {
  make();
  resolver_->set_overrides({RateLimitOverride{"email", RateLimit{50, 10}, 0}});
  enqueue("email", 100);
  dispatcher_->add_queue("email", 50);
  SteadyTime next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 10u);  // the burst
  EXPECT_EQ(next, clock_.steady_now());  // a full batch: come back at once
  next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 10u);
  EXPECT_EQ(next - clock_.steady_now(), 20ms);  // 1/50 s, not a poll interval
  EXPECT_EQ(metrics_.queue("email").throttled.load(), 1u);
  clock_.advance(20ms);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 11u);
}

TEST_F(DispatcherTest, UnusedTokensAreRefundedWhenFewerJobsAreReady) {
  make();
  resolver_->set_overrides({RateLimitOverride{"email", RateLimit{1, 10}, 0}});
  enqueue("email", 3);
  dispatcher_->add_queue("email", 50);
  dispatcher_->run_due(clock_.steady_now());
  ASSERT_EQ(claimed_.size(), 3u);
  // Seven tokens were taken but not used: they are back, with no time passing.
  enqueue("email", 20);
  dispatcher_->wake("email");
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 10u);
}

// Over 10 simulated seconds with a deep backlog, dispatch never exceeds
// burst + rate * t at any instant, and reaches it to within one job.
TEST_F(DispatcherTest, ThrottledBacklogDrainsAtTheConfiguredRate) {
  for (RateLimit limit : {RateLimit{50, 10}, RateLimit{5000, 500}}) {
    SCOPED_TRACE(limit.rate_per_sec);
    TearDown();
    SetUp();
    claimed_.clear();
    Dispatcher::Options o;
    o.claim_batch_max = 1000;
    o.max_in_flight = 1'000'000;  // jobs are never finished here
    make({}, o);
    resolver_->set_overrides({RateLimitOverride{"q", limit, 0}});
    const int backlog = static_cast<int>(limit.burst + limit.rate_per_sec * 10) + 200;
    enqueue("q", backlog);
    dispatcher_->add_queue("q", 100000);
    const SteadyTime start = clock_.steady_now();
    for (;;) {
      SteadyTime next = dispatcher_->run_due(clock_.steady_now());
      const double t = std::chrono::duration<double>(clock_.steady_now() - start).count();
      ASSERT_LE(static_cast<double>(claimed_.size()), limit.burst + limit.rate_per_sec * t + 1e-9);
      if (next > start + 10s) break;
      if (next > clock_.steady_now()) clock_.advance(next - clock_.steady_now());
    }
    EXPECT_NEAR(static_cast<double>(claimed_.size()), limit.burst + limit.rate_per_sec * 10, 1.0);
  }
}

TEST_F(DispatcherTest, RemovingTheOverrideLiftsTheLimitAtOnce) {
  make();
  resolver_->set_overrides({RateLimitOverride{"email", RateLimit{1, 1}, 0}});
  enqueue("email", 30);
  dispatcher_->add_queue("email", 100);
  dispatcher_->run_due(clock_.steady_now());
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 1u);
  resolver_->set_overrides({});
  dispatcher_->wake("email");
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 30u);
}

TEST_F(DispatcherTest, KillSwitchIgnoresOverrides) {
  EngineConfig e;
  e.rate_limit_enabled = false;
  make(e);
  resolver_->set_overrides({RateLimitOverride{"email", RateLimit{1, 1}, 0}});
  enqueue("email", 30);
  dispatcher_->add_queue("email", 100);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 30u);
  EXPECT_EQ(metrics_.queue("email").throttled.load(), 0u);
}

TEST_F(DispatcherTest, EmptyQueueIsPolledAgainAfterThePollInterval) {
  Dispatcher::Options o;
  o.poll_interval = 1000ms;
  make({}, o);
  dispatcher_->add_queue("idle", 10);
  SteadyTime next = dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(next - clock_.steady_now(), 1000ms);
  EXPECT_TRUE(claimed_.empty());
}

TEST_F(DispatcherTest, EngineWideCapLimitsClaimsAcrossQueues) {
  Dispatcher::Options o;
  o.max_in_flight = 8;
  make({}, o);
  enqueue("a", 10);
  enqueue("b", 10);
  dispatcher_->add_queue("a", 10);
  dispatcher_->add_queue("b", 10);
  dispatcher_->run_due(clock_.steady_now());
  EXPECT_EQ(claimed_.size(), 8u);
  EXPECT_EQ(dispatcher_->total_in_flight(), 8u);
}

}  // namespace
}  // namespace conveyor
