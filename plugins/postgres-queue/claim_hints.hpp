// Per-queue claim hints, in this process: the lowest claim key (priority,
// run_at, job id) at which an unclaimed entry may still be, so a claim starts
// its index scan there instead of walking every claimed entry still in the
// ring. A hint is only a starting point, never a filter of correctness:
//   * it moves forward to the first key a claim took (everything before it
//     in claim order was taken or locked by another claimer);
//   * it moves back at once when this process appends an entry below it
//     (enqueue, promotion), and a forward move that raced with such a move
//     back is dropped (epochs);
//   * release, retries and rescues (rare) forget every hint;
//   * a hint is valid only under the ring's move generation it was made in
//     (entries copied forward keep their key, maybe below a hint);
//   * every hint is forgotten each reset period, which bounds how long an
//     entry another process appended below it waits (its order is then off by
//     at most that long; nothing is ever lost).
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_CLAIM_HINTS_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_CLAIM_HINTS_HPP

#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>

namespace conveyor::pgqueue {

struct ClaimKey {
  int32_t priority = std::numeric_limits<int32_t>::min();
  int64_t run_at = std::numeric_limits<int64_t>::min();
  int64_t job_id = std::numeric_limits<int64_t>::min();
  friend bool operator<(const ClaimKey& a, const ClaimKey& b) {
    return std::tie(a.priority, a.run_at, a.job_id) < std::tie(b.priority, b.run_at, b.job_id);
  }
};

class ClaimHints {
 public:
  explicit ClaimHints(std::chrono::milliseconds reset_period) : reset_period_(reset_period) {}

  // Where a claim of queue starts (valid under move generation `moves`), and
  // the epoch to pass to advance().
  struct Start {
    ClaimKey key;
    int64_t moves = -1;
    uint64_t epoch = 0;
  };
  Start start(std::string_view queue);
  // After a claim that started at `from` ran under move generation moves:
  // first is the first key it took, if any.
  void advance(std::string_view queue, const Start& from, const ClaimKey* first, int64_t moves);
  // An entry was appended at key: the hint must not be past it.
  void lower(std::string_view queue, const ClaimKey& key);
  void forget_all();

 private:
  const std::chrono::milliseconds reset_period_;
  std::mutex mu_;
  struct Hint {
    ClaimKey key;
    int64_t moves = -1;
  };
  std::unordered_map<std::string, Hint> hints_;  // mu_
  uint64_t epoch_ = 0;                           // mu_: bumped by every move back
  std::chrono::steady_clock::time_point reset_at_ = std::chrono::steady_clock::now();  // mu_
};

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_CLAIM_HINTS_HPP
