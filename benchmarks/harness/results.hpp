// What conveyor-bench measures, per backend, in the shape the table, the JSON
// file and the chart are written from. Every figure is measured in this run;
// an absent optional means the workload was not run (or failed: see errors).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace conveyor::bench {

struct EnqueueResult {
  uint64_t single_jobs = 0;  // one enqueue() call per job
  double single_seconds = 0;
  double single_jobs_per_sec = 0;
};

// One drain: enqueue N noop jobs in batches (timed: batched enqueue), then
// start the engine and time claim + execute + complete of all N.
struct DrainRun {
  uint64_t jobs = 0;
  double enqueue_seconds = 0;
  double enqueue_jobs_per_sec = 0;
  double seconds = 0;
  double jobs_per_sec = 0;
  double cpu_cores = 0;  // process CPU time / wall time while draining
  // PostgreSQL on this machine: the server processes' CPU time / wall time,
  // and their CPU time per job (less noisy than throughput on a busy machine).
  std::optional<double> server_cpu_cores;
  std::optional<double> server_cpu_us_per_job;
};

// PostgreSQL only: what the drain cost the database.
struct PostgresCost {
  double wal_bytes_per_job = 0;    // enqueue + claim + complete
  double dead_tuples_per_job = 0;  // (n_tup_upd + n_tup_del) / jobs: versions made dead
  int64_t dead_tuples_peak = 0;    // highest n_dead_tup sampled while draining
  int64_t dead_tuples_after = 0;   // n_dead_tup once the engine closed
};

struct DrainResult {
  uint32_t workers = 0;
  uint32_t claim_batch = 0;
  uint32_t enqueue_batch = 0;
  std::vector<DrainRun> runs;
  double median_jobs_per_sec = 0;
  double median_enqueue_jobs_per_sec = 0;
  std::optional<PostgresCost> postgres;  // from the last run

  std::vector<double> rates() const;  // jobs_per_sec of each run
  // The median over the runs that measured it; none if no run did.
  std::optional<double> median_server_cpu_us_per_job() const;
};

// Exact order statistics of per-job pickup latencies, in milliseconds.
struct PickupSummary {
  uint64_t samples = 0;
  double p50_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
};

struct LatencyResult {
  std::string producer;  // "in-process" or "separate"
  double offered_per_sec = 0;
  double seconds = 0;
  uint64_t samples = 0;
  double p50_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
};

// Other queues' pickup latency while one queue's storage claims are slow
// (slow_claim_workload.cc): without that queue, then beside it.
struct SlowClaimResult {
  double claim_delay_ms = 0;  // each claim of the slow queue
  uint32_t fast_queues = 0;   // the probe jobs go round-robin to these
  double offered_per_sec = 0;
  double seconds = 0;
  PickupSummary alone;        // no slow queue
  PickupSummary beside_slow;  // the slow queue claiming all along
  uint64_t slow_claims = 0;   // the slow queue's claims in the second run
};

struct RateResult {
  double rate = 0;
  uint32_t burst = 0;
  double window_s = 0;
  uint64_t started = 0;  // handler starts within the window
  double achieved_per_sec = 0;
  double error_pct = 0;        // (achieved - rate) / rate
  double overall_per_sec = 0;  // (started - burst) / (t_last - t_first), start-up included
  double worst_excess = 0;     // max over starts of count - (burst + rate * t); must be 0
  double first_start_ms = 0;   // engine start -> first handler start
};

// Many queues draining at once (every queue unlimited, all filled before the
// engine starts): jobs/s over all of them, against the single-queue drain.
struct ManyQueuesResult {
  uint32_t queues = 0;
  uint64_t jobs_per_queue = 0;
  std::vector<double> runs_jobs_per_sec;
  double median_jobs_per_sec = 0;
};

struct IdleResult {
  uint32_t queues = 0;
  double seconds = 0;
  double cpu_pct_of_core = 0;  // this process
  // PostgreSQL on this machine: what the server spent answering the polls.
  std::optional<double> server_cpu_pct_of_core;
  uint32_t threads_before = 0;  // process threads before the engine existed
  uint32_t threads = 0;         // process threads while idle
  uint32_t worker_threads = 0;  // the engine's handler threads
  uint32_t worker_thread_cap = 0;
  // Claims the drained queues made per second while idle (all queues), and
  // how often a drained queue is re-polled: poll_interval_ms, or
  // notified_poll_interval_ms on storage that reports due jobs.
  double claims_per_sec = 0;
  uint32_t drained_poll_ms = 0;
};

// A loop of bare SQL on this machine, no engine: what the database can do.
struct ReferenceResult {
  // "sqlite-claim", "sqlite-claim-complete", "sqlite-append-only",
  // "postgres-claim-complete"
  std::string name;
  std::string description;
  uint32_t clients = 0;
  uint32_t batch = 0;
  uint64_t jobs = 0;
  std::vector<double> runs_jobs_per_sec;
  double median_jobs_per_sec = 0;
  // PostgreSQL on this machine: the server processes' CPU time per job, per run.
  std::vector<double> runs_server_cpu_us_per_job;
};

// One n_dead_tup reading taken while a steady run was going.
struct DeadTupleSample {
  double seconds = 0;      // since the first enqueue
  uint64_t completed = 0;  // jobs completed by then
  int64_t dead_tuples = 0;
};

// PostgreSQL only: what a steady run left in its schema. Sums over every
// table of the schema (n_dead_tup from pg_stat_user_tables; sizes from
// pg_total_relation_size, indexes and TOAST included).
struct SteadyStorage {
  int64_t dead_tuples_peak = 0;       // highest reading, every 500 ms and the final one
  int64_t dead_tuples_final = 0;      // once the engine closed and the statistics settled
  int64_t relation_bytes_before = 0;  // after the engine created its tables, before any job
  int64_t relation_bytes_after = 0;
  int64_t vacuums = 0;   // (auto)vacuum runs on those tables during the run
  int64_t held_xid = 0;  // the open transaction's xid (0: none held)
  std::vector<DeadTupleSample> samples;
};

// A steady producer: N noop jobs enqueued at an offered rate, in a batch every
// tick, while the engine works them; optionally with another session holding
// a transaction open (BEGIN; SELECT txid_current();) for the whole run.
struct SteadyResult {
  std::string variant;  // the workload: "steady" or "steady-held-txn"
  bool held_transaction = false;
  uint64_t jobs = 0;
  double offered_per_sec = 0;
  uint32_t tick_ms = 0;
  double enqueued_per_sec = 0;  // what the producer achieved
  double seconds = 0;           // first enqueue -> last completion
  double jobs_per_sec = 0;      // jobs / seconds
  PickupSummary pickup;         // every job, enqueue -> handler start
  std::optional<SteadyStorage> postgres;
};

struct BackendResult {
  std::string label;
  std::string source;  // the config file or plugin path it came from
  std::string plugin_name, plugin_version, plugin_kind, plugin_path, capabilities;
  std::string isolation;  // how each workload got fresh storage
  // PostgreSQL: the durability settings the figures were measured with
  // ("fsync=on synchronous_commit=on shared_buffers=128MB"); empty otherwise.
  std::string server_settings;
  std::optional<EnqueueResult> enqueue;
  std::optional<DrainResult> drain;
  std::vector<LatencyResult> latency;
  std::vector<RateResult> rate;
  std::optional<IdleResult> idle;
  std::vector<ManyQueuesResult> many_queues;
  std::optional<SlowClaimResult> slow_claim;
  std::vector<ReferenceResult> references;
  std::vector<SteadyResult> steady;
  std::vector<std::string> errors;  // "workload: message"

  // The drain's median over the reference the targets compare it with; 0 if either is missing.
  double engine_to_reference() const;
  const ReferenceResult* reference(const std::string& name) const;
  const SteadyResult* steady_run(const std::string& variant) const;
};

// Appends the runs of `more` (the same workload, measured again) and
// recomputes the medians: how interleaved repeats are put together.
void append_runs(DrainResult& into, const DrainResult& more);
void append_runs(std::vector<ReferenceResult>& into, const std::vector<ReferenceResult>& more);

struct MachineInfo {
  std::string cpu;
  uint32_t cores = 0;
  std::string kernel;
  uint64_t memory_bytes = 0;
};

struct BenchReport {
  std::string mode;  // "quick" or "full"
  std::string started_at;
  MachineInfo machine;
  uint32_t workers = 0, claim_batch = 0, enqueue_batch = 0, repeat = 0;
  uint64_t drain_jobs = 0;
  double latency_rate = 0, latency_seconds = 0, rate_seconds = 0, idle_seconds = 0;
  uint32_t idle_queues = 0;
  uint64_t steady_jobs = 0;
  double steady_rate = 0;
  uint32_t steady_tick_ms = 0;
  std::vector<BackendResult> backends;

  // Every limited queue of every backend stayed within burst + rate * t.
  bool rate_invariant_held() const;
};

}  // namespace conveyor::bench
