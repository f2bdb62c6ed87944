// The /metrics page: Prometheus text exposition format 0.0.4.
#pragma once

#include <conveyor/engine.hpp>
#include <conveyor/metrics.hpp>
#include <conveyor/rate_limit.hpp>
#include <conveyor/storage.hpp>

#include <cstdint>
#include <map>
#include <optional>
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

// Everything the page shows.
struct MetricsPage {
  std::vector<QueueCountersSnapshot> counters;  // this process's, per queue
  std::vector<QueueStats> stats;                // storage's counts (all processes)
  std::map<std::string, EffectiveLimit> limits;  // effective limit per queue
  bool rate_limit_enabled = true;
  uint64_t rescued = 0;
  std::vector<std::pair<std::string, uint64_t>> storage_errors;  // by operation
  std::vector<std::pair<std::string, std::string>> build_info;   // label, value
  std::optional<ProcessStats> process;
};

// The page of a running engine: its counters and limits, stats as given
// (the caller caches storage's counts), the build and the process.
MetricsPage collect_metrics_page(Engine& engine, std::vector<QueueStats> stats);

// Every family with # HELP and # TYPE before its samples, one series per
// queue found in counters, stats or limits (queues without counters show
// zeros): per-queue counters conveyor_jobs_{enqueued,dispatched,completed,
// failed,retried}_total, conveyor_ratelimit_throttled_total and
// conveyor_leases_lost_total; conveyor_jobs_rescued_total and
// conveyor_storage_errors_total{operation}; gauges conveyor_queue_jobs{state},
// conveyor_queue_pending, conveyor_queue_paused, conveyor_ratelimit_rate and
// _burst{source} (limited queues only), conveyor_ratelimit_enabled,
// conveyor_build_info; histograms conveyor_job_pickup_latency_seconds and
// conveyor_job_duration_seconds (cumulative buckets); process_* metrics.
std::string render_prometheus(const MetricsPage& page);
// The counters and stats alone (the rest empty or defaults).
std::string render_prometheus(const std::vector<QueueCountersSnapshot>& counters,
                              const std::vector<QueueStats>& stats);

// A label value escaped for the text format (\\, \", \n).
std::string escape_label_value(std::string_view value);

}  // namespace conveyor
