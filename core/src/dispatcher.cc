#include "dispatcher.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <random>
#include <stdexcept>
#include <utility>

namespace conveyor {
namespace {

int64_t fresh_lease_token() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  int64_t token = 0;
  while (token == 0) token = static_cast<int64_t>(rng());
  return token;
}

constexpr std::chrono::milliseconds kMaxErrorBackoff{5000};
// How long a unit that held jobs of unserved kinds is claimed with the kind
// filter before a plain claim looks again.
constexpr std::chrono::minutes kFilterHold{5};
// How long a limited unit a whole batch behind waits for its permits.
constexpr std::chrono::milliseconds kCatchUpPermitWait{5};
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
      slow_([this](LocalClaim& c) { make_claim(c); }, [this] { scheduler_.interrupt(); }),
      tokens_(storage) {}

Dispatcher::~Dispatcher() { stop_slow_claims(); }

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
    auto runner = std::make_unique<QueueRunner>(queue, std::max<uint32_t>(1, max_workers),
                                                metrics_.queue(queue));
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
  scheduler_.wake(*r);
}

void Dispatcher::wake_all() {
  MutexLock lock(units_mu_);
  for (auto& [name, r] : runners_) {
    r->local_work.store(true, std::memory_order_release);
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

// --- Permits (any thread) ---

void Dispatcher::job_finished(QueueRunner& runner) { release_permit(runner, true); }

void Dispatcher::remote_job_finished(QueueRunner& runner) { release_permit(runner, false); }

void Dispatcher::async_job_finished(QueueRunner& runner) { release_permit(runner, false); }

void Dispatcher::job_left_slot() {
  total_in_flight_.fetch_sub(1);  // seq_cst: paired with UnitScheduler::wait_for_slot
  scheduler_.slot_freed();
}

void Dispatcher::release_permit(QueueRunner& runner, bool local) {
  const uint32_t in_flight = runner.in_flight.fetch_sub(1, std::memory_order_acq_rel) - 1;
  uint32_t wake_below = runner.wake_below.load(std::memory_order_acquire);
  bool wake = wake_below != 0 && in_flight < wake_below &&
              runner.wake_below.compare_exchange_strong(wake_below, 0, std::memory_order_acq_rel);
  // seq_cst: Engine::stop() reads it after a store. Remote jobs hold no
  // local worker slot.
  if (local) total_in_flight_.fetch_sub(1);
  wake = runner.parked.exchange(false, std::memory_order_acq_rel) || wake;
  if (wake) scheduler_.wake(runner);
  if (local) scheduler_.slot_freed();
}

void Dispatcher::release_reserved(QueueRunner& r, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) release_permit(r, true);
}

void Dispatcher::park(QueueRunner& r) {
  r.parked.store(true, std::memory_order_release);
  // A job may have finished between the permit check and parking: re-check
  // so its wake-up is not lost.
  if (r.in_flight.load(std::memory_order_acquire) < r.max_workers &&
      r.parked.exchange(false, std::memory_order_acq_rel))
    scheduler_.wake(r);
}

// --- States ---

void Dispatcher::enter(QueueRunner& r, Next n) {
  if (r.state == UnitState::kClaimInFlight && n.state != UnitState::kClaimInFlight) {
    // Only the claim's delivery moves it on; what came meanwhile is kept.
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
      park(r);
      break;
    case UnitState::kWaitingForSlot:
      scheduler_.wait_for_slot(r, [this] {
        return total_in_flight_.load() < options_.max_in_flight;  // seq_cst
      });
      break;
    case UnitState::kClaimInFlight:
      r.state = UnitState::kClaimInFlight;
      return;
  }
  // A unit with a timer already (a remote claim's try, outside its poll)
  // keeps it: it is polled then in any case.
  if (!r.scheduled) r.state = n.state;
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
  std::list<LocalClaim> slow_done = slow_.take_done();
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
    enter(r, finish_claim(c, now));
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
  // tokens behind claims again before the unlimited units' turn, waiting up
  // to kCatchUpPermitWait for its permits. Whole batches only (or the whole
  // burst, if smaller), so no run of tiny claims.
  if (!r.bucket || r.state == UnitState::kClaimInFlight) return false;
  const uint32_t full_batch =
      std::min({r.max_workers, options_.claim_batch_max, r.bucket->limit().burst});
  SteadyTime now = clock_.steady_now();
  // Only a unit that claimed a full batch comes back at once (not one
  // throttled, parked, coalescing, drained or backing off).
  if (r.state != UnitState::kScheduled || !r.scheduled || r.due > now) return false;
  if (r.bucket->available(now) < full_batch) return false;
  // The batch just claimed may still hold the permits: waiting a moment for
  // them is cheaper than handing the thread to another unit's claim.
  const auto permits_free = [&] {
    return r.in_flight.load(std::memory_order_acquire) + full_batch <= r.max_workers;
  };
  if (!permits_free()) {
    r.wake_below.store(r.max_workers - full_batch + 1, std::memory_order_release);
    scheduler_.wait_for(kCatchUpPermitWait, permits_free);
    r.wake_below.store(0, std::memory_order_release);
    if (!permits_free()) return false;
    now = clock_.steady_now();
  }
  if (!scheduler_.take_if_due(r, now)) return false;
  r.state = UnitState::kPolling;
  enter(r, poll(r, now));
  check_reachable(r);
  return true;
}

void Dispatcher::refresh_limit(QueueRunner& r, SteadyTime now) {
  r.limit_generation = limits_.generation();
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
  const uint32_t in_flight = r.in_flight.load(std::memory_order_acquire);
  const uint32_t total = total_in_flight_.load(std::memory_order_acquire);
  const uint32_t queue_free = in_flight >= r.max_workers ? 0 : r.max_workers - in_flight;
  const uint32_t global_free = total >= options_.max_in_flight ? 0 : options_.max_in_flight - total;
  if (queue_free == 0) return Next::parked();
  if (global_free == 0) return Next::waiting_for_slot();
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
  const uint32_t batch = std::min({queue_free, global_free, options_.claim_batch_max});
  // Busy unit, few permits back: give other jobs a moment to finish so the
  // claim is a batch. Bounded: the next poll claims whatever is free. Not
  // while remote claims wait here: the permits and tokens waited for would
  // go to them, every time.
  const uint32_t full_batch = std::min(r.max_workers, options_.claim_batch_max);
  if (in_flight > 0 && batch < full_batch / 2 && !r.coalesced && options_.coalesce.count() > 0 &&
      r.remote.empty()) {
    r.coalesced = true;
    // Fast jobs free a full batch long before the timer: wake then. (A wake
    // missed in the race with this store only falls back to the timer.)
    r.wake_below.store(r.max_workers - full_batch + 1, std::memory_order_release);
    return Next::scheduled(now + options_.coalesce, WaitReason::kCoalescing);
  }
  r.coalesced = false;
  r.wake_below.store(0, std::memory_order_release);
  const Grant grant = tokens_.take(r, batch, now);
  if (grant.error) return claim_failed(r, 0, grant.error, "taking tokens of a fleet rate limit", now);
  if (grant.jobs == 0) return Next::scheduled(grant.wait_until, WaitReason::kTokens);

  LocalClaim c;
  c.runner = &r;
  c.grant = grant;
  // A unit remote workers claim from holds their kinds: never the plain claim.
  c.filtered = kinds && (now < r.filter_until || r.remote_seen);
  if (c.filtered) c.kinds = *kinds;
  c.wall_us = clock_.wall_now_us();
  c.expires_us =
      c.wall_us + std::chrono::duration_cast<std::chrono::microseconds>(options_.lease).count();
  r.local_work.store(false, std::memory_order_release);
  if (r.slow_claims) {
    // Off this thread. Its permits are held meanwhile, so no other claim
    // takes them; finish_claim frees those it did not fill.
    c.reserved = grant.jobs;
    r.in_flight.fetch_add(c.reserved, std::memory_order_acq_rel);
    total_in_flight_.fetch_add(c.reserved, std::memory_order_acq_rel);
    r.state = UnitState::kClaimInFlight;
    slow_.submit(std::move(c));
    return Next::claim_in_flight();
  }
  make_claim(c);
  return finish_claim(c, now);
}

void Dispatcher::make_claim(LocalClaim& c) {
  const auto start = std::chrono::steady_clock::now();
  try {
    const QueueRunner& r = *c.runner;
    c.jobs = c.filtered ? storage_.claim_kinds(r.name, c.kinds, c.grant.jobs, fresh_lease_token(),
                                               c.wall_us, c.expires_us)
                        : storage_.claim(r.name, c.grant.jobs, fresh_lease_token(), c.wall_us,
                                         c.expires_us);
  } catch (...) {
    c.error = std::current_exception();
  }
  c.took = std::chrono::steady_clock::now() - start;
}

Next Dispatcher::finish_claim(LocalClaim& c, SteadyTime now) {
  QueueRunner& r = *c.runner;
  const bool woken = std::exchange(r.polled_during_claim, false);
  if (options_.slow_claim.count() > 0) {
    if (c.took >= options_.slow_claim) {
      if (!r.slow_claims)
        spdlog::info("queue {}: a claim took {} ms: its claims run off the dispatcher thread",
                     r.name, std::chrono::duration_cast<std::chrono::milliseconds>(c.took).count());
      r.slow_claims = true;
    } else if (c.took < options_.slow_claim / 2) {
      r.slow_claims = false;
    }
  }
  if (c.error) {
    release_reserved(r, c.reserved);
    return claim_failed(r, c.grant.tokens, c.error, "claiming jobs", now);
  }
  r.counters.claims.fetch_add(1, std::memory_order_relaxed);
  if (r.error_backoff.count() > 0) spdlog::info("queue {}: claims work again", r.name);
  r.error_backoff = std::chrono::milliseconds(0);
  if (options_.health) options_.health->succeeded();

  std::vector<Job>& jobs = c.jobs;
  const uint32_t batch = c.grant.jobs;
  const std::vector<std::string>* kinds = claim_filter();
  bool gave_back = false;
  if (kinds && !c.filtered) {
    auto unserved = std::stable_partition(jobs.begin(), jobs.end(), [&](const Job& j) {
      return std::binary_search(kinds->begin(), kinds->end(), j.kind);
    });
    if (unserved != jobs.end()) {
      give_back(storage_, r.name,
                std::span<const Job>(&*unserved, static_cast<size_t>(jobs.end() - unserved)),
                "no consumer here serves its kind");
      jobs.erase(unserved, jobs.end());
      r.filter_until = now + kFilterHold;
      gave_back = true;  // the served jobs behind them: claim again at once
    }
  }
  // Jobs found, before those whose tokens are not there yet go back.
  const auto found = static_cast<uint32_t>(jobs.size());
  const std::optional<SteadyTime> tokens_due = tokens_.settle(r, jobs, c.grant.tokens, now);
  const auto claimed = static_cast<uint32_t>(jobs.size());
  if (claimed > 0) r.remote_first = true;  // remote workers' turn next
  if (r.remote_seen && found < batch) {
    r.local_idle = true;
    r.local_retry = now + options_.poll_interval;
  }
  if (c.reserved > 0) {
    release_reserved(r, c.reserved - claimed);
  } else {
    r.in_flight.fetch_add(claimed, std::memory_order_acq_rel);
    total_in_flight_.fetch_add(claimed, std::memory_order_acq_rel);
  }
  r.counters.dispatched.fetch_add(claimed, std::memory_order_relaxed);
  for (const Job& job : jobs)
    r.counters.pickup_latency.observe(
        static_cast<double>(std::max<int64_t>(0, c.wall_us - job.run_at_us)) / 1e6);
  if (claimed > 0) execute_(r, std::move(jobs));
  // Jobs waiting for tokens: back when they are due. A full batch means more
  // may be ready: come back at once. Otherwise the unit is drained (or
  // paused) until new work wakes it or its next poll; a wake while the claim
  // was in the slow-claim pool may be for jobs it did not see: at once too.
  if (tokens_due) return Next::scheduled(*tokens_due, WaitReason::kTokens);
  if (found == batch || gave_back || woken) return Next::scheduled(now, WaitReason::kMoreReady);
  const bool notified = options_.notified_due && options_.notified_due();
  const DueTimes::Policy policy{options_.poll_interval, options_.notified_poll, options_.swept};
  return Next::scheduled(r.due_times.next_poll(now, clock_.wall_now_us(), notified, policy),
                         WaitReason::kDrained);
}

Next Dispatcher::claim_failed(QueueRunner& r, uint32_t tokens, const std::exception_ptr& error,
                              const char* what, SteadyTime now) {
  std::string message = "an unknown error";
  try {
    std::rethrow_exception(error);
  } catch (const StorageError& e) {
    if (options_.health) options_.health->failed(what, e);
    message = e.what();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
  }
  tokens_.refund(r, tokens);
  r.error_backoff =
      std::min(kMaxErrorBackoff, std::max(std::chrono::milliseconds(50), r.error_backoff * 2));
  spdlog::warn("queue {}: claim failed, retrying in {} ms ({}): {}", r.name,
               r.error_backoff.count(), what, message);
  return Next::scheduled(now + r.error_backoff, WaitReason::kBackingOff);
}

void Dispatcher::stop_slow_claims() {
  for (LocalClaim& c : slow_.stop()) {
    QueueRunner& r = *c.runner;
    if (!c.error) give_back(storage_, r.name, c.jobs, "the dispatcher is stopping");
    tokens_.refund(r, c.grant.tokens);
    release_reserved(r, c.reserved);
    r.state = UnitState::kScheduled;
  }
}

void Dispatcher::run(std::stop_token stop) {
  while (!stop.stop_requested()) scheduler_.wait(run_due(clock_.steady_now()), stop);
  stop_slow_claims();
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

RemoteClaimMatcher::Try Dispatcher::try_remote(QueueRunner& r, RemoteClaim& claim,
                                               SteadyTime now) {
  using Try = RemoteClaimMatcher::Try;
  if (!claim.waiting()) return {Try::kGone, std::nullopt};
  if (r.limit_generation != limits_.generation()) refresh_limit(r, now);
  const uint64_t dispatched = r.counters.dispatched.load(std::memory_order_relaxed);
  if (const auto until = r.hold.check(now, r.bucket ? &*r.bucket : nullptr, dispatched, r.name))
    return {Try::kThrottled, Next::scheduled(*until, WaitReason::kHeld)};
  const uint32_t in_flight = r.in_flight.load(std::memory_order_acquire);
  if (in_flight >= r.max_workers) return {Try::kNoPermits, Next::parked()};
  const Grant grant = tokens_.take(
      r, std::min({r.max_workers - in_flight, claim.max_jobs, options_.claim_batch_max}), now);
  if (grant.error)
    return {Try::kFailed,
            claim_failed(r, 0, grant.error, "taking tokens of a fleet rate limit", now)};
  if (grant.jobs == 0)
    return {Try::kThrottled, Next::scheduled(grant.wait_until, WaitReason::kTokens)};
  std::vector<Job> jobs;
  const int64_t wall = clock_.wall_now_us();
  try {
    jobs = storage_.claim_kinds(r.name, claim.kinds, grant.jobs, fresh_lease_token(), wall,
                                wall + claim.lease.count());
    r.counters.claims.fetch_add(1, std::memory_order_relaxed);
    if (options_.health) options_.health->succeeded();
  } catch (const std::exception&) {
    return {Try::kFailed, claim_failed(r, grant.tokens, std::current_exception(),
                                       "claiming jobs for remote workers", now)};
  }
  const bool found = !jobs.empty();
  const std::optional<SteadyTime> tokens_due = tokens_.settle(r, jobs, grant.tokens, now);
  const std::optional<Next> wait_for_tokens =
      tokens_due ? std::optional(Next::scheduled(*tokens_due, WaitReason::kTokens)) : std::nullopt;
  const auto claimed = static_cast<uint32_t>(jobs.size());
  if (claimed == 0) return {found ? Try::kThrottled : Try::kEmpty, wait_for_tokens};
  if (!claim.take()) {
    // The worker went away while we claimed: the jobs go back unspent.
    tokens_.refund(r, TokenSettlement::tokens_for(r, jobs));
    std::vector<conveyor_lease> leases;
    for (const Job& job : jobs) leases.push_back(job.lease());
    try {
      storage_.release(leases, wall);
    } catch (const std::exception& e) {
      spdlog::warn(
          "queue {}: giving back {} job(s) of a remote worker that went away failed "
          "(their leases expire and they are rescued): {}",
          r.name, claimed, e.what());
    }
    return {Try::kGone, wait_for_tokens};
  }
  r.in_flight.fetch_add(claimed, std::memory_order_acq_rel);
  r.counters.dispatched.fetch_add(claimed, std::memory_order_relaxed);
  for (const Job& job : jobs)
    r.counters.pickup_latency.observe(
        static_cast<double>(std::max<int64_t>(0, wall - job.run_at_us)) / 1e6);
  r.remote_first = false;  // the local handlers' turn next
  claim.deliver(&r, std::move(jobs));
  return {Try::kGranted, wait_for_tokens};
}

}  // namespace conveyor
