// Maintenance's schedule and failure reporting, driven by a ManualClock
// without its thread.
#include "maintenance.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

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
