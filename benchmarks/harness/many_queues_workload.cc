#include "bench_engine.hpp"
#include "sample_stats.hpp"
#include "stall_watch.hpp"
#include "workloads.hpp"

#include <fmt/format.h>

#include <thread>

namespace conveyor::bench {
namespace {

using Clock = std::chrono::steady_clock;

// One drain of `queues` queues of `per_queue` noop jobs each, all busy at
// once: jobs/s over every queue together.
double drain_many_once(Backend& backend, const BenchOptions& options, Progress& progress,
                       uint32_t queues, uint64_t per_queue) {
  const std::string workload = "many-queues";
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  std::vector<std::string> names;
  for (uint32_t i = 0; i < queues; ++i) {
    names.push_back(fmt::format("{}-{:05d}", backend.queue(workload), i));
    config.queues[names.back()] = QueueConfig{};
  }
  Engine engine(config);
  register_builtin_handlers(engine);
  // Enqueued round-robin in mixed batches, so that every queue has jobs
  // from the start, as when many producers feed many queues.
  std::vector<NewJob> batch;
  for (uint64_t j = 0; j < per_queue; ++j)
    for (const std::string& q : names) {
      batch.push_back(make_jobs(q, "noop", 1).front());
      if (batch.size() == options.enqueue_batch) {
        engine.enqueue_batch(batch);
        batch.clear();
      }
    }
  if (!batch.empty()) engine.enqueue_batch(batch);

  std::vector<const std::atomic<uint64_t>*> completed;
  for (const std::string& q : names)
    completed.push_back(&EngineInternals::metrics(engine).queue(q).completed);
  const uint64_t total = per_queue * queues;
  auto done = [&] {
    uint64_t sum = 0;
    for (auto* c : completed) sum += c->load(std::memory_order_relaxed);
    return sum;
  };
  const auto t0 = Clock::now();
  engine.start();
  StallWatch stall(workload, t0);
  auto last_report = t0;
  for (uint64_t d = done(); d < total; d = done()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto now = Clock::now();
    stall.check(d, total, now);
    if (now - last_report >= std::chrono::seconds(1)) {
      last_report = now;
      progress.line("{} queues: drained {}/{}", queues, d, total);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  engine.stop();
  return static_cast<double>(total) / seconds;
}

}  // namespace

std::vector<ManyQueuesResult> run_many_queues(Backend& backend, const BenchOptions& options,
                                              Progress& progress) {
  // The shapes: 100 queues of 2,000 jobs and 1,000 queues of 100 (a tenth
  // of the jobs per queue in quick mode).
  const uint64_t scale = options.quick ? 10 : 1;
  const std::vector<std::pair<uint32_t, uint64_t>> shapes = {{100, 2000 / scale},
                                                             {1000, 100 / scale}};
  std::vector<ManyQueuesResult> out;
  for (const auto& [queues, per_queue] : shapes) {
    ManyQueuesResult r;
    r.queues = queues;
    r.jobs_per_queue = per_queue;
    for (uint32_t i = 1; i <= options.repeat; ++i) {
      r.runs_jobs_per_sec.push_back(drain_many_once(backend, options, progress, queues, per_queue));
      progress.line("{} queues x {} jobs, run {}/{}: {:.0f} jobs/s", queues, per_queue, i,
                    options.repeat, r.runs_jobs_per_sec.back());
    }
    r.median_jobs_per_sec = median(r.runs_jobs_per_sec);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace conveyor::bench
