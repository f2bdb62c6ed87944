#include <conveyor/engine.hpp>
#include <conveyor/validation.hpp>

#include "completer.hpp"
#include "dispatcher.hpp"
#include "worker_pool.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

namespace conveyor {

std::chrono::milliseconds retry_backoff(int32_t attempt, std::chrono::milliseconds base,
                                        std::chrono::milliseconds cap, double u) {
  const int exponent = std::clamp(attempt - 1, 0, 40);
  const double raw = static_cast<double>(base.count()) * std::ldexp(1.0, exponent);
  const double capped = std::min(raw, static_cast<double>(cap.count()));
  const double jittered = capped * (0.8 + 0.4 * std::clamp(u, 0.0, 1.0));
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(jittered)));
}

namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

double uniform01() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

// Runs fn every period on its own schedule inside the maintenance loop.
struct Periodic {
  milliseconds period;
  SteadyTime next{};
  bool due(SteadyTime now) {
    if (now < next) return false;
    next = now + period;
    return true;
  }
};

// One maintenance step's failures, so that an outage logs a step's first
// failure, a reminder at most every 30 s, and its recovery: not a line per tick.
struct StepHealth {
  uint64_t failures = 0;
  SteadyTime next_log{};

  void failed(std::string_view what, const char* why, SteadyTime now) {
    ++failures;
    if (failures == 1) {
      spdlog::warn("{} failed: {}", what, why);
    } else if (now >= next_log) {
      spdlog::warn("{} still failing ({} times): {}", what, failures, why);
    } else {
      return;
    }
    next_log = now + std::chrono::seconds(30);
  }

  void succeeded(std::string_view what) {
    if (failures > 0) spdlog::info("{} works again after {} failures", what, failures);
    failures = 0;
  }
};

}  // namespace

struct Engine::Impl {
  Impl(Config c, const Clock& clk)
      : config(std::move(c)),
        clock(clk),
        storage(open_storage(config.storage)),
        limits(config.engine, config.queues),
        pool(std::make_unique<WorkerPool>(config.engine.worker_threads)) {
    dispatcher = std::make_unique<Dispatcher>(
        *storage, limits, clock, metrics,
        Dispatcher::Options{config.engine.claim_batch_max,
                            milliseconds(config.engine.poll_interval_ms),
                            milliseconds(config.engine.lease_ms), config.engine.worker_threads},
        [this](QueueRunner& r, std::vector<Job>&& jobs) { execute(r, std::move(jobs)); });
    completer = std::make_unique<Completer>(*storage, clock,
                                            [this](const conveyor_lease& l) { settled(l); });
    refresh_overrides();
  }
  // Handlers still running call into the completer and dispatcher: join the
  // pool before anything it uses is destroyed.
  ~Impl() { pool.reset(); }

  // ---- job execution (worker threads) ----
  void execute(QueueRunner& r, std::vector<Job>&& jobs) {
    {
      std::lock_guard lock(running_mu);
      for (const Job& job : jobs) running.emplace(job.id, RunningJob{job.lease_token, false});
    }
    std::vector<WorkerPool::Task> tasks;
    tasks.reserve(jobs.size());
    for (Job& job : jobs)
      tasks.emplace_back([this, &r, job = std::move(job)]() { run_job(r, job); });
    pool->submit(std::move(tasks));
  }

  void run_job(QueueRunner& r, const Job& job) {
    Outcome o;
    o.lease = job.lease();
    o.counters = &r.counters;
    o.queue = &r.name;
    const auto started = clock.steady_now();
    try {
      Handler handler;
      {
        std::shared_lock lock(handlers_mu);
        if (auto it = handlers.find(job.kind); it != handlers.end()) handler = it->second;
      }
      if (!handler)
        throw std::runtime_error("no handler registered for job kind '" + job.kind + "'");
      handler(job);
      o.succeeded = true;
    } catch (const PermanentError& e) {
      o.error = e.what();
    } catch (const std::exception& e) {
      o.error = e.what();
      o.retry_at_us = retry_at(job);
    } catch (...) {
      o.error = "handler threw a non-standard exception";
      o.retry_at_us = retry_at(job);
    }
    r.counters.duration.observe(
        std::chrono::duration<double>(clock.steady_now() - started).count());
    mark_handler_done(o.lease);
    completer->push(std::move(o));
    dispatcher->job_finished(r);
    if (stopping.load()) {            // seq_cst: pairs with stop()'s store, then load
      std::lock_guard lock(idle_mu);  // stop() waits for in-flight jobs
      idle_cv.notify_all();
    }
  }

  int64_t retry_at(const Job& job) const {
    if (job.attempt >= job.max_attempts) return -1;
    auto delay = retry_backoff(job.attempt, milliseconds(config.engine.retry_backoff_base_ms),
                               milliseconds(config.engine.retry_backoff_max_ms), uniform01());
    return clock.wall_now_us() + duration_cast<microseconds>(delay).count();
  }

  // The running entry of lease, or running.end().
  auto find_running(const conveyor_lease& lease) {
    auto range = running.equal_range(lease.job_id);
    for (auto it = range.first; it != range.second; ++it)
      if (it->second.lease_token == lease.lease_token) return it;
    return running.end();
  }

  // From here until settled() the job's outcome may be committed while the
  // entry still exists: heartbeats must not call a refused extension "lost".
  void mark_handler_done(const conveyor_lease& lease) {
    std::lock_guard lock(running_mu);
    if (auto it = find_running(lease); it != running.end()) it->second.handler_done = true;
  }

  void settled(const conveyor_lease& lease) {
    std::lock_guard lock(running_mu);
    if (auto it = find_running(lease); it != running.end()) running.erase(it);
  }

  std::vector<conveyor_lease> running_leases() {
    std::lock_guard lock(running_mu);
    std::vector<conveyor_lease> out;
    out.reserve(running.size());
    for (const auto& [id, entry] : running)
      if (!entry.handler_done) out.push_back({id, entry.lease_token});
    return out;
  }

  // ---- maintenance (its own thread) ----
  void refresh_overrides() {
    int64_t m = storage->change_marker();
    if (m == marker && marker_known) return;
    limits.set_overrides(storage->list_rate_limits());
    marker = m;
    marker_known = true;
  }

  void discover_queues() {
    for (const auto& [name, paused] : storage->list_queues())
      if (!dispatcher->has_queue(name)) dispatcher->add_queue(name, config.max_workers_for(name));
  }

  void heartbeat() {
    auto leases = running_leases();
    if (leases.empty()) return;
    const int64_t expires = clock.wall_now_us() + int64_t(config.engine.lease_ms) * 1000;
    auto results = storage->extend_leases(leases, expires);
    std::lock_guard lock(running_mu);
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i] == CONVEYOR_OK) continue;
      // A job whose handler finished since the snapshot may have had its
      // outcome recorded, which ends the lease: not a lost lease.
      auto it = find_running(leases[i]);
      if (it != running.end() && !it->second.handler_done)
        spdlog::warn("job {}: lease lost while running (cancelled or rescued elsewhere)",
                     leases[i].job_id);
    }
  }

  void rescue() {
    uint32_t n;
    do {
      n = storage->rescue_expired(clock.wall_now_us(), 1000);
      if (n > 0) spdlog::info("rescued {} jobs whose leases expired", n);
    } while (n == 1000);
    if (n > 0) dispatcher->wake_all();
  }

  void purge() {
    const int64_t cutoff = clock.wall_now_us() - int64_t(config.engine.retention_s) * 1'000'000;
    uint64_t n;
    do n = storage->purge_finished(cutoff, 10000);
    while (n == 10000);
  }

  void maintenance(std::stop_token stop) {
    const auto& e = config.engine;
    Periodic overrides{milliseconds(250)}, discovery{milliseconds(e.poll_interval_ms)},
        beat{milliseconds(std::max<uint32_t>(e.lease_ms / 3, 10))},
        rescue_tick{milliseconds(e.rescue_interval_ms)},
        // Purge often enough that nothing outlives retention by much more
        // than a quarter of it, and at least once a minute.
        purge_tick{std::clamp(milliseconds(int64_t(e.retention_s) * 250), milliseconds(100),
                              milliseconds(60'000))};
    std::map<std::string_view, StepHealth> health;
    while (!stop.stop_requested()) {
      const SteadyTime now = std::chrono::steady_clock::now();
      auto guarded = [&](const char* what, auto&& fn) {
        StepHealth& h = health[what];
        try {
          fn();
          h.succeeded(what);
        } catch (const std::exception& ex) {
          h.failed(what, ex.what(), now);
        }
      };
      if (overrides.due(now))
        guarded("reading rate-limit overrides", [&] {
          uint64_t before = limits.generation();
          refresh_overrides();
          if (limits.generation() != before) dispatcher->wake_all();
        });
      if (discovery.due(now)) guarded("discovering queues", [&] { discover_queues(); });
      if (beat.due(now)) guarded("extending leases", [&] { heartbeat(); });
      if (rescue_tick.due(now)) guarded("rescuing expired leases", [&] { rescue(); });
      if (purge_tick.due(now)) guarded("purging finished jobs", [&] { purge(); });
      std::unique_lock lock(maintenance_mu);
      maintenance_cv.wait_for(lock, milliseconds(50), [&] { return stop.stop_requested(); });
    }
  }

  void notifications(std::stop_token stop) {
    while (!stop.stop_requested()) {
      try {
        storage->wait_for_notification(200'000, [&](int32_t kind, std::string_view queue) {
          if (kind == CONVEYOR_NOTIFY_RATE_LIMITS) {
            refresh_overrides();
            dispatcher->wake_all();
          } else if (!queue.empty()) {
            std::string name(queue);
            if (!dispatcher->has_queue(name))
              dispatcher->add_queue(name, config.max_workers_for(name));
            dispatcher->wake(name);
          }
        });
      } catch (const std::exception& ex) {
        spdlog::warn("waiting for storage notifications failed: {}", ex.what());
        std::unique_lock lock(maintenance_mu);
        maintenance_cv.wait_for(lock, milliseconds(500), [&] { return stop.stop_requested(); });
      }
    }
  }

  Config config;
  const Clock& clock;
  std::shared_ptr<Storage> storage;
  LimitResolver limits;
  Metrics metrics;
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<Dispatcher> dispatcher;
  std::unique_ptr<Completer> completer;

  std::shared_mutex handlers_mu;
  std::unordered_map<std::string, Handler> handlers;

  std::mutex running_mu;
  struct RunningJob {
    int64_t lease_token;
    bool handler_done;  // its outcome is with the completer
  };
  std::unordered_multimap<int64_t, RunningJob> running;  // by job id

  std::atomic<bool> stopping{false};
  std::mutex idle_mu;
  std::condition_variable idle_cv;
  std::mutex maintenance_mu;
  std::condition_variable maintenance_cv;

  int64_t marker = 0;
  bool marker_known = false;

  std::mutex lifecycle_mu;
  bool started = false;
  bool stopped = false;
  std::jthread dispatcher_thread, completer_thread, maintenance_thread, notify_thread;
};

Engine::Engine(Config config, const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(config), clock)) {}

Engine::~Engine() { stop(); }

void Engine::register_handler(std::string kind, Handler handler) {
  validate_job_kind(kind);
  std::unique_lock lock(impl_->handlers_mu);
  impl_->handlers[std::move(kind)] = std::move(handler);
}

int64_t Engine::enqueue(std::string_view queue, std::string_view kind, std::string_view payload,
                        const EnqueueOptions& options) {
  NewJob job;
  job.queue = std::string(queue);
  job.kind = std::string(kind);
  job.payload = std::string(payload);
  job.priority = options.priority;
  job.max_attempts = options.max_attempts.value_or(0);
  job.run_at_us =
      options.delay.count() > 0 ? impl_->clock.wall_now_us() + options.delay.count() : 0;
  return enqueue_batch({std::move(job)}).front();
}

std::vector<int64_t> Engine::enqueue_batch(std::vector<NewJob> jobs) {
  const int64_t now = impl_->clock.wall_now_us();
  for (NewJob& j : jobs) {
    validate_queue_name(j.queue);
    validate_job_kind(j.kind);
    if (j.payload.size() > kMaxPayloadBytes)
      throw ValidationError("payload", fmt::format("payload is {} bytes; the limit is {} bytes",
                                                   j.payload.size(), kMaxPayloadBytes));
    if (j.max_attempts == 0)
      j.max_attempts = static_cast<int32_t>(impl_->config.engine.max_attempts);
    if (j.max_attempts < 1) throw ValidationError("max_attempts", "max_attempts must be >= 1");
    if (j.run_at_us == 0) j.run_at_us = now;
  }
  auto ids = impl_->storage->enqueue(jobs, now);
  for (const NewJob& j : jobs) {
    impl_->metrics.queue(j.queue).enqueued.fetch_add(1, std::memory_order_relaxed);
    if (!impl_->dispatcher->has_queue(j.queue))
      impl_->dispatcher->add_queue(j.queue, impl_->config.max_workers_for(j.queue));
    else if (j.run_at_us <= now)
      impl_->dispatcher->wake(j.queue);
  }
  return ids;
}

void Engine::start() {
  std::lock_guard lock(impl_->lifecycle_mu);
  if (impl_->started) return;
  impl_->started = true;
  Impl& i = *impl_;
  for (const auto& [name, q] : i.config.queues)
    i.dispatcher->add_queue(name, i.config.max_workers_for(name));
  i.discover_queues();
  i.completer_thread = std::jthread([&i](std::stop_token st) { i.completer->run(st); });
  i.dispatcher_thread = std::jthread([&i](std::stop_token st) { i.dispatcher->run(st); });
  i.maintenance_thread = std::jthread([&i](std::stop_token st) { i.maintenance(st); });
  if (i.storage->has_capability(CONVEYOR_CAP_NOTIFY) &&
      i.storage->plugin_info().optional_slots_missing.empty())
    i.notify_thread = std::jthread([&i](std::stop_token st) { i.notifications(st); });
  spdlog::info("engine started: storage '{}' ({}), {} queue(s) known",
               i.storage->plugin_info().name, kind_name(i.storage->plugin_info().kind),
               i.dispatcher->runners().size());
}

bool Engine::running() const {
  std::lock_guard lock(impl_->lifecycle_mu);
  return impl_->started && !impl_->stopped;
}

uint32_t Engine::stop() {
  std::lock_guard lock(impl_->lifecycle_mu);
  Impl& i = *impl_;
  if (!i.started || i.stopped) return 0;
  i.stopped = true;
  // 1. No more claims.
  i.dispatcher_thread.request_stop();
  i.dispatcher->interrupt();
  i.dispatcher_thread.join();
  i.notify_thread = {};
  // 2. Let running handlers finish within the timeout.
  i.stopping.store(true);
  const auto deadline =
      std::chrono::steady_clock::now() + milliseconds(i.config.engine.shutdown_timeout_ms);
  {
    std::unique_lock idle(i.idle_mu);
    i.idle_cv.wait_until(idle, deadline, [&] { return i.dispatcher->total_in_flight() == 0; });
  }
  // 3. Record every outcome we have.
  i.completer->finish(std::chrono::steady_clock::now() + milliseconds(5000));
  i.completer_thread.join();
  // 4. Whatever still runs gives its lease back so another process runs it.
  uint32_t released = 0;
  if (i.dispatcher->total_in_flight() > 0) {
    auto leases = i.running_leases();
    try {
      auto results = i.storage->release(leases, i.clock.wall_now_us());
      for (auto r : results) released += r == CONVEYOR_OK;
      spdlog::warn("shutdown timeout: released {} leases of jobs still running", released);
    } catch (const std::exception& e) {
      spdlog::error("releasing leases at shutdown failed (they will expire): {}", e.what());
    }
  }
  i.maintenance_thread.request_stop();
  i.maintenance_cv.notify_all();
  i.maintenance_thread.join();
  spdlog::info("engine stopped");
  return released;
}

void Engine::set_rate_limit(std::string_view queue, const RateLimit& limit) {
  validate_queue_name(queue);
  validate_rate(limit.rate_per_sec);
  validate_burst(limit.burst, false);
  impl_->storage->set_rate_limit(queue, limit, impl_->clock.wall_now_us());
  impl_->refresh_overrides();
  impl_->dispatcher->wake(queue);
}

bool Engine::delete_rate_limit(std::string_view queue) {
  validate_queue_name(queue);
  bool existed = impl_->storage->delete_rate_limit(queue);
  impl_->refresh_overrides();
  impl_->dispatcher->wake(queue);
  return existed;
}

void Engine::set_queue_paused(std::string_view queue, bool paused) {
  validate_queue_name(queue);
  impl_->storage->set_queue_paused(queue, paused, impl_->clock.wall_now_us());
  if (!paused) impl_->dispatcher->wake(queue);
}

std::vector<QueueReport> Engine::queues() {
  return build_queue_reports(*impl_->storage, impl_->limits, impl_->config.queues, &impl_->metrics,
                             impl_->clock.wall_now_us());
}

std::optional<Job> Engine::get_job(int64_t id) {
  return impl_->storage->get_job(id, impl_->clock.wall_now_us());
}

const Config& Engine::config() const { return impl_->config; }
Storage& Engine::storage() { return *impl_->storage; }
const LimitResolver& Engine::limits() const { return impl_->limits; }
Metrics& Engine::metrics() { return impl_->metrics; }
uint32_t Engine::worker_threads() const { return impl_->pool->threads(); }

}  // namespace conveyor
