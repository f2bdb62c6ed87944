// The engine's counters for operators: rescues, lost leases, storage errors,
// failed and retried jobs, and the failure log lines, from a real engine on
// the in-memory example plugin (through the real loader) with a ManualClock
// where time matters.
#include <conveyor/internal/engine_internals.hpp>
#include <conveyor/internal/log.hpp>
#include "testing/fault_injecting_storage.hpp"
#include "testing/sync.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <sstream>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::FaultInjectingStorage;
using testing::Gate;
using testing::StorageOp;

class EngineMetricsTest : public ::testing::Test {
 protected:
  EngineMetricsTest() {
    config.engine.poll_interval_ms = 20;
    config.engine.shutdown_timeout_ms = 200;
  }
  std::unique_ptr<Engine> make(const Clock& clock = SystemClock::instance()) {
    return EngineInternals::make(config, clock, storage);
  }
  static QueueCountersSnapshot counters(Engine& e, const std::string& queue) {
    for (auto& c : EngineInternals::metrics(e).snapshot())
      if (c.queue == queue) return c;
    return {};
  }

  std::shared_ptr<FaultInjectingStorage> storage =
      std::make_shared<FaultInjectingStorage>(testing::open_memory_storage());
  Config config;
};

TEST_F(EngineMetricsTest, ARescueCountsOnceTheDeadWorkersLeaseHasExpired) {
  ManualClock clock(SystemClock::instance().wall_now_us());
  config.engine.rescue_interval_ms = 1000;
  auto engine = make(clock);
  std::atomic<int> runs{0};
  engine->register_handler("k", [&](const Job&) { ++runs; });
  const int64_t id = engine->enqueue("q", "k");
  // Another worker claims it and dies: its lease (10 s) simply expires.
  const int64_t now = clock.wall_now_us();
  ASSERT_EQ(storage->inner().claim("q", 1, 42, now, now + 10'000'000).size(), 1u);
  engine->start();
  ASSERT_TRUE(eventually([&] { return storage->calls(StorageOp::kRescueExpired) >= 1; }));
  const uint64_t calls = storage->calls(StorageOp::kRescueExpired);
  clock.advance(5s);  // the rescue step runs again; the lease has not expired yet
  ASSERT_TRUE(eventually([&] { return storage->calls(StorageOp::kRescueExpired) > calls; }));
  EXPECT_EQ(counters(*engine, "q").rescued, 0u);
  clock.advance(6s);
  ASSERT_TRUE(eventually([&] { return counters(*engine, "q").rescued == 1; }));
  ASSERT_TRUE(eventually([&] { return engine->get_job(id)->state == JobState::kCompleted; }));
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(counters(*engine, "q").rescued, 1u);
}

TEST_F(EngineMetricsTest, AResultRefusedForALostLeaseCountsAsLeaseLost) {
  auto engine = make();
  Gate release;
  engine->register_handler("k", [&](const Job&) { release.pass(); });
  const int64_t id = engine->enqueue("q", "k");
  engine->start();
  ASSERT_TRUE(eventually([&] { return engine->get_job(id)->state == JobState::kRunning; }));
  ASSERT_TRUE(engine->cancel_job(id));  // the running job's lease is gone
  release.open();
  ASSERT_TRUE(eventually([&] { return counters(*engine, "q").leases_lost == 1; }));
  EXPECT_EQ(counters(*engine, "q").completed, 0u);
  EXPECT_EQ(engine->get_job(id)->state, JobState::kCancelled);
}

TEST_F(EngineMetricsTest, StorageErrorsCountByOperation) {
  storage->fail_next(StorageOp::kClaim, 3);
  storage->fail_next(StorageOp::kComplete, 1);
  auto engine = make();
  engine->register_handler("k", [](const Job&) {});
  const int64_t id = engine->enqueue("q", "k");
  engine->start();
  ASSERT_TRUE(eventually([&] { return engine->get_job(id)->state == JobState::kCompleted; }));
  Metrics& m = EngineInternals::metrics(*engine);
  EXPECT_EQ(m.storage_errors("claiming_jobs").load(), 3u);
  EXPECT_EQ(m.storage_errors("recording_outcomes").load(), 1u);
}

TEST_F(EngineMetricsTest, RetriesAndFinalFailuresCountAndAreLoggedAtInfo) {
  std::ostringstream out;  // written under the sink's lock, read after stop
  setup_logging(LogLevel::kInfo, LogFormat::kJson, &out);

  config.engine.retry_backoff_base_ms = 1;
  config.engine.retry_backoff_max_ms = 1;
  {
    auto engine = make();
    engine->register_handler("bad", [](const Job&) { throw std::runtime_error("boom"); });
    EnqueueOptions two;
    two.max_attempts = 2;
    const int64_t id = engine->enqueue("failing", "bad", "{}", two);
    engine->start();
    ASSERT_TRUE(eventually([&] { return engine->get_job(id)->state == JobState::kFailed; }));
    ASSERT_TRUE(eventually([&] { return counters(*engine, "failing").failed == 1; }));
    EXPECT_EQ(counters(*engine, "failing").retried, 1u);
    engine->stop();
    const std::string text = out.str();
    const std::string job = "\"job_id\":" + std::to_string(id);
    EXPECT_NE(text.find("attempt 1 of 2 failed, retrying in"), std::string::npos) << text;
    EXPECT_NE(text.find("failed for good after attempt 2 of 2: boom"), std::string::npos) << text;
    EXPECT_NE(text.find(job + ",\"kind\":\"bad\",\"attempt\":2,\"max_attempts\":2,"
                              "\"error\":\"boom\""),
              std::string::npos)
        << text;
  }
  setup_logging(LogLevel::kWarn, LogFormat::kText);
}

}  // namespace
}  // namespace conveyor
