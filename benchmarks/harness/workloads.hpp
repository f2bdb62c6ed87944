// The workloads conveyor-bench runs on every backend, each on storage of its
// own (see Backend). Each throws on failure; the caller records the error and
// goes on with the next workload.
#pragma once

#include "backend.hpp"
#include "bench_options.hpp"
#include "progress.hpp"
#include "results.hpp"

#include <chrono>
#include <vector>

namespace conveyor::bench {

// Deletes a workload's scratch storage when it goes out of scope: declare it
// before the Engine, so the engine (and its connections) are gone first.
class WorkloadScope {
 public:
  WorkloadScope(Backend& backend, std::string workload)
      : backend_(backend), workload_(std::move(workload)) {}
  ~WorkloadScope() { backend_.finish_workload(workload_); }
  WorkloadScope(const WorkloadScope&) = delete;
  WorkloadScope& operator=(const WorkloadScope&) = delete;

 private:
  Backend& backend_;
  std::string workload_;
};

// 1. Enqueue throughput, one job per call (batched enqueue is timed by the drain).
EnqueueResult run_enqueue(Backend& backend, const BenchOptions& options, Progress& progress);

// 2. Enqueue N noop jobs in batches, then drain them (claim + execute +
// complete) with no limit; repeated, median reported. PostgreSQL: WAL and
// dead tuples per job.
DrainResult run_drain(Backend& backend, const BenchOptions& options, Progress& progress);

// 3. Pickup latency (enqueue -> handler start) at a steady offered load below
// saturation, with the producer in the engine's process and with a separate
// producer (its own storage handle: the engine learns of the jobs from
// storage notifications, or by polling when the backend has none).
std::vector<LatencyResult> run_latency(Backend& backend, const BenchOptions& options,
                                       Progress& progress);

// 4. Rate accuracy: 50/s burst 10 and 5,000/s burst 500 on a deep backlog.
std::vector<RateResult> run_rate_accuracy(Backend& backend, const BenchOptions& options,
                                          Progress& progress);

// 5. Many configured queues, idle: CPU and threads.
IdleResult run_idle_queues(Backend& backend, const BenchOptions& options, Progress& progress);

// 5b. Many busy queues: 100 queues of 2,000 jobs and 1,000 queues of 100,
// drained at once; --repeat runs each, median reported.
std::vector<ManyQueuesResult> run_many_queues(Backend& backend, const BenchOptions& options,
                                              Progress& progress);

// 5c. One queue's claims slowed to kSlowClaimDelay (a deep backlog keeps it
// claiming) beside kSlowClaimFastQueues queues fed probe jobs at
// --latency-rate for --latency-seconds: their pickup latency without the
// slow queue and beside it.
inline constexpr std::chrono::milliseconds kSlowClaimDelay{50};
inline constexpr uint32_t kSlowClaimFastQueues = 10;
SlowClaimResult run_slow_claim(Backend& backend, const BenchOptions& options, Progress& progress);

// 6. A steady producer (--steady-rate, a batch every --steady-tick-ms) of
// --steady-jobs noop jobs while the engine works them: jobs/s, pickup
// latency, and on PostgreSQL dead tuples and relation size. With
// hold_transaction (PostgreSQL only), another session keeps a transaction
// open for the whole run.
SteadyResult run_steady(Backend& backend, const BenchOptions& options, Progress& progress,
                        bool hold_transaction);

// 7. Job keys (keys_workload.cc; sizes times --keys-scale). Noisy neighbour:
// one key's backlog of 10 ms jobs, 20 workers, then 100 small keys of 5 jobs:
// the small keys' pickup latency with fairness fair and fifo, and key A's
// throughput alone.
KeysNoisyResult run_keys_noisy(Backend& backend, const BenchOptions& options, Progress& progress);
// 1,000 keys limited to 2/s burst 1 each, 20 jobs each: every key within its
// bound, the aggregate rate; then again under a queue limit of 500/s.
std::vector<KeysAccuracyRun> run_keys_accuracy(Backend& backend, const BenchOptions& options,
                                               Progress& progress);
// 10,000 keys x 10 noop jobs against the same 100,000 jobs with no key.
KeysManyResult run_keys_many(Backend& backend, const BenchOptions& options, Progress& progress);
// 100,000 keys of one job each, drained and purged: RSS and storage size.
KeysIdleResult run_keys_idle(Backend& backend, const BenchOptions& options, Progress& progress);

// Bare SQL on this machine, no engine (see reference.hpp for what each loop is).
std::vector<ReferenceResult> run_sqlite_reference(const std::filesystem::path& db,
                                                  const std::string& synchronous,
                                                  const BenchOptions& options, Progress& progress);
ReferenceResult run_postgres_reference(const std::string& dsn, const BenchOptions& options,
                                       Progress& progress);

}  // namespace conveyor::bench
