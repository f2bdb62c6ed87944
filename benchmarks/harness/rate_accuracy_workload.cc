#include "bench_engine.hpp"
#include "rate_accuracy.hpp"
#include "workloads.hpp"

#include <thread>

namespace conveyor::bench {
namespace {

using Clock = std::chrono::steady_clock;

RateResult measure(Backend& backend, const BenchOptions& options, Progress& progress,
                   const RateLimit& limit) {
  const std::string workload = fmt::format("rate-{:.0f}", limit.rate_per_sec);
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  const std::string queue = backend.queue(workload);
  config.queues[queue] =
      QueueConfig{.max_workers = options.workers, .rate_limit = limit, .http = {}};
  Engine engine(config);

  // Deeper than the window can drain, so the queue is never short of work.
  const auto backlog =
      static_cast<uint64_t>(limit.burst + limit.rate_per_sec * options.rate_seconds * 1.1) +
      2 * options.claim_batch;
  const std::vector<int64_t> ids =
      enqueue_batched(engine, queue, "bench-probe", backlog, options.enqueue_batch, progress);

  TimestampLog starts(backlog);
  int64_t t0 = 0;  // set before start(): the limit cannot begin earlier
  engine.register_handler("bench-probe", [&](const Job&) { starts.record(steady_ns() - t0); });
  t0 = steady_ns();
  engine.start();
  const auto begin = Clock::now();
  const auto window = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options.rate_seconds));
  while (Clock::now() < begin + window) {
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::seconds(2), begin + window - Clock::now()));
    progress.line("{}/s burst {}: {:.1f} s, {} started", limit.rate_per_sec, limit.burst,
                  std::chrono::duration<double>(Clock::now() - begin).count(), starts.size());
  }
  engine.stop();

  const RateAnalysis a = analyze_rate(
      starts.sorted(), limit, std::chrono::duration_cast<std::chrono::nanoseconds>(window).count());
  RateResult r;
  r.rate = limit.rate_per_sec;
  r.burst = limit.burst;
  r.window_s = options.rate_seconds;
  r.started = a.started;
  r.achieved_per_sec = a.achieved_per_sec;
  r.error_pct = a.error_pct;
  r.overall_per_sec = a.overall_per_sec;
  r.worst_excess = a.worst_excess;
  r.first_start_ms = a.first_start_s * 1000;
  progress.line(
      "{}/s burst {}: {} started in {:.0f} s, steady {:.3f}/s ({:+.3f}%), overall "
      "{:.3f}/s, worst excess over burst + rate*t: {:.2f}",
      limit.rate_per_sec, limit.burst, a.started, options.rate_seconds, a.achieved_per_sec,
      a.error_pct, a.overall_per_sec, a.worst_excess);
  if (backend.isolation() == Isolation::kShared) cancel_unfinished(engine, ids);
  return r;
}

}  // namespace

std::vector<RateResult> run_rate_accuracy(Backend& backend, const BenchOptions& options,
                                          Progress& progress) {
  std::vector<RateResult> out;
  for (const RateLimit& limit : {RateLimit{50, 10}, RateLimit{5000, 500}})
    out.push_back(measure(backend, options, progress, limit));
  return out;
}

}  // namespace conveyor::bench
