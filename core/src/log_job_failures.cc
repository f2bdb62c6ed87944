#include "log_job_failures.hpp"

#include <conveyor/internal/log.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>

namespace conveyor {
namespace {
// Longer error texts are cut in the log (storage keeps the whole text).
constexpr size_t kMaxErrorChars = 1000;

std::string one_line(std::string_view text) {
  std::string out(text.substr(0, kMaxErrorChars));
  std::replace(out.begin(), out.end(), '\n', ' ');
  if (text.size() > kMaxErrorChars) out += "...";
  return out;
}
}  // namespace

JobFailureLog::JobFailureLog(const Clock& clock, Options options, spdlog::logger* logger)
    : clock_(clock), options_(options), logger_(logger) {}

spdlog::logger& JobFailureLog::logger() const {
  return logger_ ? *logger_ : *spdlog::default_logger_raw();
}

uint64_t JobFailureLog::suppressed() const {
  MutexLock lock(mu_);
  return suppressed_total_;
}

void JobFailureLog::failed(const Failure& f) {
  if (!logger().should_log(spdlog::level::info)) return;
  const SteadyTime now = clock_.steady_now();
  uint64_t suppressed = 0;
  double suppressed_for_s = 0;
  {
    MutexLock lock(mu_);
    auto it = queues_.find(f.queue);
    if (it == queues_.end())
      it = queues_
               .emplace(std::string(f.queue),
                        PerQueue{TokenBucket(
                            make_rate_limit(options_.lines_per_sec, options_.burst), now)})
               .first;
    PerQueue& q = it->second;
    if (q.bucket.take(1, now) == 0) {
      if (q.suppressed++ == 0) q.first_suppressed = now;
      ++suppressed_total_;
      return;
    }
    suppressed = q.suppressed;
    suppressed_for_s = std::chrono::duration<double>(now - q.first_suppressed).count();
    q.suppressed = 0;
  }
  if (suppressed > 0) {
    LogFields fields{{"queue", f.queue}, {"suppressed", static_cast<int64_t>(suppressed)}};
    logger().info("queue {}: {} similar lines suppressed in the last {:.0f} s (failed attempts)",
                  f.queue, suppressed, suppressed_for_s);
  }
  const std::string error = one_line(f.error);
  LogFields fields{{"queue", f.queue},
                   {"job_id", f.job_id},
                   {"kind", f.kind},
                   {"attempt", int64_t{f.attempt}},
                   {"max_attempts", int64_t{f.max_attempts}},
                   {"error", error}};
  if (f.retry_at_us >= 0) {
    const int64_t in_ms = std::max<int64_t>(0, (f.retry_at_us - clock_.wall_now_us()) / 1000);
    LogFields retry{{"retry_in_ms", in_ms}};
    logger().info("queue {}: job {} (kind {}) attempt {} of {} failed, retrying in {} ms: {}",
                  f.queue, f.job_id, f.kind, f.attempt, f.max_attempts, in_ms, error);
  } else {
    logger().info("queue {}: job {} (kind {}) failed for good after attempt {} of {}: {}", f.queue,
                  f.job_id, f.kind, f.attempt, f.max_attempts, error);
  }
}

}  // namespace conveyor
