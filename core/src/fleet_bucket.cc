#include "fleet_bucket.hpp"

namespace conveyor {

FleetBucket::FleetBucket(Storage& storage, std::string_view queue, const RateLimit& limit,
                         const Clock& clock, QueueCounters& counters)
    : storage_(storage),
      key_(key_for(queue)),
      clock_(clock),
      limit_(limit),
      shape_(bucket::Shape::of(limit)),
      counters_(counters) {}

std::string FleetBucket::key_for(std::string_view queue) {
  return "ratelimit.bucket:" + std::string(queue);
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

uint32_t FleetBucket::take(uint32_t n, uint32_t at_least) {
  if (n == 0) return 0;
  read_once();
  for (int i = 0; i < kMaxSwaps; ++i) {
    const bucket::Take t = bucket::take(shape_, full_at_, n, wall_ns(), at_least);
    if (t.got == 0) return 0;
    if (swap(t.full_at)) return t.got;
  }
  return 0;
}

void FleetBucket::refund(uint32_t n) {
  if (n == 0 || version_ < 0) return;
  for (int i = 0; i < kMaxSwaps; ++i)
    if (swap(bucket::refund(shape_, full_at_, n))) return;
}

std::chrono::nanoseconds FleetBucket::time_until(uint32_t n) const {
  return std::chrono::nanoseconds(bucket::ns_until(shape_, full_at_, n, wall_ns()));
}

void FleetBucket::empty_until(SteadyTime until) {
  const auto ahead = until - clock_.steady_now();
  const int64_t until_wall =
      wall_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(ahead).count();
  read_once();
  for (int i = 0; i < kMaxSwaps; ++i) {
    const int64_t next = bucket::empty_until(shape_, full_at_, until_wall);
    if (next == full_at_ || swap(next)) return;
  }
}

void FleetBucket::reconfigure(const RateLimit& limit) {
  limit_ = limit;
  shape_ = bucket::Shape::of(limit);
}

}  // namespace conveyor
