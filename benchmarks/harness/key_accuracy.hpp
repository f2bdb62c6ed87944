// How well per-key rate limits held, from the start times of many keys' jobs
// (the keys-accuracy workload): each key's starts checked against its own
// bucket (rate_accuracy.hpp's analysis, per key), the keys' aggregate rate
// over a window, and how evenly the keys shared it.
#pragma once

#include <conveyor/rate_limit.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace conveyor::bench {

// One handler start: which key (an index) and when (ns since engine start).
struct KeyStart {
  uint32_t key = 0;
  int64_t t_ns = 0;
};

// Starts recorded by many handler threads at once, without a lock; starts
// past the capacity are counted and dropped.
class KeyStartLog {
 public:
  explicit KeyStartLog(size_t capacity);
  void record(uint32_t key, int64_t t_ns) noexcept;
  size_t size() const;
  uint64_t dropped() const { return dropped_.load(); }
  std::vector<KeyStart> entries() const;

 private:
  std::unique_ptr<std::atomic<int64_t>[]> t_ns_;
  std::unique_ptr<std::atomic<uint32_t>[]> key_;
  size_t capacity_;
  std::atomic<size_t> next_{0};
  std::atomic<uint64_t> dropped_{0};
};

struct KeyAccuracy {
  uint64_t started = 0;
  // Starts within [window_from, window_to] of all keys, per second.
  double jobs_per_sec = 0;
  // max over keys and k of k - (burst + rate * t), t from the key's own
  // first start (0 when no key exceeded), and the key it happened on.
  double worst_excess_from_first = 0;
  uint32_t worst_key = 0;
  // The same with t from engine start (the times' origin): sound.
  double worst_excess_from_start = 0;
  // Starts per key within the window, over every key 0..keys-1 (a key with
  // none counts 0).
  double count_min = 0, count_median = 0, count_max = 0;
};

// starts in any order; keys: how many keys there are (indexes 0..keys-1).
KeyAccuracy analyze_keys(std::span<const KeyStart> starts, uint32_t keys, const RateLimit& per_key,
                         int64_t window_from_ns, int64_t window_to_ns);

}  // namespace conveyor::bench
