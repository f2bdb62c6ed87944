#include "bench_engine.hpp"
#include "postgres_probe.hpp"
#include "process_stats.hpp"
#include "workloads.hpp"

#include <optional>
#include <thread>

namespace conveyor::bench {

IdleResult run_idle_queues(Backend& backend, const BenchOptions& options, Progress& progress) {
  const std::string workload = "idle";
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  std::vector<std::string> queues;
  for (uint32_t i = 0; i < options.idle_queues; ++i) {
    queues.push_back(fmt::format("{}-{:05d}", backend.queue(workload), i));
    config.queues[queues.back()] = QueueConfig{};
  }
  IdleResult r;
  r.queues = options.idle_queues;
  r.seconds = options.idle_seconds;
  r.threads_before = process_threads();

  Engine engine(config);
  register_builtin_handlers(engine);
  // One job per queue, so every queue is real in storage and has run once.
  std::vector<NewJob> jobs;
  for (const std::string& q : queues) jobs.push_back(make_jobs(q, "noop", 1).front());
  for (size_t i = 0; i < jobs.size(); i += options.enqueue_batch)
    engine.enqueue_batch(std::vector<NewJob>(
        jobs.begin() + static_cast<std::ptrdiff_t>(i),
        jobs.begin() +
            static_cast<std::ptrdiff_t>(std::min(jobs.size(), i + options.enqueue_batch))));
  std::vector<const std::atomic<uint64_t>*> completed, claims;
  for (const std::string& q : queues) {
    completed.push_back(&EngineInternals::metrics(engine).queue(q).completed);
    claims.push_back(&EngineInternals::metrics(engine).queue(q).claims);
  }
  const auto sum = [](const std::vector<const std::atomic<uint64_t>*>& counters) {
    uint64_t n = 0;
    for (auto* c : counters) n += c->load(std::memory_order_relaxed);
    return n;
  };
  engine.start();
  const bool drained =
      wait_for([&] { return sum(completed) >= queues.size(); }, std::chrono::seconds(120));
  if (!drained)
    throw std::runtime_error("the idle queues' first jobs did not all complete in 120 s");
  // Let the last completions and the first idle polls pass: a woken queue
  // is claimed twice more a poll interval apart before it waits for
  // notifications (due_times.hpp, kShortPollsAfterWake). With many queues
  // and a slow claim those polls take longer than that: on storage that
  // notifies (idle queues then make no claims), wait until a whole poll
  // interval passes without a claim (at most 300 s), so the window measures
  // the idle state and not the start's tail. Storage that does not notify
  // polls every queue every poll interval from the start: nothing to wait for.
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * config.engine.poll_interval_ms + 500));
  const bool notified =
      EngineInternals::drained_queue_poll_ms(engine) > config.engine.poll_interval_ms;
  const auto settle_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  for (uint64_t before = sum(claims);
       notified && std::chrono::steady_clock::now() < settle_deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(config.engine.poll_interval_ms + 100));
    const uint64_t after = sum(claims);
    if (after == before) break;
    before = after;
  }

  progress.line("{} queues drained; measuring {:.0f} s idle", queues.size(), options.idle_seconds);
  std::optional<PostgresProbe> probe;
  std::map<int, double> server_cpu0;
  if (backend.is_postgres()) {
    probe.emplace(*backend.dsn());
    server_cpu0 = probe->server_cpu_by_pid();
  }
  const double cpu0 = process_cpu_seconds();
  const uint64_t claims0 = sum(claims);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(options.idle_seconds));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.cpu_pct_of_core = (process_cpu_seconds() - cpu0) / wall * 100;
  r.claims_per_sec = static_cast<double>(sum(claims) - claims0) / wall;
  r.drained_poll_ms = EngineInternals::drained_queue_poll_ms(engine);
  if (probe && !server_cpu0.empty())
    r.server_cpu_pct_of_core =
        server_cpu_delta(server_cpu0, probe->server_cpu_by_pid()) / wall * 100;
  r.threads = process_threads();
  r.worker_threads = engine.worker_threads();
  r.worker_thread_cap = config.engine.worker_threads;
  progress.line(
      "{} idle queues: {:.2f}% of one core{}; {:.1f} claims/s (drained queues are re-checked "
      "every {} ms); {} threads ({} before the engine; {} handler threads, cap {})",
      r.queues, r.cpu_pct_of_core,
      r.server_cpu_pct_of_core
          ? fmt::format(" (database server: {:.2f}%)", *r.server_cpu_pct_of_core)
          : "",
      r.claims_per_sec, r.drained_poll_ms, r.threads, r.threads_before, r.worker_threads,
      r.worker_thread_cap);
  return r;
}

}  // namespace conveyor::bench
