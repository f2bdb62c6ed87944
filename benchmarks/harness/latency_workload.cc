#include "bench_engine.hpp"

#include <conveyor/internal/storage.hpp>
#include "pickup_log.hpp"
#include "workloads.hpp"

#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/internal/storage.hpp>

#include <fmt/format.h>

#include <stdexcept>
#include <thread>

namespace conveyor::bench {
namespace {

// storage_plugin.h promises that a second handle on the same options sees the
// first one's jobs only with CONVEYOR_CAP_MULTI_PROCESS; check it rather than
// wait for jobs the engine never sees.
void check_handles_share_storage(Engine& engine, const std::string& queue) {
  const PluginInfo& info = EngineInternals::plugin_info(engine);
  for (const QueueStats& s : engine.queue_stats())
    if (s.queue == queue) return;
  const bool promised = (info.capabilities & CONVEYOR_CAP_MULTI_PROCESS) != 0;
  throw std::runtime_error(fmt::format(
      "storage plugin '{}' does not share storage between handles: the separate producer "
      "enqueued through a second handle opened with the same options, and the engine's handle "
      "does not see queue '{}'. {} The latency workload's separate producer needs that; run "
      "--workloads without latency for this plugin.",
      info.name, queue,
      promised ? "The plugin advertises CONVEYOR_CAP_MULTI_PROCESS, which promises it: a bug in "
                 "the plugin."
               : "It does not advertise CONVEYOR_CAP_MULTI_PROCESS, so it need not."));
}

LatencyResult measure(Backend& backend, const BenchOptions& options, Progress& progress,
                      bool separate_producer) {
  const std::string workload = separate_producer ? "latency-separate" : "latency";
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  const std::string queue = backend.queue(workload);
  Engine engine(config);

  PacedProbes probes(engine, options.latency_rate, options.latency_seconds);

  // The separate producer has a storage handle of its own: the engine hears
  // of its jobs only through storage. Its first job makes the queue known, so
  // the engine's start finds it.
  std::shared_ptr<Storage> producer;
  auto produce = [&] {
    if (!producer) {
      engine.enqueue(queue, PacedProbes::kKind);
      return;
    }
    const int64_t now = wall_us();
    std::vector<NewJob> job = make_jobs(queue, PacedProbes::kKind, 1);
    job[0].max_attempts = static_cast<int32_t>(config.engine.max_attempts);
    job[0].run_at_us = now;
    producer->enqueue(job, now);
  };
  if (separate_producer) {
    producer = open_storage(config.storage);
    produce();
    check_handles_share_storage(engine, queue);
  }
  engine.start();

  const uint64_t registering = separate_producer ? 1 : 0;  // the job sent before start()
  probes.offer(produce, progress,
               fmt::format("{} producer", separate_producer ? "separate" : "in-process"));
  // Every job runs; a backend that only polls needs up to poll_interval_ms.
  const auto deadline = std::chrono::milliseconds(10'000 + 3 * config.engine.poll_interval_ms);
  const bool all_ran = probes.wait_for_all(deadline, registering);
  engine.stop();

  const PickupSummary s = probes.summary();
  LatencyResult r;
  r.producer = separate_producer ? "separate" : "in-process";
  r.offered_per_sec = options.latency_rate;
  r.seconds = options.latency_seconds;
  r.samples = s.samples;
  r.p50_ms = s.p50_ms;
  r.p95_ms = s.p95_ms;
  r.p99_ms = s.p99_ms;
  r.max_ms = s.max_ms;
  if (!all_ran)
    throw std::runtime_error(fmt::format(
        "{} producer: only {} of {} jobs ran within {} ms of the last one being offered{}",
        r.producer, probes.ran(), probes.offered() + registering, deadline.count(),
        separate_producer ? " (the engine hears of a second handle's jobs through storage only: "
                            "through notifications or its poll)"
                          : ""));
  progress.line(
      "{} producer at {:.0f}/s: pickup p50 {:.3f} ms, p95 {:.3f} ms, p99 {:.3f} ms "
      "({} samples)",
      r.producer, r.offered_per_sec, r.p50_ms, r.p95_ms, r.p99_ms, r.samples);
  return r;
}

}  // namespace

std::vector<LatencyResult> run_latency(Backend& backend, const BenchOptions& options,
                                       Progress& progress) {
  return {measure(backend, options, progress, false), measure(backend, options, progress, true)};
}

}  // namespace conveyor::bench
