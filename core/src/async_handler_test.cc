// Asynchronous handlers (Engine::register_async_handler): the job's outcome
// comes later through a JobResult, from another thread. An engine on the
// in-memory example plugin (the real loader), real time with generous bounds.
#include <conveyor/internal/engine_internals.hpp>
#include "testing/fault_injecting_storage.hpp"
#include "testing/sync.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::eventually;

class AsyncHandlerTest : public ::testing::Test {
 protected:
  AsyncHandlerTest() {
    config.engine.poll_interval_ms = 20;
    config.engine.lease_ms = 900;  // heartbeats every 300 ms
    config.engine.shutdown_timeout_ms = 300;
    config.engine.retry_backoff_base_ms = 10;
    config.engine.backoff_base_ms = 10;
  }
  std::unique_ptr<Engine> make() {
    return EngineInternals::make(config, SystemClock::instance(), storage);
  }
  // Registers kind "later": every JobResult is kept for the test to report.
  void keep_results(Engine& engine) {
    engine.register_async_handler("later", [this](const Job& job, JobResult result) {
      std::lock_guard lock(mu);
      held.emplace_back(job, std::move(result));
      most_held = std::max(most_held, held.size());
    });
  }
  size_t held_count() {
    std::lock_guard lock(mu);
    return held.size();
  }
  std::pair<Job, JobResult> take() {
    std::lock_guard lock(mu);
    auto front = std::move(held.front());
    held.pop_front();
    return front;
  }
  Job job(Engine& e, int64_t id) { return e.get_job(id).value(); }

  std::shared_ptr<testing::FaultInjectingStorage> storage =
      std::make_shared<testing::FaultInjectingStorage>(testing::open_memory_storage());
  Config config;
  std::mutex mu;
  std::deque<std::pair<Job, JobResult>> held;  // mu
  size_t most_held = 0;                        // mu
};

TEST_F(AsyncHandlerTest, AJobHoldsItsPermitUntilItsResultIsReportedFromAnotherThread) {
  config.queues["q"].max_workers = 2;
  auto engine = make();
  keep_results(*engine);
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(engine->enqueue("q", "later"));
  engine->start();
  // Two start (the permits); each report, made on another thread, lets one
  // more start.
  for (int reported = 0; reported < 5; ++reported) {
    ASSERT_TRUE(eventually([&] { return held_count() > 0; })) << "after " << reported << " reports";
    std::thread([r = take().second]() mutable { r.complete(); }).join();
  }
  for (int64_t id : ids)
    ASSERT_TRUE(eventually([&] { return job(*engine, id).state == JobState::kCompleted; }));
  for (int64_t id : ids) EXPECT_EQ(job(*engine, id).attempt, 1);
  std::lock_guard lock(mu);
  EXPECT_LE(most_held, 2u) << "more jobs outstanding than max_workers";
  EXPECT_EQ(EngineInternals::async_outstanding(*engine), 0u);
}

TEST_F(AsyncHandlerTest, OutstandingJobsTakeNoWorkerThreadSoMoreWaitThanThereAreThreads) {
  config.engine.worker_threads = 2;
  config.queues["q"].max_workers = 50;
  auto engine = make();
  keep_results(*engine);
  for (int i = 0; i < 50; ++i) engine->enqueue("q", "later");
  engine->start();
  // The engine-wide cap (worker_threads) counts a job only until it started.
  ASSERT_TRUE(eventually([&] { return held_count() == 50; }))
      << held_count() << " outstanding with 2 worker threads";
  EXPECT_LE(engine->worker_threads(), 2u);
  std::lock_guard lock(mu);
  for (auto& [j, r] : held) r.complete();
}

TEST_F(AsyncHandlerTest, EachReportEndsTheJobAsTheSynchronousHandlerWould) {
  auto engine = make();
  keep_results(*engine);
  const int64_t done = engine->enqueue("q", "later");
  const int64_t retried = engine->enqueue("q", "later");
  const int64_t failed = engine->enqueue("q", "later");
  const int64_t backed_off = engine->enqueue("q", "later");
  engine->start();
  ASSERT_TRUE(eventually([&] { return held_count() == 4; }));
  std::map<int64_t, JobResult> by_id;
  while (held_count() > 0) {
    auto [j, r] = take();
    by_id.emplace(j.id, std::move(r));
  }
  by_id.at(done).complete();
  by_id.at(retried).fail("downstream said 500");
  by_id.at(failed).fail_permanently("HTTP 404: no such hook");
  by_id.at(backed_off).retry_after(50ms, "HTTP 429");
  ASSERT_TRUE(eventually([&] { return job(*engine, done).state == JobState::kCompleted; }));
  ASSERT_TRUE(eventually([&] { return job(*engine, failed).state == JobState::kFailed; }));
  EXPECT_EQ(job(*engine, failed).last_error, "HTTP 404: no such hook");
  // The failed attempt runs again with an attempt spent; the backed-off job
  // runs again with its attempt given back.
  ASSERT_TRUE(eventually([&] { return held_count() == 2; }));
  std::map<int64_t, Job> rerun;
  while (held_count() > 0) {
    auto [j, r] = take();
    rerun.emplace(j.id, j);
    r.complete();
  }
  EXPECT_EQ(rerun.at(retried).attempt, 2);
  EXPECT_EQ(rerun.at(backed_off).attempt, 1) << "backpressure spent an attempt";
  EXPECT_EQ(EngineInternals::metrics(*engine).queue("q").backoffs.load(), 1u);
}

TEST_F(AsyncHandlerTest, OnlyTheFirstReportCounts) {
  auto engine = make();
  keep_results(*engine);
  const int64_t id = engine->enqueue("q", "later");
  engine->start();
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  auto [j, r] = take();
  JobResult copy = r;
  r.complete();
  EXPECT_TRUE(copy.reported());
  copy.fail_permanently("too late");
  ASSERT_TRUE(eventually([&] { return job(*engine, id).state == JobState::kCompleted; }));
  EXPECT_EQ(job(*engine, id).last_error, "");
}

TEST_F(AsyncHandlerTest, AResultDroppedUnreportedFailsTheAttemptSayingSo) {
  auto engine = make();
  engine->register_async_handler("lost", [](const Job&, JobResult) {});  // never reports
  const int64_t id = engine->enqueue("q", "lost", "{}", {.max_attempts = 1});
  engine->start();
  ASSERT_TRUE(eventually([&] { return job(*engine, id).state == JobState::kFailed; }));
  EXPECT_NE(job(*engine, id).last_error.find("dropped the job's result"), std::string::npos)
      << job(*engine, id).last_error;
}

TEST_F(AsyncHandlerTest, AnExceptionBeforeTheReportIsTheOutcomeAndOneAfterIsIgnored) {
  auto engine = make();
  engine->register_async_handler(
      "throws", [](const Job&, JobResult) { throw PermanentError("bad payload: url missing"); });
  engine->register_async_handler("reports_then_throws", [](const Job&, JobResult r) {
    r.complete();
    throw std::runtime_error("after the report");
  });
  const int64_t bad = engine->enqueue("q", "throws");
  const int64_t good = engine->enqueue("q", "reports_then_throws");
  engine->start();
  ASSERT_TRUE(eventually([&] { return job(*engine, bad).state == JobState::kFailed; }));
  EXPECT_EQ(job(*engine, bad).last_error, "bad payload: url missing");
  ASSERT_TRUE(eventually([&] { return job(*engine, good).state == JobState::kCompleted; }));
}

TEST_F(AsyncHandlerTest, AnOutstandingJobIsHeartbeatedPastItsLease) {
  auto engine = make();
  keep_results(*engine);
  const int64_t id = engine->enqueue("q", "later");
  engine->start();
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  const int64_t first_expiry = job(*engine, id).lease_expires_us;
  // Past the first lease's end: rescue would take it if heartbeats stopped.
  ASSERT_TRUE(
      eventually([&] { return job(*engine, id).lease_expires_us > first_expiry + 900'000; }, 10s));
  EXPECT_EQ(job(*engine, id).state, JobState::kRunning);
  take().second.complete();
  ASSERT_TRUE(eventually([&] { return job(*engine, id).state == JobState::kCompleted; }));
  EXPECT_EQ(job(*engine, id).attempt, 1);
}

TEST_F(AsyncHandlerTest, StopWaitsForAReportWithinTheShutdownTimeout) {
  config.engine.shutdown_timeout_ms = 10'000;
  auto engine = make();
  keep_results(*engine);
  const int64_t id = engine->enqueue("q", "later");
  engine->start();
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  std::thread reporter([&] {
    // Reports once stop() has begun waiting (the engine no longer runs).
    ASSERT_TRUE(eventually([&] { return !engine->running(); }));
    take().second.complete();
  });
  EXPECT_EQ(engine->stop(), 0u) << "no lease released: the job reported in time";
  reporter.join();
  EXPECT_EQ(job(*engine, id).state, JobState::kCompleted);
}

TEST_F(AsyncHandlerTest, AReportAfterTheShutdownTimeoutIsIgnoredEvenOnceTheEngineIsGone) {
  auto engine = make();
  keep_results(*engine);
  const int64_t id = engine->enqueue("q", "later");
  engine->start();
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  EXPECT_EQ(engine->stop(), 1u) << "the unreported job's lease is released";
  const Job after = job(*engine, id);
  EXPECT_EQ(after.state, JobState::kAvailable);
  EXPECT_EQ(after.attempt, 0) << "a released job's attempt is given back";
  engine.reset();
  // The engine is destroyed: the report (and the last copy's destruction)
  // touch nothing of it (AddressSanitizer checks).
  auto [j, r] = take();
  r.complete();
  EXPECT_TRUE(r.reported());
}

}  // namespace
}  // namespace conveyor
