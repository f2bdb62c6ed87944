// conveyor-bench's command line: which backends, which workloads, how long.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace conveyor::bench {

// A plugin given by path (an out-of-tree backend) and its storage options.
struct PluginSpec {
  std::string path;
  std::vector<std::pair<std::string, std::string>> options;
};

// The steady producer's default offered load (jobs/s): below what both
// PostgreSQL backends sustain on the 2-core reference machine, so the run
// measures the backends' cost at a given load, not a saturated backlog.
inline constexpr double kDefaultSteadyRate = 2000;

// What runs when --workloads is not given.
inline const std::vector<std::string>& default_workloads() {
  static const std::vector<std::string> w = {"enqueue", "drain",       "latency",    "rate",
                                             "idle",    "many-queues", "slow-claim", "reference"};
  return w;
}
// Every workload --workloads accepts: the defaults, the steady-producer
// comparisons (minutes each in full mode) and the job-key workloads, which
// run only when named.
inline const std::vector<std::string>& all_workloads() {
  static const std::vector<std::string> w = {
      "enqueue",     "drain",         "latency",   "rate",     "idle",
      "many-queues", "slow-claim",    "reference", "steady",   "steady-held-txn",
      "keys-noisy",  "keys-accuracy", "keys-many", "keys-idle"};
  return w;
}
// Names --workloads takes for several workloads at once.
inline const std::vector<std::string>& workload_group(const std::string& name) {
  static const std::vector<std::string> keys = {"keys-noisy", "keys-accuracy", "keys-many",
                                                "keys-idle"};
  static const std::vector<std::string> none;
  return name == "keys" ? keys : none;
}

struct BenchOptions {
  std::vector<std::string> configs;             // --config, in order
  std::vector<PluginSpec> plugins;              // --plugin PATH [--option K=V]...
  std::optional<std::string> pg_reference_dsn;  // --pg-reference: bare SQL loop only
  bool quick = false;
  std::filesystem::path out_dir = ".";
  std::optional<std::filesystem::path> scratch_dir;  // default: a fresh temp dir
  bool keep_scratch = false;
  std::set<std::string> workloads;  // default: default_workloads()

  uint32_t workers = 100;            // [engine] max_workers for every bench queue
  uint32_t claim_batch = 100;        // [engine] claim_batch_max
  uint32_t enqueue_batch = 1000;     // jobs per enqueue_batch() call
  uint64_t single_enqueue_jobs = 0;  // 0: by mode
  double single_enqueue_max_s = 0;
  uint64_t drain_jobs = 0;     // 0: by mode
  uint32_t repeat = 0;         // drain and reference runs (median); 0: by mode
  double latency_rate = 500;   // offered load, jobs/s
  double latency_seconds = 0;  // per producer; 0: by mode
  double rate_seconds = 0;     // per limited queue; 0: by mode
  uint32_t idle_queues = 1000;
  double idle_seconds = 0;      // 0: by mode
  uint64_t reference_jobs = 0;  // 0: by mode
  uint64_t steady_jobs = 0;     // 0: by mode
  double steady_rate = 0;       // offered jobs/s; 0: the default
  uint32_t steady_tick_ms = 5;  // the producer enqueues one batch per tick
  // When > 0, the steady queue has a fleet-scoped limit of this many jobs/s
  // (burst ceil(rate)): its shared bucket is written all the while.
  double steady_fleet_limit = 0;
  // The keys-* workloads' sizes (job and key counts) times this; 0: by mode
  // (0.1 quick, 1 full).
  double keys_scale = 0;

  bool runs(const std::string& workload) const {
    if (!workloads.empty()) return workloads.count(workload) > 0;
    for (const auto& w : default_workloads())
      if (w == workload) return true;
    return false;
  }
  // Fills every "0: by mode" field from quick/full.
  void apply_mode_defaults();
};

// A command-line problem; main prints it and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses argv. Returns nullopt when --help was printed. Throws UsageError.
std::optional<BenchOptions> parse_bench_options(int argc, char** argv);

}  // namespace conveyor::bench
