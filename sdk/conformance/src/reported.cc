#include "reported.hpp"

#include <cmath>
#include <cstring>
#include <string_view>
#include <type_traits>

namespace conveyor::conformance {
namespace {

// Copies a plugin string; "data may be NULL only when len is 0".
std::string copy_str(conveyor_str s, const char* what, std::vector<std::string>& problems) {
  if (s.len == 0) return {};
  if (s.data == nullptr) {
    problems.push_back(std::string(what) + " has data NULL with len " + std::to_string(s.len) +
                       " (storage_plugin.h: \"data may be NULL only when len is 0\")");
    return {};
  }
  return std::string(s.data, s.len);
}

// Reads a reported struct whose first member is struct_size: only the part the
// plugin says it wrote, the rest zero. Reporting a struct smaller than ABI 1.0
// defines is itself a violation (every 1.0 field exists in every plugin).
template <typename T>
T read_sized(const T* reported, const char* what, std::vector<std::string>& problems) {
  static_assert(std::is_trivially_copyable_v<T>);
  T copy;
  std::memset(&copy, 0, sizeof copy);
  uint32_t size = 0;
  std::memcpy(&size, reported, sizeof size);
  if (size < sizeof(T)) {
    problems.push_back(std::string(what) + ".struct_size is " + std::to_string(size) +
                       ", smaller than sizeof(" + what + ") = " + std::to_string(sizeof(T)) +
                       " in ABI 1.0 (storage_plugin.h rule 5: set struct_size = sizeof as built)");
    std::memcpy(&copy, reported, size < sizeof size ? sizeof size : size);
  } else {
    std::memcpy(&copy, reported, sizeof copy);
  }
  return copy;
}

bool is_final(int32_t state) {
  return state == CONVEYOR_JOB_COMPLETED || state == CONVEYOR_JOB_FAILED ||
         state == CONVEYOR_JOB_CANCELLED;
}

}  // namespace

std::string state_name(int32_t state) {
  static constexpr const char* kNames[] = {nullptr,
                                           "CONVEYOR_JOB_AVAILABLE",
                                           "CONVEYOR_JOB_SCHEDULED",
                                           "CONVEYOR_JOB_RUNNING",
                                           "CONVEYOR_JOB_COMPLETED",
                                           "CONVEYOR_JOB_FAILED",
                                           "CONVEYOR_JOB_CANCELLED"};
  std::string name = state >= 1 && state <= 6 ? kNames[state] : "unknown state";
  return name + " (" + std::to_string(state) + ")";
}

std::string status_name(int32_t status) {
  static constexpr const char* kNames[] = {
      "CONVEYOR_OK",           "CONVEYOR_E_INVALID",     "CONVEYOR_E_NOT_FOUND",
      "CONVEYOR_E_LEASE_LOST", "CONVEYOR_E_UNAVAILABLE", "CONVEYOR_E_INTERNAL",
      "CONVEYOR_E_UNSUPPORTED"};
  std::string name = status >= 0 && status <= 6 ? kNames[status] : "unknown status";
  return name + " (" + std::to_string(status) + ")";
}

JobCopy copy_job(const conveyor_job* reported, std::vector<std::string>& problems) {
  if (reported == nullptr) {
    problems.push_back("on_job was called with a NULL job");
    return {};
  }
  const conveyor_job j = read_sized(reported, "conveyor_job", problems);
  JobCopy c;
  c.struct_size = j.struct_size;
  c.state = j.state;
  c.id = j.id;
  c.queue = copy_str(j.queue, "conveyor_job.queue", problems);
  c.kind = copy_str(j.kind, "conveyor_job.kind", problems);
  c.payload = copy_str(j.payload, "conveyor_job.payload", problems);
  c.priority = j.priority;
  c.attempt = j.attempt;
  c.max_attempts = j.max_attempts;
  c.reserved0 = j.reserved0;
  c.run_at_us = j.run_at_us;
  c.created_at_us = j.created_at_us;
  c.finalized_at_us = j.finalized_at_us;
  c.lease_token = j.lease_token;
  c.lease_expires_us = j.lease_expires_us;
  c.last_error = copy_str(j.last_error, "conveyor_job.last_error", problems);

  const std::string who = "job " + std::to_string(c.id) + " (" + state_name(c.state) + ")";
  if (c.state < CONVEYOR_JOB_AVAILABLE || c.state > CONVEYOR_JOB_CANCELLED)
    problems.push_back(who + ": state is not a CONVEYOR_JOB_* value");
  if (c.id <= 0)
    problems.push_back(who +
                       ": id must be > 0 (storage_plugin.h: \"unique within the storage, > 0\")");
  if (c.reserved0 != 0)
    problems.push_back(who + ": reserved0 is " + std::to_string(c.reserved0) +
                       " (storage_plugin.h: \"reserved0; /* zero */\")");
  if (!is_final(c.state) && c.finalized_at_us != 0)
    problems.push_back(who + ": finalized_at_us is " + std::to_string(c.finalized_at_us) +
                       " (storage_plugin.h: \"0 unless COMPLETED, FAILED or CANCELLED\")");
  if (c.state != CONVEYOR_JOB_RUNNING && (c.lease_token != 0 || c.lease_expires_us != 0))
    problems.push_back(who + ": lease_token " + std::to_string(c.lease_token) +
                       " and lease_expires_us " + std::to_string(c.lease_expires_us) +
                       " must both be 0 (storage_plugin.h: \"0 unless RUNNING\")");
  if (c.state == CONVEYOR_JOB_RUNNING && c.lease_token == 0)
    problems.push_back(who + ": a RUNNING job reports lease_token 0");
  return c;
}

StatsCopy copy_stats(const conveyor_queue_stats* reported, std::vector<std::string>& problems) {
  if (reported == nullptr) {
    problems.push_back("on_stats was called with NULL stats");
    return {};
  }
  const conveyor_queue_stats s = read_sized(reported, "conveyor_queue_stats", problems);
  StatsCopy c;
  c.struct_size = s.struct_size;
  c.paused = s.paused;
  c.queue = copy_str(s.queue, "conveyor_queue_stats.queue", problems);
  c.pending = s.pending;
  c.scheduled = s.scheduled;
  c.running = s.running;
  c.completed = s.completed;
  c.failed = s.failed;
  c.cancelled = s.cancelled;
  const std::string who = "queue_stats of '" + c.queue + "'";
  if (c.paused != 0 && c.paused != 1)
    problems.push_back(who + ": paused is " + std::to_string(c.paused) +
                       " (storage_plugin.h: \"1 paused, 0 not\")");
  if (c.pending < 0 || c.scheduled < 0 || c.running < 0 || c.completed < 0 || c.failed < 0 ||
      c.cancelled < 0)
    problems.push_back(who + ": a count is negative");
  if (c.queue.empty()) problems.push_back("queue_stats reported a queue with an empty name");
  return c;
}

LimitCopy copy_limit(const conveyor_rate_limit* reported, std::vector<std::string>& problems) {
  if (reported == nullptr) {
    problems.push_back("on_limit was called with a NULL limit");
    return {};
  }
  const conveyor_rate_limit l = read_sized(reported, "conveyor_rate_limit", problems);
  LimitCopy c;
  c.struct_size = l.struct_size;
  c.burst = l.burst;
  c.queue = copy_str(l.queue, "conveyor_rate_limit.queue", problems);
  c.rate_per_sec = l.rate_per_sec;
  c.updated_at_us = l.updated_at_us;
  const std::string who = "rate limit of '" + c.queue + "'";
  if (c.burst < 1) problems.push_back(who + ": burst is 0 (storage_plugin.h: \"burst; >= 1\")");
  if (!(c.rate_per_sec > 0) || !std::isfinite(c.rate_per_sec))
    problems.push_back(who + ": rate_per_sec is " + std::to_string(c.rate_per_sec) +
                       " (storage_plugin.h: \"> 0 and finite\")");
  return c;
}

QueueCopy copy_queue(conveyor_str queue, int32_t paused, std::vector<std::string>& problems) {
  QueueCopy c;
  c.queue = copy_str(queue, "list_queues queue", problems);
  c.paused = paused;
  if (c.queue.empty()) problems.push_back("list_queues reported a queue with an empty name");
  if (paused != 0 && paused != 1)
    problems.push_back("list_queues: queue '" + c.queue +
                       "' has paused = " + std::to_string(paused) + ", expected 0 or 1");
  return c;
}

NotificationCopy copy_notification(int32_t kind, conveyor_str queue,
                                   std::vector<std::string>& problems) {
  NotificationCopy c;
  c.kind = kind;
  c.queue = copy_str(queue, "notification queue", problems);
  if (kind != CONVEYOR_NOTIFY_JOBS && kind != CONVEYOR_NOTIFY_RATE_LIMITS &&
      kind != CONVEYOR_NOTIFY_QUEUE_STATE)
    problems.push_back("on_notify was called with kind " + std::to_string(kind) +
                       ", not a CONVEYOR_NOTIFY_* value");
  return c;
}

}  // namespace conveyor::conformance
