#include "dispatcher.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <random>
#include <stdexcept>
#include <utility>

namespace conveyor {
namespace {

// Catch-up rounds per pass: a 5,000/s queue with burst 500 and batches of 100
// banks at most five batches; the unlimited units wait at most this many.
constexpr uint32_t kMaxCatchUpRounds = 8;
// An engine's unit whose claim takes this long claims off the dispatcher
// thread (Options::slow_claim): longer than a claim of a healthy backend
// under load (a few ms), short enough that the other units' pickup stays
// within tens of ms of a claim that is slow.
constexpr std::chrono::milliseconds kSlowClaim{20};

// How long until bucket is full (its burst banked) at now: the time left
// before tokens are lost.
int64_t time_to_full(const QueueBucket& bucket, SteadyTime now) {
  const int64_t missing = static_cast<int64_t>(bucket.limit().burst) - bucket.available(now);
  return missing * bucket.token_ns();
}

// The sooner of two states a poll found (remote claims' and local
// handlers'): a claim in flight stays in flight (the other's wish is kept
// for its delivery), else the earlier timer, else a.
Next sooner(QueueRunner& r, Next a, std::optional<Next> b) {
  if (!b) return a;
  if (a.state == UnitState::kClaimInFlight || b->state == UnitState::kClaimInFlight) {
    r.polled_during_claim = true;
    return Next::claim_in_flight();
  }
  if (b->state != UnitState::kScheduled) return a;
  if (a.state != UnitState::kScheduled || b->at < a.at) return *b;
  return a;
}

}  // namespace

Dispatcher::Dispatcher(Storage& storage, const LimitResolver& limits, const Clock& clock,
                       Metrics& metrics, Options options, Execute execute)
    : storage_(storage),
      limits_(limits),
      clock_(clock),
      metrics_(metrics),
      options_(std::move(options)),
      execute_(std::move(execute)),
      filter_kinds_(options_.served != nullptr && storage.has_slot(StorageSlot::kClaimKinds)),
      permits_(options_.max_in_flight, scheduler_),
      claimer_(storage, clock, permits_,
               {.lease = options_.lease,
                .claim_batch_max = options_.claim_batch_max,
                .slow_claim = options_.slow_claim,
                .health = options_.health,
                .notified_due = options_.notified_due,
                .drained = {options_.poll_interval, options_.notified_poll, options_.swept}},
               execute_, [this] { scheduler_.interrupt(); }) {}

Dispatcher::~Dispatcher() { claimer_.stop(); }

Dispatcher::Options Dispatcher::options_for(const EngineConfig& engine, StorageHealth* health,
                                            const ServedKinds* served) {
  Options o;
  o.claim_batch_max = engine.claim_batch_max;
  o.poll_interval = std::chrono::milliseconds(engine.poll_interval_ms);
  o.lease = std::chrono::milliseconds(engine.lease_ms);
  o.max_in_flight = engine.worker_threads;
  o.health = health;
  o.served = served;
  o.notified_poll = std::chrono::milliseconds(engine.notified_poll_interval_ms);
  o.slow_claim = kSlowClaim;
  return o;
}

const std::vector<std::string>* Dispatcher::claim_filter() {
  if (!filter_kinds_) return nullptr;
  const uint64_t generation = options_.served->generation();
  if (generation != kinds_generation_) {
    kinds_ = options_.served->snapshot();
    kinds_generation_ = generation;
  }
  return kinds_.get();
}

// --- Units and wake-ups (any thread) ---

QueueRunner& Dispatcher::runner_for(const std::string& queue, uint32_t max_workers) {
  QueueRunner* r = nullptr;
  {
    MutexLock lock(units_mu_);
    auto it = runners_.find(queue);
    if (it != runners_.end()) return *it->second;
    auto runner = std::make_unique<QueueRunner>(
        queue, std::max<uint32_t>(1, max_workers), metrics_.queue(queue),
        options_.key_turns ? options_.key_turns(queue) : nullptr);
    r = runner.get();
    runners_.emplace(queue, std::move(runner));
  }
  scheduler_.wake(*r);
  return *r;
}

void Dispatcher::add_queue(const std::string& name, uint32_t max_workers) {
  runner_for(name, max_workers);
}

void Dispatcher::add_or_wake(const std::string& name, uint32_t max_workers) {
  if (!has_queue(name))
    add_queue(name, max_workers);
  else
    wake(name);
}

bool Dispatcher::has_queue(std::string_view name) const {
  MutexLock lock(units_mu_);
  return runners_.find(name) != runners_.end();
}

void Dispatcher::wake(std::string_view name, bool local_work) {
  QueueRunner* r = nullptr;
  {
    MutexLock lock(units_mu_);
    auto it = runners_.find(name);
    if (it == runners_.end()) return;
    r = it->second.get();
  }
  if (local_work) r->local_work.store(true, std::memory_order_release);
  if (r->keys) r->keys->mark_stale();  // the new jobs may be of keys not known yet
  scheduler_.wake(*r);
}

void Dispatcher::wake_all() {
  MutexLock lock(units_mu_);
  for (auto& [name, r] : runners_) {
    r->local_work.store(true, std::memory_order_release);
    if (r->keys) r->keys->mark_stale();
    scheduler_.wake(*r);
  }
}

void Dispatcher::wake_at(std::string_view name, int64_t at_us) {
  MutexLock lock(units_mu_);
  auto it = runners_.find(name);
  if (it != runners_.end()) scheduler_.due_at(*it->second, at_us);
}

void Dispatcher::hold(const std::string& queue, SteadyTime until) {
  MutexLock lock(units_mu_);
  auto it = runners_.find(queue);
  if (it != runners_.end()) it->second->hold.hold(until, clock_.steady_now());
}

void Dispatcher::clear_hold(std::string_view queue) {
  MutexLock lock(units_mu_);
  auto it = runners_.find(queue);
  if (it == runners_.end()) return;
  it->second->hold.clear();
  scheduler_.wake(*it->second);
}

std::vector<RunnerView> Dispatcher::runners() const {
  MutexLock lock(units_mu_);
  std::vector<RunnerView> out;
  for (const auto& [name, r] : runners_) out.push_back({name, r->in_flight.load(), r->max_workers});
  return out;
}

std::optional<std::pair<UnitState, WaitReason>> Dispatcher::unit_state(
    std::string_view queue) const {
  MutexLock lock(units_mu_);
  auto it = runners_.find(queue);
  if (it == runners_.end()) return std::nullopt;
  return std::pair{it->second->state, it->second->why};
}

std::vector<KeyTurns::KeyView> Dispatcher::key_snapshot(std::string_view queue) const {
  const KeyTurns* keys = nullptr;
  {
    MutexLock lock(units_mu_);
    auto it = runners_.find(queue);
    if (it == runners_.end() || !it->second->keys) return {};
    keys = it->second->keys.get();  // units live as long as the dispatcher
  }
  return keys->snapshot();
}

std::map<std::string, QueueKeyCounts, std::less<>> Dispatcher::key_counts() const {
  std::vector<std::pair<std::string, const KeyTurns*>> keyed;
  {
    MutexLock lock(units_mu_);
    for (const auto& [name, r] : runners_)
      if (r->keys) keyed.emplace_back(name, r->keys.get());
  }
  std::map<std::string, QueueKeyCounts, std::less<>> out;
  for (const auto& [name, keys] : keyed) {
    QueueKeyCounts& c = out[name];
    for (const KeyTurns::KeyView& k : keys->snapshot()) {
      c.ready += k.ready > 0;
      c.running += k.running > 0;
    }
  }
  return out;
}

// --- Permits (any thread) ---

bool Dispatcher::hold_key(std::string_view queue, const std::string& key, SteadyTime until) {
  {
    MutexLock lock(units_mu_);
    auto it = runners_.find(queue);
    if (it == runners_.end() || !it->second->keys) return false;
    it->second->keys->hold(key, until);
  }
  // Its jobs come back ready (released): the unit polls at the hold's end
  // even if nothing else wakes it.
  const auto left =
      std::chrono::duration_cast<std::chrono::microseconds>(until - clock_.steady_now());
  wake_at(queue, clock_.wall_now_us() + std::max<int64_t>(0, left.count()));
  return true;
}

void Dispatcher::job_finished(QueueRunner& runner, int64_t job_id) {
  if (runner.keys) runner.keys->finished(job_id);
  permits_.release(runner, true);
}

void Dispatcher::remote_job_finished(QueueRunner& runner, int64_t job_id) {
  if (runner.keys) runner.keys->finished(job_id);
  permits_.release(runner, false);
}

void Dispatcher::async_job_finished(QueueRunner& runner, int64_t job_id) {
  if (runner.keys) runner.keys->finished(job_id);
  permits_.release(runner, false);
}

void Dispatcher::job_left_slot() { permits_.left_slot(); }

// --- States ---

void Dispatcher::enter(QueueRunner& r, Next n) {
  if (r.state == UnitState::kClaimInFlight && n.state != UnitState::kClaimInFlight) {
    // Only the claim's delivery moves it on; what came meanwhile is kept: a
    // time asked for (wake_at) as the unit's timer, whose firing before the
    // delivery is kept as a wake (poll_local), so a drained delivery still
    // wakes at that time; anything else as a wake for the delivery.
    if (n.state == UnitState::kScheduled)
      scheduler_.schedule_by(r, n.at, n.why);
    else
      r.polled_during_claim = true;
    return;
  }
  switch (n.state) {
    case UnitState::kPolling:
      assert(false && "a poll must end in a state that something leaves");
      break;
    case UnitState::kScheduled:
      scheduler_.schedule_by(r, n.at, n.why);
      r.state = UnitState::kScheduled;
      return;
    case UnitState::kParked:
      permits_.park(r);
      break;
    case UnitState::kWaitingForSlot:
      permits_.wait_for_slot(r);
      break;
    case UnitState::kClaimInFlight:
      r.state = UnitState::kClaimInFlight;
      return;
  }
  // A unit with a timer already (a remote claim's try outside its poll, a
  // time asked for during its claim) keeps it: it is polled then in any case.
  r.state = r.scheduled ? UnitState::kScheduled : n.state;
}

void Dispatcher::check_reachable(const QueueRunner& r) const {
  // Parked and waiting units are left by their wake-ups (park and
  // wait_for_slot re-check after listing); a scheduled one by its timer.
  assert(r.state != UnitState::kPolling);
  assert(r.state != UnitState::kScheduled || r.scheduled);
  (void)r;
}

// --- The pass ---

SteadyTime Dispatcher::run_due(SteadyTime now) {
  remote_.expire(now);
  const auto due_at = scheduler_.begin_pass(now, [](QueueRunner& r) {
    if (r.state != UnitState::kClaimInFlight) {
      r.state = UnitState::kScheduled;
      r.why = WaitReason::kMoreReady;
    }
    r.due_times.woken();
  });
  // Taken after begin_pass: a claim made or submitted later interrupts the
  // next wait instead.
  std::list<LocalClaim> slow_done = claimer_.take_made();
  std::vector<std::shared_ptr<RemoteClaim>> fresh = remote_.take_submitted();
  if (!due_at.empty()) {
    const int64_t wall = clock_.wall_now_us();
    // Remembered only for a drained unit's rare poll; the timer is set anyway.
    const bool remember = options_.notified_due && options_.notified_due();
    for (auto [r, at] : due_at) {
      if (remember) r->due_times.remember(at);
      enter(*r, Next::scheduled(now + std::chrono::microseconds(std::max<int64_t>(0, at - wall)),
                                WaitReason::kMoreReady));
    }
  }
  const std::vector<QueueRunner*> due = scheduler_.take_due(now);
  // What the slow-claim pool claimed since the last pass.
  for (LocalClaim& c : slow_done) {
    QueueRunner& r = *c.runner;
    r.state = UnitState::kPolling;
    enter(r, claimer_.finish(c, claim_filter(), now));
    check_reachable(r);
  }
  // Limited units first, the one nearest to a full bucket first: an
  // unlimited unit loses nothing by waiting, a limited one loses the tokens
  // that would overflow its burst. Then, while limited units are a whole
  // batch behind, rounds of catch-up claims (one each per round, nearest to
  // overflow first), and only then the unlimited units.
  std::vector<QueueRunner*> limited;
  std::vector<QueueRunner*> unlimited;
  for (QueueRunner* r : due) (r->bucket ? limited : unlimited).push_back(r);
  auto by_urgency = [&](SteadyTime at) {
    // A poll may have lifted a unit's limit (refresh_limit): its bucket is
    // gone, and it has nothing to catch up.
    std::erase_if(limited, [](QueueRunner* r) { return !r->bucket; });
    std::stable_sort(limited.begin(), limited.end(), [at](QueueRunner* a, QueueRunner* b) {
      return time_to_full(*a->bucket, at) < time_to_full(*b->bucket, at);
    });
  };
  const auto poll_and_enter = [&](QueueRunner& r, SteadyTime at) {
    enter(r, poll(r, at));
    check_reachable(r);
  };
  by_urgency(now);
  for (QueueRunner* r : limited) poll_and_enter(*r, now);
  for (uint32_t round = 0; round < kMaxCatchUpRounds; ++round) {
    by_urgency(clock_.steady_now());
    bool claimed = false;
    for (QueueRunner* r : limited) claimed = catch_up(*r) || claimed;
    if (!claimed) break;
  }
  for (QueueRunner* r : unlimited) poll_and_enter(*r, now);
  for (const auto& claim : fresh)
    remote_.start(
        claim, now,
        [&](const RemoteClaim::Source& s) -> QueueRunner& {
          return runner_for(s.queue, s.max_workers);
        },
        [&](QueueRunner& r, RemoteClaim& c) { return try_remote(r, c, now); },
        [&](QueueRunner& r, Next n) { enter(r, n); });
  return std::min(scheduler_.next_due(now), remote_.next_deadline());
}

bool Dispatcher::catch_up(QueueRunner& r) {
  // Each claim is a storage round trip that costs about the same for 1 job
  // or 100, and they run one after another: with one claim per unit per
  // pass, slow unlimited claims in a pass would hold a fast limited unit to
  // claim_batch_max per pass. So a limited unit still a whole batch of
  // tokens behind claims again before the unlimited units' turn, if its
  // permits for that batch are free. Whole batches only (or the whole burst,
  // if smaller), so no run of tiny claims.
  if (!r.bucket || r.state != UnitState::kScheduled) return false;
  const uint32_t full_batch =
      std::min({r.max_workers, options_.claim_batch_max, r.bucket->limit().burst});
  const SteadyTime now = clock_.steady_now();
  // Only a unit that claimed a full batch is due at once (not one throttled,
  // parked, coalescing, drained or backing off).
  if (!r.scheduled || r.due > now || r.bucket->available(now) < full_batch) return false;
  if (permits_.free(r).unit < full_batch) {
    // The batch just claimed still holds them: no waiting on this thread.
    // The unit stays due, and its permits coming back wake the pass.
    r.wake_below.store(r.max_workers - full_batch + 1, std::memory_order_release);
    return false;
  }
  if (!scheduler_.take_if_due(r, now)) return false;
  r.state = UnitState::kPolling;
  enter(r, poll(r, now));
  check_reachable(r);
  return true;
}

void Dispatcher::refresh_limit(QueueRunner& r, SteadyTime now) {
  r.limit_generation = limits_.generation();
  if (r.keys) r.keys->set_overrides(limits_.key_overrides(r.name), limits_.enabled());
  EffectiveLimit next = limits_.resolve(r.name);
  if (next == r.limit) return;
  if (!next.limit) {
    r.bucket.reset();
  } else if (r.bucket) {
    r.bucket->reconfigure(*next.limit, now);
  } else {
    r.bucket.emplace(storage_, r.name, *next.limit, clock_, r.counters, now);
  }
  r.limit = std::move(next);
}

Next Dispatcher::poll(QueueRunner& r, SteadyTime now) {
  if (r.state != UnitState::kClaimInFlight) r.state = UnitState::kPolling;
  if (r.limit_generation != limits_.generation()) refresh_limit(r, now);
  const uint64_t dispatched = r.counters.dispatched.load(std::memory_order_relaxed);
  r.hold.sample(now, dispatched);
  if (const auto until = r.hold.check(now, r.bucket ? &*r.bucket : nullptr, dispatched, r.name))
    return Next::scheduled(*until, WaitReason::kHeld);
  if (r.remote.empty()) return poll_local(r, now);
  // Local handlers and remote workers share the permits and the bucket:
  // whoever was granted jobs last claims second (a poll that grants nothing,
  // such as the one right after a grant, changes no turn).
  const auto serve = [&] {
    return remote_.serve(r, [&](QueueRunner& u, RemoteClaim& c) { return try_remote(u, c, now); });
  };
  if (r.remote_first) {
    const std::optional<Next> remote = serve();
    return sooner(r, poll_local(r, now), remote);
  }
  const Next local = poll_local(r, now);
  return sooner(r, local, serve());
}

// --- Local claims ---

Next Dispatcher::poll_local(QueueRunner& r, SteadyTime now) {
  if (r.state == UnitState::kClaimInFlight) {
    // Its delivery moves it on; a wake meanwhile is kept.
    r.polled_during_claim = true;
    return Next::claim_in_flight();
  }
  const Permits::Free free = permits_.free(r);
  if (free.unit == 0) return Next::parked();
  if (free.engine == 0) return Next::waiting_for_slot();
  if (options_.outcomes_backlogged && options_.outcomes_backlogged())
    return Next::scheduled(now + options_.poll_interval, WaitReason::kBacklogged);
  const std::vector<std::string>* kinds = claim_filter();
  // No consumer here: claim nothing (a kind registered later wakes us up).
  if (kinds && kinds->empty())
    return Next::scheduled(now + options_.poll_interval, WaitReason::kNoConsumer);
  if (r.local_idle) {
    // Remote workers claim here and the last local claim came back short:
    // claim again only for a wake that may concern local kinds, or after a
    // poll interval (a scan behind other kinds' jobs costs, on some plugins).
    if (!r.local_work.exchange(false, std::memory_order_acq_rel) && now < r.local_retry)
      return Next::scheduled(r.local_retry, WaitReason::kLocalIdle);
    r.local_idle = false;
  }
  const uint32_t batch = std::min({free.unit, free.engine, options_.claim_batch_max});
  // Busy unit, few permits back: give other jobs a moment to finish so the
  // claim is a batch. Bounded: the next poll claims whatever is free. Not
  // while remote claims wait here: the permits and tokens waited for would
  // go to them, every time.
  const uint32_t full_batch = std::min(r.max_workers, options_.claim_batch_max);
  if (free.unit < r.max_workers && batch < full_batch / 2 && !r.coalesced &&
      options_.coalesce.count() > 0 && r.remote.empty()) {
    r.coalesced = true;
    // Fast jobs free a full batch long before the timer: wake then. (A wake
    // missed in the race with this store only falls back to the timer.)
    r.wake_below.store(r.max_workers - full_batch + 1, std::memory_order_release);
    return Next::scheduled(now + options_.coalesce, WaitReason::kCoalescing);
  }
  r.coalesced = false;
  r.wake_below.store(0, std::memory_order_release);
  return claimer_.claim_local(r, batch, kinds, now);
}

void Dispatcher::run(std::stop_token stop) {
  while (!stop.stop_requested()) scheduler_.wait(run_due(clock_.steady_now()), stop);
  claimer_.stop();
}

// --- Remote workers' claims ---

void Dispatcher::submit_remote(std::shared_ptr<RemoteClaim> claim) {
  if (remote_.submit(claim)) {
    scheduler_.interrupt();
    return;
  }
  if (claim->take()) claim->deliver(nullptr, {});
}

void Dispatcher::close_remote() {
  std::vector<QueueRunner*> units;
  {
    MutexLock lock(units_mu_);
    for (auto& [name, r] : runners_) units.push_back(r.get());
  }
  remote_.close(units);
}

RemoteClaimMatcher::Try Dispatcher::try_remote(QueueRunner& r, RemoteClaim& claim, SteadyTime now) {
  using Try = RemoteClaimMatcher::Try;
  if (!claim.waiting()) return {Try::kGone, std::nullopt};
  if (r.limit_generation != limits_.generation()) refresh_limit(r, now);
  const uint64_t dispatched = r.counters.dispatched.load(std::memory_order_relaxed);
  if (const auto until = r.hold.check(now, r.bucket ? &*r.bucket : nullptr, dispatched, r.name))
    return {Try::kThrottled, Next::scheduled(*until, WaitReason::kHeld)};
  const uint32_t permits = permits_.free(r).unit;
  if (permits == 0) return {Try::kNoPermits, Next::parked()};
  return claimer_.claim_remote(r, claim, permits, now);
}

}  // namespace conveyor
