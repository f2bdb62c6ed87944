// Pickup latency (enqueue -> handler start) of every job, recorded by the
// handlers themselves and summarised as exact percentiles. Shared by the
// latency and steady workloads.
#pragma once

#include "bench_engine.hpp"
#include "results.hpp"

#include <conveyor/storage.hpp>

#include <atomic>
#include <cstdint>

namespace conveyor::bench {

class PickupLog {
 public:
  explicit PickupLog(size_t capacity) : latency_us_(capacity) {}

  // Jobs enqueued before this wall time (microseconds) are not recorded: a
  // warm-up. Default: every job counts.
  void measure_from(int64_t wall_us) { measure_from_us_.store(wall_us); }
  // Called first thing in a handler: the job's run_at (its enqueue time for a
  // job enqueued to run now) to this moment.
  void record(const Job& job) noexcept {
    const int64_t now = wall_us();
    if (job.run_at_us >= measure_from_us_.load(std::memory_order_relaxed))
      latency_us_.record(now - job.run_at_us);
  }
  // Exact order statistics of what was recorded.
  PickupSummary summary() const;

 private:
  TimestampLog latency_us_;
  std::atomic<int64_t> measure_from_us_{INT64_MIN};
};

}  // namespace conveyor::bench
