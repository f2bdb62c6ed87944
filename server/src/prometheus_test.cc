// The /metrics text: families, label escaping, cumulative buckets.
#include "prometheus.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

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
  email.duration.buckets.back() = 1;  // > 7200
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
      contains(text, "conveyor_job_duration_seconds_bucket{queue=\"email\",le=\"3600\"} 3"));
  EXPECT_TRUE(
      contains(text, "conveyor_job_duration_seconds_bucket{queue=\"email\",le=\"7200\"} 3"));
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

TEST(Prometheus, StatesLimitsBuildAndProcess) {
  MetricsPage page;
  QueueCountersSnapshot email;
  email.queue = "email";
  email.leases_lost = 2;
  email.rescued = 3;
  email.claims = 10;
  email.fleet_swaps = 11;
  email.fleet_conflicts = 4;
  page.counters = {email};
  page.stats = {QueueStats{"bulk", true, 300, 4, 5, 6, 7, 8, true, 1'000'000},
                QueueStats{"quiet", false, 0, 0, 0, 0, 0, 0, true, 0},
                QueueStats{"old_plugin", false, 1, 0, 0, 0, 0, 0, false, 0}};
  page.now_us = 91'500'000;
  page.stats_age_seconds = 0.25;
  page.limits["email"] = EffectiveLimit{RateLimit{2.5, 5}, LimitSource::kOverride};
  page.limits["bulk"] =
      EffectiveLimit{RateLimit{10, 10, LimitScope::kFleet}, LimitSource::kQueueConfig};
  page.limits["idle"] = EffectiveLimit{std::nullopt, LimitSource::kNone};
  page.rate_limit_enabled = false;
  page.rescued_unattributed = 9;
  page.storage_errors = {{"claiming_jobs", 3}};
  page.build_info = {{"version", "0.1.0"}, {"storage_plugin", "sqlite"}};
  page.remote_workers = 3;
  page.backoff_until_us["bulk"] = 1'700'000'123'500'000;
  page.remote_jobs_held = 17;
  page.process = ProcessStats{1.5, 1024, 4096, 1.7e9, 12, 1024, 7};
  page.unserved["bulk"] = {{"resize", 2}, {"send_email", 3}};
  const std::string text = render_prometheus(page);

  for (const auto& [state, n] : std::vector<std::pair<std::string, int>>{{"pending", 300},
                                                                         {"scheduled", 4},
                                                                         {"running", 5},
                                                                         {"completed", 6},
                                                                         {"failed", 7},
                                                                         {"cancelled", 8}})
    EXPECT_TRUE(contains(
        text, "conveyor_queue_jobs{queue=\"bulk\",state=\"" + state + "\"} " + std::to_string(n)))
        << state;
  EXPECT_TRUE(contains(text, "conveyor_queue_jobs{queue=\"idle\",state=\"failed\"} 0"));
  EXPECT_TRUE(contains(text, "conveyor_queue_stats_age_seconds 0.25"));
  EXPECT_TRUE(contains(text, "conveyor_queue_unserved_jobs{queue=\"bulk\",kind=\"resize\"} 2"));
  EXPECT_TRUE(contains(text, "conveyor_queue_unserved_jobs{queue=\"bulk\",kind=\"send_email\"} 3"));
  EXPECT_EQ(text.find("conveyor_queue_unserved_jobs{queue=\"idle\""), std::string::npos)
      << "every kind served: no series";
  EXPECT_TRUE(contains(text, "conveyor_leases_lost_total{queue=\"email\"} 2"));
  EXPECT_TRUE(contains(text, "conveyor_jobs_rescued_total{queue=\"email\"} 3"));
  EXPECT_TRUE(contains(text, "conveyor_claims_total{queue=\"email\"} 10"));
  EXPECT_TRUE(contains(text, "conveyor_ratelimit_fleet_calls_total{queue=\"email\"} 11"));
  EXPECT_TRUE(contains(text, "conveyor_ratelimit_fleet_conflicts_total{queue=\"email\"} 4"));
  EXPECT_TRUE(contains(text, "conveyor_jobs_rescued_total{queue=\"bulk\"} 0"));
  EXPECT_TRUE(contains(text, "conveyor_jobs_rescued_total{queue=\"\"} 9"))
      << "an ABI 1.0 plugin's rescues, not attributed to a queue";
  EXPECT_TRUE(contains(text, "conveyor_queue_oldest_pending_age_seconds{queue=\"bulk\"} 90.5"));
  EXPECT_TRUE(contains(text, "conveyor_queue_oldest_pending_age_seconds{queue=\"quiet\"} 0"));
  EXPECT_TRUE(contains(text, "conveyor_queue_oldest_pending_age_seconds{queue=\"idle\"} 0"))
      << "a queue storage reports no jobs for";
  EXPECT_EQ(text.find("conveyor_queue_oldest_pending_age_seconds{queue=\"old_plugin\""),
            std::string::npos)
      << "a plugin that does not report it has no series (a 0 would read as nothing waiting)";
  EXPECT_TRUE(contains(text, "conveyor_storage_errors_total{operation=\"claiming_jobs\"} 3"));
  EXPECT_TRUE(contains(text, "conveyor_ratelimit_enabled 0"));
  EXPECT_TRUE(contains(
      text, "conveyor_ratelimit_rate{queue=\"email\",source=\"override\",scope=\"process\"} 2.5"));
  EXPECT_TRUE(contains(
      text, "conveyor_ratelimit_burst{queue=\"email\",source=\"override\",scope=\"process\"} 5"));
  EXPECT_TRUE(contains(
      text, "conveyor_ratelimit_rate{queue=\"bulk\",source=\"queue-config\",scope=\"fleet\"} 10"));
  EXPECT_EQ(text.find("conveyor_ratelimit_rate{queue=\"idle\""), std::string::npos)
      << "unlimited: no series";
  EXPECT_TRUE(contains(text, "conveyor_build_info{version=\"0.1.0\",storage_plugin=\"sqlite\"} 1"));
  EXPECT_TRUE(contains(text, "# TYPE conveyor_remote_workers gauge\nconveyor_remote_workers 3"));
  EXPECT_TRUE(
      contains(text, "conveyor_ratelimit_backoff_until_seconds{queue=\"bulk\"} 1700000123.5"));
  EXPECT_TRUE(
      contains(text, "# TYPE conveyor_remote_jobs_held gauge\nconveyor_remote_jobs_held 17"));
  EXPECT_TRUE(contains(text, "process_cpu_seconds_total 1.5"));
  EXPECT_TRUE(contains(text, "process_open_fds 12"));
  EXPECT_TRUE(contains(text, "process_threads 7"));
  EXPECT_NE(text.find("# HELP conveyor_jobs_enqueued_total Jobs enqueued through this process"),
            std::string::npos);
  EXPECT_NE(text.find("Per process"), std::string::npos);
}

// Keys (issue 36): per queue, no per-key labels.
TEST(Prometheus, KeyedQueuesCountTheirKeysAndThrottledKeys) {
  MetricsPage page;
  QueueCountersSnapshot tenants;
  tenants.queue = "tenants";
  tenants.key_throttled = 9;
  QueueCountersSnapshot plain;
  plain.queue = "plain";
  page.counters = {tenants, plain};
  page.key_counts["tenants"] = QueueKeyCounts{.ready = 1200, .running = 7};
  const std::string text = render_prometheus(page);
  EXPECT_TRUE(contains(text, "# TYPE conveyor_ratelimit_key_throttled_total counter"));
  EXPECT_TRUE(contains(text, "conveyor_ratelimit_key_throttled_total{queue=\"tenants\"} 9"));
  EXPECT_TRUE(contains(text, "conveyor_ratelimit_key_throttled_total{queue=\"plain\"} 0"));
  EXPECT_TRUE(contains(text, "# TYPE conveyor_queue_keys gauge"));
  EXPECT_TRUE(contains(text, "conveyor_queue_keys{queue=\"tenants\",state=\"ready\"} 1200"));
  EXPECT_TRUE(contains(text, "conveyor_queue_keys{queue=\"tenants\",state=\"running\"} 7"));
  // A queue that is not keyed here has no series.
  EXPECT_EQ(text.find("conveyor_queue_keys{queue=\"plain\""), std::string::npos);
  // Nothing keyed: the family is still declared, with no samples.
  const std::string empty = render_prometheus(MetricsPage{});
  EXPECT_TRUE(contains(empty, "# TYPE conveyor_queue_keys gauge"));
  EXPECT_EQ(empty.find("\nconveyor_queue_keys{"), std::string::npos);
}

TEST(Prometheus, ThisProcessReadsItself) {
  const auto p = read_process_stats();
  ASSERT_TRUE(p);
  EXPECT_GT(p->resident_memory_bytes, 1e6);
  EXPECT_GE(p->threads, 1);
  EXPECT_GE(p->open_fds, 3);  // stdin, stdout, stderr at least
  EXPECT_GT(p->start_time_seconds, 1.6e9);
}

TEST(QueueStatsCache, ReadsAtMostOncePerMaxAgeAndNeverMakesAScrapeWait) {
  ManualClock clock;
  std::mutex mu;
  std::condition_variable cv;
  int reads = 0;
  bool block = false;
  QueueStatsCache cache(
      [&] {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return !block; });
        ++reads;
        return std::vector<QueueStats>{QueueStats{"q", false, reads, 0, 0, 0, 0, 0}};
      },
      clock, std::chrono::milliseconds(1000));
  EXPECT_EQ(cache.get().stats.at(0).pending, 1) << "the first scrape waits for its counts";
  clock.advance(std::chrono::milliseconds(999));
  EXPECT_EQ(cache.get().stats.at(0).pending, 1);
  EXPECT_EQ(reads, 1);
  // Stale: the scrape gets the old counts at once and starts one read, which
  // blocks here; scrapes meanwhile do not wait and do not start more.
  {
    std::lock_guard lock(mu);
    block = true;
  }
  clock.advance(std::chrono::milliseconds(1));
  const auto stale = cache.get();
  EXPECT_EQ(stale.stats.at(0).pending, 1);
  EXPECT_DOUBLE_EQ(*stale.age_seconds, 1.0);
  EXPECT_EQ(cache.get().stats.at(0).pending, 1);
  {
    std::lock_guard lock(mu);
    block = false;
  }
  cv.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (cache.get().stats.at(0).pending != 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(cache.get().stats.at(0).pending, 2);
  std::lock_guard lock(mu);
  EXPECT_EQ(reads, 2);
}

TEST(QueueStatsCache, AFailedReadKeepsTheLastCounts) {
  ManualClock clock;
  std::atomic<int> calls{0};
  QueueStatsCache cache(
      [&]() -> std::vector<QueueStats> {
        if (++calls > 1) throw std::runtime_error("database is locked");
        return {QueueStats{"q", false, 5, 0, 0, 0, 0, 0}};
      },
      clock, std::chrono::milliseconds(1000));
  EXPECT_EQ(cache.get().stats.at(0).pending, 5);
  clock.advance(std::chrono::seconds(2));
  for (int i = 0; i < 100 && calls.load() < 2; ++i) (void)cache.get();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (calls.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(cache.get().stats.at(0).pending, 5);
}

}  // namespace
}  // namespace conveyor
