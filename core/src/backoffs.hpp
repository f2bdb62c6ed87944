// Backoffs: the queues a downstream asked to wait (backpressure) and until
// when. A hold names its delay (Retry-After) or, when the downstream named
// none, doubles from [engine] backoff_base_ms while holds follow each other
// (a new hold within twice the last one's length of its end); every hold is
// capped at [engine] max_backoff_s. A hold that starts while one is active
// ends at the later of the two. Cleared by a change to the queue's limit.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/config.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor {

class Backoffs {
 public:
  struct Hold {
    int64_t until_us = 0;  // wall clock, for reports
    SteadyTime until{};    // for the dispatcher
    std::chrono::milliseconds length{0};
    uint32_t consecutive = 0;  // holds without a named delay in a row
  };

  Backoffs(const EngineConfig& config, const Clock& clock);

  // Holds queue for delay (> 0), or for the next step of the doubling (0).
  Hold hold(const std::string& queue, std::chrono::milliseconds delay);
  // Ends queue's hold; whether it had one.
  bool clear(std::string_view queue);
  // The hold of queue if it has not ended.
  std::optional<Hold> active(std::string_view queue) const;
  // Every hold that has not ended, by queue.
  std::map<std::string, Hold, std::less<>> active_all() const;

 private:
  const std::chrono::milliseconds base_, max_;
  const Clock& clock_;
  mutable std::mutex mu_;
  std::map<std::string, Hold, std::less<>> holds_;  // mu_: the last hold per queue
};

}  // namespace conveyor
