#include "bench_engine.hpp"
#include "workloads.hpp"

namespace conveyor::bench {

EnqueueResult run_enqueue(Backend& backend, const BenchOptions& options, Progress& progress) {
  const std::string workload = "enqueue";
  WorkloadScope scope(backend, workload);
  Engine engine(backend.workload_config(workload));
  const std::string queue = backend.queue(workload);

  std::vector<int64_t> ids;
  ids.reserve(options.single_enqueue_jobs + 1);
  ids.push_back(engine.enqueue(queue, "noop"));  // warm-up: registers the queue
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(options.single_enqueue_max_s);
  uint64_t n = 0;
  while (n < options.single_enqueue_jobs) {
    ids.push_back(engine.enqueue(queue, "noop"));
    ++n;
    if ((n & 63) == 0 && std::chrono::steady_clock::now() >= deadline) break;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EnqueueResult r;
  r.single_jobs = n;
  r.single_seconds = seconds;
  r.single_jobs_per_sec = static_cast<double>(n) / seconds;
  progress.line("single enqueue: {} jobs in {:.2f} s = {:.0f} jobs/s", n, seconds,
                r.single_jobs_per_sec);
  if (backend.isolation() == Isolation::kShared) cancel_unfinished(engine, ids);
  return r;
}

}  // namespace conveyor::bench
