#include "override_follower.hpp"

#include <conveyor/validation.hpp>

namespace conveyor {

OverrideFollower::OverrideFollower(Storage& storage, LimitResolver& limits)
    : storage_(storage), limits_(limits) {}

bool OverrideFollower::refresh() {
  std::lock_guard lock(mu_);
  // The marker is read before the list: a change committed between the two
  // reads moves the marker again, so the next refresh reads it.
  const int64_t marker = storage_.change_marker();
  if (marker_known_ && marker == marker_) return false;
  const uint64_t before = limits_.generation();
  limits_.set_overrides(storage_.list_rate_limits());
  marker_ = marker;
  marker_known_ = true;
  return limits_.generation() != before;
}

void OverrideFollower::set(std::string_view queue, const RateLimit& limit, int64_t now_us) {
  validate_queue_name(queue);
  validate_rate(limit.rate_per_sec);
  validate_burst(limit.burst, false);
  storage_.set_rate_limit(queue, limit, now_us);
  refresh();
}

bool OverrideFollower::remove(std::string_view queue) {
  validate_queue_name(queue);
  const bool existed = storage_.delete_rate_limit(queue);
  refresh();
  return existed;
}

}  // namespace conveyor
