// Job request validation shared by the CLI and the API (job_request.hpp).
#include <conveyor/job_request.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string_view>

namespace conveyor {
void validate_job_request(const JobRequest& job) {
  validate_queue_name(job.queue);
  validate_job_kind(job.kind);
  if (job.payload.size() > kMaxPayloadBytes)
    throw ValidationError("payload", fmt::format("payload is {} bytes; the limit is {} bytes",
                                                 job.payload.size(), kMaxPayloadBytes));
  if (!nlohmann::json::accept(job.payload))
    throw ValidationError("payload",
                          "payload is not valid JSON: " + quote_for_message(job.payload, 80));
  if (job.max_attempts && *job.max_attempts < 1)
    throw ValidationError("max_attempts",
                          fmt::format("max_attempts must be >= 1, got {}", *job.max_attempts));
  if (!(job.delay_s >= 0 && job.delay_s <= kMaxDelaySeconds))
    throw ValidationError("delay",
                          fmt::format("delay must be a number of seconds from 0 to {}, got {}",
                                      kMaxDelaySeconds, format_number(job.delay_s)));
  if (job.cost < 1 || job.cost > kMaxJobCost)
    throw ValidationError("cost",
                          fmt::format("cost must be a whole number of tokens from 1 to {}, got {}",
                                      kMaxJobCost, job.cost));
  validate_job_key(job.key);
  if (job.timeout_s != 0) {
    const double ms = job.timeout_s * 1e3;
    if (!(ms >= 0.5 && ms <= static_cast<double>(kMaxJobTimeoutMs)))
      throw ValidationError(
          "timeout", fmt::format("timeout must be a number of seconds from 0.001 to {} (7 days), "
                                 "or 0 for the queue's job_timeout_s; got {}",
                                 kMaxJobTimeoutMs / 1000, format_number(job.timeout_s)));
  }
}

NewJob to_new_job(const JobRequest& job, int64_t now_us) {
  NewJob out;
  out.queue = job.queue;
  out.kind = job.kind;
  out.payload = job.payload;
  out.priority = job.priority;
  out.max_attempts = job.max_attempts.value_or(0);
  out.cost = job.cost;
  out.key = job.key;
  out.timeout_ms = static_cast<int64_t>(std::llround(job.timeout_s * 1e3));
  out.run_at_us = now_us + static_cast<int64_t>(std::llround(job.delay_s * 1e6));
  return out;
}

}  // namespace conveyor
