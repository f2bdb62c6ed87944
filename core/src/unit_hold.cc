#include "unit_hold.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

namespace conveyor {

void UnitHold::hold(SteadyTime until, SteadyTime began) {
  began_ns_.store(began.time_since_epoch().count(), std::memory_order_release);
  const int64_t ns = until.time_since_epoch().count();
  int64_t cur = until_ns_.load(std::memory_order_acquire);
  while (cur < ns && !until_ns_.compare_exchange_weak(cur, ns, std::memory_order_acq_rel)) {
  }
}

void UnitHold::clear() {
  cleared_.store(true, std::memory_order_release);
  until_ns_.store(0, std::memory_order_release);
}

std::optional<SteadyTime> UnitHold::check(SteadyTime now, QueueBucket* bucket, uint64_t dispatched,
                                          std::string_view queue) {
  if (cleared_.exchange(false, std::memory_order_acq_rel)) {
    held_ = false;
    ramp_.reset();
  }
  const int64_t until = until_ns_.load(std::memory_order_acquire);
  const SteadyTime end{SteadyTime::duration(until)};
  if (until != 0 && until != applied_ns_) {
    // A new hold (seen now, or only after it ended): the rate the unit was
    // refused at is the ramp's if it was climbing back, else its own limit's.
    if (ramp_)
      refused_rate_ =
          ramp_->rate(SteadyTime(SteadyTime::duration(began_ns_.load(std::memory_order_acquire))));
    else if (bucket)
      refused_rate_ = bucket->limit().rate_per_sec;
    else if (const double sent = sending_rate(now, dispatched); sent > 0)
      refused_rate_ = sent;
    ramp_.reset();
    held_ = true;
    applied_ns_ = until;
    if (bucket && end > now) {
      // In a fleet bucket this holds every process on the storage.
      try {
        bucket->empty_until(end);
      } catch (const std::exception& e) {
        spdlog::warn(
            "queue {}: could not hold the fleet bucket for the backoff ({}); "
            "this process holds, other processes may not",
            queue, e.what());
      }
    }
  }
  if (end > now) return end;
  if (held_) {
    held_ = false;
    ramp_.emplace(refused_rate_, bucket ? bucket->limit().rate_per_sec : 0.0, now);
  }
  return std::nullopt;
}

void UnitHold::sample(SteadyTime now, uint64_t dispatched) {
  if (now - sample_at_ < std::chrono::seconds(1) || held_) return;
  sampled_rate_ = static_cast<double>(dispatched - sample_dispatched_) /
                  std::chrono::duration<double>(now - sample_at_).count();
  sample_at_ = now;
  sample_dispatched_ = dispatched;
}

double UnitHold::sending_rate(SteadyTime now, uint64_t dispatched) const {
  const double seconds = std::max(1.0, std::chrono::duration<double>(now - sample_at_).count());
  return std::max(sampled_rate_, static_cast<double>(dispatched - sample_dispatched_) / seconds);
}

}  // namespace conveyor
