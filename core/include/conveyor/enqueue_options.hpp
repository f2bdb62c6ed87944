// How Engine::enqueue places one job: its priority, attempts, delay, cost,
// key and timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace conveyor {

struct EnqueueOptions {
  int32_t priority = 0;                 // lower runs first
  std::optional<int32_t> max_attempts;  // default: [engine] max_attempts
  std::chrono::microseconds delay{0};   // run no earlier than now + delay
  // Tokens the job takes from its queue's rate limit (1..kMaxJobCost; at
  // most the queue's burst, else ValidationError("cost") at enqueue).
  int32_t cost = 1;
  // The job's key (NewJob::key): empty, or 1..kMaxJobKeyBytes bytes of UTF-8.
  std::string key{};
  // How long one attempt may run (NewJob::timeout_ms): 0 uses the queue's
  // job_timeout_s; else 1 ms to kMaxJobTimeoutMs, and a plugin with ABI 1.6.
  std::chrono::milliseconds timeout{0};
};

}  // namespace conveyor
