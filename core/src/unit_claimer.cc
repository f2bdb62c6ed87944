#include "unit_claimer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
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

}  // namespace

UnitClaimer::UnitClaimer(Storage& storage, const Clock& clock, Permits& permits, Options options,
                         Execute execute, std::function<void()> made)
    : storage_(storage),
      clock_(clock),
      permits_(permits),
      options_(std::move(options)),
      execute_(std::move(execute)),
      tokens_(storage),
      slow_([this](LocalClaim& c) { make(c); }, std::move(made)) {}

Next UnitClaimer::claim_local(QueueRunner& r, uint32_t batch, const std::vector<std::string>* kinds,
                              SteadyTime now) {
  const Grant grant = tokens_.take(r, batch, now);
  if (grant.error) return failed(r, 0, grant.error, "taking tokens of a fleet rate limit", now);
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
    permits_.take(r, c.reserved, true);
    r.state = UnitState::kClaimInFlight;
    slow_.submit(std::move(c));
    return Next::claim_in_flight();
  }
  make(c);
  return finish(c, kinds, now);
}

void UnitClaimer::make(LocalClaim& c) {
  const auto start = std::chrono::steady_clock::now();
  try {
    const QueueRunner& r = *c.runner;
    if (r.keys) {
      static const std::vector<std::string> kAnyKind;
      c.jobs = claim_by_keys(r, c.filtered ? c.kinds : kAnyKind, c.grant.jobs, c.wall_us,
                             c.expires_us, &c.keys_blocked);
    } else {
      c.jobs = c.filtered ? storage_.claim_kinds(r.name, c.kinds, c.grant.jobs, fresh_lease_token(),
                                                 c.wall_us, c.expires_us)
                          : storage_.claim(r.name, c.grant.jobs, fresh_lease_token(), c.wall_us,
                                           c.expires_us);
    }
  } catch (...) {
    c.error = std::current_exception();
  }
  c.took = std::chrono::steady_clock::now() - start;
}

std::vector<Job> UnitClaimer::claim_by_keys(const QueueRunner& r,
                                            const std::vector<std::string>& kinds, uint32_t permits,
                                            int64_t wall_us, int64_t expires_us,
                                            KeyTurns::Blocked* blocked) {
  KeyTurns& keys = *r.keys;
  const SteadyTime now = clock_.steady_now();
  const std::vector<Storage::KeyClaim> asked = keys.allocate(
      permits, now,
      [&](const std::optional<std::string>& after, uint32_t limit, uint32_t count_limit) {
        return storage_.list_ready_keys(r.name, after, limit, count_limit, wall_us);
      });
  if (blocked) *blocked = keys.blocked();
  if (asked.empty()) return {};
  // Only the empty key is ready and no key has a limit: its turns are claim
  // order, so the plain claim does, on the path each plugin made fastest
  // (postgres-queue's claim hint). A job of a key that became ready since
  // the listing may come with it, in claim order: no limit is passed by.
  const bool only_the_empty_key =
      asked.size() == 1 && asked.front().key.empty() && !keys.limits_keys();
  try {
    std::vector<Job> jobs =
        only_the_empty_key
            ? (kinds.empty() ? storage_.claim(r.name, asked.front().max_jobs, fresh_lease_token(),
                                              wall_us, expires_us)
                             : storage_.claim_kinds(r.name, kinds, asked.front().max_jobs,
                                                    fresh_lease_token(), wall_us, expires_us))
            : storage_.claim_keys(r.name, kinds, asked, fresh_lease_token(), wall_us, expires_us);
    keys.claimed(asked, jobs, now, /*failed=*/false, /*filtered=*/!kinds.empty());
    return jobs;
  } catch (...) {
    keys.claimed(asked, {}, now, /*failed=*/true);
    throw;
  }
}

Next UnitClaimer::finish(LocalClaim& c, const std::vector<std::string>* kinds, SteadyTime now) {
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
    permits_.release_local(r, c.reserved);
    return failed(r, c.grant.tokens, c.error, "claiming jobs", now);
  }
  r.counters.claims.fetch_add(1, std::memory_order_relaxed);
  if (r.error_backoff.count() > 0) spdlog::info("queue {}: claims work again", r.name);
  r.error_backoff = std::chrono::milliseconds(0);
  if (options_.health) options_.health->succeeded();

  std::vector<Job>& jobs = c.jobs;
  const uint32_t batch = c.grant.jobs;
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
    r.local_retry = now + options_.drained.poll_interval;
  }
  if (c.reserved > 0) {
    permits_.release_local(r, c.reserved - claimed);
  } else {
    permits_.take(r, claimed, true);
  }
  if (r.keys) r.keys->started(jobs);
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
  if (r.keys) {
    // Short of a batch, but not drained: keys beyond the page listed (read
    // them now); keys held back by their own limits (a key at
    // key_max_workers: a job of the queue ending wakes the unit; a
    // throttled or held key: when it may start again); or a key whose claim
    // came back short while others still have jobs (claim again now).
    const KeyTurns::Blocked& b = c.keys_blocked;
    if (b.more_keys) return Next::scheduled(now, WaitReason::kMoreReady);
    if (b.by_workers)
      r.wake_below.store(r.in_flight.load(std::memory_order_acquire), std::memory_order_release);
    if (b.tokens_at) return Next::scheduled(*b.tokens_at, WaitReason::kKeyLimits);
    if (b.by_workers)
      return Next::scheduled(now + options_.drained.poll_interval, WaitReason::kKeyLimits);
    if (found > 0 && r.keys->has_ready(now)) return Next::scheduled(now, WaitReason::kMoreReady);
  }
  const bool notified = options_.notified_due && options_.notified_due();
  return Next::scheduled(
      r.due_times.next_poll(now, clock_.wall_now_us(), notified, options_.drained),
      WaitReason::kDrained);
}

Next UnitClaimer::failed(QueueRunner& r, uint32_t tokens, const std::exception_ptr& error,
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

void UnitClaimer::stop() {
  // The pool's threads are joined first: nothing else touches these claims.
  for (LocalClaim& c : slow_.stop()) {
    QueueRunner& r = *c.runner;
    if (!c.error) give_back(storage_, r.name, c.jobs, "the dispatcher is stopping");
    tokens_.refund(r, c.grant.tokens);
    permits_.release_local(r, c.reserved);
    r.state = UnitState::kScheduled;
  }
}

RemoteClaimMatcher::Try UnitClaimer::claim_remote(QueueRunner& r, RemoteClaim& claim,
                                                  uint32_t permits, SteadyTime now) {
  using Try = RemoteClaimMatcher::Try;
  if (!claim.waiting()) return {Try::kGone, std::nullopt};
  const Grant grant =
      tokens_.take(r, std::min({permits, claim.max_jobs, options_.claim_batch_max}), now);
  if (grant.error)
    return {Try::kFailed, failed(r, 0, grant.error, "taking tokens of a fleet rate limit", now)};
  if (grant.jobs == 0)
    return {Try::kThrottled, Next::scheduled(grant.wait_until, WaitReason::kTokens)};
  std::vector<Job> jobs;
  const int64_t wall = clock_.wall_now_us();
  try {
    // A keyed unit: the same turns between keys, and the same per-key
    // limits, as its local claims.
    jobs = r.keys ? claim_by_keys(r, claim.kinds, grant.jobs, wall, wall + claim.lease.count(),
                                  nullptr)
                  : storage_.claim_kinds(r.name, claim.kinds, grant.jobs, fresh_lease_token(), wall,
                                         wall + claim.lease.count());
    r.counters.claims.fetch_add(1, std::memory_order_relaxed);
    if (options_.health) options_.health->succeeded();
  } catch (const std::exception&) {
    return {Try::kFailed, failed(r, grant.tokens, std::current_exception(),
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
    for (const Job& job : jobs) leases.push_back(lease_of(job));
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
  permits_.take(r, claimed, false);
  if (r.keys) r.keys->started(jobs);
  r.counters.dispatched.fetch_add(claimed, std::memory_order_relaxed);
  for (const Job& job : jobs)
    r.counters.pickup_latency.observe(
        static_cast<double>(std::max<int64_t>(0, wall - job.run_at_us)) / 1e6);
  r.remote_first = false;  // the local handlers' turn next
  claim.deliver(&r, std::move(jobs));
  return {Try::kGranted, wait_for_tokens};
}

}  // namespace conveyor
