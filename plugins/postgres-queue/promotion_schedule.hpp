// When a claim of a queue must first promote the queue's due `later` rows
// into the ring, in this process: a promotion is a round trip, and most claims
// find nothing due. The schedule knows the earliest run_at in `later` as of
// the last promotion of the queue (the database reports it) and every row
// this process has put there since; rows other processes put there are found
// by a check each check period (their promotion is late by at most that).
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_PROMOTION_SCHEDULE_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_PROMOTION_SCHEDULE_HPP

#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace conveyor::pgqueue {

class PromotionSchedule {
 public:
  explicit PromotionSchedule(std::chrono::milliseconds check_period)
      : check_period_(check_period) {}

  // Whether a claim of queue at the host's now must promote first; if so,
  // *started is what to pass to promoted().
  bool due(std::string_view queue, int64_t now_us, uint64_t* started);
  // A promotion that began at `started` ran; next_run_at is the earliest
  // run_at left in `later` for the queue (none: empty).
  void promoted(std::string_view queue, uint64_t started, std::optional<int64_t> next_run_at);
  // This process put a row of queue into `later`.
  void added(std::string_view queue, int64_t run_at);
  // This process put a row into `later` for a queue it does not know.
  void added_somewhere(int64_t run_at);

 private:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  struct Queue {
    int64_t earliest = kNever;  // no row of the queue in `later` is due before
    uint64_t adds = 0;          // bumped by added()
    std::chrono::steady_clock::time_point checked_at;
  };
  const std::chrono::milliseconds check_period_;
  std::mutex mu_;
  std::unordered_map<std::string, Queue> queues_;  // mu_
};

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_PROMOTION_SCHEDULE_HPP
