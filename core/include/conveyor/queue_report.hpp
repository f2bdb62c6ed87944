// QueueReport: what `conveyor queues`, the API and the dashboard show for a
// queue: counts from storage, the effective limit and its source, and the
// process's own counters when an engine is running.
#pragma once

#include <conveyor/job.hpp>
#include <conveyor/rate_limit.hpp>

#include <cstdint>

namespace conveyor {

struct QueueReport {
  QueueStats stats;
  EffectiveLimit limit;
  uint64_t throttled = 0;  // this process's conveyor_ratelimit_throttled_total
};

}  // namespace conveyor
