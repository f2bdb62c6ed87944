// Copies of what a plugin reports through callbacks (jobs, queue stats, rate
// limits, queues, notifications), made inside the callback while the plugin's
// strings are valid, and checked against the rules storage_plugin.h sets for
// those structs. A broken rule is described in `problems`; the caller turns
// each into a test failure.
#pragma once

#include <conveyor/storage_plugin.h>

#include <cstdint>
#include <string>
#include <vector>

namespace conveyor::conformance {

struct JobCopy {
  uint32_t struct_size = 0;
  int32_t state = 0;
  int64_t id = 0;
  std::string queue;
  std::string kind;
  std::string payload;
  int32_t priority = 0;
  int32_t attempt = 0;
  int32_t max_attempts = 0;
  int32_t reserved0 = 0;
  int64_t run_at_us = 0;
  int64_t created_at_us = 0;
  int64_t finalized_at_us = 0;
  int64_t lease_token = 0;
  int64_t lease_expires_us = 0;
  std::string last_error;

  conveyor_lease lease() const { return conveyor_lease{id, lease_token}; }
};

struct StatsCopy {
  uint32_t struct_size = 0;
  int32_t paused = 0;
  std::string queue;
  int64_t pending = 0;
  int64_t scheduled = 0;
  int64_t running = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t cancelled = 0;
};

struct LimitCopy {
  uint32_t struct_size = 0;
  uint32_t burst = 0;
  std::string queue;
  double rate_per_sec = 0;
  int64_t updated_at_us = 0;
};

struct QueueCopy {
  std::string queue;
  int32_t paused = 0;
};

struct NotificationCopy {
  int32_t kind = 0;
  std::string queue;
};

JobCopy copy_job(const conveyor_job* job, std::vector<std::string>& problems);
StatsCopy copy_stats(const conveyor_queue_stats* stats, std::vector<std::string>& problems);
LimitCopy copy_limit(const conveyor_rate_limit* limit, std::vector<std::string>& problems);
QueueCopy copy_queue(conveyor_str queue, int32_t paused, std::vector<std::string>& problems);
NotificationCopy copy_notification(int32_t kind, conveyor_str queue,
                                   std::vector<std::string>& problems);

// "CONVEYOR_JOB_RUNNING (3)", "CONVEYOR_E_LEASE_LOST (3)", ...
std::string state_name(int32_t state);
std::string status_name(int32_t status);

}  // namespace conveyor::conformance
