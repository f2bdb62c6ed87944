// Maintenance's schedule and failure reporting, driven by a ManualClock
// without its thread.
#include "maintenance.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "testing/sync.hpp"

namespace conveyor {
namespace {

using namespace std::chrono_literals;

TEST(Maintenance, EachStepRunsOnItsOwnPeriod) {
  ManualClock clock;
  StorageHealth health(clock, {});
  int fast = 0, slow = 0;
  Maintenance m(clock, health,
                {{"fast", 100ms, [&] { ++fast; }}, {"slow", 1000ms, [&] { ++slow; }}});
  SteadyTime next = m.run_due(clock.steady_now());
  EXPECT_EQ(next, clock.steady_now() + 100ms);
  for (int i = 0; i < 20; ++i) {
    clock.advance(100ms);
    m.run_due(clock.steady_now());
  }
  EXPECT_EQ(fast, 21);
  EXPECT_EQ(slow, 3);  // at 0, 1 s and 2 s
}

TEST(Maintenance, RunSoonMakesAStepDueAtOnce) {
  ManualClock clock;
  StorageHealth health(clock, {});
  int runs = 0;
  Maintenance m(clock, health, {{"overrides", 1000ms, [&] { ++runs; }}});
  m.run_due(clock.steady_now());
  m.run_due(clock.steady_now());
  EXPECT_EQ(runs, 1);
  m.run_soon("overrides");
  m.run_due(clock.steady_now());
  EXPECT_EQ(runs, 2);
}

// A step that asks for another run while it runs (as the override follower
// does when a notification arrives mid-pass) leaves a step due at
// SteadyTime::min(); the thread's wait must not overflow on it (UBSan
// killed the engine on exactly this) and the step runs again promptly.
TEST(Maintenance, RunSoonDuringAPassRunsTheStepAgainWithoutOverflow) {
  StorageHealth health(SystemClock::instance(), {});
  std::atomic<int> runs{0};
  Maintenance* self = nullptr;
  Maintenance m(SystemClock::instance(), health, {{"overrides", 1h, [&] {
                                                     if (runs.fetch_add(1) == 0)
                                                       self->run_soon("overrides");
                                                   }}});
  self = &m;
  m.start();
  EXPECT_TRUE(testing::eventually([&] { return runs.load() >= 2; }))
      << "the step asked for in mid-pass ran again, not an hour later";
  m.stop();
}

TEST(Maintenance, AFailingStepIsCountedReportedAndRecovers) {
  ManualClock clock;
  StorageHealth health(clock, {2, 0ms});
  bool failing = true;
  int others = 0;
  Maintenance m(clock, health,
                {{"purge", 100ms,
                  [&] {
                    if (failing) throw StorageError(CONVEYOR_E_INTERNAL, "disk I/O error");
                  }},
                 {"other", 100ms, [&] { ++others; }}});
  m.run_due(clock.steady_now());
  EXPECT_EQ(m.failures("purge"), 1u);
  EXPECT_EQ(others, 1) << "a failing step does not stop the others";
  clock.advance(100ms);
  failing = false;
  m.run_due(clock.steady_now());
  EXPECT_EQ(m.failures("purge"), 0u);
  EXPECT_FALSE(health.fatal());
}

TEST(Maintenance, StopJoinsTheThread) {
  StorageHealth health(SystemClock::instance(), {});
  std::atomic<int> runs{0};
  Maintenance m(SystemClock::instance(), health, {{"tick", 1ms, [&] { ++runs; }}});
  m.start();
  while (runs.load() < 3) std::this_thread::yield();
  m.stop();
  const int after = runs.load();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(runs.load(), after) << "no step runs after stop() returned";
  m.stop();  // idempotent
}

}  // namespace
}  // namespace conveyor
