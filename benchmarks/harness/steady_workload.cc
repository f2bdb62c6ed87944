// The steady workload: a producer thread enqueues N noop jobs at an offered
// rate (one batch per tick, never one big burst) while the engine works them.
// Measured: jobs/s from the first enqueue to the last completion, every job's
// pickup latency, and on PostgreSQL the schema's dead tuples (every 500 ms and
// at the end) and its size before and after. The held-transaction variant
// keeps another session in BEGIN; SELECT txid_current(); for the whole run.
#include "bench_engine.hpp"
#include "held_transaction.hpp"
#include "pickup_log.hpp"
#include "postgres_probe.hpp"
#include "stall_watch.hpp"
#include "workloads.hpp"

#include <fmt/format.h>

#include <cmath>
#include <exception>
#include <optional>
#include <thread>

namespace conveyor::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSampleEvery = std::chrono::milliseconds(500);

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Enqueues n jobs at `rate` per second: at tick k it tops the total up to
// rate * k * tick, so a slow enqueue is caught up by the next batch rather
// than lowering the offered load.
class SteadyProducer {
 public:
  SteadyProducer(Engine& engine, std::string queue, uint64_t n, double rate, uint32_t tick_ms,
                 uint32_t max_batch)
      : engine_(engine),
        queue_(std::move(queue)),
        n_(n),
        rate_(rate),
        tick_(std::chrono::milliseconds(tick_ms)),
        max_batch_(max_batch) {}

  void start() {
    started_ = Clock::now();
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  ~SteadyProducer() { stop(); }

  Clock::time_point started() const { return started_; }
  uint64_t sent() const { return sent_.load(); }
  bool done() const { return done_.load(); }
  // The producer's error, if it failed (read after done() or stop()).
  std::exception_ptr error() const { return error_; }
  // Jobs/s the producer achieved (valid once done()).
  double achieved_per_sec() const {
    const double s = seconds_between(started_, finished_);
    return s > 0 ? static_cast<double>(n_) / s : 0;
  }

 private:
  void run() {
    try {
      const double tick_s = std::chrono::duration<double>(tick_).count();
      uint64_t sent = 0;
      for (uint64_t k = 1; sent < n_ && !stop_.load(); ++k) {
        const auto target = std::min<uint64_t>(
            n_, static_cast<uint64_t>(std::llround(rate_ * tick_s * static_cast<double>(k))));
        while (sent < target) {
          const uint64_t batch = std::min<uint64_t>(target - sent, max_batch_);
          engine_.enqueue_batch(make_jobs(queue_, "noop", batch));
          sent += batch;
          sent_.store(sent, std::memory_order_relaxed);
        }
        std::this_thread::sleep_until(started_ + tick_ * k);
      }
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_ = Clock::now();
    done_.store(true);
  }

  Engine& engine_;
  const std::string queue_;
  const uint64_t n_;
  const double rate_;
  const Clock::duration tick_;
  const uint32_t max_batch_;
  Clock::time_point started_, finished_;
  std::thread thread_;
  std::atomic<bool> stop_{false}, done_{false};
  std::atomic<uint64_t> sent_{0};
  std::exception_ptr error_;
};

}  // namespace

SteadyResult run_steady(Backend& backend, const BenchOptions& options, Progress& progress,
                        bool hold_transaction) {
  const std::string workload = hold_transaction ? "steady-held-txn" : "steady";
  if (hold_transaction && !backend.is_postgres())
    throw std::runtime_error(
        "needs a PostgreSQL backend (a plugin named postgres* with a dsn option): a held "
        "transaction means nothing elsewhere");
  WorkloadScope scope(backend, workload);
  Config config = backend.workload_config(workload);
  const std::string queue = backend.queue(workload);
  const std::string schema = backend.schema(workload);
  const uint64_t n = options.steady_jobs;

  SteadyResult r;
  r.variant = workload;
  r.held_transaction = hold_transaction;
  r.jobs = n;
  r.offered_per_sec = options.steady_rate;
  r.tick_ms = options.steady_tick_ms;

  std::optional<PostgresProbe> probe;
  std::optional<HeldTransaction> held;
  SteadyStorage storage;
  int64_t sessions_before = 0;
  if (backend.is_postgres()) {
    probe.emplace(*backend.dsn());
    if (hold_transaction) {
      held.emplace(*backend.dsn());
      storage.held_xid = held->xid();
      progress.line("session {} holds transaction {} open (BEGIN; SELECT txid_current();)",
                    held->pid(), held->xid());
    }
    sessions_before = probe->other_sessions();
  }

  PickupLog pickup(n + 16);
  TupleStats before;
  {
    Engine engine(config);  // creates the schema's tables
    engine.register_handler("noop", [&](const Job& job) { pickup.record(job); });
    if (probe) {
      storage.relation_bytes_before = probe->relation_bytes(schema);
      before = probe->tuples(schema);
    }
    const std::atomic<uint64_t>& completed =
        EngineInternals::metrics(engine).queue(queue).completed;
    if (options.steady_fleet_limit > 0) {
      engine.set_rate_limit(queue,
                            make_rate_limit(options.steady_fleet_limit, 0, LimitScope::kFleet));
      progress.line("queue {} limited to {}/s, scope fleet (a shared bucket in storage)", queue,
                    options.steady_fleet_limit);
    }
    engine.start();

    SteadyProducer producer(engine, queue, n, options.steady_rate, options.steady_tick_ms,
                            options.enqueue_batch);
    producer.start();
    const auto t0 = producer.started();
    StallWatch stall("steady", t0);
    auto last_report = t0, last_sample = t0;
    while (completed.load(std::memory_order_relaxed) < n) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const auto now = Clock::now();
      if (producer.done() && producer.error()) std::rethrow_exception(producer.error());
      const uint64_t done = completed.load(std::memory_order_relaxed);
      stall.check(done, n, now);
      if (probe && now - last_sample >= kSampleEvery) {
        last_sample = now;
        const int64_t dead = probe->tuples(schema).dead;
        storage.dead_tuples_peak = std::max(storage.dead_tuples_peak, dead);
        storage.samples.push_back({seconds_between(t0, now), done, dead});
      }
      if (now - last_report >= std::chrono::seconds(2)) {
        last_report = now;
        progress.line("{}/{} enqueued, {} completed ({:.0f} jobs/s){}", producer.sent(), n, done,
                      static_cast<double>(done) / seconds_between(t0, now),
                      storage.samples.empty()
                          ? ""
                          : fmt::format(", n_dead_tup {}", storage.samples.back().dead_tuples));
      }
    }
    const auto t_done = Clock::now();
    producer.stop();
    r.seconds = seconds_between(t0, t_done);
    r.jobs_per_sec = static_cast<double>(n) / r.seconds;
    r.enqueued_per_sec = producer.achieved_per_sec();
    engine.stop();
    const QueueCounters& c = EngineInternals::metrics(engine).queue(queue);
    if (options.steady_fleet_limit > 0)
      progress.line("fleet bucket: {} calls ({} lost a race) for {} claims, {:.0f} calls/s",
                    c.fleet_swaps.load(), c.fleet_conflicts.load(), c.claims.load(),
                    static_cast<double>(c.fleet_swaps.load()) / r.seconds);
  }
  r.pickup = pickup.summary();

  if (probe) {
    // The engine's sessions flush their statistics as they close.
    wait_for([&] { return probe->other_sessions() <= sessions_before; }, std::chrono::seconds(5));
    const TupleStats after = probe->settled_tuples(schema);
    storage.dead_tuples_final = after.dead;
    storage.dead_tuples_peak = std::max(storage.dead_tuples_peak, after.dead);
    storage.relation_bytes_after = probe->relation_bytes(schema);
    storage.vacuums = after.vacuums - before.vacuums;
    storage.samples.push_back({r.seconds, n, after.dead});
    if (held) {
      // A transaction that ended early would make the figures those of the plain run.
      const std::string state = probe->session_state(held->pid());
      if (state != "idle in transaction")
        throw std::runtime_error(fmt::format(
            "the held transaction's session {} is '{}' at the end, not 'idle in transaction'",
            held->pid(), state.empty() ? "gone" : state));
      held.reset();
    }
    r.postgres = storage;
  }
  progress.line(
      "{} jobs at {:.0f}/s offered ({:.0f}/s enqueued): {:.0f} jobs/s, pickup p50 {:.2f} ms, "
      "p99 {:.2f} ms{}",
      n, r.offered_per_sec, r.enqueued_per_sec, r.jobs_per_sec, r.pickup.p50_ms, r.pickup.p99_ms,
      r.postgres ? fmt::format("; n_dead_tup peak {}, final {}; {} -> {} bytes",
                               r.postgres->dead_tuples_peak, r.postgres->dead_tuples_final,
                               r.postgres->relation_bytes_before, r.postgres->relation_bytes_after)
                 : "");
  if (r.pickup.samples < n)
    throw std::runtime_error(
        fmt::format("only {} of {} jobs recorded a pickup latency", r.pickup.samples, n));
  return r;
}

}  // namespace conveyor::bench
