#include "backoffs.hpp"

#include <algorithm>
#include <cmath>

namespace conveyor {

Backoffs::Backoffs(const EngineConfig& config, const Clock& clock)
    : base_(config.backoff_base_ms),
      max_(std::chrono::seconds(config.max_backoff_s)),
      max_unnamed_(std::min<std::chrono::milliseconds>(max_, kMaxUnnamedHold)),
      clock_(clock) {}

Backoffs::Answer Backoffs::hold(const std::string& queue,
                                std::optional<std::chrono::milliseconds> delay, SteadyTime sent,
                                std::string reason, std::optional<std::chrono::milliseconds> cap) {
  const SteadyTime now = clock_.steady_now();
  const int64_t now_us = clock_.wall_now_us();
  MutexLock lock(mu_);
  auto [it, added] = holds_.try_emplace(queue);
  Hold& h = it->second;
  if (added) episodes_.store(holds_.size(), std::memory_order_release);
  // In flight when the hold in force began: part of it.
  if (!added && sent < h.began) return {h, false};

  std::chrono::milliseconds length;
  if (delay) {
    length = std::clamp(*delay, std::chrono::milliseconds(0), max_);
    h.consecutive = 0;
  } else {
    // Refused again since the last hold, with no success in between, and
    // not long after it ended.
    const bool follows = !added && h.consecutive > 0 && !h.succeeded_since &&
                         now < h.until + 2 * std::max(h.length, base_);
    h.consecutive = follows ? h.consecutive + 1 : 1;
    const double doubled = static_cast<double>(base_.count()) *
                           std::ldexp(1.0, static_cast<int>(std::min(h.consecutive - 1, 40u)));
    length = std::chrono::milliseconds(
        static_cast<int64_t>(std::min(doubled, static_cast<double>(max_unnamed_.count()))));
  }
  if (cap) length = std::clamp(length, std::chrono::milliseconds(0), *cap);
  h.began = now;
  h.until = now + length;
  h.until_us = now_us + std::chrono::duration_cast<std::chrono::microseconds>(length).count();
  h.length = length;
  h.named = delay.has_value();
  h.succeeded_since = false;
  h.reason = std::move(reason);
  Answer a{h, true};
  if (added || now - h.logged >= kLogEvery) {
    a.log = true;
    a.unlogged = h.unlogged;
    h.logged = now;
    h.unlogged = 0;
  } else {
    ++h.unlogged;
  }
  return a;
}

void Backoffs::succeeded(std::string_view queue, SteadyTime sent) {
  if (episodes_.load(std::memory_order_acquire) == 0) return;
  const SteadyTime now = clock_.steady_now();
  MutexLock lock(mu_);
  auto it = holds_.find(queue);
  if (it == holds_.end() || sent < it->second.began) return;
  if (now < it->second.until) {
    it->second.succeeded_since = true;
    return;
  }
  // Resumed and delivered: the episode is over (and successes cost no lock).
  holds_.erase(it);
  episodes_.store(holds_.size(), std::memory_order_release);
}

bool Backoffs::clear(std::string_view queue) {
  MutexLock lock(mu_);
  auto it = holds_.find(queue);
  if (it == holds_.end()) return false;
  const bool was_active = it->second.until > clock_.steady_now();
  holds_.erase(it);
  episodes_.store(holds_.size(), std::memory_order_release);
  return was_active;
}

std::optional<Backoffs::Hold> Backoffs::active(std::string_view queue) const {
  MutexLock lock(mu_);
  auto it = holds_.find(queue);
  if (it == holds_.end() || it->second.until <= clock_.steady_now()) return std::nullopt;
  return it->second;
}

std::map<std::string, Backoffs::Hold, std::less<>> Backoffs::active_all() const {
  const SteadyTime now = clock_.steady_now();
  MutexLock lock(mu_);
  std::map<std::string, Hold, std::less<>> out;
  for (const auto& [queue, h] : holds_)
    if (h.until > now) out.emplace(queue, h);
  return out;
}

}  // namespace conveyor
