// JobFailureLog: a line at info for each failed attempt (retried or final)
// with the job's queue, id, kind, attempt and error, bounded so a storm of
// failures cannot flood the log.
//
// The bound: each queue has a token bucket of burst lines refilled at
// lines_per_sec (default 20 lines, then 1 a second). A line without a token
// is not written but counted; the next line of that queue that gets one is
// preceded by "queue Q: N similar lines suppressed in the last S s". So a
// queue writes at most burst + lines_per_sec * t + (summaries, one per
// written line) lines in t seconds, whatever its failure rate.
//
// Thread-safe (the completer's thread calls it; tests call it directly).
#pragma once

#include <conveyor/clock.hpp>
#include <conveyor/internal/mutex.hpp>
#include <conveyor/internal/token_bucket.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace spdlog {
class logger;
}

namespace conveyor {

class JobFailureLog {
 public:
  struct Options {
    uint32_t burst = 20;
    double lines_per_sec = 1;
  };
  struct Failure {
    std::string_view queue;
    int64_t job_id = 0;
    std::string_view kind;
    int32_t attempt = 0;
    int32_t max_attempts = 0;
    std::string_view error;
    int64_t retry_at_us = -1;  // >= 0: runs again then; < 0: failed for good
  };

  // logger null: spdlog's default logger at the time of each line.
  JobFailureLog(const Clock& clock, Options options, spdlog::logger* logger = nullptr);

  void failed(const Failure& f) EXCLUDES(mu_);
  // Lines not written so far, all queues.
  uint64_t suppressed() const EXCLUDES(mu_);

 private:
  struct PerQueue {
    TokenBucket bucket;
    uint64_t suppressed = 0;  // since the last written line
    SteadyTime first_suppressed{};
  };
  spdlog::logger& logger() const;

  // Constant after construction.
  const Clock& clock_;
  const Options options_;
  spdlog::logger* logger_;

  // Guarded by mu_.
  mutable Mutex mu_;
  std::map<std::string, PerQueue, std::less<>> queues_ GUARDED_BY(mu_);
  uint64_t suppressed_total_ GUARDED_BY(mu_) = 0;
};

}  // namespace conveyor
