// Slow claim: does one queue whose storage claims are slow delay the others?
// A FaultInjectingStorage over the backend's storage sleeps kClaimDelay in
// every claim of one queue, which has a deep backlog (so it claims for the
// whole run); probe jobs go round-robin to kFastQueues other queues at
// --latency-rate, and their pickup latency (enqueue -> handler start) is
// measured once without the slow queue and once beside it.
#include "bench_engine.hpp"
#include "pickup_log.hpp"
#include "workloads.hpp"

#include "testing/fault_injecting_storage.hpp"

#include <conveyor/host/plugin_loader.hpp>

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <thread>

namespace conveyor::bench {
namespace {

struct Phase {
  PickupSummary pickup;
  uint64_t slow_claims = 0;
};

Phase measure(Backend& backend, const BenchOptions& options, Progress& progress, bool beside_slow) {
  const std::string workload = beside_slow ? "slow-claim" : "slow-claim-alone";
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  const std::string base = backend.queue(workload);
  const std::string slow = base + "-slow";
  std::vector<std::string> fast;
  for (uint32_t i = 0; i < kSlowClaimFastQueues; ++i)
    fast.push_back(fmt::format("{}-fast-{:02d}", base, i));

  auto storage = std::make_shared<testing::FaultInjectingStorage>(open_storage(config.storage));
  std::atomic<uint64_t> slow_claims{0};
  storage->set_claim_hook([&](std::string_view queue) {
    if (queue != slow) return;
    slow_claims.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(kSlowClaimDelay);
  });
  std::unique_ptr<Engine> engine = EngineInternals::make(config, SystemClock::instance(), storage);
  register_builtin_handlers(*engine);

  PacedProbes probes(*engine, options.latency_rate, options.latency_seconds);

  // Enough for the slow queue to claim full batches for the whole run and
  // more: a claim of claim_batch jobs at most every kSlowClaimDelay.
  const double run_s =
      std::chrono::duration<double>(PacedProbes::kWarmUp).count() + options.latency_seconds;
  const auto claims_per_s = 1.0 / std::chrono::duration<double>(kSlowClaimDelay).count();
  const auto backlog =
      static_cast<uint64_t>(std::ceil(options.claim_batch * claims_per_s * (run_s + 5)));
  if (beside_slow) enqueue_batched(*engine, slow, "noop", backlog, options.enqueue_batch, progress);

  engine->start();
  uint64_t sent = 0;
  probes.offer([&] { engine->enqueue(fast[sent++ % fast.size()], PacedProbes::kKind); }, progress,
               workload);
  const auto deadline = std::chrono::milliseconds(10'000 + 3 * config.engine.poll_interval_ms);
  const bool all_ran = probes.wait_for_all(deadline);
  const uint64_t slow_done = EngineInternals::metrics(*engine).queue(slow).completed.load();
  engine->stop();
  if (!all_ran)
    throw std::runtime_error(fmt::format("{}: only {} of {} probe jobs ran within {} ms", workload,
                                         probes.ran(), probes.offered(), deadline.count()));
  if (beside_slow && slow_done >= backlog)
    throw std::runtime_error(fmt::format(
        "{}: the slow queue drained its {} jobs before the probes ended: it did not claim for "
        "the whole run",
        workload, backlog));

  Phase p{probes.summary(), slow_claims.load()};
  progress.line("{}: pickup p50 {:.3f} ms, p99 {:.3f} ms ({} samples){}", workload, p.pickup.p50_ms,
                p.pickup.p99_ms, p.pickup.samples,
                beside_slow ? fmt::format("; the slow queue made {} claims", p.slow_claims) : "");
  return p;
}

}  // namespace

SlowClaimResult run_slow_claim(Backend& backend, const BenchOptions& options, Progress& progress) {
  SlowClaimResult r;
  r.claim_delay_ms = std::chrono::duration<double, std::milli>(kSlowClaimDelay).count();
  r.fast_queues = kSlowClaimFastQueues;
  r.offered_per_sec = options.latency_rate;
  r.seconds = options.latency_seconds;
  r.alone = measure(backend, options, progress, false).pickup;
  const Phase beside = measure(backend, options, progress, true);
  r.beside_slow = beside.pickup;
  r.slow_claims = beside.slow_claims;
  return r;
}

}  // namespace conveyor::bench
