#include "override_follower.hpp"

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

}  // namespace conveyor
