#include "remote_claim_matcher.hpp"

#include <algorithm>
#include <cmath>
#include <random>

namespace conveyor {

bool RemoteClaimMatcher::submit(std::shared_ptr<RemoteClaim> claim) {
  MutexLock lock(mu_);
  if (closed_) return false;
  submitted_.push_back(std::move(claim));
  return true;
}

std::vector<std::shared_ptr<RemoteClaim>> RemoteClaimMatcher::take_submitted() {
  std::vector<std::shared_ptr<RemoteClaim>> fresh;
  MutexLock lock(mu_);
  fresh.swap(submitted_);
  return fresh;
}

void RemoteClaimMatcher::start(const std::shared_ptr<RemoteClaim>& claim, SteadyTime now,
                               const UnitFor& unit_for, const TryOne& try_one,
                               const std::function<void(QueueRunner&, Next)>& enter) {
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
  std::vector<QueueRunner*> units;
  bool answered = false;
  for (const auto& [key, i] : order) {
    QueueRunner& r = unit_for(claim->queues[i]);
    r.remote_seen = true;
    units.push_back(&r);
    if (answered) continue;
    const Try t = try_one(r, *claim);
    if (t.next) enter(r, *t.next);
    answered = t.result == Try::kGranted || t.result == Try::kGone;
  }
  if (answered) return;
  if (claim->deadline <= now) {
    if (claim->take()) claim->deliver(nullptr, {});
    return;
  }
  for (QueueRunner* r : units) r->remote.push_back(claim);
  deadlines_.emplace(claim->deadline, claim);
}

std::optional<Next> RemoteClaimMatcher::serve(QueueRunner& r, const TryOne& try_one) {
  // Kinds sets this poll found no job of: a claim wanting only kinds of one
  // of them would find none either.
  std::vector<const std::vector<std::string>*> empty_for;
  // The earliest time a try asked to come back (jobs given back for tokens).
  std::optional<Next> wish;
  const auto keep = [&wish](const std::optional<Next>& n) {
    if (n && (!wish || (n->state == UnitState::kScheduled &&
                        (wish->state != UnitState::kScheduled || n->at < wish->at))))
      wish = n;
  };
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
    Try t = try_one(r, claim);
    keep(t.next);
    switch (t.result) {
      case Try::kGranted:
      case Try::kGone:
        it = r.remote.erase(it);
        break;
      case Try::kEmpty:
        empty_for.push_back(&claim.kinds);
        ++it;
        break;
      case Try::kNoPermits:
      case Try::kThrottled:
      case Try::kFailed:
        return wish;  // nobody else can be served now either
    }
  }
  return wish;
}

void RemoteClaimMatcher::expire(SteadyTime now) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    std::shared_ptr<RemoteClaim> claim = std::move(deadlines_.begin()->second);
    deadlines_.erase(deadlines_.begin());
    if (claim->take()) claim->deliver(nullptr, {});
  }
}

SteadyTime RemoteClaimMatcher::next_deadline() const {
  return deadlines_.empty() ? SteadyTime::max() : deadlines_.begin()->first;
}

void RemoteClaimMatcher::close(const std::vector<QueueRunner*>& units) {
  std::vector<std::shared_ptr<RemoteClaim>> left;
  {
    MutexLock lock(mu_);
    closed_ = true;
    left.swap(submitted_);
  }
  for (QueueRunner* r : units) r->remote.clear();
  for (auto& [deadline, claim] : deadlines_) left.push_back(std::move(claim));
  deadlines_.clear();
  for (const auto& claim : left)
    if (claim->take()) claim->deliver(nullptr, {});
}

}  // namespace conveyor
