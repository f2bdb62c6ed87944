#include "key_turns.hpp"

#include "fleet_bucket.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace conveyor {

KeyTurns::KeyTurns(Limits limits, std::atomic<uint64_t>* throttled_count,
                   std::optional<Fleet> fleet)
    : limits_(std::move(limits)),
      overrides_(std::make_shared<const LimitResolver::KeyOverrides>()),
      throttled_count_(throttled_count),
      fleet_(std::move(fleet)) {}

KeyTurns::~KeyTurns() = default;

KeyTurns::KeyLimit KeyTurns::resolve(const Limits& config,
                                     const LimitResolver::KeyOverrides& overrides, bool enabled,
                                     std::string_view key) {
  KeyLimit out;
  if (const auto w = overrides.weights.find(key); w != overrides.weights.end())
    out.weight = w->second;
  if (const auto o = overrides.limits.find(key); o != overrides.limits.end())
    out = {o->second, LimitSource::kOverride, out.weight};
  else if (overrides.every_key)
    out = {overrides.every_key, LimitSource::kEveryKeyOverride, out.weight};
  else if (config.rate)
    out = {config.rate, LimitSource::kQueueConfig, out.weight};
  if (out.limit && !enabled) out = {std::nullopt, LimitSource::kDisabled, out.weight};
  return out;
}

void KeyTurns::set_overrides(std::shared_ptr<const LimitResolver::KeyOverrides> overrides,
                             bool enabled) {
  MutexLock lock(mu_);
  overrides_ = std::move(overrides);
  enabled_ = enabled;
  ++limit_generation_;
}

KeyTurns::KeyLimit KeyTurns::limit_of(std::string_view key) const {
  MutexLock lock(mu_);
  return resolve(limits_, *overrides_, enabled_, key);
}

void KeyTurns::apply_limit(const std::string& key, KeyState& k, SteadyTime now) {
  if (k.limit_generation == limit_generation_) return;
  k.limit_generation = limit_generation_;
  const KeyLimit l = resolve(limits_, *overrides_, enabled_, key);
  k.weight = l.weight;
  const bool wants_fleet = l.limit && l.limit->scope == LimitScope::kFleet;
  const bool fleet =
      wants_fleet && fleet_ && fleet_->storage->has_slot(StorageSlot::kAddSharedState);
  // The config and the API refuse such a limit on this plugin; one stored by
  // a process whose plugin shares key buckets still reaches here: it holds
  // per process, and the log says so once.
  if (wants_fleet && !fleet && !warned_no_fleet_) {
    warned_no_fleet_ = true;
    spdlog::warn("queue {}: the limit of key '{}' has scope fleet, but {}: it holds per process",
                 fleet_ ? fleet_->queue : std::string("?"), key,
                 fleet_ ? "this storage plugin cannot share key buckets (ABI 1.3 add_shared_state)"
                        : "this queue's keys have no shared storage");
  }
  if (!l.limit) {
    k.bucket.reset();
    k.fleet.reset();
  } else if (fleet) {
    k.bucket.reset();
    if (k.fleet)
      k.fleet->reconfigure(*l.limit);
    else
      k.fleet = std::make_unique<FleetBucket>(
          *fleet_->storage, FleetBucket::Record{FleetBucket::key_for(fleet_->queue, key)}, *l.limit,
          *fleet_->clock, *fleet_->counters);
  } else {
    k.fleet.reset();
    if (k.bucket)
      k.bucket->reconfigure(*l.limit, now);
    else
      k.bucket.emplace(*l.limit, now);
  }
}

uint32_t KeyTurns::tokens(const KeyState& k, SteadyTime now) {
  if (k.bucket) return k.bucket->available(now);
  if (k.fleet) return k.fleet->available() + k.fleet->spare();
  return std::numeric_limits<uint32_t>::max();
}

SteadyTime KeyTurns::next_token(const KeyState& k, SteadyTime now) {
  if (k.bucket) return now + k.bucket->time_until_next(now);
  if (k.fleet) return now + k.fleet->time_until(1);
  return now;
}

void KeyTurns::refund(KeyState& k, uint32_t n) {
  if (n == 0) return;
  if (k.bucket) k.bucket->refund(n);
  if (k.fleet) k.fleet->refund(n);
}

void KeyTurns::count_throttled(KeyState& k, SteadyTime now) {
  k.throttled = true;
  if (throttled_count_) throttled_count_->fetch_add(1, std::memory_order_relaxed);
  const SteadyTime at = next_token(k, now);
  if (!blocked_.tokens_at || at < *blocked_.tokens_at) blocked_.tokens_at = at;
}

void KeyTurns::mark_stale() {
  MutexLock lock(mu_);
  ++stale_count_;
}

void KeyTurns::reconfigure(const Limits& limits, SteadyTime now) {
  MutexLock lock(mu_);
  limits_ = limits;
  ++limit_generation_;
  for (auto& [key, k] : keys_) apply_limit(key, k, now);
}

bool KeyTurns::forgettable(const KeyState& k, SteadyTime now) const {
  return k.ready == 0 && k.running == 0 && (!k.held_until || *k.held_until <= now) &&
         (!k.bucket || k.bucket->available(now) >= k.bucket->limit().burst) &&
         (!k.fleet || k.fleet->available() >= k.fleet->limit().burst);
}

void KeyTurns::forget_idle(SteadyTime now) {
  std::erase_if(keys_, [&](const Keys::value_type& e) { return forgettable(e.second, now); });
}

std::pair<std::vector<Storage::ReadyKey>, bool> KeyTurns::read_keys(
    const std::optional<std::string>& cursor, uint32_t count_limit, const ListPage& list) {
  // One page from the first key: every key with ready jobs when there are
  // at most a page of them. With more, and the cursor past that page, also
  // the page after the cursor, where the turns go on.
  std::vector<Storage::ReadyKey> listed = list(std::nullopt, kPageKeys, count_limit);
  bool full = listed.size() == kPageKeys;
  if (full && cursor && listed.back().key < *cursor) {
    std::vector<Storage::ReadyKey> next = list(cursor, kPageKeys, count_limit);
    full = next.size() == kPageKeys;
    for (Storage::ReadyKey& k : next) listed.push_back(std::move(k));
  }
  return {std::move(listed), full};
}

void KeyTurns::apply_listing(std::vector<Storage::ReadyKey> listed, bool full, uint64_t stale_count,
                             uint32_t count_limit, SteadyTime now) {
  for (auto& [key, k] : keys_) {
    k.ready = 0;
    k.ready_capped = false;
  }
  for (Storage::ReadyKey& r : listed) {
    KeyState& k = keys_[std::move(r.key)];
    k.ready = std::max<int64_t>(r.ready, 1);
    k.ready_capped = r.ready >= count_limit;
  }
  ready_keys_ = listed.size();  // distinct: a listing names each key once
  listed_count_ = stale_count;
  page_full_ = full;
  listed_at_ = now;
  forget_idle(now);
}

uint32_t KeyTurns::headroom(KeyState& k, SteadyTime now) const {
  constexpr uint32_t kNoLimit = std::numeric_limits<uint32_t>::max();
  // A count that reached the listing's cap says "at least that many": the
  // key gives until a claim comes back short.
  if (k.held_until && now < *k.held_until) return 0;
  uint32_t room =
      k.ready_capped ? kNoLimit : static_cast<uint32_t>(std::min<int64_t>(k.ready, kNoLimit));
  if (limits_.workers)
    room = std::min(room, *limits_.workers > k.running ? *limits_.workers - k.running : 0);
  return std::min(room, tokens(k, now));
}

std::vector<Storage::KeyClaim> KeyTurns::allocate(uint32_t permits, SteadyTime now,
                                                  const ListPage& list) {
  MutexLock lock(mu_);
  const bool none_ready = ready_keys_ == 0;
  if (listed_count_ != stale_count_ || none_ready || !listed_at_ ||
      now - *listed_at_ >= kRelistEvery) {
    const uint64_t stale_count = stale_count_;
    const std::optional<std::string> cursor = turn_after_;
    const uint32_t count_limit = std::max<uint32_t>(permits, 1);
    lock.unlock();
    const ListPage counted = [&](const std::optional<std::string>& after, uint32_t limit,
                                 uint32_t count) {
      if (fleet_) fleet_->counters->key_listings.fetch_add(1, std::memory_order_relaxed);
      return list(after, limit, count);
    };
    auto [listed, full] = read_keys(cursor, count_limit, counted);
    lock.lock();
    apply_listing(std::move(listed), full, stale_count, count_limit, now);
  }

  blocked_ = {};
  // The ready keys in turn order: after the last key served, wrapping.
  struct Turn {
    Keys::iterator key;
    uint32_t room;
    uint32_t given;
    uint32_t fleet_got;  // tokens its fleet bucket gave (fleet scope only)
  };
  std::vector<Turn> turns;
  // A key whose share of the round the last claim cut short (its weight
  // above the permits left) goes on first with the rest of its share:
  // deficit round-robin, so weights hold however few the permits.
  Keys::iterator start = turn_after_ ? keys_.upper_bound(*turn_after_) : keys_.begin();
  std::optional<uint32_t> owed;
  if (resume_) {
    if (const auto it = keys_.find(resume_->first); it != keys_.end()) {
      start = it;
      owed = resume_->second;
    }
    resume_.reset();
  }
  uint32_t left = permits;
  std::optional<Keys::iterator> last_served;
  uint32_t last_share = 0;  // what last_served was given in its last share
  uint32_t last_owed = 0;   // what the round owed it then
  // Round one: one job for each key that may take one, in turn order, until
  // the permits run out. Keys past that point are not even looked at.
  auto visit = [&](Keys::iterator it) REQUIRES(mu_) {
    KeyState& k = it->second;
    if (k.ready <= 0) return;
    apply_limit(it->first, k, now);
    const uint32_t room = headroom(k, now);
    k.throttled = false;
    if (room == 0) {
      if (limits_.workers && k.running >= *limits_.workers) blocked_.by_workers = true;
      if (k.held_until && now < *k.held_until &&
          (!blocked_.tokens_at || *k.held_until < *blocked_.tokens_at))
        blocked_.tokens_at = *k.held_until;
      if ((k.bucket || k.fleet) && tokens(k, now) == 0) count_throttled(k, now);
      return;
    }
    // A key of weight w takes up to w jobs a round.
    const uint32_t quantum = it == start && owed ? *owed : k.weight;
    const uint32_t first = std::min({quantum, room, left});
    turns.push_back(Turn{it, room, first, 0});
    left -= first;
    last_served = it;
    last_share = first;
    last_owed = std::min(quantum, room);
  };
  for (auto it = start; it != keys_.end() && left > 0; ++it) visit(it);
  for (auto it = keys_.begin(); it != start && left > 0; ++it) visit(it);
  // Further rounds over the same keys, in the same order, while permits last.
  for (bool progress = true; left > 0 && progress;) {
    progress = false;
    for (Turn& t : turns) {
      if (left == 0) break;
      if (t.given >= t.room) continue;
      const uint32_t quantum = std::min(t.key->second.weight, t.room - t.given);
      const uint32_t more = std::min(quantum, left);
      t.given += more;
      left -= more;
      progress = true;
      last_served = t.key;
      last_share = more;
      last_owed = quantum;
    }
  }
  if (last_served) {
    turn_after_ = (*last_served)->first;
    if (last_share < last_owed) resume_.emplace((*last_served)->first, last_owed - last_share);
  }

  // Fleet buckets: the takes of every key served, in one storage call
  // (add_shared_states); other processes may have taken tokens since the
  // estimates above.
  {
    std::vector<FleetBucket::PreparedTake> prepared(turns.size());
    std::vector<size_t> pending;  // turns whose take is an add
    std::vector<Storage::KeyedAdd> adds;
    for (size_t i = 0; i < turns.size(); ++i) {
      FleetBucket* f = turns[i].key->second.fleet.get();
      if (!f) continue;
      prepared[i] = f->prepare_take(turns[i].given);
      turns[i].fleet_got = prepared[i].from_spare;
      if (!prepared[i].add) continue;
      pending.push_back(i);
      adds.push_back(Storage::KeyedAdd{f->record(), *prepared[i].add});
    }
    if (!adds.empty()) {
      std::vector<Storage::SharedAdded> results;
      try {
        fleet_->counters->key_bucket_calls.fetch_add(1, std::memory_order_relaxed);
        results = fleet_->storage->add_shared_states(adds);
      } catch (...) {
        for (size_t i : pending) turns[i].key->second.fleet->lost_reply();
        throw;
      }
      for (size_t j = 0; j < pending.size(); ++j) {
        Turn& t = turns[pending[j]];
        t.fleet_got = t.key->second.fleet->finish_take(prepared[pending[j]], results.at(j));
      }
    }
  }

  std::vector<Storage::KeyClaim> claims;
  claims.reserve(turns.size());
  for (Turn& t : turns) {
    KeyState& k = t.key->second;
    if (k.bucket) k.bucket->take(t.given, now, t.given);
    if (k.fleet && t.fleet_got < t.given) {
      left += t.given - t.fleet_got;
      t.given = t.fleet_got;
      if (t.given == 0) {
        count_throttled(k, now);
        continue;
      }
    }
    claims.push_back(Storage::KeyClaim{t.key->first, t.given});
    // A key with jobs left that this claim brings to its limit: the unit
    // comes back when it has a token, or when a job of the queue ends.
    if (!k.ready_capped && k.ready <= static_cast<int64_t>(t.given)) continue;
    if ((k.bucket || k.fleet) && tokens(k, now) == 0) count_throttled(k, now);  // from now
    if (limits_.workers && k.running + t.given >= *limits_.workers) blocked_.by_workers = true;
  }
  blocked_.more_keys = left > 0 && page_full_ && !claims.empty();
  if (blocked_.more_keys) ++stale_count_;  // read the keys beyond the page next time
  return claims;
}

void KeyTurns::claimed(std::span<const Storage::KeyClaim> asked, std::span<const Job> got,
                       SteadyTime now, bool failed, bool filtered) {
  MutexLock lock(mu_);
  std::unordered_map<std::string_view, uint32_t> per_key;
  for (const Job& j : got) ++per_key[j.key];
  for (const Storage::KeyClaim& a : asked) {
    const auto it = keys_.find(a.key);
    if (it == keys_.end()) continue;
    KeyState& k = it->second;
    const auto n = std::min(a.max_jobs, failed ? 0u : per_key[a.key]);
    refund(k, a.max_jobs - n);
    if (failed) continue;
    const bool was_ready = k.ready > 0;
    if (n < a.max_jobs) {
      k.ready = 0;  // it gave all it had (of the kinds asked)
      k.ready_capped = false;
      if (filtered) ++stale_count_;
    } else if (!k.ready_capped) {
      k.ready -= n;
    }
    if (was_ready && k.ready <= 0) --ready_keys_;
    // Only the keys of this claim: a walk over every key would make each
    // claim cost the keys known (the listing sweeps the rest).
    if (forgettable(k, now)) keys_.erase(it);
  }
  if (failed) ++stale_count_;
}

void KeyTurns::started(std::span<const Job> jobs) {
  MutexLock lock(mu_);
  for (const Job& j : jobs) {
    ++keys_[j.key].running;
    running_.emplace(j.id, j.key);
  }
}

void KeyTurns::finished(int64_t job_id) {
  MutexLock lock(mu_);
  const auto it = running_.find(job_id);
  if (it == running_.end()) return;
  const auto k = keys_.find(it->second);
  if (k != keys_.end() && k->second.running > 0) --k->second.running;
  running_.erase(it);
}

void KeyTurns::hold(const std::string& key, SteadyTime until) {
  MutexLock lock(mu_);
  KeyState& k = keys_[key];
  if (!k.held_until || *k.held_until < until) k.held_until = until;
}

bool KeyTurns::has_ready(SteadyTime now) const {
  MutexLock lock(mu_);
  const std::optional<uint32_t> workers = limits_.workers;
  return std::any_of(keys_.begin(), keys_.end(), [&](const Keys::value_type& e) {
    const KeyState& k = e.second;
    return k.ready > 0 && (!k.held_until || *k.held_until <= now) &&
           (!workers || k.running < *workers) && tokens(k, now) > 0;
  });
}

KeyTurns::Blocked KeyTurns::blocked() const {
  MutexLock lock(mu_);
  return blocked_;
}

std::vector<KeyTurns::KeyView> KeyTurns::snapshot() const {
  MutexLock lock(mu_);
  std::vector<KeyView> out;
  out.reserve(keys_.size());
  for (const auto& [key, k] : keys_) out.push_back(KeyView{key, k.ready, k.running, k.throttled});
  return out;
}

bool KeyTurns::limits_keys() const {
  MutexLock lock(mu_);
  return limits_.rate.has_value() || limits_.workers.has_value() || !overrides_->empty();
}

size_t KeyTurns::remembered() const {
  MutexLock lock(mu_);
  return keys_.size();
}

size_t KeyTurns::bytes_per_key() {
  // A std::map node: the pair plus three pointers and a colour (libstdc++),
  // rounded to the allocator's 16 bytes; keys longer than 15 bytes add their
  // length on the heap.
  constexpr size_t node = sizeof(Keys::value_type) + 4 * sizeof(void*);
  return (node + 15) / 16 * 16;
}

}  // namespace conveyor
