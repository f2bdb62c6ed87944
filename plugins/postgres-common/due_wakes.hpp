// The wake-ups a listener owes for delayed jobs (CONVEYOR_CAP_NOTIFY_DUE):
// an enqueue of a job whose run_at is in the future notifies the `later`
// channel with "<run_at_us> <queue>", and the listener reports the queue
// again once that time has come. This is the bounded set of those times.
//
// Bounded: at most kMaxEntries (queue, run_at) pairs, the earliest kept.
// Past the bound the latest are dropped (counted in dropped()); their jobs
// wait for the host's rare re-poll (engine.notified_poll_interval_ms).
//
// Thread-safety: none; the listener calls it under its own mutex.
#ifndef CONVEYOR_PLUGINS_POSTGRES_COMMON_DUE_WAKES_HPP
#define CONVEYOR_PLUGINS_POSTGRES_COMMON_DUE_WAKES_HPP

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor::postgres {

// "<run_at_us> <queue>": the later channel's payload.
std::string later_payload(int64_t run_at_us, std::string_view queue);
// The payload's parts; nullopt when it is not one (ignored, never thrown on:
// a payload is whatever some process sent).
std::optional<std::pair<int64_t, std::string>> parse_later_payload(std::string_view payload);

class DueWakes {
 public:
  static constexpr size_t kMaxEntries = 100'000;

  // Owes a wake of queue at run_at_us (a repeat of a pair is one entry).
  void add(int64_t run_at_us, std::string queue);
  // The earliest time owed, if any.
  std::optional<int64_t> next() const;
  // Removes and returns the queues owed at or before now_us, each once, in
  // name order.
  std::vector<std::string> take_due(int64_t now_us);
  size_t size() const { return entries_.size(); }
  uint64_t dropped() const { return dropped_; }

 private:
  std::set<std::pair<int64_t, std::string>> entries_;
  uint64_t dropped_ = 0;
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_COMMON_DUE_WAKES_HPP
