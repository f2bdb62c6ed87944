#include "claim_hints.hpp"

#include <algorithm>

namespace conveyor::pgqueue {

ClaimHints::Start ClaimHints::start(std::string_view queue) {
  std::lock_guard lock(mu_);
  const uint64_t ticket = next_ticket_++;
  in_flight_.emplace(ticket, InFlight{std::string(queue)});
  auto it = hints_.find(std::string(queue));
  if (it == hints_.end()) return Start{ClaimKey{}, -1, epoch_, ticket, false};
  const auto now = std::chrono::steady_clock::now();
  if (now - it->second.probed_at >= reset_period_) {
    it->second.probed_at = now;
    return Start{ClaimKey{}, it->second.moves, epoch_, ticket, true};
  }
  return Start{it->second.key, it->second.moves, epoch_, ticket, false};
}

void ClaimHints::abandon(const Start& from) {
  std::lock_guard lock(mu_);
  in_flight_.erase(from.ticket);
}

void ClaimHints::advance(std::string_view queue, const Start& from, const ClaimKey* first,
                         int64_t moves) {
  std::lock_guard lock(mu_);
  auto flight = in_flight_.find(from.ticket);
  if (flight == in_flight_.end()) return;  // not started by start(): moves nothing
  const ClaimKey lowest_appended = flight->second.lowest_appended;
  in_flight_.erase(flight);
  if (epoch_ != from.epoch) return;  // forgotten meanwhile
  Hint& h = hints_[std::string(queue)];
  if (h.moves != moves) h = Hint{ClaimKey{}, moves};  // the scan started from the beginning
  if (first == nullptr) return;
  // Not past an entry appended while the claim ran (its snapshot may have
  // missed it).
  const ClaimKey to = std::min(*first, lowest_appended);
  // A probe that found entries below the hint (another process appended
  // them) takes the hint back there.
  if (from.probe && to < h.key) h.key = to;
  if (h.key < to) h.key = to;
}

void ClaimHints::lower(std::string_view queue, const ClaimKey& key) {
  std::lock_guard lock(mu_);
  for (auto& [ticket, f] : in_flight_)
    if (f.queue == queue && key < f.lowest_appended) f.lowest_appended = key;
  auto it = hints_.find(std::string(queue));
  if (it != hints_.end() && key < it->second.key) it->second.key = key;
}

void ClaimHints::forget_all() {
  std::lock_guard lock(mu_);
  ++epoch_;
  hints_.clear();
}

}  // namespace conveyor::pgqueue
