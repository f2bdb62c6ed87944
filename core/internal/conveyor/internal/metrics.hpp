// Per-queue counters and latency histograms, kept by the engine and read by
// the CLI, the admin API and /metrics. Counters are atomics: incrementing one
// never blocks the dispatcher.
#pragma once

#include <conveyor/internal/mutex.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor {

// A cumulative histogram with fixed bucket bounds (seconds), Prometheus-style.
// The bounds reach two hours: a throttled or backed-up queue's pickup waits
// and a long handler's run still land in a bucket, not only in +Inf.
class Histogram {
 public:
  static constexpr std::array<double, 21> kBounds = {
      0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5, 1,
      2.5,    5,     10,    30,    60,   300,   900,  1800, 3600, 7200};
  void observe(double seconds);
  struct Snapshot {
    std::array<uint64_t, kBounds.size() + 1> buckets{};  // non-cumulative; last is +Inf
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

struct QueueCounters {
  std::atomic<uint64_t> enqueued{0};
  std::atomic<uint64_t> dispatched{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> failed{0};       // ended failed (attempts exhausted or permanent)
  std::atomic<uint64_t> retried{0};      // failed attempts scheduled for a retry
  std::atomic<uint64_t> throttled{0};    // dispatch deferred on an exhausted limit
  std::atomic<uint64_t> leases_lost{0};  // an outcome refused: the lease was gone
  std::atomic<uint64_t> rescued{0};      // lease expired; made runnable again or failed
  std::atomic<uint64_t> backoffs{0};     // the downstream asked to wait (backpressure)
  // Attempts failed by their time limit (job_timeout_s, a job's timeout_ms):
  // in-process handlers and remote workers' jobs.
  std::atomic<uint64_t> timed_out{0};
  // Keyed queue: times a key with ready jobs was passed over in its turn
  // because its own bucket (key_rate_limit) was empty.
  std::atomic<uint64_t> key_throttled{0};
  // Fleet-scoped limit: swap_shared_state calls on the queue's bucket, and
  // those that lost a race to another process (so the take was retried).
  std::atomic<uint64_t> claims{0};  // claim calls to storage that succeeded (any number of jobs)
  std::atomic<uint64_t> fleet_swaps{0};
  std::atomic<uint64_t> fleet_conflicts{0};
  // Keyed queue: storage calls for the keys (list_ready_keys pages, and the
  // add_shared_states calls that take the fleet buckets of a claim's keys).
  std::atomic<uint64_t> key_listings{0};
  std::atomic<uint64_t> key_bucket_calls{0};
  Histogram pickup_latency;  // ready (run_at) -> claimed
  Histogram duration;        // handler start -> end
};

struct QueueCountersSnapshot {
  std::string queue;
  uint64_t enqueued = 0, dispatched = 0, completed = 0, failed = 0, retried = 0, throttled = 0,
           leases_lost = 0, rescued = 0, backoffs = 0, claims = 0, fleet_swaps = 0,
           fleet_conflicts = 0, key_throttled = 0, timed_out = 0;
  Histogram::Snapshot pickup_latency;
  Histogram::Snapshot duration;
};

// A keyed queue's keys as its dispatch unit knows them now: how many have
// ready jobs, how many have jobs running in this process.
struct QueueKeyCounts {
  uint64_t ready = 0;
  uint64_t running = 0;
};

// Thread-safe. References returned by queue() and storage_errors() stay
// valid for the Metrics' life.
class Metrics {
 public:
  QueueCounters& queue(std::string_view name) EXCLUDES(mu_);
  std::vector<QueueCountersSnapshot> snapshot() const EXCLUDES(mu_);  // by queue name

  // Failed storage calls of the engine's own work, by operation (a label:
  // "claiming_jobs", "recording_outcomes", a maintenance step's name).
  std::atomic<uint64_t>& storage_errors(std::string_view operation) EXCLUDES(mu_);
  // By name.
  std::vector<std::pair<std::string, uint64_t>> storage_errors_snapshot() const EXCLUDES(mu_);

  // Jobs this process's rescue step rescued that it cannot attribute to a
  // queue: a storage plugin of ABI 1.0 reports only how many.
  std::atomic<uint64_t> rescued_unattributed{0};

  // The queues /metrics gives series of their own when it caps them (the
  // rest are summed into queue="_other"): queues of ranked (best first) join
  // while fewer than limit are kept, and a queue once kept stays kept. So the
  // choice is stable for the process's life: no queue's series comes and
  // goes, and the sums of the rest only gain queues (their counters never go
  // down). Returns the kept set.
  std::set<std::string, std::less<>> keep_series_queues(const std::vector<std::string>& ranked,
                                                        size_t limit) EXCLUDES(mu_);

 private:
  // Guarded by mu_: the maps (the counters they point at are atomic, and
  // live as long as the Metrics).
  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<QueueCounters>, std::less<>> queues_ GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<std::atomic<uint64_t>>, std::less<>> storage_errors_
      GUARDED_BY(mu_);
  std::set<std::string, std::less<>> series_queues_ GUARDED_BY(mu_);
};

// A text as a metric label value of our own: lower case, runs of anything
// but letters and digits as one '_' ("claiming jobs" -> "claiming_jobs").
std::string operation_label(std::string_view text);

}  // namespace conveyor
