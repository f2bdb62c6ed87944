#include "claim_hints.hpp"

#include <algorithm>

namespace conveyor::pgqueue {

ClaimHints::Clock::duration ClaimHints::period_after(Clock::duration probe_cost) const {
  const Clock::duration by_cost = probe_cost * kProbeCostFactor;
  const Clock::duration cap = std::max<Clock::duration>(reset_period_, kMaxResetPeriod);
  return std::clamp<Clock::duration>(by_cost, reset_period_, cap);
}

ClaimHints::Start ClaimHints::start(std::string_view queue) {
  std::lock_guard lock(mu_);
  const auto now = now_();
  const uint64_t ticket = next_ticket_++;
  in_flight_.emplace(ticket, InFlight{std::string(queue), now});
  auto it = hints_.find(std::string(queue));
  if (it == hints_.end()) return Start{ClaimKey{}, -1, epoch_, ticket};
  return Start{it->second.key, it->second.moves, epoch_, ticket};
}

void ClaimHints::abandon(const Start& from) {
  std::lock_guard lock(mu_);
  in_flight_.erase(from.ticket);
}

void ClaimHints::advance(std::string_view queue, const Start& from, const ClaimKey* walked,
                         int64_t moves) {
  std::lock_guard lock(mu_);
  auto flight = in_flight_.find(from.ticket);
  if (flight == in_flight_.end()) return;  // not started by start(): moves nothing
  const ClaimKey lowest_appended = flight->second.lowest_appended;
  const auto now = now_();
  const Clock::duration took = now - flight->second.started_at;
  in_flight_.erase(flight);
  if (epoch_ != from.epoch) return;  // forgotten meanwhile
  auto [it, added] = hints_.try_emplace(std::string(queue));
  Hint& h = it->second;
  h.claimed_since_probe = true;
  // A claim that started from the beginning (the first claim of the queue,
  // or one whose hint was void) walked the history: the next probe waits in
  // proportion to what that cost.
  if (added || h.moves != moves) {
    h.probed_at = now;
    h.probe_cost = took;
  }
  if (h.moves != moves) {  // the hint was void: the scan started from the beginning
    h.key = ClaimKey{};
    h.moves = moves;
  }
  if (walked == nullptr) return;
  // Not past an entry appended while the claim ran (its snapshot may have
  // missed it).
  const ClaimKey to = std::min(*walked, lowest_appended);
  if (h.key < to) h.key = to;
}

void ClaimHints::lower(std::string_view queue, const ClaimKey& key) {
  std::lock_guard lock(mu_);
  lower_locked(queue, key);
}

void ClaimHints::lower_locked(std::string_view queue, const ClaimKey& key) {
  for (auto& [ticket, f] : in_flight_)
    if (f.queue == queue && key < f.lowest_appended) f.lowest_appended = key;
  auto it = hints_.find(std::string(queue));
  if (it != hints_.end() && key < it->second.key) it->second.key = key;
}

std::optional<std::string> ClaimHints::next_probe() {
  std::lock_guard lock(mu_);
  const auto now = now_();
  if (now < probes_paused_until_) return std::nullopt;
  Hint* next = nullptr;
  const std::string* next_queue = nullptr;
  for (auto& [queue, h] : hints_) {
    if (!h.claimed_since_probe || now - h.probed_at < period_after(h.probe_cost)) continue;
    if (next == nullptr || h.probed_at < next->probed_at) {
      next = &h;
      next_queue = &queue;
    }
  }
  if (next == nullptr) return std::nullopt;
  next->claimed_since_probe = false;
  next->probed_at = now;
  return *next_queue;
}

void ClaimHints::probed(std::string_view queue, const ClaimKey* lowest, int64_t moves,
                        Clock::duration took) {
  std::lock_guard lock(mu_);
  const auto now = now_();
  // The probe is charged kProbeCostFactor times what it took, from where the
  // charges reached or kProbeBurst ago, whichever is later. The charge is
  // capped like a queue's period: a probe of a huge backlog must not stop
  // the others' for longer than that.
  probes_paused_until_ =
      std::max(probes_paused_until_, now - kProbeBurst) +
      std::min<Clock::duration>(took * kProbeCostFactor,
                                std::max<Clock::duration>(reset_period_, kMaxResetPeriod));
  auto it = hints_.find(std::string(queue));
  if (it == hints_.end()) return;  // forgotten meanwhile: the next claim starts afresh
  it->second.probed_at = now;
  it->second.probe_cost = took;
  // Under another move generation the hint is void anyway (the next claim
  // starts from the beginning).
  if (lowest != nullptr && moves == it->second.moves) lower_locked(queue, *lowest);
}

void ClaimHints::forget_all() {
  std::lock_guard lock(mu_);
  ++epoch_;
  hints_.clear();
}

}  // namespace conveyor::pgqueue
