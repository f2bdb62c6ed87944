// A job as a user asks for it, from CLI flags or an API NewJob message, and
// its validation: one code path, so the same bad input gets the same message
// from `conveyor enqueue`, from `conveyor --server ... enqueue` and from the API.
#pragma once

#include <conveyor/internal/storage.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace conveyor {

struct JobRequest {
  std::string queue;
  std::string kind;
  std::string payload = "{}";           // JSON text
  int32_t priority = 0;                 // lower runs first
  std::optional<int32_t> max_attempts;  // unset: [engine] max_attempts
  double delay_s = 0;                   // run no earlier than now + delay
  int32_t cost = 1;                     // tokens taken from the queue's limit, 1..kMaxJobCost
  std::string key;  // its key for per-key limits and fair turns; "": the empty key
  // How long one attempt may run, in seconds (rounded to whole milliseconds):
  // 0 (the queue's job_timeout_s) or 0.001 to kMaxJobTimeoutMs / 1000 (7 days).
  double timeout_s = 0;
};

// The longest delay accepted: one year.
inline constexpr double kMaxDelaySeconds = 365.0 * 86400;

// Throws ValidationError naming the field: "queue", "kind", "payload"
// (valid JSON, at most kMaxPayloadBytes), "max_attempts" (>= 1), "delay"
// (0 to kMaxDelaySeconds), "cost" (1 to kMaxJobCost; the engine refuses a
// cost above the queue's burst when it enqueues) or "key" (at most
// kMaxJobKeyBytes bytes of UTF-8; the engine refuses a non-empty key on a
// plugin without ABI 1.4) or "timeout" (0, or 1 ms to 7 days; the engine
// refuses a timeout on a plugin without ABI 1.6).
void validate_job_request(const JobRequest& job);

// What storage takes: run_at = now + delay; max_attempts 0 means the engine's
// default. Call validate_job_request first.
NewJob to_new_job(const JobRequest& job, int64_t now_us);

}  // namespace conveyor
