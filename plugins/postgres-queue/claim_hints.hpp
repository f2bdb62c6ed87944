// Per-queue claim hints, in this process: the lowest claim key (priority,
// run_at, job id) at which an unclaimed entry may still be, so a claim starts
// its index scan there instead of walking every claimed entry still in the
// ring. A hint is only a starting point, never a filter of correctness:
//   * it moves forward to the last key a claim's walk reached, its last
//     candidate, won or lost (everything up to it in claim order was taken,
//     by this claim or another claimer, or locked by another claimer). Not
//     to the first key won: a claimer that lost its candidates to a faster
//     one would then walk them again every claim, fall further behind, and
//     walk more, until one process of several made nearly every claim and
//     the fleet's work was no longer shared;
//   * it moves back at once when this process appends an entry below it
//     (enqueue, promotion), and a forward move never passes an entry this
//     process appended while that claim was in flight (each claim in flight
//     records the lowest key appended meanwhile: appends far above the hint,
//     the common case, cost the hint nothing);
//   * release, retries and rescues (rare) forget every hint;
//   * a hint is valid only under the ring's move generation it was made in
//     (entries copied forward keep their key, maybe below a hint);
//   * once each reset period a probe, off the claim path (HintProber, a
//     thread of its own), looks for the queue's first unclaimed entry from
//     the beginning and takes the hint back there if it is below, which
//     bounds how long an entry another process appended below the hint waits
//     (its order is then off by at most that long; nothing is ever lost).
//     Only queues claimed since their last probe are probed: an idle queue's
//     hint waits for its next claim, whose probe follows within a tick.
//     That is enough because the engine, after a wake-up notification for
//     a queue, claims it twice more a poll interval apart (storage_plugin.h,
//     "Wake-ups"): a claim that missed an entry below the hint is followed
//     by claims after the probe has moved the hint back.
//     Claims never walk the history for it, so a probe does not show in
//     their latency. A probe walks every claimed entry of the queue still in
//     the ring (a backlog of a million jobs enqueued at once keeps its whole
//     slot, so up to a million): the period grows with what the last probe
//     cost (kProbeCostFactor times its duration, at most kMaxResetPeriod),
//     and the probes of all queues together take at most 1/kProbeCostFactor
//     of the time, give or take a kProbeBurst of credit (see next_probe),
//     because with many busy queues, probes at a fixed period would take a
//     large share of the server's time away from claims.
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_CLAIM_HINTS_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_CLAIM_HINTS_HPP

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
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
  using Clock = std::chrono::steady_clock;
  // The period between probes is at least kProbeCostFactor times the
  // duration of the queue's last probe, and at most kMaxResetPeriod (or
  // reset_period when that is longer).
  static constexpr int kProbeCostFactor = 20;
  static constexpr std::chrono::milliseconds kMaxResetPeriod{30'000};
  // How far behind the clock the probes' charges may start (next_probe).
  static constexpr std::chrono::milliseconds kProbeBurst{1000};

  // now: the clock probes are timed by (tests pass a fake one).
  explicit ClaimHints(std::chrono::milliseconds reset_period,
                      std::function<Clock::time_point()> now = &Clock::now)
      : reset_period_(reset_period), now_(std::move(now)) {}

  // Where a claim of queue starts (valid under move generation `moves`), and
  // the epoch to pass to advance().
  struct Start {
    ClaimKey key;
    int64_t moves = -1;
    uint64_t epoch = 0;
    uint64_t ticket = 0;  // 0: no claim in flight
  };
  // Every start is ended by exactly one advance() or abandon().
  Start start(std::string_view queue);
  // After a claim that started at `from` ran under move generation moves:
  // walked is its last candidate's key (won or lost), if it had any.
  void advance(std::string_view queue, const Start& from, const ClaimKey* walked, int64_t moves);
  // A claim that failed: it moves nothing.
  void abandon(const Start& from);
  // An entry was appended at key: the hint must not be past it.
  void lower(std::string_view queue, const ClaimKey& key);
  void forget_all();

  // The queue to probe now, if any: of those claimed since their last probe
  // and past that probe's period, the one probed longest ago; none while
  // the probes together are over their share of the time (a probe that took
  // t is charged kProbeCostFactor * t, at most kMaxResetPeriod or
  // reset_period; the charges may run up to kProbeBurst behind the clock,
  // so cheap probes of many queues go one after another).
  // The queue returned is not due again until a claim ran and its period
  // after probed() has passed.
  std::optional<std::string> next_probe();
  // The probe of queue ran under move generation moves and took `took`;
  // lowest is the first unclaimed entry it found (nullptr: none).
  void probed(std::string_view queue, const ClaimKey* lowest, int64_t moves, Clock::duration took);

 private:
  // The least time from one probe of a queue to the next.
  Clock::duration period_after(Clock::duration probe_cost) const;
  void lower_locked(std::string_view queue, const ClaimKey& key);

  const std::chrono::milliseconds reset_period_;
  const std::function<Clock::time_point()> now_;
  std::mutex mu_;
  struct Hint {
    ClaimKey key;
    int64_t moves = -1;
    Clock::time_point probed_at;
    Clock::duration probe_cost{0};  // how long the last probe took
    // A claim ran from the hint since the last probe. A hint no claim uses
    // is not probed: an idle queue costs no probe (1,000 idle queues cost
    // 1,000 probes a second), and a claim after idleness makes it due.
    bool claimed_since_probe = true;
  };
  std::unordered_map<std::string, Hint> hints_;  // mu_
  // Claims in flight: their queue and the lowest key appended to it since
  // they started.
  struct InFlight {
    std::string queue;
    Clock::time_point started_at;
    ClaimKey lowest_appended{std::numeric_limits<int32_t>::max(),
                             std::numeric_limits<int64_t>::max(),
                             std::numeric_limits<int64_t>::max()};
  };
  std::unordered_map<uint64_t, InFlight> in_flight_;  // mu_
  uint64_t next_ticket_ = 1;                          // mu_
  Clock::time_point probes_paused_until_{};           // mu_: the probes' share
  uint64_t epoch_ = 0;                                // mu_: bumped by forget_all
};

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_CLAIM_HINTS_HPP
