#include "storage_health.hpp"

#include <gtest/gtest.h>

namespace conveyor {
namespace {

using namespace std::chrono_literals;

StorageError broken() { return StorageError(CONVEYOR_E_INTERNAL, "file is not a database"); }
StorageError outage() { return StorageError(CONVEYOR_E_UNAVAILABLE, "connection refused"); }

TEST(StorageHealth, BrokenAfterEnoughFailuresInARowOverTheSpan) {
  ManualClock clock;
  StorageHealth health(clock, {3, 1000ms});
  int fatal_calls = 0;
  health.on_fatal([&](const std::string&) { ++fatal_calls; });
  health.failed("claiming jobs", broken());
  health.failed("claiming jobs", broken());
  health.failed("claiming jobs", broken());
  EXPECT_FALSE(health.fatal()) << "3 failures within 0 ms: the span is not over yet";
  clock.advance(1000ms);
  health.failed("claiming jobs", broken());
  ASSERT_TRUE(health.fatal());
  EXPECT_NE(health.fatal()->find("file is not a database"), std::string::npos);
  EXPECT_NE(health.fatal()->find("claiming jobs"), std::string::npos);
  health.failed("claiming jobs", broken());
  EXPECT_EQ(fatal_calls, 1);
}

TEST(StorageHealth, ASuccessStartsTheCountAgain) {
  ManualClock clock;
  StorageHealth health(clock, {3, 1000ms});
  for (int i = 0; i < 10; ++i) {
    health.failed("purging", broken());
    health.failed("purging", broken());
    health.succeeded();
    clock.advance(500ms);
  }
  EXPECT_FALSE(health.fatal());
}

TEST(StorageHealth, OutagesNeverCount) {
  ManualClock clock;
  StorageHealth health(clock, {3, 1000ms});
  for (int i = 0; i < 100; ++i) {
    health.failed("claiming jobs", outage());
    clock.advance(100ms);
  }
  EXPECT_FALSE(health.fatal());
  // Nor do they break a run of real failures.
  health.failed("claiming jobs", broken());
  health.failed("claiming jobs", outage());
  health.failed("claiming jobs", broken());
  clock.advance(2000ms);
  health.failed("claiming jobs", broken());
  EXPECT_TRUE(health.fatal());
}

}  // namespace
}  // namespace conveyor
