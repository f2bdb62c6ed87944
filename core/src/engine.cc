// Engine: builds the parts that run queues (one job each), starts, stops.
#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>
#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/queue_reports.hpp>
#include <conveyor/internal/remote_workers.hpp>
#include <conveyor/validation.hpp>

#include "backoffs.hpp"
#include "completer.hpp"
#include "dispatcher.hpp"
#include "handler_registry.hpp"
#include "job_operations.hpp"
#include "job_runner.hpp"
#include "key_report.hpp"
#include "lease_table.hpp"
#include "maintenance.hpp"
#include "maintenance_steps.hpp"
#include "new_jobs.hpp"
#include "notification_pump.hpp"
#include "override_follower.hpp"
#include "served_kinds.hpp"
#include "storage_health.hpp"
#include "unserved_kinds.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <thread>

namespace conveyor {
using std::chrono::milliseconds;
constexpr auto kOutcomeDrainTime = milliseconds(5000);  // outcomes recorded at stop

// Whether the pending-jobs sweep (a maintenance step) stands in for each
// drained queue's own safety poll (Dispatcher::Options::swept): the two are
// set from this one answer, so they always agree.
bool sweeps_pending_jobs(const Storage& storage) {
  return storage.has_slot(StorageSlot::kJobCounts);
}

// A limit of scope "fleet" in the config needs a plugin that can share its
// bucket: refused at start, naming the key and the plugin.
void refuse_unsupported_fleet_limits(const Config& config, const Storage& storage) {
  const std::string missing = missing_slot_reason(storage, StorageSlot::kSwapSharedState,
                                                  "a fleet-wide rate limit (scope = \"fleet\")");
  const std::string fix = "; or write scope = \"process\"";
  if (!missing.empty()) {
    if (auto d = config.engine.default_limit(); d && d->scope == LimitScope::kFleet)
      throw ConfigError("[engine] rate_limit_scope = \"fleet\": " + missing + fix);
    for (const auto& [name, q] : config.queues)
      if (q.rate_limit && q.rate_limit->scope == LimitScope::kFleet)
        throw ConfigError("[queues." + name + "] rate_limit scope = \"fleet\": " + missing + fix);
  }
  // A key's fleet bucket takes with add_shared_state (a take per key served
  // must not lose races and retry).
  const std::string no_add = missing_slot_reason(storage, StorageSlot::kAddSharedState,
                                                 "a fleet-wide limit per key (scope = \"fleet\")");
  if (no_add.empty()) return;
  for (const auto& [name, q] : config.queues)
    if (q.key_rate_limit && q.key_rate_limit->scope == LimitScope::kFleet)
      throw ConfigError("[queues." + name + "] key_rate_limit scope = \"fleet\": " + no_add + fix);
}

// Whether storage has every ABI 1.4 slot keys need.
bool stores_keys(const Storage& storage) {
  return storage.has_slot(StorageSlot::kEnqueueV4) && storage.has_slot(StorageSlot::kClaimKeys) &&
         storage.has_slot(StorageSlot::kListReadyKeys);
}

// A queue configured with per-key settings needs a plugin that stores keys:
// refused at start, naming the queue and the plugin.
void refuse_unsupported_keys(const Config& config, const Storage& storage) {
  if (stores_keys(storage)) return;
  for (const auto& [name, q] : config.queues) {
    if (!q.uses_keys()) continue;
    for (StorageSlot slot :
         {StorageSlot::kEnqueueV4, StorageSlot::kClaimKeys, StorageSlot::kListReadyKeys}) {
      const std::string missing = missing_slot_reason(storage, slot, "job keys");
      if (!missing.empty())
        throw ConfigError("[queues." + name +
                          "] sets key_from, key_rate_limit or key_max_workers: " + missing +
                          "; remove them, or use a plugin of ABI 1.4 or later");
    }
  }
}

// The key turns of queue's dispatch unit: fair turns between its keys
// unless it says fairness = "fifo". (On a plugin without keys every job has
// the empty key, and turns between one key are claim order: no KeyTurns.)
std::unique_ptr<KeyTurns> key_turns_for(const Config& config, const std::string& queue,
                                        KeyTurns::Fleet fleet) {
  const auto it = config.queues.find(queue);
  const QueueConfig q = it != config.queues.end() ? it->second : QueueConfig{};
  if (q.fairness == Fairness::kFifo) return nullptr;
  std::atomic<uint64_t>* throttled = &fleet.counters->key_throttled;
  return std::make_unique<KeyTurns>(KeyTurns::Limits{q.key_rate_limit, q.key_max_workers},
                                    throttled, std::move(fleet));
}

struct Engine::Impl {
  Impl(Config c, const Clock& clk, std::shared_ptr<Storage> s)
      : config(std::move(c)),
        clock(clk),
        storage(s ? std::move(s) : open_storage(config.storage)),
        limits(config.engine, config.queues),
        backoffs(config.engine, clock),
        health(clock, {.metrics = &metrics}),
        follower(*storage, limits),
        unserved(*storage, served, clock, std::chrono::seconds(config.engine.unknown_kind_grace_s)),
        completer(
            *storage, clock, [this](const conveyor_lease& l) { leases.settle(l); }, &metrics,
            [this](const std::string& queue, int64_t at_us) { dispatcher.wake_at(queue, at_us); }),
        runner(handlers, leases, completer, clock, config.engine,
               {.finished = [this](QueueRunner& r, int64_t id) { dispatcher.job_finished(r, id); },
                .left_slot = [this] { dispatcher.job_left_slot(); },
                .finished_without_slot =
                    [this](QueueRunner& r, int64_t id) { dispatcher.async_job_finished(r, id); }},
               {.backpressure =
                    [this](const QueueRunner& r, const Job& job, std::chrono::milliseconds delay,
                           const std::string& why, SteadyTime started) {
                      backpressure(r.name, job.key, delay, why, job.id, started);
                    },
                .succeeded = [this](const QueueRunner& r,
                                    SteadyTime started) { backoffs.succeeded(r.name, started); }},
               [this](const std::string& q) { return config.job_timeout_ms_for(q); }),
        dispatcher(*storage, limits, clock, metrics, dispatch_options(),
                   [this](QueueRunner& r, std::vector<Job>&& jobs) {
                     runner.execute(r, std::move(jobs));
                   }),
        remote(
            *storage, dispatcher, served, clock, config,
            [this](const std::string& queue, const std::string& key,
                   std::chrono::milliseconds delay, const std::string& why, int64_t job_id,
                   SteadyTime granted, std::optional<std::chrono::milliseconds> max_hold) {
              return backpressure(queue, key, delay, why, job_id, granted, max_hold);
            },
            [this](const std::string& queue, SteadyTime granted) {
              backoffs.succeeded(queue, granted);
            }),
        maintenance(clock, health,
                    engine_maintenance_steps(
                        {*storage, follower, dispatcher, leases, clock, config, metrics,
                         storage->has_slot(StorageSlot::kListJobs) ? &unserved : nullptr, &remote,
                         /*sweep_pending=*/sweeps_pending_jobs(*storage), &runner})),
        pump(*storage, {[this](const std::string& q) {
                          dispatcher.add_or_wake(q, config.max_workers_for(q));
                        },
                        [this] { maintenance.run_soon(kOverridesStep); }}) {
    refuse_unsupported_fleet_limits(config, *storage);
    refuse_unsupported_keys(config, *storage);
    health.on_fatal([](const std::string& e) { spdlog::critical("storage is broken: {}", e); });
    follower.refresh();
  }

  // The dispatcher's options; a drained queue polls rarely while the pump
  // says storage reports every job that becomes ready.
  Dispatcher::Options dispatch_options() {
    Dispatcher::Options o = Dispatcher::options_for(config.engine, &health, &local_kinds);
    o.notified_due = [this] { return pump.reports_due_jobs(); };
    o.swept = sweeps_pending_jobs(*storage);
    o.outcomes_backlogged = [this] { return completer.backlogged(); };
    if (stores_keys(*storage))
      o.key_turns = [this](const std::string& queue) {
        return key_turns_for(config, queue,
                             KeyTurns::Fleet{storage.get(), &clock, &metrics.queue(queue), queue});
      };
    return o;
  }

  // Registers (or replaces) a kind's handler; a new kind is claimed at once.
  void add_handler(std::string kind, RegisteredHandler handler);

  // The downstream asked queue to wait, answering a job started at sent:
  // hold its dispatch (Backoffs has the rules). delay > 0: named; 0: none
  // named; < 0 (kRetryNow): "now". max_hold bounds the hold it sets.
  // Returns when the hold in force ends (wall clock, us).
  int64_t backpressure(const std::string& queue, const std::string& key,
                       std::chrono::milliseconds delay, const std::string& why, int64_t job_id,
                       SteadyTime sent,
                       std::optional<std::chrono::milliseconds> max_hold = std::nullopt) {
    std::optional<std::chrono::milliseconds> named;
    if (delay.count() != 0) named = std::max(delay, std::chrono::milliseconds(0));
    if (!key.empty() && hold_scope(queue) == HttpTargetConfig::Hold::kKey) {
      // The key alone waits: the named delay, else backoff_base_ms, at most
      // max_backoff_s. (No doubling per key yet: docs/design/keys.md.)
      std::chrono::milliseconds length = std::min<std::chrono::milliseconds>(
          named.value_or(std::chrono::milliseconds(config.engine.backoff_base_ms)),
          std::chrono::seconds(config.engine.max_backoff_s));
      if (max_hold) length = std::min(length, *max_hold);
      const int64_t until_us =
          clock.wall_now_us() +
          std::chrono::duration_cast<std::chrono::microseconds>(length).count();
      if (dispatcher.hold_key(queue, key, clock.steady_now() + length)) {
        metrics.queue(queue).backoffs.fetch_add(1, std::memory_order_relaxed);
        spdlog::debug("queue {}: key {} held for {} ms (job {}: {})", queue, key, length.count(),
                      job_id, reason_excerpt(why));
        return until_us;
      }
    }
    const Backoffs::Answer a = backoffs.hold(queue, named, sent, reason_excerpt(why), max_hold);
    if (!a.changed) return a.hold.until_us;  // in flight when the hold in force began
    dispatcher.hold(queue, a.hold.until);
    metrics.queue(queue).backoffs.fetch_add(1, std::memory_order_relaxed);
    if (a.log)
      spdlog::info("queue {}: held for {} ms ({}, job {}: {}){}", queue, a.hold.length.count(),
                   a.hold.named
                       ? "the delay the downstream named"
                       : fmt::format("hold {} in a row without a named delay", a.hold.consecutive),
                   job_id, a.hold.reason,
                   a.unlogged > 0 ? fmt::format("; {} hold(s) since the last line", a.unlogged)
                                  : std::string());
    return a.hold.until_us;
  }
  // What a backpressure answer of queue's keyed jobs holds ([queues.NAME.http] hold).
  HttpTargetConfig::Hold hold_scope(const std::string& queue) const {
    const auto it = config.queues.find(queue);
    if (it == config.queues.end() || !it->second.http) return HttpTargetConfig::Hold::kKey;
    return it->second.http->hold;
  }
  // The first line of why, at most kReasonBytes, for reports and the log.
  static std::string reason_excerpt(const std::string& why) {
    constexpr size_t kReasonBytes = 120;
    std::string out = why.substr(0, std::min(why.find_first_of("\r\n"), kReasonBytes));
    return out;
  }
  void clear_backoff(std::string_view queue) {
    backoffs.clear(queue);
    dispatcher.clear_hold(queue);
  }

  // The parts, constant after construction (each is thread-safe itself).
  // Declared in the order they are built: a constructor above may be handed
  // only parts declared before it. The callbacks (lambdas capturing this)
  // may name any part, since none runs before construction ends: parts
  // start calling each other in start().
  Config config;
  const Clock& clock;
  std::shared_ptr<Storage> storage;
  LimitResolver limits;
  Metrics metrics;
  Backoffs backoffs;
  StorageHealth health;
  OverrideFollower follower;
  HandlerRegistry handlers;
  ServedKinds local_kinds;  // what the dispatcher claims for the handlers: their kinds
  ServedKinds served;       // the handlers' kinds and the connected remote workers'
  UnservedKinds unserved;
  LeaseTable leases;
  Completer completer;
  JobRunner runner;
  Dispatcher dispatcher;
  RemoteWorkers remote;
  Maintenance maintenance;
  NotificationPump pump;

  // Guarded by lifecycle_mu (start() and stop()).
  Mutex lifecycle_mu;
  std::thread dispatcher_thread GUARDED_BY(lifecycle_mu);
  std::thread completer_thread GUARDED_BY(lifecycle_mu);
  // Written under lifecycle_mu; atomic so that running() does not wait for
  // a stop() in progress (it answers false from stop's first step).
  std::atomic<bool> started{false}, stopped{false};
  std::stop_source stop_claims, stop_completer;  // thread-safe
};

Engine::Engine(Config config, const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(config), clock, nullptr)) {}

Engine::Engine(Config config, const Clock& clock, std::shared_ptr<Storage> storage)
    : impl_(std::make_unique<Impl>(std::move(config), clock, std::move(storage))) {}

Engine::~Engine() { stop(); }

void Engine::register_handler(std::string kind, Handler handler) {
  impl_->add_handler(std::move(kind), RegisteredHandler{.run = std::move(handler), .start = {}});
}

void Engine::register_async_handler(std::string kind, AsyncHandler handler) {
  impl_->add_handler(std::move(kind), RegisteredHandler{.run = {}, .start = std::move(handler)});
}

void Engine::Impl::add_handler(std::string kind, RegisteredHandler handler) {
  const std::string k = kind;
  if (handlers.add(std::move(kind), std::move(handler))) {
    local_kinds.add(k);
    served.add(k);
    dispatcher.wake_all();  // pending jobs of the kind can be claimed now
  }
}

int64_t Engine::enqueue(std::string_view queue, std::string_view kind, std::string_view payload,
                        const EnqueueOptions& options) {
  return enqueue_batch({make_new_job(queue, kind, payload, options, impl_->clock.wall_now_us())})
      .front();
}

std::vector<int64_t> Engine::enqueue_batch(std::vector<NewJob> jobs) {
  const int64_t now = impl_->clock.wall_now_us();
  prepare_new_jobs(jobs, impl_->config.engine, now);
  apply_job_keys(jobs, impl_->config.queues, *impl_->storage);
  check_job_costs(jobs, impl_->limits, *impl_->storage);
  check_job_timeouts(jobs, *impl_->storage);
  auto ids = impl_->storage->enqueue(jobs, now);
  const ServedKinds::Snapshot local = impl_->local_kinds.snapshot();
  for (const NewJob& j : jobs) {
    impl_->metrics.queue(j.queue).enqueued.fetch_add(1, std::memory_order_relaxed);
    if (!impl_->dispatcher.has_queue(j.queue))
      impl_->dispatcher.add_queue(j.queue, impl_->config.max_workers_for(j.queue));
    else if (j.run_at_us <= now)
      impl_->dispatcher.wake(j.queue, std::binary_search(local->begin(), local->end(), j.kind));
  }
  return ids;
}

void Engine::start() {
  Impl& i = *impl_;
  MutexLock lock(i.lifecycle_mu);
  if (i.started) return;
  i.started = true;
  spdlog::default_logger_raw();  // spdlog's registry exists before our threads log

  for (const auto& [name, q] : i.config.queues)
    i.dispatcher.add_queue(name, i.config.max_workers_for(name));
  // Storage may be down at start: maintenance discovers the queues later.
  i.maintenance.run_soon("discovering queues");
  i.completer_thread = std::thread([&i] { i.completer.run(i.stop_completer.get_token()); });
  i.dispatcher_thread = std::thread([&i] { i.dispatcher.run(i.stop_claims.get_token()); });
  i.maintenance.start();
  if (NotificationPump::supported(*i.storage)) i.pump.start();
  spdlog::info("engine started: storage '{}' ({}), {} queue(s) known",
               i.storage->plugin_info().name, kind_name(i.storage->plugin_info().kind),
               i.dispatcher.runners().size());
  if (!i.storage->has_slot(StorageSlot::kClaimKinds)) {
    const PluginInfo& p = i.storage->plugin_info();
    spdlog::warn(
        "storage plugin '{}' implements ABI {}.{} (no claim_kinds): this engine claims jobs of "
        "every kind, and one with no handler here {} (engine.unknown_kind)",
        p.name, p.abi_major, p.abi_minor,
        i.config.engine.unknown_kind == EngineConfig::UnknownKind::kFail
            ? "fails at once"
            : "is retried with backoff");
  }
}

bool Engine::running() const { return impl_->started.load() && !impl_->stopped.load(); }

uint32_t Engine::stop() {
  Impl& i = *impl_;
  MutexLock lock(i.lifecycle_mu);
  if (!i.started || i.stopped) return 0;
  i.stopped = true;
  // 1. No more claims, no more wake-ups.
  i.stop_claims.request_stop();
  i.dispatcher.interrupt();
  i.dispatcher_thread.join();
  i.dispatcher.close_remote();  // waiting remote workers get an empty answer now
  i.pump.stop();
  // 2. Running handlers get the timeout; unstarted work is dropped.
  auto stopped = i.runner.shutdown(std::chrono::steady_clock::now() +
                                   milliseconds(i.config.engine.shutdown_timeout_ms));
  // 3. Record every outcome we have.
  i.completer.finish(std::chrono::steady_clock::now() + kOutcomeDrainTime);
  i.completer_thread.join();
  // 4. What will not finish here goes back to storage for another process.
  const uint32_t released = release_unfinished_leases(*i.storage, i.clock, stopped);
  i.maintenance.stop();
  spdlog::info("engine stopped");
  return released;
}

void Engine::set_rate_limit(std::string_view queue, const RateLimit& limit) {
  if (limit.scope == LimitScope::kFleet) {
    for (StorageSlot slot : {StorageSlot::kSwapSharedState, StorageSlot::kSetRateLimitV2})
      if (std::string missing =
              missing_slot_reason(*impl_->storage, slot, "a fleet-wide rate limit (scope fleet)");
          !missing.empty())
        throw ValidationError("scope", missing + ", or use scope process");
  }
  impl_->follower.set(queue, limit, impl_->clock.wall_now_us());
  impl_->clear_backoff(queue);  // a new limit is the operator's answer to backpressure
  impl_->dispatcher.wake(queue);
}

bool Engine::delete_rate_limit(std::string_view queue) {
  const bool existed = impl_->follower.remove(queue);
  impl_->clear_backoff(queue);
  impl_->dispatcher.wake(queue);
  return existed;
}

void Engine::set_rate_limiting_enabled(bool enabled) {
  if (std::string missing = missing_slot_reason(*impl_->storage, StorageSlot::kSwapSharedState,
                                                "the live kill switch");
      !missing.empty())
    throw StorageError(CONVEYOR_E_UNSUPPORTED,
                       missing + " (or set [engine] rate_limit_enabled in the config and restart)");
  impl_->follower.set_switch(enabled);
  impl_->dispatcher.wake_all();
}

namespace {
// A run-time key setting for queue: refused where it cannot apply.
void check_key_setting_applies(const Config& config, const Storage& storage, std::string_view queue,
                               const RateLimit* limit) {
  validate_queue_name(queue);
  for (StorageSlot slot :
       {StorageSlot::kSetKeySetting, StorageSlot::kDeleteKeySetting, StorageSlot::kListKeySettings})
    if (std::string missing = missing_slot_reason(storage, slot, "a key's own limit or weight");
        !missing.empty())
      throw StorageError(CONVEYOR_E_UNSUPPORTED, missing);
  if (const auto it = config.queues.find(std::string(queue));
      it != config.queues.end() && it->second.fairness == Fairness::kFifo)
    throw ValidationError("queue", "queue " + std::string(queue) +
                                       " has fairness = \"fifo\": it claims across keys in "
                                       "claim order, so a key has no limit or weight of its own; "
                                       "write fairness = \"fair\" in [queues." +
                                       std::string(queue) + "]");
  if (limit && limit->scope == LimitScope::kFleet)
    if (std::string missing = missing_slot_reason(storage, StorageSlot::kAddSharedState,
                                                  "a fleet-wide limit per key (scope fleet)");
        !missing.empty())
      throw ValidationError("scope", missing + ", or use scope process");
}
}  // namespace

void Engine::set_key_rate_limit(std::string_view queue, const std::optional<std::string>& key,
                                const RateLimit& limit) {
  check_key_setting_applies(impl_->config, *impl_->storage, queue, &limit);
  impl_->follower.set_key(KeyOverride{std::string(queue), key, limit, std::nullopt, 0},
                          impl_->clock.wall_now_us());
  impl_->dispatcher.wake(queue);
}

bool Engine::delete_key_rate_limit(std::string_view queue, const std::optional<std::string>& key) {
  validate_queue_name(queue);
  const bool existed = impl_->follower.remove_key(queue, key, /*limit=*/true, /*weight=*/false);
  impl_->dispatcher.wake(queue);
  return existed;
}

void Engine::set_key_weight(std::string_view queue, const std::string& key, uint32_t weight) {
  check_key_setting_applies(impl_->config, *impl_->storage, queue, nullptr);
  impl_->follower.set_key(KeyOverride{std::string(queue), key, std::nullopt, weight, 0},
                          impl_->clock.wall_now_us());
  impl_->dispatcher.wake(queue);
}

bool Engine::delete_key_weight(std::string_view queue, const std::string& key) {
  validate_queue_name(queue);
  const bool existed = impl_->follower.remove_key(queue, key, /*limit=*/false, /*weight=*/true);
  impl_->dispatcher.wake(queue);
  return existed;
}

std::vector<KeyOverride> Engine::key_overrides() const { return impl_->limits.key_overrides(); }

RateLimitingState Engine::rate_limiting() const { return impl_->limits.switch_state(); }

bool Engine::supports_fleet_limits() const {
  return impl_->storage->has_slot(StorageSlot::kSwapSharedState) &&
         impl_->storage->has_slot(StorageSlot::kSetRateLimitV2);
}

void Engine::set_queue_paused(std::string_view queue, bool paused) {
  validate_queue_name(queue);
  impl_->storage->set_queue_paused(queue, paused, impl_->clock.wall_now_us());
  if (paused) return;
  // Resuming is also the operator's answer to backpressure: the hold ends now.
  if (impl_->backoffs.clear(queue)) spdlog::info("queue {}: hold ended by the operator", queue);
  impl_->dispatcher.clear_hold(queue);
  impl_->dispatcher.wake(queue);
}

std::vector<QueueReport> Engine::queues() {
  const UnservedKinds::Report unserved = impl_->unserved.report();
  std::vector<QueueReport> reports =
      build_queue_reports(*impl_->storage, impl_->limits, impl_->config.queues, &impl_->metrics,
                          impl_->clock.wall_now_us(), &unserved);
  for (QueueReport& r : reports)
    if (auto hold = impl_->backoffs.active(r.stats.queue)) {
      r.limit.source = LimitSource::kBackoff;
      r.backoff_until_us = hold->until_us;
      r.backoff_reason = hold->reason;
    }
  return reports;
}

std::vector<QueueStats> Engine::queue_stats() {
  return impl_->storage->job_counts(impl_->clock.wall_now_us());
}

std::vector<QueueStats> Engine::job_counts() { return queue_stats(); }

std::vector<Job> Engine::list_jobs(const JobQuery& query) {
  return checked_list_jobs(*impl_->storage, query, impl_->clock.wall_now_us());
}

std::vector<JobOutcome> Engine::retry_jobs(std::span<const int64_t> ids) {
  return checked_retry_jobs(*impl_->storage, ids, impl_->clock.wall_now_us());
}

std::vector<JobOutcome> Engine::delete_jobs(std::span<const int64_t> ids) {
  return checked_delete_jobs(*impl_->storage, ids);
}

Engine::JobBatchResult Engine::cancel_jobs_batch(const JobQuery& filter) {
  return checked_cancel_batch(*impl_->storage, filter, impl_->clock.wall_now_us());
}

Engine::JobBatchResult Engine::delete_jobs_batch(const JobQuery& filter) {
  return checked_delete_batch(*impl_->storage, filter, impl_->clock.wall_now_us());
}

Engine::QueueRemoval Engine::remove_queue(std::string_view queue, bool force, int64_t after_id,
                                          uint32_t limit) {
  validate_queue_name(queue);
  if (after_id < 0)
    throw ValidationError("after_id", "after_id must be a job id >= 0 (0: from the start), got " +
                                          std::to_string(after_id));
  Impl& i = *impl_;
  Storage& storage = *i.storage;
  const bool has_key_settings = storage.has_slot(StorageSlot::kListKeySettings) &&
                                storage.has_slot(StorageSlot::kDeleteKeySetting);
  QueueRemoval out;
  out.configured = i.config.queues.count(std::string(queue)) > 0;
  if (after_id == 0) {
    std::optional<bool> paused;  // nullopt: storage does not know the queue
    for (const auto& [name, p] : storage.list_queues())
      if (name == queue) paused = p;
    bool known = paused.has_value();
    for (const RateLimitOverride& o : storage.list_rate_limits()) known = known || o.queue == queue;
    if (has_key_settings)
      for (const KeyOverride& k : storage.list_key_settings()) known = known || k.queue == queue;
    if (!known && !out.configured) {
      out.not_found = true;
      return out;
    }
    out.was_paused = paused.value_or(false);
    // Paused first: nothing starts while the jobs go, so a job that is not
    // running now is not running when it is cancelled.
    storage.set_queue_paused(queue, true, i.clock.wall_now_us());
    if (!force) {
      JobQuery running;
      running.queue = std::string(queue);
      running.states = {JobState::kRunning};
      running.limit = kListJobsMax;
      const auto jobs = checked_list_jobs(storage, running, i.clock.wall_now_us());
      if (!jobs.empty()) {
        if (!out.was_paused) storage.set_queue_paused(queue, false, i.clock.wall_now_us());
        out.running_refused = static_cast<int64_t>(jobs.size());
        return out;
      }
    }
  }
  remove_queue_jobs_batch(storage, queue, force, after_id, limit, i.clock.wall_now_us(), out);
  if (out.next_after_id != 0) return out;
  // No more jobs: the queue's settings go too.
  out.override_removed = i.follower.remove(queue);
  if (has_key_settings) {
    for (const KeyOverride& k : storage.list_key_settings())
      if (k.queue == queue) {
        i.follower.remove_key(queue, k.key, /*limit=*/true, /*weight=*/true);
        ++out.key_settings_removed;
      }
  }
  storage.set_queue_paused(queue, false, i.clock.wall_now_us());
  i.clear_backoff(queue);
  i.dispatcher.wake(queue);
  return out;
}

std::optional<Job> Engine::get_job(int64_t id) {
  return impl_->storage->get_job(id, impl_->clock.wall_now_us());
}

bool Engine::cancel_job(int64_t id) {
  return impl_->storage->cancel(id, impl_->clock.wall_now_us());
}

KeysReport Engine::keys(std::string_view queue, uint32_t limit) {
  std::optional<std::vector<KeyTurns::KeyView>> live;
  if (running()) live = impl_->dispatcher.key_snapshot(queue);
  return build_keys_report(*impl_->storage, impl_->config, impl_->limits, queue, limit, live,
                           impl_->clock.wall_now_us());
}

std::optional<std::string> Engine::storage_failure() const { return impl_->health.fatal(); }
const Config& Engine::config() const { return impl_->config; }
const LimitResolver& EngineInternals::limits(const Engine& e) { return e.impl_->limits; }
Metrics& EngineInternals::metrics(Engine& e) { return e.impl_->metrics; }
const Clock& EngineInternals::clock(const Engine& e) { return e.impl_->clock; }
std::map<std::string, std::vector<KindCount>, std::less<>> EngineInternals::unserved_kinds(
    const Engine& e) {
  return e.impl_->unserved.report();
}
void EngineInternals::scan_unserved_kinds(Engine& e) { e.impl_->unserved.scan(); }
const PluginInfo& EngineInternals::plugin_info(const Engine& e) {
  return e.impl_->storage->plugin_info();
}
RemoteWorkers& EngineInternals::remote_workers(Engine& e) { return e.impl_->remote; }
std::map<std::string, int64_t, std::less<>> EngineInternals::backoffs(const Engine& e) {
  std::map<std::string, int64_t, std::less<>> out;
  for (const auto& [queue, hold] : e.impl_->backoffs.active_all())
    out.emplace(queue, hold.until_us);
  return out;
}
uint32_t EngineInternals::drained_queue_poll_ms(const Engine& e) {
  const EngineConfig& c = e.impl_->config.engine;
  return e.impl_->pump.reports_due_jobs() ? c.notified_poll_interval_ms : c.poll_interval_ms;
}
std::map<std::string, QueueKeyCounts, std::less<>> EngineInternals::key_counts(const Engine& e) {
  return e.impl_->dispatcher.key_counts();
}
uint32_t EngineInternals::slots_in_use(const Engine& e) {
  return e.impl_->dispatcher.total_in_flight();
}
size_t EngineInternals::async_outstanding(const Engine& e) {
  return e.impl_->runner.async_outstanding();
}
uint32_t Engine::worker_threads() const { return impl_->runner.threads(); }

}  // namespace conveyor
