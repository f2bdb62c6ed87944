// Which expired claims a rescue looks at, in this process. Every claim mark
// stays in the ring until its slot is truncated, and with it its lease
// expiry, so "claims whose lease expired" is mostly claims long completed:
// with a backlog of a million jobs in one slot, a rescue that looked at all
// of them took over a second, every rescue interval. A rescue looks only at
// leases that expired since this process's last complete rescue (less
// kOverlap, for a claim that committed late or a host clock slightly
// behind), and at all of them once every kFullScanPeriod, which bounds how
// late any other expired lease is found. Leases moved by heartbeats
// (lease_ext) are always looked at whole: that table holds only live leases.
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_RESCUE_WINDOW_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_RESCUE_WINDOW_HPP

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>

namespace conveyor::pgqueue {

class RescueWindow {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int64_t kOverlapUs = 1'000'000;
  static constexpr std::chrono::seconds kFullScanPeriod{60};

  // now: the clock full scans are timed by (tests pass a fake one).
  explicit RescueWindow(std::function<Clock::time_point()> now = &Clock::now)
      : now_(std::move(now)) {}

  // The least lease expiry a rescue at now_us (the host's clock) looks at;
  // kAll for a full scan. Thread-safe.
  static constexpr int64_t kAll = 1;  // claim marks' lease_expires is > 0
  int64_t floor(int64_t now_us);

  // After a rescue at now_us from floor: complete when it looked at every
  // expired claim from floor on (it did not stop at its limit). Thread-safe.
  void scanned(int64_t floor, int64_t now_us, bool complete);

 private:
  const std::function<Clock::time_point()> now_;
  std::mutex mu_;
  bool scanned_once_ = false;    // mu_: a complete full scan happened
  Clock::time_point last_full_;  // mu_: when it ended
  int64_t scanned_to_us_ = 0;    // mu_: complete up to here (host's clock)
};

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_RESCUE_WINDOW_HPP
