// The /metrics text: families, label escaping, cumulative buckets.
#include "prometheus.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

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

// A hostile deployment: n queues, each with counters and both histograms,
// storage counts, a default rate limit; every 10th keyed, every 100th held
// by backpressure and with an unserved kind.
MetricsPage many_queues(int n) {
  MetricsPage page;
  page.now_us = 2'000'000'000'000'000;
  page.stats_age_seconds = 0.5;
  page.build_info = {{"version", "0.1.0"}, {"storage_plugin", "sqlite"}};
  page.process = ProcessStats{1.5, 1024, 4096, 1.7e9, 12, 1024, 7};
  page.remote_workers = 1;
  page.remote_jobs_held = 0;
  for (int i = 0; i < n; ++i) {
    const std::string q = fmt::format("tenant-{:05}", i);
    QueueCountersSnapshot c;
    c.queue = q;
    c.enqueued = 1000 + static_cast<uint64_t>(i);
    c.dispatched = static_cast<uint64_t>(i);
    c.completed = static_cast<uint64_t>(i);
    c.failed = 1;
    c.claims = 3;
    for (size_t b = 0; b < c.duration.buckets.size(); ++b) {
      c.duration.buckets[b] = b;
      c.pickup_latency.buckets[b] = 1;
    }
    c.duration.sum = 1.25;
    c.pickup_latency.sum = 0.5;
    page.counters.push_back(c);
    page.stats.push_back(
        QueueStats{q, i % 50 == 0, i % 7, 1, 2, 3, 4, 5, true, page.now_us - 1'000'000 * (i % 13)});
    page.limits[q] = EffectiveLimit{RateLimit{5, 10}, LimitSource::kDefault};
    if (i % 10 == 0) page.key_counts[q] = QueueKeyCounts{.ready = 4, .running = 1};
    if (i % 100 == 0) {
      page.backoff_until_us[q] = page.now_us + 30'000'000;
      page.unserved[q] = {{"resize", 2}};
    }
  }
  return page;
}

size_t line_count(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

// The value of the sample line that starts with key ("name{labels} "), or -1.
double value_of(const std::string& text, const std::string& key) {
  const size_t at = text.find("\n" + key + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + key.size() + 2));
}

// The sum of the values of every sample of name (with labels).
double sum_of(const std::string& text, const std::string& name) {
  double total = 0;
  for (size_t at = text.find("\n" + name + "{"); at != std::string::npos;
       at = text.find("\n" + name + "{", at + 1)) {
    const size_t space = text.find(' ', text.find('}', at));
    total += std::stod(text.substr(space + 1));
  }
  return total;
}

// The bound docs/reference.md states: per queue with series of its own, and
// for "_other", at most 76 lines (14 counters, 6 job states, oldest pending,
// pending, paused, 2 key states, rate, burst, backoff end, 2 histograms of 24
// lines) plus one per unserved kind; about 100 lines besides.
constexpr size_t kLinesPerQueue = 76;
constexpr size_t kFixedLines = 100;

TEST(Prometheus, ManyQueuesStayUnderTheBound) {
  for (const int n : {1000, 10000}) {
    const MetricsPage page = many_queues(n);
    const std::string text = render_prometheus(page);
    const size_t lines = line_count(text);
    std::printf("[metrics size] queues=%d max_queues=%zu lines=%zu bytes=%zu\n", n, page.max_queues,
                lines, text.size());
    // The same page with every queue its own series: the size the cap saves.
    MetricsPage uncapped = page;
    uncapped.max_queues = static_cast<size_t>(n);
    const std::string all = render_prometheus(uncapped);
    std::printf("[metrics size] queues=%d uncapped lines=%zu bytes=%zu\n", n, line_count(all),
                all.size());
    EXPECT_GT(line_count(all), static_cast<size_t>(n) * 70) << "every queue has its series";
    ASSERT_EQ(page.max_queues, 100u) << "the default, [server] metrics_max_queues";
    // One unserved kind per queue at most here.
    EXPECT_LE(lines, kFixedLines + (page.max_queues + 1) * (kLinesPerQueue + 1)) << n;
    EXPECT_LE(text.size(), 600'000u) << n << " queues (about 5 KB per queue kept)";
    EXPECT_EQ(value_of(text, "conveyor_metrics_other_queues"), n - 100.0);
    // The busiest keep their series; the rest are summed, so sums over the
    // queue label are exact.
    EXPECT_NE(
        text.find(fmt::format("conveyor_jobs_completed_total{{queue=\"tenant-{:05}\"}}", n - 1)),
        std::string::npos);
    EXPECT_EQ(text.find("conveyor_jobs_completed_total{queue=\"tenant-00000\"}"),
              std::string::npos);
    double completed = 0, pending = 0, duration_count = 0;
    for (const auto& c : page.counters) {
      completed += static_cast<double>(c.completed);
      for (uint64_t b : c.duration.buckets) duration_count += static_cast<double>(b);
    }
    for (const auto& st : page.stats) pending += static_cast<double>(st.pending);
    EXPECT_EQ(sum_of(text, "conveyor_jobs_completed_total"), completed);
    EXPECT_EQ(sum_of(text, "conveyor_queue_pending"), pending);
    EXPECT_EQ(sum_of(text, "conveyor_job_duration_seconds_count"), duration_count);
    EXPECT_EQ(value_of(text, "conveyor_queue_paused{queue=\"_other\"}"),
              std::ceil((n - 100) / 50.0))
        << "how many of the summed queues are paused";
  }
}

TEST(Prometheus, ACappedPageStillPassesPromtool) {
  FILE* which = ::popen("command -v promtool 2>/dev/null", "r");
  ASSERT_NE(which, nullptr);
  char buf[4096];
  std::string promtool;
  while (size_t n = std::fread(buf, 1, sizeof buf, which)) promtool.append(buf, n);
  ::pclose(which);
  while (!promtool.empty() && promtool.back() == '\n') promtool.pop_back();
  if (promtool.empty()) GTEST_SKIP() << "promtool not found (apt-get install prometheus)";
  const std::string path = ::testing::TempDir() + "capped_metrics.txt";
  {
    const std::string text = render_prometheus(many_queues(10000));
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  FILE* p = ::popen((promtool + " check metrics < " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  EXPECT_EQ(out, "") << "lint problems";
  std::remove(path.c_str());
}

// Up to the cap the page is what it was before there was one.
TEST(Prometheus, ASmallDeploymentIsAsWithoutACap) {
  for (const int n : {5, 100}) {
    MetricsPage page = many_queues(n);
    const std::string capped = render_prometheus(page);
    page.max_queues = 0;
    EXPECT_EQ(capped, render_prometheus(page)) << n;
    EXPECT_EQ(capped.find("_other"), std::string::npos);
    EXPECT_EQ(capped.find("conveyor_metrics_other_queues"), std::string::npos);
    EXPECT_EQ(line_count(capped),
              88u + 73u * static_cast<size_t>(n) + 2u * ((n + 9) / 10) + 2u * ((n + 99) / 100))
        << "as before the cap: 73 lines a queue here";
  }
}

TEST(Prometheus, OtherSumsCountsAndKeepsTheLatestTimes) {
  MetricsPage page;
  page.max_queues = 1;
  page.now_us = 100'000'000;
  QueueCountersSnapshot a, b, c;
  a.queue = "a";
  a.dispatched = 50;  // the busiest: kept
  b.queue = "b";
  b.completed = 2;
  b.duration.buckets[0] = 1;
  b.duration.sum = 0.25;
  c.queue = "c";
  c.completed = 3;
  c.duration.buckets[2] = 2;
  c.duration.sum = 1;
  page.counters = {a, b, c};
  page.stats = {QueueStats{"b", true, 1, 0, 0, 0, 0, 0, true, 90'000'000},
                QueueStats{"c", true, 2, 0, 0, 0, 0, 0, true, 40'000'000}};
  page.limits["b"] = EffectiveLimit{RateLimit{2.5, 5}, LimitSource::kOverride};
  page.limits["d"] = EffectiveLimit{std::nullopt, LimitSource::kNone};
  page.unserved["b"] = {{"resize", 2}};
  page.unserved["c"] = {{"resize", 1}, {"zip", 4}};
  page.backoff_until_us["b"] = 2'000'000;
  page.backoff_until_us["c"] = 3'500'000;
  page.key_counts["b"] = QueueKeyCounts{.ready = 3, .running = 1};
  page.key_counts["c"] = QueueKeyCounts{.ready = 4, .running = 0};
  const std::string text = render_prometheus(page);
  EXPECT_TRUE(contains(text, "conveyor_metrics_other_queues 3")) << text;
  EXPECT_TRUE(contains(text, "conveyor_jobs_dispatched_total{queue=\"a\"} 50"));
  EXPECT_TRUE(contains(text, "conveyor_jobs_completed_total{queue=\"_other\"} 5"));
  EXPECT_EQ(text.find("{queue=\"b\""), std::string::npos);
  EXPECT_EQ(text.find("{queue=\"d\""), std::string::npos);
  EXPECT_TRUE(contains(text, "conveyor_queue_pending{queue=\"_other\"} 3"));
  EXPECT_TRUE(contains(text, "conveyor_queue_jobs{queue=\"_other\",state=\"pending\"} 3"));
  EXPECT_TRUE(contains(text, "conveyor_queue_paused{queue=\"_other\"} 2"));
  EXPECT_TRUE(contains(text, "conveyor_queue_oldest_pending_age_seconds{queue=\"_other\"} 60"));
  EXPECT_TRUE(contains(text, "conveyor_queue_unserved_jobs{queue=\"_other\",kind=\"resize\"} 3"));
  EXPECT_TRUE(contains(text, "conveyor_queue_unserved_jobs{queue=\"_other\",kind=\"zip\"} 4"));
  EXPECT_TRUE(contains(text, "conveyor_ratelimit_backoff_until_seconds{queue=\"_other\"} 3.5"));
  EXPECT_TRUE(contains(text, "conveyor_queue_keys{queue=\"_other\",state=\"ready\"} 7"));
  EXPECT_TRUE(contains(text, "conveyor_queue_keys{queue=\"_other\",state=\"running\"} 1"));
  EXPECT_EQ(text.find("conveyor_ratelimit_rate{queue=\"_other\""), std::string::npos)
      << "a sum of limits means nothing";
  EXPECT_TRUE(
      contains(text, "conveyor_job_duration_seconds_bucket{queue=\"_other\",le=\"0.0005\"} 1"));
  EXPECT_TRUE(
      contains(text, "conveyor_job_duration_seconds_bucket{queue=\"_other\",le=\"0.002\"} 3"));
  EXPECT_TRUE(contains(text, "conveyor_job_duration_seconds_sum{queue=\"_other\"} 1.25"));
  EXPECT_TRUE(contains(text, "conveyor_job_duration_seconds_count{queue=\"_other\"} 3"));

  // The kept set given (the engine's choice) wins over this page's ranking.
  page.own_series = std::set<std::string, std::less<>>{"c"};
  const std::string chosen = render_prometheus(page);
  EXPECT_TRUE(contains(chosen, "conveyor_jobs_completed_total{queue=\"c\"} 3"));
  EXPECT_TRUE(contains(chosen, "conveyor_jobs_completed_total{queue=\"_other\"} 2"));
  EXPECT_TRUE(contains(chosen, "conveyor_jobs_dispatched_total{queue=\"_other\"} 50"));
}

TEST(Prometheus, RankingPutsConfiguredQueuesThenTheBusiestFirst) {
  MetricsPage page;
  QueueCountersSnapshot busy;
  busy.queue = "busy";
  busy.enqueued = 10;
  page.counters = {busy};
  page.stats = {QueueStats{"backlog", false, 30, 0, 0, 0, 0, 0},
                QueueStats{"quiet", false, 0, 0, 0, 0, 0, 0}};
  page.limits["configured"] = EffectiveLimit{};
  page.limits["also_quiet"] = EffectiveLimit{};
  page.configured_queues = {"configured"};
  EXPECT_EQ(rank_metrics_queues(page),
            (std::vector<std::string>{"configured", "backlog", "busy", "also_quiet", "quiet"}));
}

TEST(Prometheus, TheKeptQueuesAreChosenOnceAndKept) {
  Metrics metrics;
  EXPECT_EQ(metrics.keep_series_queues({"a", "b"}, 3),
            (std::set<std::string, std::less<>>{"a", "b"}));
  EXPECT_EQ(metrics.keep_series_queues({"z", "y", "a", "x"}, 3),
            (std::set<std::string, std::less<>>{"a", "b", "z"}))
      << "room for one more: the best of the new";
  EXPECT_EQ(metrics.keep_series_queues({"w", "v"}, 3),
            (std::set<std::string, std::less<>>{"a", "b", "z"}))
      << "full: a busier newcomer is summed, never swapped in (the sums would drop)";
}

// The engine's page: [server] metrics_max_queues and [queues.NAME] read from
// its config, the choice kept across scrapes.
TEST(Prometheus, AnEngineCapsItsPageAsConfigured) {
  const Config parsed = parse_config("[server]\nmetrics_max_queues = 2\n", "t.toml");
  EXPECT_EQ(parsed.server.metrics_max_queues, 2u);
  EXPECT_EQ(parse_config("", "t.toml").server.metrics_max_queues, 100u);
  EXPECT_THROW(parse_config("[server]\nmetrics_max_queues = -1\n", "t.toml"), ConfigError);

  test::TempDir dir;
  Config c = test::sqlite_config(dir);
  c.server.metrics_max_queues = 2;
  c.queues["named"] = QueueConfig{};
  Engine engine(c);
  for (int i = 0; i < 3; ++i) engine.enqueue("busy", "noop");
  engine.enqueue("quiet", "noop");
  engine.enqueue("idle", "noop");
  const auto scrape = [&] {
    return render_prometheus(
        collect_metrics_page(engine, QueueStatsCache::Counts{engine.queue_stats(), 0.0}));
  };
  const std::string first = scrape();
  EXPECT_TRUE(contains(first, "conveyor_jobs_enqueued_total{queue=\"named\"} 0")) << first;
  EXPECT_TRUE(contains(first, "conveyor_jobs_enqueued_total{queue=\"busy\"} 3"));
  EXPECT_TRUE(contains(first, "conveyor_jobs_enqueued_total{queue=\"_other\"} 2"));
  EXPECT_TRUE(contains(first, "conveyor_metrics_other_queues 2"));
  // A queue busier than all now arrives: it is summed; nothing kept changes.
  for (int i = 0; i < 10; ++i) engine.enqueue("newcomer", "noop");
  const std::string second = scrape();
  EXPECT_TRUE(contains(second, "conveyor_jobs_enqueued_total{queue=\"busy\"} 3")) << second;
  EXPECT_TRUE(contains(second, "conveyor_jobs_enqueued_total{queue=\"_other\"} 12"));
  EXPECT_TRUE(contains(second, "conveyor_metrics_other_queues 3"));
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
