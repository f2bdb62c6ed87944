// Completer: records job outcomes in storage off the workers' threads.
// Successes are batched into one complete() call; failures go one by one
// through fail() with the retry time the engine chose. Transient storage
// errors keep the outcomes and retry with backoff: nothing is forgotten
// while the process lives (and if it dies, leases expire and jobs re-run).
//
// Every pushed outcome is settled (the settled callback runs for its lease)
// exactly once: when it is recorded, when storage refuses it (lease lost),
// or when it is abandoned (a non-transient storage error, or shutdown before
// it could be recorded; its lease then expires and the job runs again).
//
// Outcomes go to storage in batches of at most kMaxBatch; a batch that meets
// a transient error is halved for the next try (down to one outcome), and
// the batches stay under the size that failed until 16 have been recorded,
// then may double again: a batch too large for the database's time or size
// limits (statement_timeout) is split until it passes, instead of being
// retried whole and growing for ever.
//
// Unrecorded outcomes are bounded: while kMaxUnsavedJobs or more (or
// kMaxUnsavedBytes of error texts) wait, backlogged() is true and the
// dispatcher claims nothing (a job whose result cannot be saved would only
// run again); said once in the log when it starts and once when it ends.
//
// Also: a failed attempt that storage recorded is logged (JobFailureLog,
// bounded per queue); a refusal counts as a lost lease in the queue's
// counters; storage errors count in Metrics::storage_errors.
#pragma once

#include "log_job_failures.hpp"

#include <conveyor/clock.hpp>
#include <conveyor/internal/metrics.hpp>
#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/storage.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <vector>

namespace conveyor {

struct Outcome {
  conveyor_lease lease{};
  QueueCounters* counters = nullptr;
  const std::string* queue = nullptr;  // the runner's name; lives as long as the engine
  std::string kind;                    // for the failure log
  int32_t attempt = 0, max_attempts = 0;
  bool succeeded = false;
  // Backpressure: given back unrun (attempt not spent), not a failure.
  bool released = false;
  int64_t retry_at_us = -1;  // failures: >= 0 retry then, < 0 final
  std::string error;
  // A recording attempt failed before: the storage may have committed it
  // then and lost only the reply, so a refusal now is no proof of a lost lease.
  bool retried = false;
};

class Completer {
 public:
  // How the settled outcomes ended, so far.
  struct Stats {
    uint64_t recorded = 0;   // storage accepted them
    uint64_t refused = 0;    // storage answered LEASE_LOST
    uint64_t abandoned = 0;  // never recorded: non-transient error or shutdown
  };

  // settled(lease) runs once per outcome, on the completer's thread (or on
  // the pusher's, for an outcome pushed after run() returned).
  // metrics, if given, counts storage errors ("recording_outcomes").
  // retry_recorded(queue, retry_at_us), if given, runs on the completer's
  // thread once a failure with a retry is recorded (storage does not notify
  // retries: the dispatcher polls the queue then).
  using RetryRecorded = std::function<void(const std::string& queue, int64_t retry_at_us)>;
  Completer(Storage& storage, const Clock& clock,
            std::function<void(const conveyor_lease&)> settled, Metrics* metrics = nullptr,
            RetryRecorded retry_recorded = {});

  static constexpr size_t kMaxBatch = 1000;
  static constexpr size_t kMaxUnsavedJobs = 10000;
  static constexpr size_t kMaxUnsavedBytes = 16 << 20;

  void push(Outcome outcome) EXCLUDES(mu_);  // thread-safe, never blocks on storage
  // Too many outcomes wait to be recorded: claim nothing. Thread-safe, one
  // atomic load.
  bool backlogged() const { return backlogged_.load(std::memory_order_acquire); }
  // Outcomes pushed and not yet settled, and their error texts' bytes.
  size_t unsaved_jobs() const { return unsaved_jobs_.load(std::memory_order_relaxed); }
  size_t unsaved_bytes() const { return unsaved_bytes_.load(std::memory_order_relaxed); }
  // The thread body: records outcomes until stop is requested and nothing
  // is pending (or the deadline given to finish() has passed). Outcomes left
  // unrecorded then are abandoned (logged with their count).
  void run(std::stop_token stop) EXCLUDES(mu_);
  // Asks run() to drain what is pending and return by deadline: no storage
  // call starts after it.
  void finish(std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_);
  size_t pending() const EXCLUDES(mu_);
  Stats stats() const;

 private:
  // Records what it can of batch and settles that; what is left in batch
  // met a transient error (false) and is retried later.
  bool record(std::vector<Outcome>& batch);
  // Records up to batch_limit_ of backlog's first outcomes; what met a
  // transient error goes back to its front. False on a transient error.
  bool record_some(std::vector<Outcome>& backlog);
  // Re-evaluates backlogged_ after unsaved_* changed; logs a change.
  void update_backlogged() EXCLUDES(backlogged_mu_);
  void settle(const Outcome& o, std::atomic<uint64_t>& how);
  void abandon(std::vector<Outcome>& batch, const char* why);
  void count_storage_error();

  // Constant after construction.
  Storage& storage_;
  const Clock& clock_;
  std::function<void(const conveyor_lease&)> settled_;
  Metrics* metrics_;
  const RetryRecorded retry_recorded_;
  JobFailureLog failure_log_;  // thread-safe itself

  // Guarded by mu_.
  mutable Mutex mu_;
  CondVarAny cv_;  // _any: a stop request wakes run() too
  std::vector<Outcome> pending_ GUARDED_BY(mu_);
  bool finishing_ GUARDED_BY(mu_) = false;
  uint64_t finish_calls_ GUARDED_BY(mu_) = 0;
  bool closed_ GUARDED_BY(mu_) = false;  // run() returned
  std::chrono::steady_clock::time_point deadline_ GUARDED_BY(mu_){};

  // Atomic: any thread.
  std::atomic<uint64_t> recorded_{0}, refused_{0}, abandoned_{0};
  std::atomic<size_t> unsaved_jobs_{0}, unsaved_bytes_{0};
  // Flipped under backlogged_mu_ (which orders the flips and their log
  // lines), read without it: not GUARDED_BY.
  std::atomic<bool> backlogged_{false};
  Mutex backlogged_mu_;

  // Owned by run()'s thread: the next batch's size, the size it may grow
  // to, and the batches recorded since a failure or since the ceiling last
  // grew.
  static constexpr uint32_t kBatchesBeforeGrowing = 16;
  size_t batch_limit_ = kMaxBatch, batch_ceiling_ = kMaxBatch;
  uint32_t recorded_batches_ = 0;
};

}  // namespace conveyor
