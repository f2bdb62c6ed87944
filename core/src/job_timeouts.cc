#include "job_timeouts.hpp"

#include <conveyor/validation.hpp>

#include <fmt/format.h>

namespace conveyor {

std::optional<AttemptTimeout> attempt_timeout(const Job& job, int64_t queue_timeout_ms) {
  const bool own = job.timeout_ms > 0;
  const int64_t ms = own ? job.timeout_ms : queue_timeout_ms;
  if (ms <= 0) return std::nullopt;
  const std::string length = format_number(static_cast<double>(ms) / 1000.0);
  return AttemptTimeout{
      std::chrono::milliseconds(ms),
      own ? fmt::format("timed out after {} s (the job's timeout_ms = {})", length, ms)
          : fmt::format("timed out after {} s (job_timeout_s)", length)};
}

}  // namespace conveyor
