#include "due_times.hpp"

#include <algorithm>
#include <iterator>
#include <random>

namespace conveyor {

void DueTimes::remember(int64_t at_us) {
  if (!at_us_.insert(at_us).second || at_us_.size() <= kMaxDueTimes) return;
  const auto last = std::prev(at_us_.end());
  dropped_until_us_ = std::max(dropped_until_us_, *last);
  at_us_.erase(last);
}

SteadyTime DueTimes::next_poll(SteadyTime now, int64_t wall_us, bool notified,
                               const Policy& policy) {
  const SteadyTime soon = now + policy.poll_interval;
  const int64_t grace_us =
      std::chrono::duration_cast<std::chrono::microseconds>(policy.poll_interval).count();
  // A time a poll interval past had its poll (and the short polls after it,
  // in case our clocks disagreed by a little about when its jobs are due).
  while (!at_us_.empty() && *at_us_.begin() + grace_us < wall_us) at_us_.erase(at_us_.begin());
  if (!notified) return soon;
  if (dropped_until_us_ != 0) {
    if (wall_us <= dropped_until_us_ + grace_us) return soon;
    dropped_until_us_ = 0;
  }
  if (!at_us_.empty() && *at_us_.begin() <= wall_us) return soon;
  if (short_polls_ > 0) {
    --short_polls_;
    return soon;
  }
  // Under the sweep: no poll of its own, only a bound on the timer.
  SteadyTime next = now + std::chrono::hours(24);
  if (!policy.swept) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const auto quiet_ms = policy.notified_poll.count();
    std::uniform_int_distribution<int64_t> jitter(quiet_ms / 2, quiet_ms);
    next = now + std::chrono::milliseconds(jitter(rng));
  }
  if (!at_us_.empty())
    next = std::min(next, now + std::chrono::microseconds(*at_us_.begin() - wall_us));
  return next;
}

}  // namespace conveyor
