// The /metrics page: Prometheus text exposition format 0.0.4.
#pragma once

#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/internal/metrics.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/rate_limit.hpp>

#include <conveyor/clock.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// This process, as the Prometheus client libraries report one.
struct ProcessStats {
  double cpu_seconds = 0;
  double resident_memory_bytes = 0;
  double virtual_memory_bytes = 0;
  double start_time_seconds = 0;  // since the Unix epoch
  double open_fds = 0;
  double max_fds = 0;
  double threads = 0;
};
// From /proc/self; nullopt where that cannot be read.
std::optional<ProcessStats> read_process_stats();

// Storage's queue counts for /metrics, read at most once per max_age and in
// the background: a scrape gets the last counts at once and, when they are
// older than max_age, starts one read for the next scrape. Only the first
// scrape waits for storage. So a count that takes seconds (millions of
// retained jobs) never holds a scrape, and scrapes never pile reads up.
// A failed read keeps the last counts (logged). Thread-safe.
class QueueStatsCache {
 public:
  using Read = std::function<std::vector<QueueStats>()>;
  QueueStatsCache(Read read, const Clock& clock,
                  std::chrono::milliseconds max_age = std::chrono::seconds(1));
  ~QueueStatsCache();  // waits for a read in flight
  QueueStatsCache(const QueueStatsCache&) = delete;
  QueueStatsCache& operator=(const QueueStatsCache&) = delete;

  struct Counts {
    std::vector<QueueStats> stats;
    std::optional<double> age_seconds;  // since the read began; none: never read
  };
  Counts get();

 private:
  struct Done {
    std::vector<QueueStats> stats;
    SteadyTime started;
    std::string error;  // non-empty: the read failed
  };
  void take_finished();  // mu_ held

  const Read read_;
  const Clock& clock_;
  const std::chrono::milliseconds max_age_;
  std::mutex mu_;
  std::future<Done> in_flight_;        // mu_
  std::vector<QueueStats> stats_;      // mu_
  std::optional<SteadyTime> read_at_;  // mu_: when the counts' read began
};

// The queue label of the series that sum the queues past the cap
// (MetricsPage::max_queues). Queue names start with a letter or digit, so no
// queue is called this.
inline constexpr std::string_view kOtherQueuesLabel = "_other";

// Everything the page shows.
struct MetricsPage {
  std::vector<QueueCountersSnapshot> counters;   // this process's, per queue
  std::vector<QueueStats> stats;                 // storage's counts (all processes)
  std::optional<double> stats_age_seconds;       // how old those counts are
  std::map<std::string, EffectiveLimit> limits;  // effective limit per queue
  bool rate_limit_enabled = true;
  uint64_t rescued_unattributed = 0;  // from an ABI 1.0 plugin: not per queue
  int64_t now_us = 0;                 // wall clock of the page (ages are measured to it)
  std::vector<std::pair<std::string, uint64_t>> storage_errors;  // by operation
  std::vector<std::pair<std::string, std::string>> build_info;   // label, value
  std::optional<ProcessStats> process;
  // Per queue, pending jobs of kinds no consumer here serves (past the grace).
  std::map<std::string, std::vector<KindCount>, std::less<>> unserved;
  // Queues held by backpressure, and when each hold ends (wall us).
  std::map<std::string, int64_t, std::less<>> backoff_until_us;
  // Per keyed queue: keys with ready jobs and keys with jobs running, as
  // this process's dispatch knows them.
  std::map<std::string, QueueKeyCounts, std::less<>> key_counts;
  // Remote workers (WorkerService) connected, and the jobs they hold.
  std::optional<uint64_t> remote_workers, remote_jobs_held;

  // At most this many queues get series of their own ([server]
  // metrics_max_queues; 0: every queue). Past it the others are summed into
  // one series per family with queue="_other" (kOtherQueuesLabel), so a
  // scrape stays under about 75 lines per kept queue whatever the number of
  // queues. Up to the cap the page is as it would be without one.
  size_t max_queues = ServerConfig{}.metrics_max_queues;
  // The queues that keep their own series (collect_metrics_page: the
  // engine's choice, kept for the process's life; see
  // Metrics::keep_series_queues). Unset: the first max_queues of
  // rank_metrics_queues(*this).
  std::optional<std::set<std::string, std::less<>>> own_series;
  // Queues named in the config ([queues.NAME]): ranked first.
  std::set<std::string, std::less<>> configured_queues;
};

// Every queue the page names, best first for a series of its own: queues
// named in the config, then the busiest (jobs this process enqueued and
// dispatched plus storage's pending, scheduled and running), then by name.
std::vector<std::string> rank_metrics_queues(const MetricsPage& page);

// The page of a running engine: its counters and limits, stats as given
// (the caller caches storage's counts), the build and the process.
MetricsPage collect_metrics_page(Engine& engine, QueueStatsCache::Counts counts);

// Every family with # HELP and # TYPE before its samples, one series per
// queue found in counters, stats or limits (queues without counters show
// zeros): per-queue counters conveyor_jobs_{enqueued,dispatched,completed,
// failed,retried}_total, conveyor_ratelimit_throttled_total and
// conveyor_leases_lost_total and conveyor_jobs_rescued_total (plus one series
// with an empty queue label for rescues an ABI 1.0 plugin cannot attribute);
// conveyor_storage_errors_total{operation}; gauges conveyor_queue_jobs{state},
// conveyor_queue_oldest_pending_age_seconds (plugins of ABI 1.1),
// conveyor_queue_pending, conveyor_queue_paused, conveyor_queue_unserved_jobs{kind},
// conveyor_ratelimit_rate and _burst{source} (limited queues only), conveyor_ratelimit_enabled,
// conveyor_ratelimit_backoff_until_seconds (held queues only),
// conveyor_ratelimit_key_throttled_total, conveyor_queue_keys{state} (keyed
// queues only), conveyor_build_info,
// conveyor_remote_workers and conveyor_remote_jobs_held
// (when set); histograms conveyor_job_pickup_latency_seconds and
// conveyor_job_duration_seconds (cumulative buckets); process_* metrics.
// Past page.max_queues queues, the others' series are summed into
// queue="_other" (their limits left out; paused: how many are; oldest
// pending age and backoff end: the latest), and
// conveyor_metrics_other_queues says how many queues that series sums.
std::string render_prometheus(const MetricsPage& page);
// The counters and stats alone (the rest empty or defaults).
std::string render_prometheus(const std::vector<QueueCountersSnapshot>& counters,
                              const std::vector<QueueStats>& stats);

// A label value escaped for the text format (\\, \", \n).
std::string escape_label_value(std::string_view value);

}  // namespace conveyor
