// Job timeouts (issue 41): how long one attempt of a job may run, and the
// error it fails with when that passes. A job's own timeout_ms wins; else its
// queue's job_timeout_s ([queues.NAME], else [engine]); else none. Shared by
// the job runner (in-process handlers) and the remote workers' tables.
#pragma once

#include <conveyor/job.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace conveyor {

struct AttemptTimeout {
  std::chrono::milliseconds length{0};
  // "timed out after 30 s (job_timeout_s)", or "... (the job's timeout_ms = 1500)".
  std::string error;
};

// queue_timeout_ms: Config::job_timeout_ms_for(job.queue) (0: none).
std::optional<AttemptTimeout> attempt_timeout(const Job& job, int64_t queue_timeout_ms);

}  // namespace conveyor
