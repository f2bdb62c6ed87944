// The engine end to end on the SQLite plugin, loaded through the real loader:
// drain, retries with backoff, permanent failure (unserved kinds:
// engine_unknown_kinds_test.cc), rescue of a dead worker's
// job, exactly-once execution across two engines, overrides made elsewhere,
// pause, delay, graceful stop, retention, and the 50/s limit on a real clock.
#include "test_support.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/validation.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using test::TempDir;
using test::wait_until;

QueueStats stats_of(Engine& e, const std::string& queue) {
  for (const auto& r : e.queues())
    if (r.stats.queue == queue) return r.stats;
  return QueueStats{};
}

Config fast_config(const TempDir& dir) {
  Config c = test::sqlite_config(dir);
  c.engine.poll_interval_ms = 50;
  c.engine.retry_backoff_base_ms = 1;
  c.engine.retry_backoff_max_ms = 5;
  c.engine.rescue_interval_ms = 50;
  return c;
}

TEST(EngineSqlite, DrainsNoopJobs) {
  TempDir dir;
  Engine engine(fast_config(dir));
  register_builtin_handlers(engine);
  std::vector<NewJob> jobs(2000);
  for (auto& j : jobs) j = NewJob{"bulk", "noop", "{}", 0, 0, 0};
  engine.enqueue_batch(jobs);
  engine.start();
  // The completed counter is bumped after storage acknowledges the batch, so
  // a reader can see the stored count first: wait for both.
  auto& completed = EngineInternals::metrics(engine).queue("bulk").completed;
  ASSERT_TRUE(wait_until([&] {
    return stats_of(engine, "bulk").completed == 2000 && completed.load() == 2000u;
  })) << "completed "
      << stats_of(engine, "bulk").completed << ", counter " << completed.load();
  auto s = stats_of(engine, "bulk");
  EXPECT_EQ(s.pending, 0);
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(completed.load(), 2000u);
  EXPECT_LE(engine.worker_threads(), engine.config().engine.worker_threads);
}

TEST(EngineSqlite, RetriesWithBackoffUntilTheHandlerSucceeds) {
  TempDir dir;
  Engine engine(fast_config(dir));
  std::atomic<int> calls{0};
  engine.register_handler("flaky", [&](const Job& job) {
    calls++;
    if (job.attempt < 3)
      throw std::runtime_error("downstream 503 on attempt " + std::to_string(job.attempt));
  });
  EnqueueOptions o;
  o.max_attempts = 5;
  int64_t id = engine.enqueue("q", "flaky", "{}", o);
  engine.start();
  ASSERT_TRUE(wait_until([&] {
    auto j = engine.get_job(id);
    return j && j->state == JobState::kCompleted;
  }));
  auto job = engine.get_job(id);
  EXPECT_EQ(job->attempt, 3);
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(job->last_error, "downstream 503 on attempt 2");
  EXPECT_EQ(EngineInternals::metrics(engine).queue("q").retried.load(), 2u);
}

TEST(EngineSqlite, FailsAfterMaxAttemptsWithTheLastError) {
  TempDir dir;
  Engine engine(fast_config(dir));
  engine.register_handler("bad", [](const Job& job) {
    throw std::runtime_error("boom " + std::to_string(job.attempt));
  });
  EnqueueOptions o;
  o.max_attempts = 3;
  int64_t id = engine.enqueue("q", "bad", "{}", o);
  engine.start();
  ASSERT_TRUE(wait_until([&] { return engine.get_job(id)->state == JobState::kFailed; }));
  auto job = engine.get_job(id);
  EXPECT_EQ(job->attempt, 3);
  EXPECT_EQ(job->last_error, "boom 3");
  EXPECT_EQ(stats_of(engine, "q").failed, 1);
  EXPECT_EQ(EngineInternals::metrics(engine).queue("q").failed.load(), 1u);
}

TEST(EngineSqlite, PermanentErrorFailsAtOnce) {
  TempDir dir;
  Engine engine(fast_config(dir));
  engine.register_handler("bad", [](const Job&) { throw PermanentError("invalid address"); });
  int64_t id = engine.enqueue("q", "bad");
  engine.start();
  ASSERT_TRUE(wait_until([&] { return engine.get_job(id)->state == JobState::kFailed; }));
  EXPECT_EQ(engine.get_job(id)->attempt, 1);
  EXPECT_EQ(engine.get_job(id)->last_error, "invalid address");
}

// A worker that claimed a job and died: its lease expires, the engine rescues
// the job and runs it again; the dead worker's late result is refused.
TEST(EngineSqlite, RescuesJobsWhoseWorkerDied) {
  TempDir dir;
  Config c = fast_config(dir);
  auto dead_worker = open_storage(c.storage);
  const int64_t now = SystemClock::instance().wall_now_us();
  std::vector<NewJob> job{NewJob{"q", "noop", "{}", 0, 5, now}};
  const int64_t id = dead_worker->enqueue(job, now).front();
  auto claimed = dead_worker->claim("q", 1, 777, now, now + 1);  // a lease that expires at once
  ASSERT_EQ(claimed.size(), 1u);

  Engine engine(c);
  register_builtin_handlers(engine);
  engine.start();
  ASSERT_TRUE(wait_until([&] { return engine.get_job(id)->state == JobState::kCompleted; }));
  EXPECT_EQ(engine.get_job(id)->attempt, 2);
  // The lease guard: the dead worker's completion does not count.
  std::vector<conveyor_lease> stale{lease_of(claimed[0])};
  EXPECT_EQ(dead_worker->complete(stale, now).front(), CONVEYOR_E_LEASE_LOST);
}

// Two engines (separate storage handles, as two processes would have) drain
// one queue: every job runs exactly once.
TEST(EngineSqlite, TwoEnginesNeverRunAJobTwice) {
  TempDir dir;
  std::mutex mu;
  std::map<int64_t, int> runs;
  auto record = [&](const Job& job) {
    std::lock_guard lock(mu);
    runs[job.id]++;
  };
  Config c = fast_config(dir);
  c.engine.max_workers = 8;
  Engine a(c), b(c);
  a.register_handler("record", record);
  b.register_handler("record", record);
  std::vector<NewJob> jobs(3000);
  for (auto& j : jobs) j = NewJob{"shared", "record", "{}", 0, 0, 0};
  auto ids = a.enqueue_batch(jobs);
  a.start();
  b.start();
  ASSERT_TRUE(wait_until([&] { return stats_of(a, "shared").completed == 3000; }));
  a.stop();
  b.stop();
  std::lock_guard lock(mu);
  ASSERT_EQ(runs.size(), 3000u);
  for (int64_t id : ids) EXPECT_EQ(runs[id], 1) << "job " << id;
  EXPECT_GT(EngineInternals::metrics(a).queue("shared").completed.load(), 0u);
  EXPECT_GT(EngineInternals::metrics(b).queue("shared").completed.load(), 0u);
}

// An override written by another process (here: another storage handle) is
// applied by a running engine within a second, and so is its removal.
TEST(EngineSqlite, RunningEngineSeesOverridesMadeElsewhere) {
  TempDir dir;
  Config c = fast_config(dir);
  Engine engine(c);
  register_builtin_handlers(engine);
  engine.start();
  auto other = open_storage(c.storage);
  const auto set_at = std::chrono::steady_clock::now();
  other->set_rate_limit("email", RateLimit{5, 1}, SystemClock::instance().wall_now_us());
  ASSERT_TRUE(wait_until(
      [&] {
        return EngineInternals::limits(engine).resolve("email").source == LimitSource::kOverride;
      },
      5s));
  EXPECT_LT(std::chrono::steady_clock::now() - set_at, 1500ms);
  EXPECT_EQ(EngineInternals::limits(engine).resolve("email").limit, (RateLimit{5, 1}));
  other->delete_rate_limit("email");
  ASSERT_TRUE(wait_until(
      [&] { return EngineInternals::limits(engine).resolve("email").source == LimitSource::kNone; },
      5s));
}

TEST(EngineSqlite, PausedQueueIsNotDispatchedUntilResumed) {
  TempDir dir;
  Engine engine(fast_config(dir));
  register_builtin_handlers(engine);
  engine.set_queue_paused("q", true);
  engine.enqueue("q", "noop");
  engine.enqueue("other", "noop");
  engine.start();
  ASSERT_TRUE(wait_until([&] { return stats_of(engine, "other").completed == 1; }));
  EXPECT_EQ(stats_of(engine, "q").pending, 1);
  EXPECT_TRUE(stats_of(engine, "q").paused);
  engine.set_queue_paused("q", false);
  ASSERT_TRUE(wait_until([&] { return stats_of(engine, "q").completed == 1; }));
}

TEST(EngineSqlite, DelayedJobWaitsUntilItIsDue) {
  TempDir dir;
  Engine engine(fast_config(dir));
  std::atomic<int64_t> ran_at{0};
  engine.register_handler("t", [&](const Job&) { ran_at = SystemClock::instance().wall_now_us(); });
  EnqueueOptions o;
  o.delay = 400ms;
  const int64_t enqueued_at = SystemClock::instance().wall_now_us();
  int64_t id = engine.enqueue("q", "t", "{}", o);
  EXPECT_EQ(engine.get_job(id)->state, JobState::kScheduled);
  engine.start();
  ASSERT_TRUE(wait_until([&] { return ran_at.load() != 0; }));
  EXPECT_GE(ran_at.load() - enqueued_at, 400'000);
}

TEST(EngineSqlite, GracefulStopLetsRunningJobsFinish) {
  TempDir dir;
  Config c = fast_config(dir);
  c.engine.shutdown_timeout_ms = 10000;
  Engine engine(c);
  std::atomic<int> started{0}, finished{0};
  engine.register_handler("slow", [&](const Job&) {
    started++;
    std::this_thread::sleep_for(300ms);
    finished++;
  });
  for (int i = 0; i < 4; ++i) engine.enqueue("q", "slow");
  engine.start();
  ASSERT_TRUE(wait_until([&] { return started.load() == 4; }));
  EXPECT_EQ(engine.stop(), 0u);
  EXPECT_EQ(finished.load(), 4);
  EXPECT_EQ(stats_of(engine, "q").completed, 4);
  EXPECT_EQ(stats_of(engine, "q").running, 0);
}

TEST(EngineSqlite, StopReleasesLeasesOfJobsThatOutliveTheTimeout) {
  TempDir dir;
  Config c = fast_config(dir);
  c.engine.shutdown_timeout_ms = 100;
  std::atomic<bool> release_handler{false};
  std::atomic<int> started{0};
  int64_t id = 0;
  {
    Engine engine(c);
    engine.register_handler("stuck", [&](const Job&) {
      started++;
      while (!release_handler) std::this_thread::sleep_for(5ms);
    });
    id = engine.enqueue("q", "stuck");
    engine.start();
    ASSERT_TRUE(wait_until([&] { return started.load() == 1; }));
    EXPECT_EQ(engine.stop(), 1u);
    auto job = engine.get_job(id);
    EXPECT_EQ(job->state, JobState::kAvailable);
    EXPECT_EQ(job->attempt, 0);  // the attempt was not spent
    release_handler = true;      // let the destructor join the pool
  }
}

TEST(EngineSqlite, FinishedJobsArePurgedAfterRetention) {
  TempDir dir;
  Config c = fast_config(dir);
  c.engine.retention_s = 1;
  Engine engine(c);
  register_builtin_handlers(engine);
  engine.enqueue("q", "noop");
  engine.start();
  ASSERT_TRUE(wait_until([&] { return stats_of(engine, "q").completed == 1; }));
  ASSERT_TRUE(wait_until([&] { return stats_of(engine, "q").completed == 0; }, 10s));
}

TEST(EngineSqlite, RejectsInvalidInputBeforeStoringAnything) {
  TempDir dir;
  Engine engine(fast_config(dir));
  EXPECT_THROW(engine.enqueue("x'); DROP TABLE jobs;--", "noop"), ValidationError);
  EXPECT_THROW(engine.enqueue("q", ""), ValidationError);
  EXPECT_THROW(engine.enqueue("q", "noop", std::string(kMaxPayloadBytes + 1, 'x')),
               ValidationError);
  EXPECT_THROW(engine.set_rate_limit("q", RateLimit{0, 1}), ValidationError);
  EXPECT_THROW(engine.set_rate_limit("q", RateLimit{1, 0}), ValidationError);
  EXPECT_TRUE(engine.queues().empty());
}

// Real clock, generous bounds: a 50/s burst-10 queue never exceeds
// burst + rate * t, and an unlimited queue beside it drains at once.
TEST(EngineSqlite, FiftyPerSecondLimitHoldsOnARealClock) {
  TempDir dir;
  Config c = fast_config(dir);
  c.engine.max_workers = 50;
  Engine engine(c);
  std::mutex mu;
  std::vector<std::chrono::steady_clock::time_point> starts;
  engine.register_handler("tick", [&](const Job&) {
    std::lock_guard lock(mu);
    starts.push_back(std::chrono::steady_clock::now());
  });
  register_builtin_handlers(engine);
  engine.set_rate_limit("email", RateLimit{50, 10});
  std::vector<NewJob> jobs(200, NewJob{"email", "tick", "{}", 0, 0, 0});
  std::vector<NewJob> bulk(1000, NewJob{"bulk", "noop", "{}", 0, 0, 0});
  engine.enqueue_batch(jobs);
  engine.enqueue_batch(bulk);
  const auto t0 = std::chrono::steady_clock::now();
  engine.start();
  ASSERT_TRUE(wait_until([&] { return stats_of(engine, "bulk").completed == 1000; }, 10s));
  const double bulk_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(wait_until(
      [&] {
        std::lock_guard l(mu);
        return starts.size() >= 110;
      },
      10s));
  engine.stop();
  std::lock_guard lock(mu);
  // Every prefix of starts fits burst + rate * elapsed (1 job of slack for
  // the gap between the dispatcher's claim and the handler's timestamp).
  for (size_t i = 0; i < starts.size(); ++i) {
    const double t = std::chrono::duration<double>(starts[i] - t0).count();
    ASSERT_LE(static_cast<double>(i + 1), 10 + 50 * t + 1) << "job " << i << " at " << t << " s";
  }
  const double span = std::chrono::duration<double>(starts.back() - starts.front()).count();
  const double rate = (starts.size() - 10) / span;
  EXPECT_NEAR(rate, 50.0, 5.0);
  EXPECT_LT(bulk_s, 1.5) << "the unlimited queue must not wait for the limited one";
  EXPECT_GT(EngineInternals::metrics(engine).queue("email").throttled.load(), 0u);
}

}  // namespace
}  // namespace conveyor
