// QueueReport: what `conveyor queues`, the API and the dashboard show for a
// queue: counts from storage, the effective limit and its source, and the
// process's own counters when an engine is running.
#pragma once

#include <conveyor/limit_resolver.hpp>
#include <conveyor/metrics.hpp>
#include <conveyor/storage.hpp>

#include <vector>

namespace conveyor {

struct QueueReport {
  QueueStats stats;
  EffectiveLimit limit;
  uint64_t throttled = 0;  // this process's conveyor_ratelimit_throttled_total
};

// Every queue storage reports, plus queues that only have a static limit or
// an override (so a configured, empty queue still shows). Sorted by name.
// metrics may be null (the CLI has no engine).
std::vector<QueueReport> build_queue_reports(Storage& storage, const LimitResolver& limits,
                                             const std::map<std::string, QueueConfig>& configured,
                                             const Metrics* metrics, int64_t now_us);

}  // namespace conveyor
