// The /metrics page: Prometheus text exposition format 0.0.4.
#pragma once

#include <conveyor/metrics.hpp>
#include <conveyor/storage.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// Every family with # HELP and # TYPE before its samples, one series per
// queue found in either input (queues without counters show zeros):
//   conveyor_ratelimit_throttled_total, conveyor_jobs_{enqueued,dispatched,
//   completed,failed,retried}_total (counters), conveyor_queue_pending and
//   conveyor_queue_paused (gauges, from stats), conveyor_job_pickup_latency_seconds
//   and conveyor_job_duration_seconds (histograms; cumulative buckets).
std::string render_prometheus(const std::vector<QueueCountersSnapshot>& counters,
                              const std::vector<QueueStats>& stats);

// A label value escaped for the text format (\\, \", \n).
std::string escape_label_value(std::string_view value);

}  // namespace conveyor
