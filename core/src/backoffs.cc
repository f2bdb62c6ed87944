#include "backoffs.hpp"

#include <algorithm>
#include <cmath>

namespace conveyor {

Backoffs::Backoffs(const EngineConfig& config, const Clock& clock)
    : base_(config.backoff_base_ms),
      max_(std::chrono::seconds(config.max_backoff_s)),
      clock_(clock) {}

Backoffs::Hold Backoffs::hold(const std::string& queue, std::chrono::milliseconds delay) {
  const SteadyTime now = clock_.steady_now();
  const int64_t now_us = clock_.wall_now_us();
  std::lock_guard lock(mu_);
  Hold& h = holds_[queue];
  std::chrono::milliseconds length;
  if (delay.count() > 0) {
    length = std::min(delay, max_);
    h.consecutive = 0;
  } else {
    // Back to back: the last hold ended less than twice its length ago.
    const bool follows = h.consecutive > 0 && now < h.until + 2 * h.length;
    h.consecutive = follows ? h.consecutive + 1 : 1;
    const double doubled = static_cast<double>(base_.count()) *
                           std::ldexp(1.0, static_cast<int>(std::min(h.consecutive - 1, 40u)));
    length = std::chrono::milliseconds(
        static_cast<int64_t>(std::min(doubled, static_cast<double>(max_.count()))));
  }
  const SteadyTime until = now + length;
  if (until > h.until || h.until_us < now_us) {
    h.until = until;
    h.until_us = now_us + std::chrono::duration_cast<std::chrono::microseconds>(length).count();
  }
  h.length = length;
  return h;
}

bool Backoffs::clear(std::string_view queue) {
  std::lock_guard lock(mu_);
  auto it = holds_.find(queue);
  if (it == holds_.end()) return false;
  const bool was_active = it->second.until > clock_.steady_now();
  holds_.erase(it);
  return was_active;
}

std::optional<Backoffs::Hold> Backoffs::active(std::string_view queue) const {
  std::lock_guard lock(mu_);
  auto it = holds_.find(queue);
  if (it == holds_.end() || it->second.until <= clock_.steady_now()) return std::nullopt;
  return it->second;
}

std::map<std::string, Backoffs::Hold, std::less<>> Backoffs::active_all() const {
  const SteadyTime now = clock_.steady_now();
  std::lock_guard lock(mu_);
  std::map<std::string, Hold, std::less<>> out;
  for (const auto& [queue, h] : holds_)
    if (h.until > now) out.emplace(queue, h);
  return out;
}

}  // namespace conveyor
