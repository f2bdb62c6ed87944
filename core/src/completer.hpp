// Completer: records job outcomes in storage off the workers' threads.
// Successes are batched into one complete() call; failures go one by one
// through fail() with the retry time the engine chose. Transient storage
// errors keep the outcomes and retry with backoff: nothing is forgotten
// while the process lives (and if it dies, leases expire and jobs re-run).
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/metrics.hpp>
#include <conveyor/storage.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

namespace conveyor {

struct Outcome {
  conveyor_lease lease{};
  QueueCounters* counters = nullptr;
  const std::string* queue = nullptr;  // the runner's name; lives as long as the engine
  bool succeeded = false;
  int64_t retry_at_us = -1;  // failures: >= 0 retry then, < 0 final
  std::string error;
  // A recording attempt failed before: the storage may have committed it
  // then and lost only the reply, so a refusal now is no proof of a lost lease.
  bool retried = false;
};

class Completer {
 public:
  // settled(lease) runs after an outcome was recorded (or found stale).
  Completer(Storage& storage, const Clock& clock,
            std::function<void(const conveyor_lease&)> settled);

  void push(Outcome outcome);  // thread-safe, never blocks on storage
  // The thread body: records outcomes until stop is requested and nothing
  // is pending (or the deadline given to finish() has passed).
  void run(std::stop_token stop);
  // Asks run() to drain what is pending and return by deadline.
  void finish(std::chrono::steady_clock::time_point deadline);
  size_t pending() const;

 private:
  bool record(std::vector<Outcome>& batch);  // false: storage unavailable, keep batch

  Storage& storage_;
  const Clock& clock_;
  std::function<void(const conveyor_lease&)> settled_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Outcome> pending_;                      // mu_
  bool finishing_ = false;                            // mu_
  std::chrono::steady_clock::time_point deadline_{};  // mu_
};

}  // namespace conveyor
