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
  // PostgreSQL on this machine: the server processes' CPU time / wall time.
  std::optional<double> server_cpu_cores;
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
};

struct LatencyResult {
  std::string producer;  // "in-process" or "separate"
  double offered_per_sec = 0;
  double seconds = 0;
  uint64_t samples = 0;
  double p50_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
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
};

// A loop of bare SQL on this machine, no engine: what the database can do.
struct ReferenceResult {
  std::string name;  // "sqlite-claim", "sqlite-claim-complete", "postgres-claim-complete"
  std::string description;
  uint32_t clients = 0;
  uint32_t batch = 0;
  uint64_t jobs = 0;
  std::vector<double> runs_jobs_per_sec;
  double median_jobs_per_sec = 0;
};

struct BackendResult {
  std::string label;
  std::string source;  // the config file or plugin path it came from
  std::string plugin_name, plugin_version, plugin_kind, plugin_path, capabilities;
  std::string isolation;  // how each workload got fresh storage
  std::optional<EnqueueResult> enqueue;
  std::optional<DrainResult> drain;
  std::vector<LatencyResult> latency;
  std::vector<RateResult> rate;
  std::optional<IdleResult> idle;
  std::vector<ReferenceResult> references;
  std::vector<std::string> errors;  // "workload: message"

  // The drain's median over the reference the targets compare it with; 0 if either is missing.
  double engine_to_reference() const;
  const ReferenceResult* reference(const std::string& name) const;
};

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
  std::vector<BackendResult> backends;

  // Every limited queue of every backend stayed within burst + rate * t.
  bool rate_invariant_held() const;
};

}  // namespace conveyor::bench
