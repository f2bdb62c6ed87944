#include "bench_engine.hpp"
#include "postgres_probe.hpp"
#include "process_stats.hpp"
#include "sample_stats.hpp"
#include "stall_watch.hpp"
#include "workloads.hpp"

#include <fmt/format.h>

#include <optional>
#include <thread>

namespace conveyor::bench {
namespace {

using Clock = std::chrono::steady_clock;

DrainRun drain_once(Backend& backend, const BenchOptions& options, Progress& progress,
                    std::optional<PostgresCost>& pg_cost) {
  const std::string workload = "drain";
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  const std::string queue = backend.queue(workload);
  const uint64_t n = options.drain_jobs;

  std::optional<PostgresProbe> probe;
  int64_t sessions_before = 0, wal_before = 0;
  if (backend.is_postgres()) {
    probe.emplace(*backend.dsn());
    sessions_before = probe->other_sessions();
    wal_before = probe->wal_bytes();
  }
  int64_t dead_peak = 0;

  DrainRun run;
  run.jobs = n;
  {
    Engine engine(config);
    register_builtin_handlers(engine);
    const auto e0 = Clock::now();
    enqueue_batched(engine, queue, "noop", n, options.enqueue_batch, progress);
    run.enqueue_seconds = std::chrono::duration<double>(Clock::now() - e0).count();
    run.enqueue_jobs_per_sec = static_cast<double>(n) / run.enqueue_seconds;

    const std::atomic<uint64_t>& completed =
        EngineInternals::metrics(engine).queue(queue).completed;
    std::map<int, double> server_cpu0;
    if (probe) server_cpu0 = probe->server_cpu_by_pid();
    const double cpu0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    engine.start();
    StallWatch stall("drain", t0);
    auto last_report = t0, last_sample = t0;
    while (completed.load(std::memory_order_relaxed) < n) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const auto now = Clock::now();
      const uint64_t done = completed.load(std::memory_order_relaxed);
      stall.check(done, n, now);
      if (now - last_report >= std::chrono::seconds(1)) {
        last_report = now;
        const double s = std::chrono::duration<double>(now - t0).count();
        progress.line("drained {}/{} ({:.0f} jobs/s)", done, n, static_cast<double>(done) / s);
      }
      if (probe && now - last_sample >= std::chrono::milliseconds(500)) {
        last_sample = now;
        dead_peak = std::max(dead_peak, probe->tuples(backend.schema(workload)).dead);
      }
    }
    run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    run.cpu_cores = (process_cpu_seconds() - cpu0) / run.seconds;
    if (probe && !server_cpu0.empty()) {
      const double server_cpu = server_cpu_delta(server_cpu0, probe->server_cpu_by_pid());
      run.server_cpu_cores = server_cpu / run.seconds;
      run.server_cpu_us_per_job = server_cpu * 1e6 / static_cast<double>(n);
    }
    run.jobs_per_sec = static_cast<double>(n) / run.seconds;
    engine.stop();
  }
  if (probe) {
    // The engine's sessions report their statistics as they close.
    wait_for([&] { return probe->other_sessions() <= sessions_before; }, std::chrono::seconds(5));
    const TupleStats t = probe->tuples(backend.schema(workload));
    PostgresCost cost;
    cost.wal_bytes_per_job =
        static_cast<double>(probe->wal_bytes() - wal_before) / static_cast<double>(n);
    cost.dead_tuples_per_job = static_cast<double>(t.updated + t.deleted) / static_cast<double>(n);
    cost.dead_tuples_peak = std::max(dead_peak, t.dead);
    cost.dead_tuples_after = t.dead;
    pg_cost = cost;
  }
  return run;
}

}  // namespace

DrainResult run_drain(Backend& backend, const BenchOptions& options, Progress& progress) {
  DrainResult r;
  r.workers = options.workers;
  r.claim_batch = options.claim_batch;
  r.enqueue_batch = options.enqueue_batch;
  std::vector<double> rates, enqueue_rates;
  for (uint32_t i = 1; i <= options.repeat; ++i) {
    std::optional<PostgresCost> cost;
    DrainRun run = drain_once(backend, options, progress, cost);
    progress.line(
        "run {}/{}: enqueued {} in {:.2f} s ({:.0f} jobs/s, batches of {}); drained in "
        "{:.2f} s = {:.0f} jobs/s ({:.2f} cores busy{})",
        i, options.repeat, run.jobs, run.enqueue_seconds, run.enqueue_jobs_per_sec,
        options.enqueue_batch, run.seconds, run.jobs_per_sec, run.cpu_cores,
        run.server_cpu_cores ? fmt::format(", database server {:.2f}, {:.1f} us CPU per job",
                                           *run.server_cpu_cores, *run.server_cpu_us_per_job)
                             : "");
    if (cost) r.postgres = cost;
    rates.push_back(run.jobs_per_sec);
    enqueue_rates.push_back(run.enqueue_jobs_per_sec);
    r.runs.push_back(run);
  }
  r.median_jobs_per_sec = median(rates);
  r.median_enqueue_jobs_per_sec = median(enqueue_rates);
  return r;
}

}  // namespace conveyor::bench
