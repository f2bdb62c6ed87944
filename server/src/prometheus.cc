// Prometheus text exposition (prometheus.hpp).
#include "prometheus.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>

namespace conveyor {
namespace {

// A sample value: integers as such, floats shortest, specials as Prometheus spells them.
std::string value_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);  // shortest round-trip text, "0.0005" rather than "5e-04"
}

struct Row {
  const QueueCountersSnapshot* counters = nullptr;
  const QueueStats* stats = nullptr;
};

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void sample(std::string& out, std::string_view name, std::string_view labels,
            std::string_view value) {
  out.append(name).append("{").append(labels).append("} ").append(value).append("\n");
}

void histogram(std::string& out, std::string_view name, std::string_view help,
               const std::map<std::string, Row>& rows,
               Histogram::Snapshot QueueCountersSnapshot::*which) {
  family(out, name, "histogram", help);
  const Histogram::Snapshot empty;
  const std::string bucket = std::string(name) + "_bucket";
  for (const auto& [queue, row] : rows) {
    const Histogram::Snapshot& h = row.counters ? row.counters->*which : empty;
    const std::string q = "queue=\"" + escape_label_value(queue) + "\"";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < Histogram::kBounds.size(); ++i) {
      cumulative += h.buckets[i];
      sample(out, bucket, q + ",le=\"" + value_text(Histogram::kBounds[i]) + "\"",
             std::to_string(cumulative));
    }
    cumulative += h.buckets.back();
    // +Inf must equal _count: the snapshot's count is read apart from its
    // buckets, so both come from the buckets here.
    sample(out, bucket, q + ",le=\"+Inf\"", std::to_string(cumulative));
    sample(out, std::string(name) + "_sum", q, value_text(h.sum));
    sample(out, std::string(name) + "_count", q, std::to_string(cumulative));
  }
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string render_prometheus(const std::vector<QueueCountersSnapshot>& counters,
                              const std::vector<QueueStats>& stats) {
  std::map<std::string, Row> rows;
  for (const auto& c : counters) rows[c.queue].counters = &c;
  for (const auto& s : stats) rows[s.queue].stats = &s;

  std::string out;
  struct Counter {
    const char* name;
    const char* help;
    uint64_t QueueCountersSnapshot::*field;
  };
  static constexpr Counter kCounters[] = {
      {"conveyor_ratelimit_throttled_total",
       "Times the queue deferred dispatch because its rate limit was exhausted.",
       &QueueCountersSnapshot::throttled},
      {"conveyor_jobs_enqueued_total", "Jobs enqueued through this process.",
       &QueueCountersSnapshot::enqueued},
      {"conveyor_jobs_dispatched_total", "Jobs claimed and handed to a worker by this process.",
       &QueueCountersSnapshot::dispatched},
      {"conveyor_jobs_completed_total", "Jobs that succeeded in this process.",
       &QueueCountersSnapshot::completed},
      {"conveyor_jobs_failed_total",
       "Jobs that failed for good in this process (attempts exhausted or permanent error).",
       &QueueCountersSnapshot::failed},
      {"conveyor_jobs_retried_total", "Failed attempts scheduled for a retry by this process.",
       &QueueCountersSnapshot::retried},
  };
  for (const Counter& c : kCounters) {
    family(out, c.name, "counter", c.help);
    for (const auto& [queue, row] : rows)
      sample(out, c.name, "queue=\"" + escape_label_value(queue) + "\"",
             std::to_string(row.counters ? row.counters->*c.field : 0));
  }

  family(out, "conveyor_queue_pending", "gauge", "Jobs ready to run now, as storage counts them.");
  for (const auto& [queue, row] : rows)
    sample(out, "conveyor_queue_pending", "queue=\"" + escape_label_value(queue) + "\"",
           std::to_string(row.stats ? row.stats->pending : 0));
  family(out, "conveyor_queue_paused", "gauge", "1 when the queue is paused.");
  for (const auto& [queue, row] : rows)
    sample(out, "conveyor_queue_paused", "queue=\"" + escape_label_value(queue) + "\"",
           row.stats && row.stats->paused ? "1" : "0");

  histogram(out, "conveyor_job_pickup_latency_seconds",
            "Time from when a job could run to when this process claimed it.", rows,
            &QueueCountersSnapshot::pickup_latency);
  histogram(out, "conveyor_job_duration_seconds", "Time a handler ran, per attempt.", rows,
            &QueueCountersSnapshot::duration);
  return out;
}

}  // namespace conveyor
