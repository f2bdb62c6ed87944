// Pickup latency (enqueue -> handler start) of every job, recorded by the
// handlers themselves and summarised as exact percentiles. Shared by the
// latency, slow-claim and steady workloads.
#pragma once

#include "bench_engine.hpp"
#include "results.hpp"

#include <conveyor/internal/storage.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

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

// Probe jobs offered at a steady rate below saturation, each recording its
// pickup latency; the first kWarmUp's worth are not measured. Shared by the
// latency and slow-claim workloads.
class PacedProbes {
 public:
  static constexpr const char* kKind = "bench-probe";
  static constexpr std::chrono::milliseconds kWarmUp{500};

  // Registers kKind's handler on engine (before it starts). rate: probes/s;
  // seconds: how long the measured part lasts.
  PacedProbes(Engine& engine, double rate, double seconds);
  // Offers every probe, warm-up first, one per 1/rate: each produce()
  // enqueues one. what names the run in the progress lines.
  void offer(const std::function<void()>& produce, Progress& progress, const std::string& what);
  // Waits up to timeout until extra + every offered probe ran (extra: probes
  // enqueued before offer); whether they did.
  bool wait_for_all(std::chrono::milliseconds timeout, uint64_t extra = 0) const;
  uint64_t ran() const { return ran_.load(); }
  uint64_t offered() const { return warm_up_ + measured_; }
  PickupSummary summary() const { return pickup_.summary(); }

 private:
  const double rate_;
  const uint64_t warm_up_, measured_;
  PickupLog pickup_;
  std::atomic<uint64_t> ran_{0};
};

}  // namespace conveyor::bench
