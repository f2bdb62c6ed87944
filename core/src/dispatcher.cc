#include "dispatcher.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
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
// How long a queue that held jobs of unserved kinds is claimed with the kind
// filter before a plain claim looks again.
constexpr std::chrono::minutes kFilterHold{5};
// How long a limited queue a whole batch behind waits for its permits.
constexpr std::chrono::milliseconds kCatchUpPermitWait{5};
// Catch-up rounds per pass: a 5,000/s queue with burst 500 and batches of 100
// banks at most five batches; the unlimited queues wait at most this many.
constexpr uint32_t kMaxCatchUpRounds = 8;
// A fleet-limited queue takes at least this long's worth of tokens per
// take (fleet bucket writes <= 100/s per process at any rate).
constexpr std::chrono::milliseconds kFleetTakeQuantum{10};
// The most due times a runner remembers (wake_at), while storage reports due
// jobs; past it the latest go and the queue keeps the short poll until they
// have passed (as without notifications: bounded memory, never a late job).
constexpr size_t kMaxDueTimes = 64;
// After a wake (a notification, new local jobs, a freed permit) a drained
// queue is claimed this many more times a poll interval apart before it
// waits for notifications: a claim right after a notification may miss what
// storage does not show it yet (postgres-queue's claim hint that another
// process's entry sits below until the plugin's probe corrects it).
constexpr uint32_t kShortPollsAfterWake = 2;
// A drained queue's wait under the engine's sweep (Options::swept): no poll
// of its own, only a bound on the timer.
constexpr auto kSweptWait = std::chrono::hours(24);
// Slow claims made at once, each on a thread of its own: a few slow queues
// do not wait for each other, and a storage that is slow for every queue
// does not get a thread per queue.
constexpr size_t kSlowClaimThreads = 4;
// An engine's queue whose claim takes this long claims off the dispatcher
// thread (Options::slow_claim): longer than a claim of a healthy backend
// under load (a few ms), short enough that the other queues' pickup stays
// within tens of ms of a claim that is slow.
constexpr std::chrono::milliseconds kSlowClaim{20};

// How long until bucket is full (its burst banked) at now: the time left
// before tokens are lost.
int64_t time_to_full(const QueueBucket& bucket, SteadyTime now) {
  const int64_t missing = static_cast<int64_t>(bucket.limit().burst) - bucket.available(now);
  return missing * bucket.token_ns();
}

}  // namespace

Dispatcher::Dispatcher(Storage& storage, const LimitResolver& limits, const Clock& clock,
                       Metrics& metrics, Options options, Execute execute)
    : storage_(storage),
      limits_(limits),
      clock_(clock),
      metrics_(metrics),
      options_(options),
      execute_(std::move(execute)),
      filter_kinds_(options.served != nullptr && storage.has_slot("claim_kinds")) {}

const std::vector<std::string>* Dispatcher::claim_filter() {
  if (!filter_kinds_) return nullptr;
  const uint64_t generation = options_.served->generation();
  if (generation != kinds_generation_) {
    kinds_ = options_.served->snapshot();
    kinds_generation_ = generation;
  }
  return kinds_.get();
}

void Dispatcher::add_queue(const std::string& name, uint32_t max_workers) {
  std::lock_guard lock(mu_);
  if (runners_.count(name)) return;
  auto runner =
      std::make_unique<QueueRunner>(name, std::max<uint32_t>(1, max_workers), metrics_.queue(name));
  woken_.push_back(runner.get());
  runners_.emplace(name, std::move(runner));
  interrupted_ = true;
  cv_.notify_one();
}

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

void Dispatcher::add_or_wake(const std::string& name, uint32_t max_workers) {
  if (!has_queue(name))
    add_queue(name, max_workers);
  else
    wake(name);
}

bool Dispatcher::has_queue(std::string_view name) const {
  std::lock_guard lock(mu_);
  return runners_.find(name) != runners_.end();
}

void Dispatcher::wake(std::string_view name, bool local_work) {
  std::lock_guard lock(mu_);
  auto it = runners_.find(name);
  if (it == runners_.end()) return;
  if (local_work) it->second->local_work.store(true, std::memory_order_release);
  woken_.push_back(it->second.get());
  interrupted_ = true;
  cv_.notify_one();
}

void Dispatcher::wake_all() {
  std::lock_guard lock(mu_);
  for (auto& [name, r] : runners_) {
    r->local_work.store(true, std::memory_order_release);
    woken_.push_back(r.get());
  }
  interrupted_ = true;
  cv_.notify_one();
}

void Dispatcher::wake_at(std::string_view name, int64_t at_us) {
  std::lock_guard lock(mu_);
  auto it = runners_.find(name);
  if (it == runners_.end()) return;
  due_inbox_.emplace_back(it->second.get(), at_us);
  interrupted_ = true;
  cv_.notify_one();
}

void Dispatcher::wake_global_waiters() {
  woken_.insert(woken_.end(), waiting_global_.begin(), waiting_global_.end());
  waiting_global_.clear();
  has_global_waiters_.store(false, std::memory_order_release);
}

void Dispatcher::job_finished(QueueRunner& runner) { release_permit(runner, true); }

void Dispatcher::hold(const std::string& queue, SteadyTime until) {
  std::lock_guard lock(mu_);
  auto it = runners_.find(queue);
  if (it == runners_.end()) return;
  const int64_t ns = until.time_since_epoch().count();
  it->second->hold_began_ns.store(clock_.steady_now().time_since_epoch().count(),
                                  std::memory_order_release);
  std::atomic<int64_t>& h = it->second->hold_until_ns;
  int64_t cur = h.load(std::memory_order_acquire);
  while (cur < ns && !h.compare_exchange_weak(cur, ns, std::memory_order_acq_rel)) {
  }
}

void Dispatcher::clear_hold(std::string_view queue) {
  std::lock_guard lock(mu_);
  auto it = runners_.find(queue);
  if (it == runners_.end()) return;
  it->second->hold_cleared.store(true, std::memory_order_release);
  it->second->hold_until_ns.store(0, std::memory_order_release);
  woken_.push_back(it->second.get());
  interrupted_ = true;
  cv_.notify_one();
}

bool Dispatcher::held(QueueRunner& r, SteadyTime now) {
  if (r.hold_cleared.exchange(false, std::memory_order_acq_rel)) {
    r.held = false;
    r.ramp.reset();
  }
  const int64_t until = r.hold_until_ns.load(std::memory_order_acquire);
  const SteadyTime end{SteadyTime::duration(until)};
  if (until != 0 && until != r.hold_applied_ns) {
    // A new hold (seen now, or only after it ended): the rate the queue was
    // refused at is the ramp's if it was climbing back, else its own limit's.
    if (r.ramp)
      r.refused_rate = r.ramp->rate(
          SteadyTime(SteadyTime::duration(r.hold_began_ns.load(std::memory_order_acquire))));
    else if (r.bucket)
      r.refused_rate = r.bucket->limit().rate_per_sec;
    else if (const double sent = sending_rate(r, now); sent > 0)
      r.refused_rate = sent;
    r.ramp.reset();
    r.held = true;
    r.hold_applied_ns = until;
    if (r.bucket && end > now) {
      // Held empty: no tokens are banked for the downstream while it asked
      // to wait. In a fleet bucket this holds every process on the storage.
      try {
        r.bucket->empty_until(end);
      } catch (const std::exception& e) {
        spdlog::warn(
            "queue {}: could not hold the fleet bucket for the backoff ({}); "
            "this process holds, other processes may not",
            r.name, e.what());
      }
    }
  }
  if (end > now) {
    std::lock_guard lock(mu_);
    schedule_by(r, end);
    return true;
  }
  if (r.held) {
    r.held = false;
    r.ramp.emplace(r.refused_rate, r.bucket ? r.bucket->limit().rate_per_sec : 0.0, now);
  }
  return false;
}

void Dispatcher::remote_job_finished(QueueRunner& runner) { release_permit(runner, false); }

void Dispatcher::async_job_finished(QueueRunner& runner) { release_permit(runner, false); }

void Dispatcher::job_left_slot() {
  total_in_flight_.fetch_sub(1);
  // seq_cst, paired with poll_local's store then re-check of the total.
  if (!has_global_waiters_.load()) return;
  std::lock_guard lock(mu_);
  wake_global_waiters();
  interrupted_ = true;
  cv_.notify_one();
}

void Dispatcher::release_permit(QueueRunner& runner, bool local) {
  const uint32_t in_flight = runner.in_flight.fetch_sub(1, std::memory_order_acq_rel) - 1;
  uint32_t wake_below = runner.wake_below.load(std::memory_order_acquire);
  if (wake_below != 0 && in_flight < wake_below &&
      runner.wake_below.compare_exchange_strong(wake_below, 0, std::memory_order_acq_rel)) {
    std::lock_guard lock(mu_);
    woken_.push_back(&runner);
    interrupted_ = true;
    cv_.notify_one();
  }
  // seq_cst: Engine::stop() reads it after a store. Remote jobs hold no
  // local worker slot.
  if (local) total_in_flight_.fetch_sub(1);
  bool wake_runner = runner.parked.exchange(false, std::memory_order_acq_rel);
  const bool wake_global = local && has_global_waiters_.load();  // seq_cst: see job_left_slot
  if (!wake_runner && !wake_global) return;                      // the common case: no lock
  std::lock_guard lock(mu_);
  if (wake_runner) woken_.push_back(&runner);
  if (local && !waiting_global_.empty()) {
    wake_global_waiters();
    wake_runner = true;
  }
  if (wake_runner) {
    interrupted_ = true;
    cv_.notify_one();
  }
}

void Dispatcher::submit_remote(std::shared_ptr<RemoteClaim> claim) {
  {
    std::lock_guard lock(mu_);
    if (!remote_closed_) {
      remote_submitted_.push_back(std::move(claim));
      interrupted_ = true;
      cv_.notify_one();
      return;
    }
  }
  if (claim->take()) claim->deliver(nullptr, {});
}

void Dispatcher::close_remote() {
  std::vector<std::shared_ptr<RemoteClaim>> left;
  {
    std::lock_guard lock(mu_);
    remote_closed_ = true;
    left.swap(remote_submitted_);
    for (auto& [name, r] : runners_) r->remote.clear();
  }
  for (auto& [deadline, claim] : remote_deadlines_) left.push_back(std::move(claim));
  remote_deadlines_.clear();
  for (const auto& claim : left)
    if (claim->take()) claim->deliver(nullptr, {});
}

QueueRunner& Dispatcher::runner_for(const std::string& queue, uint32_t max_workers) {
  std::lock_guard lock(mu_);
  auto it = runners_.find(queue);
  if (it != runners_.end()) return *it->second;
  auto runner = std::make_unique<QueueRunner>(queue, std::max<uint32_t>(1, max_workers),
                                              metrics_.queue(queue));
  woken_.push_back(runner.get());
  return *runners_.emplace(queue, std::move(runner)).first->second;
}

void Dispatcher::start_remote(const std::shared_ptr<RemoteClaim>& claim, SteadyTime now) {
  if (!claim->waiting()) return;
  // Weighted random order without replacement (Efraimidis-Spirakis: the
  // largest u^(1/weight) first), so a queue is tried first with a chance
  // proportional to its weight.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<std::pair<double, size_t>> order;
  for (size_t i = 0; i < claim->queues.size(); ++i)
    order.emplace_back(std::pow(uniform(rng), 1.0 / std::max(1u, claim->queues[i].weight)), i);
  std::sort(order.begin(), order.end(), std::greater<>());
  std::vector<QueueRunner*> runners;
  bool answered = false;
  for (const auto& [key, i] : order) {
    QueueRunner& r = runner_for(claim->queues[i].queue, claim->queues[i].max_workers);
    r.remote_seen = true;
    runners.push_back(&r);
    if (answered) continue;
    const RemoteTry t = try_remote(r, *claim, now);
    answered = t == RemoteTry::kGranted || t == RemoteTry::kGone;
  }
  if (answered) return;
  if (claim->deadline <= now) {
    if (claim->take()) claim->deliver(nullptr, {});
    return;
  }
  for (QueueRunner* r : runners) r->remote.push_back(claim);
  remote_deadlines_.emplace(claim->deadline, claim);
}

void Dispatcher::expire_remote(SteadyTime now) {
  while (!remote_deadlines_.empty() && remote_deadlines_.begin()->first <= now) {
    std::shared_ptr<RemoteClaim> claim = std::move(remote_deadlines_.begin()->second);
    remote_deadlines_.erase(remote_deadlines_.begin());
    if (claim->take()) claim->deliver(nullptr, {});
  }
}

Dispatcher::RemoteTry Dispatcher::try_remote(QueueRunner& r, RemoteClaim& claim, SteadyTime now) {
  if (!claim.waiting()) return RemoteTry::kGone;
  if (r.limit_generation != limits_.generation()) refresh_limit(r, now);
  if (held(r, now)) return RemoteTry::kThrottled;
  const uint32_t in_flight = r.in_flight.load(std::memory_order_acquire);
  if (in_flight >= r.max_workers) {
    park(r);
    return RemoteTry::kNoPermits;
  }
  const Grant grant = take_tokens(
      r, std::min({r.max_workers - in_flight, claim.max_jobs, options_.claim_batch_max}), now);
  if (grant.jobs == 0) return RemoteTry::kThrottled;
  std::vector<Job> jobs;
  const int64_t wall = clock_.wall_now_us();
  try {
    jobs = storage_.claim_kinds(r.name, claim.kinds, grant.jobs, fresh_lease_token(), wall,
                                wall + claim.lease.count());
    r.counters.claims.fetch_add(1, std::memory_order_relaxed);
    if (options_.health) options_.health->succeeded();
  } catch (const std::exception& e) {
    claim_failed(r, grant.tokens, e, "claiming jobs for remote workers", now);
    return RemoteTry::kFailed;
  }
  const bool found = !jobs.empty();
  settle_costs(r, jobs, grant.tokens, now);
  const auto claimed = static_cast<uint32_t>(jobs.size());
  if (claimed == 0) return found ? RemoteTry::kThrottled : RemoteTry::kEmpty;
  if (!claim.take()) {
    // The worker went away while we claimed: the jobs go back unspent.
    refund_tokens(r, tokens_for(r, jobs));
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
    return RemoteTry::kGone;
  }
  r.in_flight.fetch_add(claimed, std::memory_order_acq_rel);
  r.counters.dispatched.fetch_add(claimed, std::memory_order_relaxed);
  for (const Job& job : jobs)
    r.counters.pickup_latency.observe(
        static_cast<double>(std::max<int64_t>(0, wall - job.run_at_us)) / 1e6);
  r.remote_first = false;  // the local handlers' turn next
  claim.deliver(&r, std::move(jobs));
  return RemoteTry::kGranted;
}

Dispatcher::Grant Dispatcher::take_tokens(QueueRunner& r, uint32_t max_jobs, SteadyTime now) {
  if (r.ramp && r.ramp->finished(now)) {
    r.ramp.reset();
    // Back at the queue's own pace, from an empty bucket: the tokens banked
    // while the ramp held it back would be a burst into the downstream.
    if (r.bucket && !r.bucket->fleet()) r.bucket->empty_until(now);
  }
  if (r.ramp) {
    const uint32_t paced = r.ramp->take(max_jobs, now);
    if (paced == 0) {
      r.counters.throttled.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard lock(mu_);
      schedule_by(r, now + r.ramp->time_until_next(now));
      return {};
    }
    max_jobs = paced;
  }
  if (!r.bucket) return {max_jobs, 0};
  const RateLimit& limit = r.bucket->limit();
  const uint32_t hint = std::max<uint32_t>(1, std::min(r.cost_hint, limit.burst));
  const uint64_t want = std::min<uint64_t>(uint64_t{max_jobs} * hint, UINT32_MAX);
  // A fleet bucket is a storage write per take: wait for kFleetTakeQuantum's
  // worth of tokens (at most the burst or what the claim can use), so its
  // writes per second are bounded by the processes, never the job rate.
  uint32_t at_least = hint;
  if (r.bucket->fleet()) {
    const double quantum = std::ceil(limit.rate_per_sec * kFleetTakeQuantum.count() / 1000.0);
    const uint64_t cap = std::min<uint64_t>(limit.burst, want);
    at_least = static_cast<uint32_t>(
        std::max<uint64_t>(hint, std::min<uint64_t>(cap, static_cast<uint64_t>(quantum))));
  }
  uint32_t got = 0;
  try {
    got = r.bucket->take(static_cast<uint32_t>(want), now, at_least);
  } catch (const std::exception& e) {
    if (r.ramp) r.ramp->give_back(max_jobs, now);
    claim_failed(r, 0, e, "taking tokens of a fleet rate limit", now);
    return {};
  }
  const uint32_t jobs = got == 0 ? 0 : std::min(max_jobs, std::max<uint32_t>(1, got / hint));
  if (r.ramp && jobs < max_jobs) r.ramp->give_back(max_jobs - jobs, now);
  if (got == 0) {
    r.counters.throttled.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mu_);
    schedule_by(r, now + r.bucket->time_until(at_least, now));
    return {};
  }
  return {jobs, got};
}

uint32_t Dispatcher::token_cost(const Job& job, uint32_t burst) {
  // A job dearer than the burst (lowered since it was enqueued) takes a full bucket.
  return std::clamp<uint32_t>(static_cast<uint32_t>(std::max(job.cost, 1)), 1, burst);
}

uint32_t Dispatcher::tokens_for(const QueueRunner& r, std::span<const Job> jobs) {
  if (!r.bucket) return 0;
  const uint32_t burst = r.bucket->limit().burst;
  uint64_t sum = 0;
  for (const Job& job : jobs) sum += token_cost(job, burst);
  return static_cast<uint32_t>(std::min<uint64_t>(sum, UINT32_MAX));
}

void Dispatcher::refund_tokens(QueueRunner& r, uint32_t n) {
  if (!r.bucket || n == 0) return;
  try {
    r.bucket->refund(n);
  } catch (const std::exception& e) {
    spdlog::debug("queue {}: giving back {} fleet token(s) failed (they are lost): {}", r.name, n,
                  e.what());
  }
}

bool Dispatcher::settle_costs(QueueRunner& r, std::vector<Job>& jobs, uint32_t tokens,
                              SteadyTime now) {
  if (!r.bucket) return false;
  const uint32_t burst = r.bucket->limit().burst;
  const auto cost = [burst](const Job& job) { return token_cost(job, burst); };
  uint32_t most = 1;
  for (const Job& job : jobs) most = std::max(most, cost(job));
  if (!jobs.empty()) r.cost_hint = most;
  const uint32_t need = tokens_for(r, jobs);
  uint32_t have = tokens;
  if (need > have) {
    try {
      have += r.bucket->take(need - have, now);
    } catch (const std::exception& e) {
      spdlog::debug("queue {}: taking fleet tokens for costly jobs failed: {}", r.name, e.what());
    }
  }
  bool gave_back = false;
  uint32_t used = need;
  if (need > have) {
    // Start the jobs that fit, in claim order; the rest wait for their tokens.
    size_t keep = 0;
    used = 0;
    for (; keep < jobs.size() && used + cost(jobs[keep]) <= have; ++keep) used += cost(jobs[keep]);
    give_back(r, std::span<const Job>(jobs.data() + keep, jobs.size() - keep),
              "its tokens were not there yet");
    jobs.erase(jobs.begin() + static_cast<std::ptrdiff_t>(keep), jobs.end());
    gave_back = true;
  }
  refund_tokens(r, have - used);
  if (gave_back) {
    std::lock_guard lock(mu_);
    schedule_by(r, now + r.bucket->time_until(r.cost_hint, now));
  }
  return gave_back;
}

void Dispatcher::claim_failed(QueueRunner& r, uint32_t tokens, const std::exception& e,
                              const char* what, SteadyTime now) {
  if (auto* se = dynamic_cast<const StorageError*>(&e); se && options_.health)
    options_.health->failed(what, *se);
  refund_tokens(r, tokens);
  r.error_backoff =
      std::min(kMaxErrorBackoff, std::max(std::chrono::milliseconds(50), r.error_backoff * 2));
  spdlog::warn("queue {}: claim failed, retrying in {} ms ({}): {}", r.name,
               r.error_backoff.count(), what, e.what());
  std::lock_guard lock(mu_);
  schedule_by(r, now + r.error_backoff);
}

void Dispatcher::serve_remote(QueueRunner& r, SteadyTime now) {
  // Kinds sets this poll found no job of: a claim wanting only kinds of one
  // of them would find none either.
  std::vector<const std::vector<std::string>*> empty_for;
  for (auto it = r.remote.begin(); it != r.remote.end();) {
    RemoteClaim& claim = **it;
    if (!claim.waiting()) {
      it = r.remote.erase(it);
      continue;
    }
    const bool known_empty =
        std::any_of(empty_for.begin(), empty_for.end(), [&](const std::vector<std::string>* k) {
          return std::includes(k->begin(), k->end(), claim.kinds.begin(), claim.kinds.end());
        });
    if (known_empty) {
      ++it;
      continue;
    }
    switch (try_remote(r, claim, now)) {
      case RemoteTry::kGranted:
      case RemoteTry::kGone:
        it = r.remote.erase(it);
        break;
      case RemoteTry::kEmpty:
        empty_for.push_back(&claim.kinds);
        ++it;
        break;
      case RemoteTry::kNoPermits:
      case RemoteTry::kThrottled:
      case RemoteTry::kFailed:
        return;  // nobody else can be served now either
    }
  }
}

void Dispatcher::interrupt() {
  std::lock_guard lock(mu_);
  interrupted_ = true;
  cv_.notify_one();
}

void Dispatcher::schedule(QueueRunner& r, SteadyTime due) {
  if (r.scheduled) timers_.erase({r.due, &r});
  r.due = due;
  r.scheduled = true;
  timers_.insert({due, &r});
}

void Dispatcher::schedule_by(QueueRunner& r, SteadyTime due) {
  if (!r.scheduled || due < r.due) schedule(r, due);
}

SteadyTime Dispatcher::run_due(SteadyTime now) {
  std::list<LocalClaim> slow_done;  // taken with the wake-ups: none is lost
  std::vector<QueueRunner*> due;
  std::vector<std::shared_ptr<RemoteClaim>> fresh;
  expire_remote(now);
  {
    std::lock_guard lock(mu_);
    slow_done.swap(slow_done_);
    fresh.swap(remote_submitted_);
    for (QueueRunner* r : woken_) {
      schedule(*r, now);
      r->short_polls_after_wake = kShortPollsAfterWake;
    }
    woken_.clear();
    if (!due_inbox_.empty()) {
      const int64_t wall = clock_.wall_now_us();
      // Remembered only for drained_poll's rare poll; the timer is set anyway.
      const bool remember = options_.notified_due && options_.notified_due();
      for (auto [r, at] : due_inbox_) {
        if (remember && r->due_at_us.insert(at).second && r->due_at_us.size() > kMaxDueTimes) {
          auto last = std::prev(r->due_at_us.end());
          r->due_dropped_until_us = std::max(r->due_dropped_until_us, *last);
          r->due_at_us.erase(last);
        }
        schedule_by(*r, now + std::chrono::microseconds(std::max<int64_t>(0, at - wall)));
      }
      due_inbox_.clear();
    }
    interrupted_ = false;
    while (!timers_.empty() && timers_.begin()->first <= now) {
      QueueRunner* r = timers_.begin()->second;
      timers_.erase(timers_.begin());
      r->scheduled = false;
      due.push_back(r);
    }
  }
  // What the slow-claim thread claimed since the last pass.
  for (LocalClaim& c : slow_done) finish_claim(c, now);
  // Limited queues first, the one nearest to a full bucket first: an
  // unlimited queue loses nothing by waiting, a limited one loses the tokens
  // that would overflow its burst. Then, while limited queues are a whole
  // batch behind, rounds of catch-up claims (one each per round, nearest to
  // overflow first), and only then the unlimited queues.
  std::vector<QueueRunner*> limited;
  std::vector<QueueRunner*> unlimited;
  for (QueueRunner* r : due) (r->bucket ? limited : unlimited).push_back(r);
  auto by_urgency = [&](SteadyTime at) {
    // A poll may have lifted a queue's limit (refresh_limit): its bucket is
    // gone, and it has nothing to catch up.
    std::erase_if(limited, [](QueueRunner* r) { return !r->bucket; });
    std::stable_sort(limited.begin(), limited.end(), [at](QueueRunner* a, QueueRunner* b) {
      return time_to_full(*a->bucket, at) < time_to_full(*b->bucket, at);
    });
  };
  by_urgency(now);
  for (QueueRunner* r : limited) poll(*r, now);
  for (uint32_t round = 0; round < kMaxCatchUpRounds; ++round) {
    by_urgency(clock_.steady_now());
    bool claimed = false;
    for (QueueRunner* r : limited) claimed = catch_up(*r) || claimed;
    if (!claimed) break;
  }
  for (QueueRunner* r : unlimited) poll(*r, now);
  for (const auto& claim : fresh) start_remote(claim, now);
  std::lock_guard lock(mu_);
  if (!woken_.empty()) return now;
  SteadyTime next = timers_.empty() ? SteadyTime::max() : timers_.begin()->first;
  if (!remote_deadlines_.empty()) next = std::min(next, remote_deadlines_.begin()->first);
  return next;
}

bool Dispatcher::catch_up(QueueRunner& r) {
  // Each claim is a storage round trip (a commit, on PostgreSQL) that costs
  // about the same for 1 job or 100, and they run one after another. With one
  // claim per queue per pass, a pass with slow unlimited claims in it (25 ms)
  // held a 5,000/s queue to claim_batch_max per pass (100 per 25 ms). So a
  // limited queue still a whole batch of tokens behind claims again before
  // the unlimited queues' turn, waiting up to kCatchUpPermitWait for its
  // permits. Whole batches only (or the whole burst, if smaller), so no run
  // of tiny claims.
  if (!r.bucket || r.claim_in_flight) return false;
  const uint32_t full_batch =
      std::min({r.max_workers, options_.claim_batch_max, r.bucket->limit().burst});
  SteadyTime now = clock_.steady_now();
  {
    std::lock_guard lock(mu_);
    // Only a queue that claimed a full batch comes back at once (not one
    // throttled, parked, coalescing, drained or backing off).
    if (!r.scheduled || r.due > now) return false;
  }
  if (r.bucket->available(now) < full_batch) return false;
  // The batch just claimed may still hold the permits: waiting a moment for
  // them is cheaper than handing the thread to another queue's claim.
  if (r.in_flight.load(std::memory_order_acquire) + full_batch > r.max_workers) {
    r.wake_below.store(r.max_workers - full_batch + 1, std::memory_order_release);
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, kCatchUpPermitWait, [&] {
      return r.in_flight.load(std::memory_order_acquire) + full_batch <= r.max_workers;
    });
    r.wake_below.store(0, std::memory_order_release);
    if (r.in_flight.load(std::memory_order_acquire) + full_batch > r.max_workers) return false;
    now = clock_.steady_now();
  }
  {
    std::lock_guard lock(mu_);
    if (!r.scheduled) return false;
    timers_.erase({r.due, &r});
    r.scheduled = false;
  }
  poll(r, now);
  return true;
}

void Dispatcher::park(QueueRunner& r) {
  r.parked.store(true, std::memory_order_release);
  // A job may have finished between the permit check and parking: re-check
  // so its wake-up is not lost.
  if (r.in_flight.load(std::memory_order_acquire) < r.max_workers &&
      r.parked.exchange(false, std::memory_order_acq_rel)) {
    std::lock_guard lock(mu_);
    woken_.push_back(&r);
  }
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

double Dispatcher::sending_rate(const QueueRunner& r, SteadyTime now) {
  const uint64_t sent =
      r.counters.dispatched.load(std::memory_order_relaxed) - r.rate_sample_dispatched;
  const double seconds =
      std::max(1.0, std::chrono::duration<double>(now - r.rate_sample_at).count());
  return std::max(r.sampled_rate, static_cast<double>(sent) / seconds);
}

void Dispatcher::poll(QueueRunner& r, SteadyTime now) {
  if (r.limit_generation != limits_.generation()) refresh_limit(r, now);
  if (now - r.rate_sample_at >= std::chrono::seconds(1) && !r.held) {
    const uint64_t dispatched = r.counters.dispatched.load(std::memory_order_relaxed);
    r.sampled_rate = static_cast<double>(dispatched - r.rate_sample_dispatched) /
                     std::chrono::duration<double>(now - r.rate_sample_at).count();
    r.rate_sample_at = now;
    r.rate_sample_dispatched = dispatched;
  }
  if (held(r, now)) return;
  if (r.remote.empty()) return poll_local(r, now);
  // Local handlers and remote workers share the permits and the bucket:
  // whoever was granted jobs last claims second (a poll that grants nothing,
  // such as the one right after a grant, changes no turn).
  const bool remote_first = r.remote_first;
  if (remote_first) serve_remote(r, now);
  poll_local(r, now);
  if (!remote_first) serve_remote(r, now);
}

void Dispatcher::poll_local(QueueRunner& r, SteadyTime now) {
  if (r.claim_in_flight) {
    // Its slow claim's delivery schedules it; a wake meanwhile is kept.
    r.polled_during_claim = true;
    return;
  }
  const uint32_t in_flight = r.in_flight.load(std::memory_order_acquire);
  const uint32_t total = total_in_flight_.load(std::memory_order_acquire);
  const uint32_t queue_free = in_flight >= r.max_workers ? 0 : r.max_workers - in_flight;
  const uint32_t global_free = total >= options_.max_in_flight ? 0 : options_.max_in_flight - total;
  if (queue_free == 0) {
    park(r);
    return;
  }
  if (global_free == 0) {
    std::lock_guard lock(mu_);
    waiting_global_.push_back(&r);
    has_global_waiters_.store(true);  // seq_cst: ordered before the re-check
    // A slot may have been freed between the load above and the store, by a
    // job that saw no waiter: re-check so its wake-up is not lost (as park).
    if (total_in_flight_.load() < options_.max_in_flight) wake_global_waiters();
    return;
  }
  if (options_.outcomes_backlogged && options_.outcomes_backlogged()) {
    std::lock_guard lock(mu_);
    schedule_by(r, now + options_.poll_interval);
    return;
  }
  const std::vector<std::string>* kinds = claim_filter();
  if (kinds && kinds->empty()) {
    // No consumer here: claim nothing (a kind registered later wakes us up).
    std::lock_guard lock(mu_);
    schedule_by(r, now + options_.poll_interval);
    return;
  }
  if (r.local_idle) {
    // Remote workers claim here and the last local claim came back short:
    // claim again only for a wake that may concern local kinds, or after a
    // poll interval (a scan behind other kinds' jobs costs, on some plugins).
    if (r.local_work.exchange(false, std::memory_order_acq_rel) || now >= r.local_retry) {
      r.local_idle = false;
    } else {
      std::lock_guard lock(mu_);
      schedule_by(r, r.local_retry);
      return;
    }
  }
  uint32_t batch = std::min({queue_free, global_free, options_.claim_batch_max});
  // Busy queue, few permits back: give other jobs a moment to finish so the
  // claim is a batch. Bounded: the next poll claims whatever is free.
  const uint32_t full_batch = std::min(r.max_workers, options_.claim_batch_max);
  // Not while remote claims wait here: the permits and tokens waited for
  // would go to them, every time.
  if (in_flight > 0 && batch < full_batch / 2 && !r.coalescing && options_.coalesce.count() > 0 &&
      r.remote.empty()) {
    r.coalescing = true;
    // Fast jobs free a full batch long before the timer: wake then. (A wake
    // missed in the race with this store only falls back to the timer.)
    r.wake_below.store(r.max_workers - full_batch + 1, std::memory_order_release);
    std::lock_guard lock(mu_);
    schedule_by(r, now + options_.coalesce);
    return;
  }
  r.coalescing = false;
  r.wake_below.store(0, std::memory_order_release);
  const Grant grant = take_tokens(r, batch, now);
  if (grant.jobs == 0) return;

  LocalClaim c;
  c.runner = &r;
  c.grant = grant;
  // A queue remote workers claim from holds their kinds: never the plain claim.
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
    r.claim_in_flight = true;
    std::lock_guard lock(slow_mu_);
    slow_requests_.push_back(std::move(c));
    if (slow_requests_.size() > slow_waiting_ && slow_threads_.size() < kSlowClaimThreads)
      slow_threads_.emplace_back([this] { run_slow_claims(); });
    slow_cv_.notify_one();
    return;
  }
  make_claim(c);
  finish_claim(c, now);
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

void Dispatcher::finish_claim(LocalClaim& c, SteadyTime now) {
  QueueRunner& r = *c.runner;
  r.claim_in_flight = false;
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
    try {
      std::rethrow_exception(c.error);
    } catch (const std::exception& e) {
      claim_failed(r, c.grant.tokens, e, "claiming jobs", now);
    } catch (...) {
      claim_failed(r, c.grant.tokens, std::runtime_error("an unknown error"), "claiming jobs", now);
    }
    return;
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
      give_back(r, std::span<const Job>(&*unserved, static_cast<size_t>(jobs.end() - unserved)),
                "no consumer here serves its kind");
      jobs.erase(unserved, jobs.end());
      r.filter_until = now + kFilterHold;
      gave_back = true;  // the served jobs behind them: claim again at once
    }
  }
  // Jobs found, before those whose tokens are not there yet go back.
  const auto found = static_cast<uint32_t>(jobs.size());
  const bool waiting_for_tokens = settle_costs(r, jobs, c.grant.tokens, now);
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
  // Jobs waiting for tokens: settle_costs scheduled r for them. A full batch
  // means more may be ready: come back at once. Otherwise the queue is
  // drained (or paused) until new work wakes it or the poll interval; a
  // wake while the claim was on the slow-claim thread may be for jobs it
  // did not see: come back at once then too.
  if (waiting_for_tokens) return;
  const SteadyTime next = found == batch || gave_back || woken ? now : drained_poll(r, now);
  std::lock_guard lock(mu_);
  schedule_by(r, next);
}

void Dispatcher::release_reserved(QueueRunner& r, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) release_permit(r, true);
}

void Dispatcher::run_slow_claims() {
  std::unique_lock lock(slow_mu_);
  for (;;) {
    ++slow_waiting_;
    slow_cv_.wait(lock, [&] { return slow_stop_ || !slow_requests_.empty(); });
    --slow_waiting_;
    if (slow_stop_) return;  // what is left, stop_slow_claims gives back
    std::list<LocalClaim> one;
    one.splice(one.begin(), slow_requests_, slow_requests_.begin());
    lock.unlock();
    make_claim(one.front());
    {
      std::lock_guard done(mu_);
      slow_done_.splice(slow_done_.end(), one);
      interrupted_ = true;
      cv_.notify_one();
    }
    lock.lock();
  }
}

void Dispatcher::stop_slow_claims() {
  if (slow_threads_.empty()) return;
  {
    std::lock_guard lock(slow_mu_);
    slow_stop_ = true;
  }
  slow_cv_.notify_all();
  for (std::thread& t : slow_threads_) t.join();
  slow_threads_.clear();
  std::list<LocalClaim> left;
  {
    std::lock_guard lock(slow_mu_);
    left.splice(left.end(), slow_requests_);  // never made
  }
  {
    std::lock_guard lock(mu_);
    left.splice(left.end(), slow_done_);  // made, not delivered
  }
  for (LocalClaim& c : left) {
    QueueRunner& r = *c.runner;
    if (!c.error) give_back(r, c.jobs, "the dispatcher is stopping");
    refund_tokens(r, c.grant.tokens);
    release_reserved(r, c.reserved);
    r.claim_in_flight = false;
  }
}

SteadyTime Dispatcher::drained_poll(QueueRunner& r, SteadyTime now) {
  const SteadyTime soon = now + options_.poll_interval;
  const int64_t wall = clock_.wall_now_us();
  const int64_t grace_us =
      std::chrono::duration_cast<std::chrono::microseconds>(options_.poll_interval).count();
  // A time a poll interval past had its poll (and the short polls after it,
  // in case our clocks disagreed by a little about when its jobs are due).
  while (!r.due_at_us.empty() && *r.due_at_us.begin() + grace_us < wall)
    r.due_at_us.erase(r.due_at_us.begin());
  if (!options_.notified_due || !options_.notified_due()) return soon;
  if (r.due_dropped_until_us != 0) {
    if (wall <= r.due_dropped_until_us + grace_us) return soon;
    r.due_dropped_until_us = 0;
  }
  if (!r.due_at_us.empty() && *r.due_at_us.begin() <= wall) return soon;
  if (r.short_polls_after_wake > 0) {
    --r.short_polls_after_wake;
    return soon;
  }
  SteadyTime next = now + kSweptWait;
  if (!options_.swept) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const auto quiet_ms = options_.notified_poll.count();
    std::uniform_int_distribution<int64_t> jitter(quiet_ms / 2, quiet_ms);
    next = now + std::chrono::milliseconds(jitter(rng));
  }
  if (!r.due_at_us.empty())
    next = std::min(next, now + std::chrono::microseconds(*r.due_at_us.begin() - wall));
  return next;
}

void Dispatcher::give_back(const QueueRunner& r, std::span<const Job> jobs, const char* why) {
  // One release per job with its own run_at as "now": it stays where it was
  // in claim order, and its time waiting (the unserved report's grace) keeps
  // counting. Rare: unserved kinds once per queue per kFilterHold; costly
  // jobs when cost_hint underestimated them (the first batch, mixed costs).
  for (const Job& job : jobs) {
    const conveyor_lease lease = job.lease();
    try {
      storage_.release(std::span<const conveyor_lease>(&lease, 1), job.run_at_us);
    } catch (const std::exception& e) {
      spdlog::warn(
          "queue {}: giving back job {} of kind '{}' ({}) failed (its lease expires "
          "and it is rescued): {}",
          r.name, job.id, job.kind, why, e.what());
    }
  }
}

void Dispatcher::run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    SteadyTime next = run_due(clock_.steady_now());
    std::unique_lock lock(mu_);
    if (interrupted_ || stop.stop_requested()) continue;
    if (next == SteadyTime::max()) {
      cv_.wait(lock, [&] { return interrupted_ || stop.stop_requested(); });
    } else {
      cv_.wait_until(lock, next, [&] { return interrupted_ || stop.stop_requested(); });
    }
  }
  stop_slow_claims();
}

Dispatcher::~Dispatcher() { stop_slow_claims(); }

std::vector<RunnerView> Dispatcher::runners() const {
  std::lock_guard lock(mu_);
  std::vector<RunnerView> out;
  for (const auto& [name, r] : runners_) out.push_back({name, r->in_flight.load(), r->max_workers});
  return out;
}

}  // namespace conveyor
