#include "rescue_window.hpp"

#include <algorithm>

namespace conveyor::pgqueue {

int64_t RescueWindow::floor(int64_t now_us) {
  std::lock_guard lock(mu_);
  if (!scanned_once_ || now_() - last_full_ >= kFullScanPeriod) return kAll;
  return std::max(kAll, std::min(scanned_to_us_, now_us) - kOverlapUs);
}

void RescueWindow::scanned(int64_t floor, int64_t now_us, bool complete) {
  if (!complete) return;  // the next call looks from the same floor
  std::lock_guard lock(mu_);
  if (floor == kAll) {
    scanned_once_ = true;
    last_full_ = now_();
    scanned_to_us_ = now_us;
  } else if (scanned_once_) {
    scanned_to_us_ = std::max(scanned_to_us_, now_us);
  }
}

}  // namespace conveyor::pgqueue
