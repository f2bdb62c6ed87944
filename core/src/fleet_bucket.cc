#include "fleet_bucket.hpp"

#include <conveyor/config.hpp>

#include <algorithm>

namespace conveyor {

FleetBucket::FleetBucket(Storage& storage, std::string_view queue, const RateLimit& limit,
                         const Clock& clock, QueueCounters& counters)
    : storage_(storage),
      key_(key_for(queue)),
      clock_(clock),
      limit_(limit),
      shape_(bucket::Shape::of(limit)),
      adds_(storage.has_slot(StorageSlot::kAddSharedState)),
      counters_(counters) {}

FleetBucket::FleetBucket(Storage& storage, Record record, const RateLimit& limit,
                         const Clock& clock, QueueCounters& counters)
    : storage_(storage),
      key_(std::move(record.name)),
      clock_(clock),
      limit_(limit),
      shape_(bucket::Shape::of(limit)),
      adds_(storage.has_slot(StorageSlot::kAddSharedState)),
      counters_(counters) {}

std::string FleetBucket::key_for(std::string_view queue) {
  return "ratelimit.bucket:" + std::string(queue);
}

std::string FleetBucket::key_for(std::string_view queue, std::string_view key) {
  std::string name = std::string(kKeyPrefix) + std::string(queue);
  if (name.size() + 2 + key.size() <= CONVEYOR_SHARED_KEY_MAX)
    return name + "/=" + std::string(key);
  return name + "/#" + sha256_hex(key).substr(0, 40);  // the digest's first 20 bytes
}

int64_t FleetBucket::wall_ns() const { return clock_.wall_now_us() * 1000; }

uint32_t FleetBucket::available() const { return bucket::available(shape_, full_at_, wall_ns()); }

bool FleetBucket::swap(int64_t new_full_at) {
  counters_.fleet_swaps.fetch_add(1, std::memory_order_relaxed);
  Storage::SharedRecord r;
  try {
    r = storage_.swap_shared_state(key_, version_, new_full_at);
  } catch (const StorageError&) {
    // The swap may or may not have applied (a lost reply): read afresh next time.
    version_ = -1;
    throw;
  }
  version_ = r.version;
  full_at_ = r.value;
  if (!r.applied) counters_.fleet_conflicts.fetch_add(1, std::memory_order_relaxed);
  return r.applied;
}

void FleetBucket::read_once() {
  if (version_ >= 0) return;
  counters_.fleet_swaps.fetch_add(1, std::memory_order_relaxed);
  const Storage::SharedRecord r = storage_.swap_shared_state(key_, -1, 0);  // -1: read only
  version_ = r.version;
  full_at_ = r.value;
}

uint32_t FleetBucket::from_spare(uint32_t n, uint32_t at_least, int64_t now) {
  // A spare is never older than the last applied take (an applied take returns it).
  const int64_t spare_until =
      last_take_ns_ + std::chrono::duration_cast<std::chrono::nanoseconds>(kSpareHold).count();
  if (spare_ == 0 || now >= spare_until || std::min(n, spare_) < std::min(n, at_least)) return 0;
  const uint32_t got = std::min(n, spare_);
  spare_ -= got;
  return got;
}

uint32_t FleetBucket::take(uint32_t n, uint32_t at_least) {
  if (n == 0) return 0;
  if (adds_) {
    const PreparedTake p = prepare_take(n, at_least);
    if (!p.add) return p.from_spare;
    Storage::SharedAdded r;
    try {
      r = storage_.add_shared_state(key_, *p.add);
    } catch (const StorageError&) {
      lost_reply();
      throw;
    }
    return finish_take(p, r);
  }
  const int64_t now = wall_ns();
  if (const uint32_t got = from_spare(n, at_least, now); got > 0) return got;
  if (now < quiet_until_) return 0;
  read_once();
  // The spare, fresh but too small or past its hold, goes back in this swap.
  const uint32_t back = spare_;
  bool lost = false;
  for (int i = 0; i < kMaxSwaps; ++i) {
    const int64_t at = wall_ns();
    const bucket::Take t =
        bucket::take(shape_, bucket::refund(shape_, full_at_, back), n, at, at_least);
    if (t.got == 0) {
      if (lost) back_off(at);
      return 0;  // the spare stays, to return with the next take
    }
    if (swap(t.full_at)) {
      spare_ = 0;
      last_take_ns_ = at;
      back_off_ns_ = 0;
      return t.got;
    }
    lost = true;
  }
  back_off(wall_ns());
  return 0;
}

FleetBucket::PreparedTake FleetBucket::prepare_take(uint32_t n, uint32_t at_least) {
  PreparedTake p;
  if (n == 0) return p;
  const int64_t at = wall_ns();
  p.from_spare = from_spare(n, at_least, at);
  if (p.from_spare > 0 || at < quiet_until_) return p;
  const uint32_t least = std::max<uint32_t>(1, at_least);
  if (least > n) return p;
  // A take the cached record says cannot succeed makes no call (one never
  // read promises nothing: it makes the call).
  p.known = version_ >= 0;
  p.promised = bucket::take(shape_, bucket::refund(shape_, full_at_, spare_), n, at, least).got > 0;
  if (p.known && !p.promised) return p;
  // bucket::take as one add: the spare's credit back, from now at the
  // lowest, at most the burst's credit ahead of now.
  constexpr int64_t kMax = CONVEYOR_SHARED_ADD_MAX;
  Storage::SharedAdd a;
  a.credit = std::min(kMax, bucket::credit_of(shape_, spare_));
  a.low = at;
  if (bucket::over_burst(shape_, least)) {
    // A debt take: one unit of all least tokens, which fits under high
    // only from a full bucket (base = now); full_at becomes now + that credit.
    a.unit = std::min(kMax, bucket::credit_of(shape_, least));
    a.high = at + std::min(a.unit, kMax - at);
    a.min_count = 1;
    a.max_count = 1;
    p.tokens_per_count = least;
  } else {
    a.high = at + std::min(shape_.cap_ns, kMax - at);
    a.unit = shape_.token_ns;
    a.min_count = least;
    a.max_count = n;
  }
  p.add = a;
  p.at = at;
  counters_.fleet_swaps.fetch_add(1, std::memory_order_relaxed);
  return p;
}

uint32_t FleetBucket::finish_take(const PreparedTake& p, const Storage::SharedAdded& r) {
  version_ = r.version;
  full_at_ = r.value;
  if (r.count == 0) {
    // The record said there were tokens and another process took them first.
    if (p.known && p.promised) {
      counters_.fleet_conflicts.fetch_add(1, std::memory_order_relaxed);
      back_off(p.at);
    }
    return 0;  // the spare stays, to return with the next take
  }
  spare_ = 0;
  last_take_ns_ = p.at;
  back_off_ns_ = 0;
  return r.count * p.tokens_per_count;
}

void FleetBucket::lost_reply() { version_ = -1; }  // the add may or may not have applied

void FleetBucket::back_off(int64_t at) {
  using std::chrono::nanoseconds;
  const int64_t most = std::min<int64_t>(nanoseconds(kBackOffMost).count(), shape_.cap_ns);
  const int64_t first = nanoseconds(kBackOffFirst).count();
  back_off_ns_ = std::min(most, back_off_ns_ == 0 ? first : back_off_ns_ * 2);
  quiet_until_ = at + back_off_ns_;
}

void FleetBucket::refund(uint32_t n) {
  if (n == 0) return;
  // The tokens came from the last applied take: usable until its hold ends.
  spare_ = static_cast<uint32_t>(std::min<uint64_t>(limit_.burst, uint64_t{spare_} + n));
}

std::chrono::nanoseconds FleetBucket::time_until(uint32_t n) const {
  const int64_t now = wall_ns();
  return std::chrono::nanoseconds(
      std::max(bucket::ns_until(shape_, full_at_, n, now), quiet_until_ - now));
}

void FleetBucket::empty_until(SteadyTime until) {
  const auto ahead = until - clock_.steady_now();
  const int64_t until_wall =
      wall_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(ahead).count();
  spare_ = 0;
  read_once();
  for (int i = 0; i < kMaxSwaps; ++i) {
    const int64_t next = bucket::empty_until(shape_, full_at_, until_wall);
    if (next == full_at_ || swap(next)) return;
  }
}

void FleetBucket::reconfigure(const RateLimit& limit) {
  limit_ = limit;
  shape_ = bucket::Shape::of(limit);
  spare_ = std::min(spare_, limit.burst);
  back_off_ns_ = 0;
  quiet_until_ = 0;
}

}  // namespace conveyor
