// Drained queues on PostgreSQL are polled rarely ([engine]
// notified_poll_interval_ms) because both plugins report delayed jobs when
// they come due (CONVEYOR_CAP_NOTIFY_DUE), and a retry this process
// scheduled wakes its queue at its time. Each test sets the rare poll to
// 10 minutes, so a job that runs within seconds was woken, not polled for.
//
// Needs CONVEYOR_TEST_PG_DSN (skipped without it, failed without it when
// CI=true).
#include "pg_test_env.hpp"
#include "test_support.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>
#include <conveyor/internal/storage.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

int64_t wall_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class PostgresIdlePoll : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    CONVEYOR_NEED_PG_DSN();
    dsn_ = *test::pg_dsn();
    schema_ = test::fresh_schema_name("idle_");
    config_.storage.plugin = GetParam();
    config_.storage.plugin_dir = CONVEYOR_TEST_PLUGIN_DIR;
    config_.storage.options = {{"dsn", dsn_}, {"schema", schema_}};
    config_.engine.poll_interval_ms = 200;
    config_.engine.notified_poll_interval_ms = 600'000;
    config_.engine.retry_backoff_base_ms = 1000;
  }
  void TearDown() override {
    engine_.reset();
    other_.reset();
    test::drop_schema(dsn_, schema_);  // empty (nothing to drop) when SetUp skipped
  }

  // Starts the engine with a noop handler and waits until a job enqueued by
  // another handle (another process, as far as the engine can tell) has run:
  // the queue is known, drained, and the engine's listener is up.
  void start() {
    engine_ = std::make_unique<Engine>(config_);
    engine_->register_handler("noop", [this](const Job&) { ran_.fetch_add(1); });
    engine_->start();
    other_ = open_storage(config_.storage);
    const int64_t id = enqueue_other(wall_now_us());
    ASSERT_TRUE(test::wait_until([&] { return completed(id); }, 30s)) << "the first job never ran";
  }
  int64_t enqueue_other(int64_t run_at_us) {
    NewJob job;
    job.queue = "q";
    job.kind = "noop";
    job.payload = "{}";
    job.max_attempts = 1;
    job.run_at_us = run_at_us;
    return other_->enqueue(std::vector<NewJob>{job}, wall_now_us()).front();
  }
  bool completed(int64_t id) {
    auto j = other_->get_job(id, wall_now_us());
    return j && j->state == JobState::kCompleted;
  }
  uint64_t claims() { return EngineInternals::metrics(*engine_).queue("q").claims.load(); }

  std::string dsn_, schema_;
  Config config_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<Storage> other_;
  std::atomic<int> ran_{0};
};

TEST_P(PostgresIdlePoll, ADrainedQueueIsNotClaimedEveryPollInterval) {
  start();
  // The claim that took the first job, then the two a wake owes, a poll
  // interval apart (dispatcher.cc, kShortPollsAfterWake).
  ASSERT_TRUE(test::wait_until([&] { return claims() >= 3; }, 10s)) << claims() << " claims";
  const uint64_t before = claims();
  // A window of 15 poll intervals: the old fallback claimed 15 times. (Up to
  // 3 allows one more wake, e.g. the listener's catch-up after a reconnect.)
  std::this_thread::sleep_for(3s);
  EXPECT_LE(claims() - before, 3u) << "claims of a drained queue in 3 s at poll_interval_ms 200";
}

TEST_P(PostgresIdlePoll, ADelayedJobAnotherProcessEnqueuedRunsWhenItComesDue) {
  start();
  const int64_t run_at = wall_now_us() + 1'500'000;
  const int64_t id = enqueue_other(run_at);
  ASSERT_TRUE(test::wait_until([&] { return completed(id); }, 20s))
      << "a job due in 1.5 s had not run after 20 s (the drained queue's poll is 10 minutes)";
  const int64_t ran_after_us = wall_now_us() - run_at;
  EXPECT_GE(ran_after_us, 0) << "ran before its run_at";
  // Generous for a loaded machine; the poll it replaces would take 10 minutes.
  EXPECT_LT(ran_after_us, 5'000'000);
}

TEST_P(PostgresIdlePoll, ARetryThisProcessScheduledRunsAtItsTime) {
  std::mutex mu;
  std::vector<Steady::time_point> attempts;
  config_.engine.max_attempts = 2;
  start();
  engine_->register_handler("flaky", [&](const Job& job) {
    {
      std::lock_guard lock(mu);
      attempts.push_back(Steady::now());
    }
    if (job.attempt == 1) throw std::runtime_error("first attempt fails");
  });
  EnqueueOptions o;
  o.max_attempts = 2;
  const int64_t id = engine_->enqueue("q", "flaky", "{}", o);
  ASSERT_TRUE(test::wait_until([&] { return completed(id); }, 30s))
      << "the retry had not run after 30 s (the drained queue's poll is 10 minutes)";
  std::lock_guard lock(mu);
  ASSERT_EQ(attempts.size(), 2u);
  const auto gap = attempts[1] - attempts[0];
  EXPECT_LT(gap, 10s) << "retry_backoff_base_ms is 1000";
}

INSTANTIATE_TEST_SUITE_P(Plugins, PostgresIdlePoll,
                         ::testing::Values("postgres"
#ifdef CONVEYOR_TEST_HAS_POSTGRES_QUEUE
                                           ,
                                           "postgres-queue"
#endif
                                           ),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace conveyor
