// Helpers the workloads share: building and enqueueing jobs, cancelling what
// a workload left behind, and a lock-free log of times recorded by handlers.
#pragma once

#include "progress.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace conveyor::bench {

// Monotonic nanoseconds (the clock the limiter uses).
inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline int64_t wall_us() { return SystemClock::instance().wall_now_us(); }

std::vector<NewJob> make_jobs(const std::string& queue, const std::string& kind, size_t n);

// Enqueues n jobs in batches through the engine; returns their ids.
std::vector<int64_t> enqueue_batched(Engine& engine, const std::string& queue,
                                     const std::string& kind, uint64_t n, uint32_t batch,
                                     Progress& progress);

// Cancels every job of ids that is not final (used on shared storage, where a
// workload must not leave runnable jobs for the next one).
void cancel_unfinished(Engine& engine, std::span<const int64_t> ids);

// Values recorded by many handler threads at once, without a lock; values
// past the capacity are counted and dropped.
class TimestampLog {
 public:
  explicit TimestampLog(size_t capacity);
  void record(int64_t value) noexcept;
  size_t size() const;
  uint64_t dropped() const { return dropped_.load(); }
  // The recorded values, sorted ascending.
  std::vector<int64_t> sorted() const;

 private:
  std::unique_ptr<std::atomic<int64_t>[]> values_;
  size_t capacity_;
  std::atomic<size_t> next_{0};
  std::atomic<uint64_t> dropped_{0};
};

// Waits until pred() holds, checking every millisecond; false at the deadline.
bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

}  // namespace conveyor::bench
