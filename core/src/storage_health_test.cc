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

TEST(StorageHealth, EveryFailureCountsInTheMetricsByOperation) {
  ManualClock clock;
  Metrics metrics;
  StorageHealth health(clock, {3, 1000ms, &metrics});
  health.failed("claiming jobs", outage());
  health.failed("claiming jobs", broken());
  health.failed("rescuing expired leases", outage());
  health.succeeded();
  EXPECT_EQ(metrics.storage_errors("claiming_jobs").load(), 2u) << "transient ones count too";
  EXPECT_EQ(metrics.storage_errors("rescuing_expired_leases").load(), 1u);
  const auto all = metrics.storage_errors_snapshot();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, "claiming_jobs");
  EXPECT_FALSE(health.fatal());
}

TEST(StorageHealth, OperationLabels) {
  EXPECT_EQ(operation_label("reading rate-limit overrides"), "reading_rate_limit_overrides");
  EXPECT_EQ(operation_label("  Claiming  jobs! "), "claiming_jobs");
}

}  // namespace
}  // namespace conveyor
