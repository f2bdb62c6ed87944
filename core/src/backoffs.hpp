// Backoffs: the queues a downstream asked to wait (backpressure), until when
// and why. The rules, one hold per episode:
//
// - An answer to a request sent before the hold in force began (it was in
//   flight then) belongs to that hold: it neither lengthens nor restarts it.
//   So the 44 refusals of one claimed batch are one hold, not 44 doublings.
// - An answer to a request sent after the hold began (the queue resumed and
//   was refused again) sets a new hold: for the delay the downstream named
//   (Retry-After; zero is a hold of zero, capped at [engine] max_backoff_s),
//   or, when it named none, backoff_base_ms doubling while refusals follow
//   each other with no success in between, capped at kMaxUnnamedHold (and
//   max_backoff_s). A success of a request sent after the hold began, or a
//   refusal long after the last hold ended (twice its length), starts the
//   doubling over; a success after the hold ended ends the episode.
// - Cleared by the operator (a new limit, `conveyor queues resume`).
//
// Thread-safe: every method may be called from any thread. succeeded() costs
// one atomic load while no queue is held.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/config.hpp>
#include <conveyor/internal/mutex.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor {

// The longest hold when the downstream named no delay. The longest window
// common limiters count in is a minute (nginx's r/m, per-minute API
// quotas), so a longer hold only delays the recovery; a downstream that
// needs longer says so with Retry-After (up to max_backoff_s).
inline constexpr std::chrono::seconds kMaxUnnamedHold{60};

class Backoffs {
 public:
  struct Hold {
    int64_t until_us = 0;  // wall clock, for reports
    SteadyTime until{};    // for the dispatcher
    SteadyTime began{};    // answers to requests sent before this belong to the hold
    std::chrono::milliseconds length{0};
    uint32_t consecutive = 0;      // holds without a named delay in a row
    bool named = false;            // the downstream named the delay
    bool succeeded_since = false;  // a request sent after `began` succeeded
    std::string reason;            // the answer that set it (status, body excerpt)
    SteadyTime logged{};           // when a hold of the queue was last logged
    uint32_t unlogged = 0;         // holds set since
  };
  struct Answer {
    Hold hold;             // the hold in force after the answer
    bool changed = false;  // the answer set a new hold (false: it belonged to one)
    // Log this hold: at most one line per queue per kLogEvery; unlogged
    // counts the holds set since the last line.
    bool log = false;
    uint32_t unlogged = 0;
  };
  static constexpr std::chrono::seconds kLogEvery{1};

  Backoffs(const EngineConfig& config, const Clock& clock);

  // A backpressure answer to a request of queue sent at sent: delay is the
  // delay the downstream named (nullopt: none), reason what it said.
  // cap, when set, bounds the hold this answer sets (a worker token's
  // max_backpressure_s).
  Answer hold(const std::string& queue, std::optional<std::chrono::milliseconds> delay,
              SteadyTime sent, std::string reason,
              std::optional<std::chrono::milliseconds> cap = std::nullopt) EXCLUDES(mu_);
  // A request of queue sent at sent succeeded.
  void succeeded(std::string_view queue, SteadyTime sent) EXCLUDES(mu_);
  // Ends queue's hold and its episode; whether a hold was in force.
  bool clear(std::string_view queue) EXCLUDES(mu_);
  // The hold of queue if it has not ended.
  std::optional<Hold> active(std::string_view queue) const EXCLUDES(mu_);
  // Every hold that has not ended, by queue.
  std::map<std::string, Hold, std::less<>> active_all() const EXCLUDES(mu_);

 private:
  // Constant after construction.
  const std::chrono::milliseconds base_, max_, max_unnamed_;
  const Clock& clock_;

  // Guarded by mu_.
  mutable Mutex mu_;
  std::map<std::string, Hold, std::less<>> holds_ GUARDED_BY(mu_);  // the last hold per queue

  // Atomic: written under mu_, read without it.
  std::atomic<size_t> episodes_{0};  // holds_.size()
};

}  // namespace conveyor
