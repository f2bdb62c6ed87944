// Job value types: what is enqueued, what a claim or a lookup returns, and a
// queue's counts. Plain values, shared by the embedding API and storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace conveyor {

enum class JobState { kAvailable, kScheduled, kRunning, kCompleted, kFailed, kCancelled };
// "available", "scheduled", "running", "completed", "failed", "cancelled".
const char* to_string(JobState state) noexcept;

struct NewJob {
  std::string queue;
  std::string kind;
  std::string payload;
  int32_t priority = 0;
  int32_t max_attempts = 25;
  int64_t run_at_us = 0;  // 0: now
  // Tokens the job takes from its queue's rate limit when it starts
  // (1..kMaxJobCost). A cost above 1 needs a plugin with ABI 1.2's enqueue_v3.
  int32_t cost = 1;
  // The job's key (0..kMaxJobKeyBytes bytes of UTF-8): its queue's per-key
  // limits and fair turns count it under this key. Empty: the empty key, one
  // key like any other. A non-empty key needs a plugin with ABI 1.4's
  // enqueue_v4. A queue with key_from derives it from the payload instead.
  std::string key{};
  // How long one attempt may run, in milliseconds, before it fails as timed
  // out. 0: the queue's [queues.NAME] job_timeout_s (no limit when unset).
  // A non-zero timeout needs a plugin with ABI 1.6's enqueue_v5.
  int64_t timeout_ms = 0;
};

// The longest job key, in bytes (CONVEYOR_JOB_KEY_MAX).
inline constexpr std::size_t kMaxJobKeyBytes = 200;

// The longest timeout of one attempt (NewJob::timeout_ms), in milliseconds:
// 7 days (CONVEYOR_JOB_TIMEOUT_MAX_MS). A job that must run longer than a
// week in one attempt should checkpoint and re-enqueue itself instead.
inline constexpr int64_t kMaxJobTimeoutMs = int64_t{7} * 24 * 3600 * 1000;

struct Job {
  int64_t id = 0;
  JobState state = JobState::kAvailable;
  std::string queue;
  std::string kind;
  std::string payload;
  int32_t priority = 0;
  int32_t attempt = 0;
  int32_t max_attempts = 0;
  int64_t run_at_us = 0;
  int64_t created_at_us = 0;
  int64_t finalized_at_us = 0;
  int64_t lease_token = 0;
  int64_t lease_expires_us = 0;
  std::string last_error;
  int32_t cost = 1;           // as enqueued; 1 from a plugin before ABI 1.2
  std::string key{};          // as enqueued; empty from a plugin before ABI 1.4
  int64_t timeout_ms = 0;     // as enqueued (0: the queue's); 0 before ABI 1.6
  int64_t started_at_us = 0;  // when the latest attempt started; 0 if none, or before ABI 1.6
};

struct QueueStats {
  std::string queue;
  bool paused = false;
  int64_t pending = 0;
  int64_t scheduled = 0;
  int64_t running = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t cancelled = 0;
  // When the longest-waiting pending job became ready (its run_at); 0 when
  // none is pending. Known only from a plugin of ABI 1.1 or later.
  bool oldest_pending_known = false;
  int64_t oldest_pending_run_at_us = 0;
};

// Which jobs of one queue to list (Engine::list_jobs, Storage::list_jobs):
// id > after_id, in id order, at most limit (1..kListJobsMax).
struct JobQuery {
  std::string queue{};             // required
  std::vector<JobState> states{};  // empty: every state
  std::string kind{};              // empty: every kind
  int64_t after_id = 0;            // keyset cursor: the last id of the previous page
  uint32_t limit = 100;
};
// The storage ABI's limits (CONVEYOR_LIST_JOBS_MAX, CONVEYOR_JOB_COST_MAX),
// written out so the embedding API needs no C header; core/src/storage.cc
// checks that they agree.
inline constexpr uint32_t kListJobsMax = 1000;
inline constexpr int32_t kMaxJobCost = 1'000'000;

// One id's outcome of a retry or delete.
struct JobOutcome {
  enum class Status {
    kOk,
    kNotFound,    // no such job
    kWrongState,  // a state the operation refuses; the job is unchanged
  };
  int64_t id = 0;
  Status status = Status::kOk;
};

}  // namespace conveyor
