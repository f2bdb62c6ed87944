// A dispatch unit: what the dispatcher polls, limits and claims for as one.
// A queue (hence QueueRunner); its permits, bucket, hold and remote claims
// are the unit's. A keyed queue's keys are not units of their own: one claim
// serves many keys (claim_keys), so the storage work stays per queue, and
// the unit's KeyTurns shares each claim between its ready keys.
//
// Where a unit is between two polls (UnitState). A poll starts in kPolling
// and ends in exactly one other state: the poll returns a Next, and only
// Dispatcher::enter moves the unit, so no path can end without choosing one
// (and debug builds check that the unit is then reachable from the state it
// is in: Dispatcher::check_reachable).
//
//          timer due, or woken (new jobs, a hold cleared, wake_at's time)
//      +--------------------------------------------------------------+
//      v                                                              |
//  [kPolling] -- claimed a full batch: more may be ready ----> [kScheduled(now)]
//      |      -- drained, throttled, held, coalescing, -------> [kScheduled(at, why)]
//      |         backing off, backlogged, no consumer
//      |      -- no permit of the unit -----------------------> [kParked]
//      |                                    a permit is freed: woken --+
//      |      -- no engine-wide worker slot ------------------> [kWaitingForSlot]
//      |                                       a slot is freed: woken --+
//      |      -- claim handed to the slow-claim pool ---------> [kClaimInFlight]
//      |                                                              |
//      +<---- delivered at the next pass (finish_claim) --------------+
//
// An event for a unit in kClaimInFlight (a wake, a remote claim throttled)
// is remembered, and the unit is polled as soon as the claim is delivered.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/internal/limit_resolver.hpp>
#include <conveyor/internal/metrics.hpp>

#include "due_times.hpp"
#include "key_turns.hpp"
#include "queue_bucket.hpp"
#include "remote_claim.hpp"
#include "unit_hold.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>

namespace conveyor {

enum class UnitState : uint8_t { kPolling, kScheduled, kParked, kWaitingForSlot, kClaimInFlight };

// Why a unit in kScheduled waits for its time.
enum class WaitReason : uint8_t {
  kNone,
  kMoreReady,   // its last claim was full, or it was woken
  kCoalescing,  // a busy unit waits briefly for more permits, to claim a batch
  kTokens,      // its bucket or resume ramp has no tokens until then
  kHeld,        // a downstream's backpressure hold
  kDrained,     // its last claim came back short: the next poll (DueTimes)
  kLocalIdle,   // remote workers claim here; the local kinds had no job
  kBackingOff,  // a claim failed
  kBacklogged,  // outcomes of jobs already run wait to be recorded
  kNoConsumer,  // no kind is served here
  kKeyLimits,   // keyed: ready keys wait for their own bucket or key_max_workers
};

// What a poll decided: the state the unit enters.
struct Next {
  UnitState state = UnitState::kScheduled;
  WaitReason why = WaitReason::kNone;
  SteadyTime at{};  // kScheduled only

  static Next scheduled(SteadyTime at, WaitReason why) { return {UnitState::kScheduled, why, at}; }
  static Next parked() { return {UnitState::kParked}; }
  static Next waiting_for_slot() { return {UnitState::kWaitingForSlot}; }
  static Next claim_in_flight() { return {UnitState::kClaimInFlight}; }
};

struct QueueRunner {
  QueueRunner(std::string n, uint32_t workers, QueueCounters& c,
              std::unique_ptr<KeyTurns> key_turns = nullptr)
      : name(std::move(n)), max_workers(workers), counters(c), keys(std::move(key_turns)) {}

  // Constant after construction.
  const std::string name;
  const uint32_t max_workers;
  QueueCounters& counters;
  // Fair turns between the queue's keys and their limits (thread-safe), or
  // null: the queue is claimed in claim order across keys.
  const std::unique_ptr<KeyTurns> keys;

  // Shared with the workers and other threads (atomics).
  std::atomic<uint32_t> in_flight{0};  // permits taken: claimed and not yet finished
  std::atomic<bool> parked{false};     // set in kParked; a freed permit wakes the unit
  // While coalescing: wake as soon as in_flight drops below this (0: off),
  // i.e. when a full batch of permits is free, instead of at the timer.
  std::atomic<uint32_t> wake_below{0};
  std::atomic<bool> local_work{false};  // a wake that may concern the local kinds
  UnitHold hold;                        // set by any thread, seen by the dispatcher

  // Owned by the dispatcher thread.
  UnitState state = UnitState::kScheduled;  // a new unit is woken at once
  WaitReason why = WaitReason::kMoreReady;
  SteadyTime due{};                   // its timer, when scheduled is set
  bool scheduled = false;             // present in the dispatcher's timer set
  std::optional<QueueBucket> bucket;  // present iff limited
  EffectiveLimit limit;
  uint64_t limit_generation = 0;  // resolver generation of limit
  uint32_t cost_hint = 1;         // token_settlement.hpp
  std::chrono::milliseconds error_backoff{0};
  bool coalesced = false;  // the last poll waited for permits: the next one claims
  // Until then claims take only the served kinds (claim_kinds); after it, a
  // plain claim, which is the faster one on some plugins.
  SteadyTime filter_until{};
  DueTimes due_times;
  bool slow_claims = false;          // local claims go to the slow-claim pool
  bool polled_during_claim = false;  // an event came in kClaimInFlight

  // Remote workers, owned by the dispatcher thread.
  std::list<std::shared_ptr<RemoteClaim>> remote;  // claims waiting here, oldest first
  // A remote worker claimed here: local claims always take the local kinds
  // only (claim_kinds), never the plain claim that would take its jobs.
  bool remote_seen = false;
  bool remote_first = false;  // remote claims go first at the next poll
  // The last local claim found fewer jobs than it asked for: no local claim
  // until a wake that may concern local kinds (local_work), or local_retry.
  bool local_idle = false;
  SteadyTime local_retry{};
};

// What a unit looks like from outside the dispatcher thread.
struct RunnerView {
  std::string queue;
  uint32_t in_flight = 0;
  uint32_t max_workers = 0;
};

}  // namespace conveyor
