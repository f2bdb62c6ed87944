#include "claim_hints.hpp"

namespace conveyor::pgqueue {

ClaimHints::Start ClaimHints::start(std::string_view queue) {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - reset_at_ >= reset_period_) {
    hints_.clear();
    ++epoch_;
    reset_at_ = now;
  }
  auto it = hints_.find(std::string(queue));
  if (it == hints_.end()) return Start{ClaimKey{}, -1, epoch_};
  return Start{it->second.key, it->second.moves, epoch_};
}

void ClaimHints::advance(std::string_view queue, const Start& from, const ClaimKey* first,
                         int64_t moves) {
  std::lock_guard lock(mu_);
  if (epoch_ != from.epoch) return;  // something moved back meanwhile
  Hint& h = hints_[std::string(queue)];
  if (h.moves != moves) h = Hint{ClaimKey{}, moves};  // the scan started from the beginning
  if (first != nullptr && h.key < *first) h.key = *first;
}

void ClaimHints::lower(std::string_view queue, const ClaimKey& key) {
  std::lock_guard lock(mu_);
  ++epoch_;
  auto it = hints_.find(std::string(queue));
  if (it != hints_.end() && key < it->second.key) it->second.key = key;
}

void ClaimHints::forget_all() {
  std::lock_guard lock(mu_);
  ++epoch_;
  hints_.clear();
}

}  // namespace conveyor::pgqueue
