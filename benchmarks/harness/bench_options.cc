#include "bench_options.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>

namespace conveyor::bench {
namespace {

std::string known_workloads() {
  std::string out;
  for (const auto& w : all_workloads()) out += (out.empty() ? "" : ", ") + w;
  return out + ", keys (every keys-* workload)";
}

}  // namespace

void BenchOptions::apply_mode_defaults() {
  auto pick = [this](auto& field, auto quick_value, auto full_value) {
    if (field == 0) field = quick ? quick_value : full_value;
  };
  pick(single_enqueue_jobs, uint64_t{2'000}, uint64_t{20'000});
  pick(single_enqueue_max_s, 2.0, 10.0);
  pick(drain_jobs, uint64_t{20'000}, uint64_t{200'000});
  pick(repeat, 1u, 3u);
  pick(latency_seconds, 2.0, 10.0);
  // The limiter's accuracy is measured over at least 10 s in full mode; the
  // quick smoke run uses 4 s per queue (same invariant, coarser rate error).
  pick(rate_seconds, 4.0, 10.0);
  pick(idle_seconds, 3.0, 10.0);
  pick(reference_jobs, uint64_t{20'000}, uint64_t{200'000});
  pick(steady_jobs, uint64_t{10'000}, uint64_t{200'000});
  pick(steady_rate, kDefaultSteadyRate, kDefaultSteadyRate);
  pick(keys_scale, 0.1, 1.0);
}

std::optional<BenchOptions> parse_bench_options(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{
      "conveyor-bench: the same workloads, measured the same way, on every backend given.\n"
      "Writes a table to stdout and bench-results.json and bench-results.svg to --out.",
      "conveyor-bench"};
  std::vector<std::string> plugin_paths, plugin_options;
  std::string workloads;
  auto* config_opt = app.add_option("--config", o.configs, "a conveyor TOML config (repeatable)");
  auto* plugin_opt =
      app.add_option("--plugin", plugin_paths, "a storage plugin .so not in the tree (repeatable)");
  auto* option_opt = app.add_option("--option", plugin_options,
                                    "K=V storage option for the --plugin before it (repeatable)");
  app.add_option("--pg-reference", o.pg_reference_dsn,
                 "also run the bare-SQL PostgreSQL loop against this DSN (no engine)");
  app.add_flag("--quick", o.quick, "a smoke run that finishes in under a minute");
  app.add_option("--out", o.out_dir, "where bench-results.json and .svg go (default: .)");
  app.add_option("--scratch", o.scratch_dir,
                 "where SQLite scratch databases go (default: a fresh temp directory)");
  app.add_flag("--keep-scratch", o.keep_scratch, "do not delete the scratch directory");
  app.add_option(
      "--workloads", workloads,
      "comma-separated, of: " + known_workloads() + " (default: all but the steady and keys ones)");
  app.add_option("--workers", o.workers, "max_workers per queue (default 100)")
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--batch", o.claim_batch, "claim_batch_max (default 100)")
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--enqueue-batch", o.enqueue_batch, "jobs per enqueue_batch call (default 1000)")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--drain-jobs", o.drain_jobs, "noop jobs per drain (default 20k quick, 200k full)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000'000}));
  app.add_option("--repeat", o.repeat,
                 "drain and reference runs, median reported (1 quick, 3 full)")
      ->check(CLI::Range(1u, 100u));
  app.add_option("--latency-rate", o.latency_rate, "offered load for pickup latency, jobs/s (500)")
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--latency-seconds", o.latency_seconds, "per producer (2 quick, 10 full)")
      ->check(CLI::Range(0.5, 3600.0));
  app.add_option("--rate-seconds", o.rate_seconds, "per limited queue (4 quick, 10 full)")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--idle-queues", o.idle_queues, "queues in the idle measurement (1000)")
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--idle-seconds", o.idle_seconds, "idle measurement length (3 quick, 10 full)")
      ->check(CLI::Range(0.5, 3600.0));
  app.add_option("--reference-jobs", o.reference_jobs,
                 "jobs per bare-SQL reference run (20k quick, 200k full)")
      ->check(CLI::Range(uint64_t{100}, uint64_t{100'000'000}));
  app.add_option("--steady-jobs", o.steady_jobs, "noop jobs per steady run (10k quick, 200k full)")
      ->check(CLI::Range(uint64_t{100}, uint64_t{100'000'000}));
  app.add_option("--steady-rate", o.steady_rate,
                 fmt::format("steady producer's offered load, jobs/s ({:g})", kDefaultSteadyRate))
      ->check(CLI::Range(1.0, 1e7));
  app.add_option("--steady-fleet-limit", o.steady_fleet_limit,
                 "give the steady queue a fleet-wide limit of this many jobs/s (0: none)")
      ->check(CLI::Range(0.0, 1e7));
  app.add_option("--steady-tick-ms", o.steady_tick_ms,
                 "the steady producer enqueues one batch every this many ms (5)")
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--keys-scale", o.keys_scale,
                 "the keys-* workloads' job and key counts times this (0.1 quick, 1 full)")
      ->check(CLI::Range(0.001, 10.0));
  (void)config_opt;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }

  // Each --option belongs to the --plugin before it on the command line.
  size_t next_plugin = 0, next_option = 0;
  for (const CLI::Option* opt : app.parse_order()) {
    if (opt == plugin_opt) {
      o.plugins.push_back(PluginSpec{plugin_paths.at(next_plugin++), {}});
    } else if (opt == option_opt) {
      const std::string& kv = plugin_options.at(next_option++);
      if (o.plugins.empty())
        throw UsageError(fmt::format("--option {}: give it after the --plugin it belongs to", kv));
      const auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        throw UsageError(
            fmt::format("--option '{}': expected KEY=VALUE, e.g. --option path=q.db", kv));
      o.plugins.back().options.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
  }
  if (o.configs.empty() && o.plugins.empty() && !o.pg_reference_dsn)
    throw UsageError(
        "nothing to measure: give --config FILE (repeatable), --plugin PATH, or "
        "--pg-reference DSN");

  if (!workloads.empty()) {
    size_t start = 0;
    while (start <= workloads.size()) {
      const size_t comma = std::min(workloads.find(',', start), workloads.size());
      const std::string w = workloads.substr(start, comma - start);
      if (const auto& group = workload_group(w); !group.empty()) {
        o.workloads.insert(group.begin(), group.end());
        start = comma + 1;
        continue;
      }
      bool known = false;
      for (const auto& name : all_workloads()) known = known || name == w;
      if (!known)
        throw UsageError(
            fmt::format("--workloads: unknown workload '{}' (known: {})", w, known_workloads()));
      o.workloads.insert(w);
      start = comma + 1;
    }
  }
  o.apply_mode_defaults();
  return o;
}

}  // namespace conveyor::bench
