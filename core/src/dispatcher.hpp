// Dispatcher: one thread polls every dispatch unit (dispatch_unit.hpp), each
// when it is due, so an idle queue costs a timer entry and an occasional
// claim, not a thread. It wires the parts that each do one job:
//   UnitScheduler        timers and wake-ups: which unit is due when
//   permits              in_flight of each unit, and engine-wide worker slots
//   TokenSettlement      a unit's bucket and resume ramp: what a claim may take
//   UnitHold             a downstream's backpressure holds
//   DueTimes             when a drained unit is polled again
//   RemoteClaimMatcher   remote workers' claims, served by the same polls
//   SlowClaimPool        claims of slow units, made off this thread
//   ServedKinds          the kind filter (claim_kinds)
//
// A poll of one unit (docs/reference.md, "Rate limits"):
//   permits = min(max_workers - in flight, engine-wide free slots)
//   batch   = min(permits, claim_batch_max)
//   tokens  = TokenSettlement::take(batch): none -> wait until they are due
//   jobs    = storage.claim(batch); then TokenSettlement::settle
// and ends in exactly one state (dispatch_unit.hpp), returned as a Next that
// only enter() applies.
// A pass polls the due limited units first, the nearest to a full bucket
// first; then limited units still a whole batch of tokens behind claim again
// (catch_up); then the unlimited units. An unlimited unit never touches a
// bucket: its cost is one atomic load (the resolver's generation) per poll.
// A unit with remote claims waiting serves them and its local handlers in
// turn (who goes first alternates), from one bucket and one set of permits.
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/config.hpp>
#include <conveyor/internal/limit_resolver.hpp>
#include <conveyor/internal/metrics.hpp>
#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/storage.hpp>

#include "dispatch_unit.hpp"
#include "permits.hpp"
#include "remote_claim_matcher.hpp"
#include "served_kinds.hpp"
#include "storage_health.hpp"
#include "unit_claimer.hpp"
#include "unit_scheduler.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

namespace conveyor {

class Dispatcher {
 public:
  struct Options {
    uint32_t claim_batch_max = 100;
    std::chrono::milliseconds poll_interval{1000};
    std::chrono::milliseconds lease{30000};
    // Engine-wide: the worker thread cap. Jobs of asynchronous handlers
    // count only until started (job_left_slot).
    uint32_t max_in_flight = 256;
    // When a busy unit gets a permit back, wait this long for more to free
    // up before claiming, so fast jobs are claimed in batches, not one by one.
    std::chrono::microseconds coalesce{1000};
    // Where claim outcomes are reported (may be null).
    StorageHealth* health = nullptr;
    // The kinds to claim (claim_kinds), read at every poll; none served:
    // nothing is claimed. Null, or a plugin without claim_kinds: every kind.
    const ServedKinds* served = nullptr;
    // Whether storage now reports every job that becomes ready, delayed ones
    // when they come due (CONVEYOR_CAP_NOTIFY_DUE and a working notification
    // channel); asked at every drained poll, any thread's answer. Then a
    // drained unit waits as DueTimes says; otherwise for poll_interval.
    // Null: never.
    std::function<bool()> notified_due;
    std::chrono::milliseconds notified_poll{60000};
    // Whether the engine's sweep (wake_queues_with_pending_jobs, every
    // notified_poll: one job_counts call for every queue) stands in for each
    // drained unit's own notified_poll, so the safety net costs one storage
    // call per notified_poll however many queues are idle.
    bool swept = false;
    // A unit whose local claim takes this long claims in the SlowClaimPool
    // from then on (its permits reserved for the batch while the claim
    // runs), and back on this thread once a claim takes under half of it;
    // 0: every claim on the dispatcher thread. Remote workers' claims always
    // run on the dispatcher thread.
    std::chrono::milliseconds slow_claim{0};
    // Whether the outcomes of jobs already run wait, too many, to be
    // recorded (Completer::backlogged): then no local claim, since a job
    // whose result cannot be saved would only run again; asked at every
    // local claim, any thread's answer. Null: never.
    std::function<bool()> outcomes_backlogged;
    // The key turns of a new unit (key_turns.hpp), or null for a queue
    // claimed in claim order across keys. Called once per unit, when it is
    // added, with units_mu_ held: it must not call the dispatcher. Null: no
    // queue is keyed.
    std::function<std::unique_ptr<KeyTurns>(const std::string& queue)> key_turns;
  };
  // Receives each claimed batch; must not block on the jobs' execution.
  using Execute = std::function<void(QueueRunner&, std::vector<Job>&&)>;

  Dispatcher(Storage& storage, const LimitResolver& limits, const Clock& clock, Metrics& metrics,
             Options options, Execute execute);
  // Stops the slow-claim pool; what it claimed and nobody delivered goes
  // back to storage.
  ~Dispatcher();

  // The options an engine configured with engine gives its dispatcher.
  static Options options_for(const EngineConfig& engine, StorageHealth* health,
                             const ServedKinds* served = nullptr);

  // Adds a queue (no-op if known) and makes it due now. Thread-safe.
  void add_queue(const std::string& name, uint32_t max_workers) EXCLUDES(units_mu_);
  // Makes the queue due now, adding it first when it is new. Thread-safe.
  void add_or_wake(const std::string& name, uint32_t max_workers) EXCLUDES(units_mu_);
  bool has_queue(std::string_view name) const EXCLUDES(units_mu_);
  // Makes a known queue due now (new jobs, a changed limit). Thread-safe.
  // local_work = false: the change concerns no kind the local handlers run
  // (a remote worker's job was enqueued), so on a queue remote workers serve
  // it wakes only their claims.
  void wake(std::string_view name, bool local_work = true) EXCLUDES(units_mu_);
  // Makes every queue due now. Thread-safe.
  void wake_all() EXCLUDES(units_mu_);
  // Jobs of a known queue become ready at at_us (wall clock): this process
  // scheduled them (a retry) and storage will not notify. The queue is
  // polled then, whatever its idle poll. Thread-safe.
  void wake_at(std::string_view name, int64_t at_us) EXCLUDES(units_mu_);
  // A worker finished a job of runner: frees its permit. Thread-safe.
  // job_id: the job's id, for its key's running count (0: none).
  void job_finished(QueueRunner& runner, int64_t job_id = 0);
  // A local job now waits without a thread (an asynchronous handler started
  // it): its engine-wide worker slot is free, its queue's permit still
  // held until async_job_finished. Any thread.
  void job_left_slot();
  void async_job_finished(QueueRunner& runner, int64_t job_id = 0);

  // Backpressure: queue claims nothing (for local handlers or remote
  // workers) before until, and its bucket is empty then; after it the
  // queue resumes through a ResumeRamp from the rate it was refused at. A
  // later hold extends it; clear_hold (the operator's) ends it, with no
  // ramp, and wakes the queue. Thread-safe.
  void hold(const std::string& queue, SteadyTime until) EXCLUDES(units_mu_);
  void clear_hold(std::string_view queue) EXCLUDES(units_mu_);
  // Backpressure for one key of a keyed queue: key gets no turn before
  // until, the queue's other keys go on; the queue is polled again then.
  // false (nothing done) when the queue is unknown or not keyed. Thread-safe.
  bool hold_key(std::string_view queue, const std::string& key, SteadyTime until)
      EXCLUDES(units_mu_);

  // Serves a remote worker's claim (remote_claim.hpp), adding its queues
  // when new. Answered empty at once after close_remote(). Thread-safe.
  void submit_remote(std::shared_ptr<RemoteClaim> claim);
  // Answers every waiting remote claim empty, and every later one at once.
  // Call after run() returned (the engine stops).
  void close_remote() EXCLUDES(units_mu_);
  // A job granted to a remote worker was settled or its lease expired:
  // frees its permit. Thread-safe.
  void remote_job_finished(QueueRunner& runner, int64_t job_id = 0);

  // Polls every unit due at or before now, tries new remote claims and
  // answers those whose wait ended; returns when the next unit is due or
  // a claim's wait ends (SteadyTime::max() when none). Dispatcher thread (or
  // a test) only.
  SteadyTime run_due(SteadyTime now);
  // The thread body: run_due in a loop until stop is requested, waiting on
  // the real clock in between. Before it returns, the slow-claim pool
  // stops and the jobs of claims not delivered go back to storage.
  void run(std::stop_token stop);
  // Interrupts run()'s wait so it sees a stop request promptly.
  void interrupt() { scheduler_.interrupt(); }

  uint32_t total_in_flight() const { return permits_.slots_taken(); }
  std::vector<RunnerView> runners() const EXCLUDES(units_mu_);
  // Where queue's unit is and why (for tests and diagnostics); nullopt for
  // an unknown queue. Dispatcher thread (or a test between passes).
  std::optional<std::pair<UnitState, WaitReason>> unit_state(std::string_view queue) const
      EXCLUDES(units_mu_);
  // What queue's unit knows of its keys now (KeyTurns::snapshot); empty for
  // an unknown queue or one that is not keyed. Thread-safe.
  std::vector<KeyTurns::KeyView> key_snapshot(std::string_view queue) const EXCLUDES(units_mu_);
  // Per keyed queue: how many keys its unit knows with ready jobs, and with
  // jobs running here. Thread-safe.
  std::map<std::string, QueueKeyCounts, std::less<>> key_counts() const EXCLUDES(units_mu_);

 private:
  Next poll(QueueRunner& r, SteadyTime now);
  Next poll_local(QueueRunner& r, SteadyTime now);
  RemoteClaimMatcher::Try try_remote(QueueRunner& r, RemoteClaim& claim, SteadyTime now);
  // Moves r to the state n (dispatch_unit.hpp): the one place a unit's
  // state changes after a poll.
  void enter(QueueRunner& r, Next n);
  // Debug builds: r, after a poll, is in a state something leaves.
  void check_reachable(const QueueRunner& r) const;
  // The unit of queue, added when new.
  QueueRunner& runner_for(const std::string& queue, uint32_t max_workers) EXCLUDES(units_mu_);
  // After r's poll: claims again if r is a whole batch of tokens behind;
  // whether it claimed.
  bool catch_up(QueueRunner& r);
  void refresh_limit(QueueRunner& r, SteadyTime now);
  // The kinds to claim now (served_'s snapshot, refreshed when it changed);
  // null when claims take every kind. Dispatcher thread only.
  const std::vector<std::string>* claim_filter();

  // Constant after construction.
  Storage& storage_;
  const LimitResolver& limits_;
  const Clock& clock_;
  Metrics& metrics_;
  const Options options_;
  const Execute execute_;
  const bool filter_kinds_;  // served given and the plugin has claim_kinds

  // The parts, built in this order: each refers only to those above it.
  // Thread-safe.
  UnitScheduler scheduler_;
  RemoteClaimMatcher remote_;
  Permits permits_;

  // The units, by queue name. A unit is never removed, so a pointer to one
  // stays valid without the lock.
  mutable Mutex units_mu_;
  std::map<std::string, std::unique_ptr<QueueRunner>, std::less<>> runners_ GUARDED_BY(units_mu_);

  // Owned by the dispatcher thread (its pool's threads make claims only).
  UnitClaimer claimer_;
  uint64_t kinds_generation_ = UINT64_MAX;  // of kinds_
  ServedKinds::Snapshot kinds_;
};

}  // namespace conveyor
