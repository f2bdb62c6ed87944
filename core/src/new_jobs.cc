#include "new_jobs.hpp"

#include <conveyor/validation.hpp>

#include <fmt/format.h>

namespace conveyor {

NewJob make_new_job(std::string_view queue, std::string_view kind, std::string_view payload,
                    const EnqueueOptions& options, int64_t now_us) {
  NewJob job;
  job.queue = std::string(queue);
  job.kind = std::string(kind);
  job.payload = std::string(payload);
  job.priority = options.priority;
  job.max_attempts = options.max_attempts.value_or(0);
  job.run_at_us = options.delay.count() > 0 ? now_us + options.delay.count() : 0;
  return job;
}

void prepare_new_jobs(std::vector<NewJob>& jobs, const EngineConfig& engine, int64_t now_us) {
  for (NewJob& j : jobs) {
    validate_queue_name(j.queue);
    validate_job_kind(j.kind);
    if (j.payload.size() > kMaxPayloadBytes)
      throw ValidationError("payload", fmt::format("payload is {} bytes; the limit is {} bytes",
                                                   j.payload.size(), kMaxPayloadBytes));
    if (j.max_attempts == 0) j.max_attempts = static_cast<int32_t>(engine.max_attempts);
    if (j.max_attempts < 1) throw ValidationError("max_attempts", "max_attempts must be >= 1");
    if (j.run_at_us == 0) j.run_at_us = now_us;
  }
}

}  // namespace conveyor
