// Time sources. The core reads time only through a Clock so that the limiter,
// the dispatcher and retry timing can be tested with a ManualClock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace conveyor {

using SteadyTime = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time for intervals (token refill, poll timing).
  virtual SteadyTime steady_now() const = 0;
  // Wall time, microseconds since the Unix epoch, for what storage records.
  virtual int64_t wall_now_us() const = 0;
};

// The real clocks. Thread-safe; one shared instance.
class SystemClock final : public Clock {
 public:
  SteadyTime steady_now() const override { return std::chrono::steady_clock::now(); }
  int64_t wall_now_us() const override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  static const SystemClock& instance() {
    static const SystemClock clock;
    return clock;
  }
};

// A clock that moves only when told to; both readings advance together.
// Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t wall_start_us = 1'700'000'000'000'000)
      : wall_start_us_(wall_start_us) {}
  SteadyTime steady_now() const override {
    return SteadyTime(std::chrono::nanoseconds(elapsed_ns_.load()));
  }
  int64_t wall_now_us() const override { return wall_start_us_ + elapsed_ns_.load() / 1000; }
  void advance(std::chrono::nanoseconds d) { elapsed_ns_ += d.count(); }

 private:
  int64_t wall_start_us_;
  std::atomic<int64_t> elapsed_ns_{0};
};

}  // namespace conveyor
