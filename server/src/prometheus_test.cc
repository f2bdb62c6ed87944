// The /metrics text: families, label escaping, cumulative buckets.
#include "prometheus.hpp"

#include <gtest/gtest.h>

namespace conveyor {
namespace {

bool contains(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(Prometheus, CountersGaugesAndHistogramsPerQueue) {
  QueueCountersSnapshot email;
  email.queue = "email";
  email.throttled = 7;
  email.dispatched = 12;
  email.enqueued = 20;
  email.duration.buckets[0] = 2;      // <= 0.0005
  email.duration.buckets[3] = 1;      // <= 0.005
  email.duration.buckets.back() = 1;  // > 10
  email.duration.count = 4;
  email.duration.sum = 12.5;
  QueueStats bulk{"bulk", true, 300, 0, 0, 0, 0, 0};
  const std::string text = render_prometheus({email}, {bulk});

  EXPECT_TRUE(contains(text, "# TYPE conveyor_ratelimit_throttled_total counter"));
  EXPECT_TRUE(contains(text, "conveyor_ratelimit_throttled_total{queue=\"email\"} 7"));
  EXPECT_TRUE(contains(text, "conveyor_ratelimit_throttled_total{queue=\"bulk\"} 0"));
  EXPECT_TRUE(contains(text, "conveyor_jobs_dispatched_total{queue=\"email\"} 12"));
  EXPECT_TRUE(contains(text, "conveyor_jobs_enqueued_total{queue=\"email\"} 20"));
  EXPECT_TRUE(contains(text, "# TYPE conveyor_queue_pending gauge"));
  EXPECT_TRUE(contains(text, "conveyor_queue_pending{queue=\"bulk\"} 300"));
  EXPECT_TRUE(contains(text, "conveyor_queue_pending{queue=\"email\"} 0"));
  EXPECT_TRUE(contains(text, "conveyor_queue_paused{queue=\"bulk\"} 1"));
  EXPECT_TRUE(contains(text, "# TYPE conveyor_job_duration_seconds histogram"));
  EXPECT_TRUE(
      contains(text, "conveyor_job_duration_seconds_bucket{queue=\"email\",le=\"0.0005\"} 2"));
  EXPECT_TRUE(
      contains(text, "conveyor_job_duration_seconds_bucket{queue=\"email\",le=\"0.002\"} 2"));
  EXPECT_TRUE(
      contains(text, "conveyor_job_duration_seconds_bucket{queue=\"email\",le=\"0.005\"} 3"));
  EXPECT_TRUE(contains(text, "conveyor_job_duration_seconds_bucket{queue=\"email\",le=\"10\"} 3"));
  EXPECT_TRUE(
      contains(text, "conveyor_job_duration_seconds_bucket{queue=\"email\",le=\"+Inf\"} 4"));
  EXPECT_TRUE(contains(text, "conveyor_job_duration_seconds_sum{queue=\"email\"} 12.5"));
  EXPECT_TRUE(contains(text, "conveyor_job_duration_seconds_count{queue=\"email\"} 4"));
  EXPECT_TRUE(contains(text, "conveyor_job_pickup_latency_seconds_count{queue=\"bulk\"} 0"));
  // Each family's HELP and TYPE come once, before its first sample.
  for (const char* family : {"conveyor_jobs_failed_total", "conveyor_job_pickup_latency_seconds"}) {
    const std::string type = std::string("# TYPE ") + family + " ";
    const size_t at = text.find(type);
    ASSERT_NE(at, std::string::npos) << family;
    EXPECT_EQ(text.find(type, at + 1), std::string::npos) << family;
    EXPECT_LT(at, text.find(std::string("\n") + family + "{")) << family;
  }
}

TEST(Prometheus, LabelValuesAreEscaped) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_label_value("email:send"), "email:send");
}

TEST(Prometheus, NothingYetStillListsEveryFamily) {
  const std::string text = render_prometheus({}, {});
  EXPECT_TRUE(contains(text, "# TYPE conveyor_ratelimit_throttled_total counter"));
  EXPECT_TRUE(contains(text, "# TYPE conveyor_job_duration_seconds histogram"));
  EXPECT_EQ(text.find("{queue="), std::string::npos);
}

}  // namespace
}  // namespace conveyor
