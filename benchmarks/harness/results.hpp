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

// Job keys (keys_workload.cc). Noisy neighbour: one queue, one key with a
// deep backlog of slow jobs, then many small keys with a few jobs each: how
// long the small keys' jobs wait (enqueue -> handler start) with fair turns
// and in FIFO order, each on fresh storage, and the big key's throughput
// alone.
struct KeysNoisyResult {
  uint32_t workers = 0;   // the queue's max_workers
  double handler_ms = 0;  // each job sleeps this long in its handler
  uint64_t big_jobs = 0;  // key "A"'s backlog
  uint32_t small_keys = 0;
  uint32_t small_jobs_per_key = 0;
  double small_after_ms = 0;          // engine start -> the small keys enqueue
  PickupSummary fair;                 // the small keys' jobs, fairness = "fair"
  PickupSummary fifo;                 // the same with fairness = "fifo"
  double big_alone_jobs_per_sec = 0;  // key A's jobs only, fair
  double big_alone_window_s = 0;      // the span that figure was measured over
};

// Per-key rate limits: every key's own bucket, many keys at once; the second
// run adds a queue-wide limit on top, which binds first.
struct KeysAccuracyRun {
  uint32_t keys = 0;
  uint32_t jobs_per_key = 0;
  double key_rate = 0;  // key_rate_limit
  uint32_t key_burst = 0;
  double queue_rate = 0;  // the queue's rate_limit; 0: none
  uint32_t queue_burst = 0;
  uint32_t workers = 0;
  double seconds = 0;  // engine start -> the run's end
  uint64_t started = 0;
  double window_from_s = 0, window_to_s = 0;  // the steady window, from engine start
  double jobs_per_sec = 0;                    // all keys together, in the window
  // max over keys and k of k - (burst + rate * t), t from that key's first
  // start: tight, but a job whose handler started late moves its key's
  // origin, so a fraction of a job (rate x that delay) is measurement noise;
  // a whole job is a key run past its limit.
  double worst_key_excess = 0;
  std::string worst_key;
  // The same with t from engine start (before any key's bucket existed):
  // sound, no tolerance: must be 0.
  double worst_key_excess_from_start = 0;
  // The queue limit's worst excess from engine start (sound); 0 without one.
  double queue_worst_excess = 0;
  // Jobs started per key within the window: min, median, max over the keys.
  double key_count_min = 0, key_count_median = 0, key_count_max = 0;
};

// Many keys cost little: the same jobs drained with a key each and with none
// (the default, fair queue: the ratio's base); and with none on a FIFO queue
// (no key turns at all), for reference.
struct KeysManyResult {
  uint32_t keys = 0;
  uint64_t jobs_per_key = 0;
  uint64_t jobs = 0;  // keys * jobs_per_key, every way
  std::vector<double> keyed_runs_jobs_per_sec, unkeyed_runs_jobs_per_sec,
      unkeyed_fifo_runs_jobs_per_sec;
  double keyed_jobs_per_sec = 0, unkeyed_jobs_per_sec = 0,
         unkeyed_fifo_jobs_per_sec = 0;                                     // medians
  double keyed_seconds = 0, unkeyed_seconds = 0, unkeyed_fifo_seconds = 0;  // median drain times
  double ratio() const {
    return unkeyed_jobs_per_sec > 0 ? keyed_jobs_per_sec / unkeyed_jobs_per_sec : 0;
  }
};

// Keys that come and go: one job each, drained, then purged. What stays.
// Measured with a key per job, and (first, as the baseline of what any
// drain of that many jobs leaves) the same jobs with no key.
struct KeysIdleRun {
  bool keyed = false;
  double drain_seconds = 0;
  // This process's resident memory (after malloc_trim), before enqueueing,
  // after draining (and 2 s idle), after the purge (and 2 s idle); the peak
  // sampled while draining.
  int64_t rss_before = 0, rss_drained = 0, rss_purged = 0, rss_peak = 0;
  int64_t storage_before = 0, storage_drained = 0, storage_purged = 0;
  // SQLite: pages in use (page_count - freelist_count) * page_size.
  std::optional<int64_t> sqlite_used_before, sqlite_used_drained, sqlite_used_purged;
  uint64_t purged = 0;  // jobs the purge deleted
};
struct KeysIdleResult {
  uint64_t keys = 0;  // = jobs, one each
  // What storage_* measure: "sqlite file + wal" or "pg_total_relation_size";
  // empty (and the sizes 0) for storage the bench cannot size.
  std::string storage_measure;
  KeysIdleRun keyed, unkeyed;
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
  std::optional<KeysNoisyResult> keys_noisy;
  std::vector<KeysAccuracyRun> keys_accuracy;
  std::optional<KeysManyResult> keys_many;
  std::optional<KeysIdleResult> keys_idle;
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
  double keys_scale = 0;
  std::vector<BackendResult> backends;

  // Every limited queue (and every key of a queue with key_rate_limit) of
  // every backend stayed within burst + rate * t.
  bool rate_invariant_held() const;
};

}  // namespace conveyor::bench
