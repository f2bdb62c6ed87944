// Fails a workload whose completed count stops moving (e.g. every claim
// errors), instead of waiting for it forever.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace conveyor::bench {

class StallWatch {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kLimit{60};

  // what names the workload in the error ("drain", "steady").
  StallWatch(std::string what, Clock::time_point start) : what_(std::move(what)), last_(start) {}

  // Throws std::runtime_error when done has not changed for over kLimit.
  void check(uint64_t done, uint64_t total, Clock::time_point now) {
    if (done != done_) {
      done_ = done;
      last_ = now;
    } else if (now - last_ > kLimit) {
      throw std::runtime_error(fmt::format("{} stalled at {}/{} jobs completed for {} s", what_,
                                           done, total, kLimit.count()));
    }
  }

 private:
  const std::string what_;
  uint64_t done_ = 0;
  Clock::time_point last_;
};

}  // namespace conveyor::bench
