#include "reported.hpp"

#include <cmath>

namespace conveyor::conformance {
namespace {

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
  static constexpr const char* kNames[] = {"CONVEYOR_OK",
                                           "CONVEYOR_E_INVALID",
                                           "CONVEYOR_E_NOT_FOUND",
                                           "CONVEYOR_E_LEASE_LOST",
                                           "CONVEYOR_E_UNAVAILABLE",
                                           "CONVEYOR_E_INTERNAL",
                                           "CONVEYOR_E_UNSUPPORTED",
                                           "CONVEYOR_E_WRONG_STATE"};
  std::string name = status >= 0 && status <= 7 ? kNames[status] : "unknown status";
  return name + " (" + std::to_string(status) + ")";
}

void check_job(const JobCopy& c, std::vector<std::string>& problems) {
  const std::string who = "job " + std::to_string(c.id) + " (" + state_name(c.state) + ")";
  if (c.state < CONVEYOR_JOB_AVAILABLE || c.state > CONVEYOR_JOB_CANCELLED)
    problems.push_back(who + ": state is not a CONVEYOR_JOB_* value");
  if (c.id <= 0)
    problems.push_back(who +
                       ": id must be > 0 (storage_plugin.h: \"unique within the storage, > 0\")");
  if (c.reserved0 != 0)
    problems.push_back(who + ": reserved0 is " + std::to_string(c.reserved0) +
                       " (storage_plugin.h: \"reserved0; /* zero */\")");
  if (!is_final(c.state) && c.finalized_at != 0)
    problems.push_back(who + ": finalized_at_us is " + std::to_string(c.finalized_at) +
                       " (storage_plugin.h: \"0 unless COMPLETED, FAILED or CANCELLED\")");
  if (c.state != CONVEYOR_JOB_RUNNING && (c.lease_token != 0 || c.lease_expires != 0))
    problems.push_back(who + ": lease_token " + std::to_string(c.lease_token) +
                       " and lease_expires_us " + std::to_string(c.lease_expires) +
                       " must both be 0 (storage_plugin.h: \"0 unless RUNNING\")");
  if (c.state == CONVEYOR_JOB_RUNNING && c.lease_token == 0)
    problems.push_back(who + ": a RUNNING job reports lease_token 0");
  if (c.cost > CONVEYOR_JOB_COST_MAX)
    problems.push_back(who + ": cost is " + std::to_string(c.cost) +
                       ", above CONVEYOR_JOB_COST_MAX (storage_plugin.h conveyor_job.cost)");
  if (c.key.size() > CONVEYOR_JOB_KEY_MAX)
    problems.push_back(who + ": key is " + std::to_string(c.key.size()) +
                       " bytes, above CONVEYOR_JOB_KEY_MAX (no such key can be enqueued)");
}

void check_stats(const StatsCopy& c, std::vector<std::string>& problems) {
  const std::string who = "queue_stats of '" + c.queue + "'";
  if (c.paused != 0 && c.paused != 1)
    problems.push_back(who + ": paused is " + std::to_string(c.paused) +
                       " (storage_plugin.h: \"1 paused, 0 not\")");
  if (c.pending < 0 || c.scheduled < 0 || c.running < 0 || c.completed < 0 || c.failed < 0 ||
      c.cancelled < 0)
    problems.push_back(who + ": a count is negative");
  if (c.queue.empty()) problems.push_back("queue_stats reported a queue with an empty name");
}

void check_limit(const LimitCopy& c, std::vector<std::string>& problems) {
  const std::string who = "rate limit of '" + c.queue + "'";
  if (c.burst < 1) problems.push_back(who + ": burst is 0 (storage_plugin.h: \"burst; >= 1\")");
  if (!(c.rate_per_sec > 0) || !std::isfinite(c.rate_per_sec))
    problems.push_back(who + ": rate_per_sec is " + std::to_string(c.rate_per_sec) +
                       " (storage_plugin.h: \"> 0 and finite\")");
  if (c.reports_scope && c.scope != CONVEYOR_SCOPE_PROCESS && c.scope != CONVEYOR_SCOPE_FLEET)
    problems.push_back(who + ": scope is " + std::to_string(c.scope) +
                       ", not CONVEYOR_SCOPE_PROCESS (0) or CONVEYOR_SCOPE_FLEET (1)");
}

void check_queue(const QueueCopy& c, std::vector<std::string>& problems) {
  if (c.queue.empty()) problems.push_back("list_queues reported a queue with an empty name");
  if (c.paused != 0 && c.paused != 1)
    problems.push_back("list_queues: queue '" + c.queue +
                       "' has paused = " + std::to_string(c.paused) + ", expected 0 or 1");
}

void check_notification(const NotificationCopy& c, std::vector<std::string>& problems) {
  if (c.kind != CONVEYOR_NOTIFY_JOBS && c.kind != CONVEYOR_NOTIFY_RATE_LIMITS &&
      c.kind != CONVEYOR_NOTIFY_QUEUE_STATE)
    problems.push_back("on_notify was called with kind " + std::to_string(c.kind) +
                       ", not a CONVEYOR_NOTIFY_* value");
}

void check_key_setting(const KeySettingCopy& c, std::vector<std::string>& problems) {
  // (fields 0 or with unknown bits: the binding already says so while copying.)
  const std::string who = "key setting of queue '" + c.queue + "', target " +
                          std::to_string(c.target) + ", key \"" + c.key + "\"";
  const std::string rule = " (storage_plugin.h conveyor_key_setting)";
  if (c.queue.empty()) problems.push_back("list_key_settings reported a setting of an empty queue");
  if (c.target != CONVEYOR_KEY_TARGET_ONE && c.target != CONVEYOR_KEY_TARGET_EVERY)
    problems.push_back(who + ": target is not CONVEYOR_KEY_TARGET_ONE (0) or _EVERY (1)" + rule);
  if (c.target == CONVEYOR_KEY_TARGET_EVERY && !c.key.empty())
    problems.push_back(who + ": a setting of every key has a key (\"EVERY: empty\")" + rule);
  if (c.key.size() > CONVEYOR_JOB_KEY_MAX)
    problems.push_back(who + ": the key is " + std::to_string(c.key.size()) +
                       " bytes, above CONVEYOR_JOB_KEY_MAX" + rule);
  if (c.fields & CONVEYOR_KEY_FIELD_RATE) {
    if (!(c.rate_per_sec > 0) || !std::isfinite(c.rate_per_sec))
      problems.push_back(who + ": rate_per_sec is " + std::to_string(c.rate_per_sec) +
                         ", not > 0 and finite" + rule);
    if (c.burst < 1) problems.push_back(who + ": burst is 0" + rule);
    if (c.scope != CONVEYOR_SCOPE_PROCESS && c.scope != CONVEYOR_SCOPE_FLEET)
      problems.push_back(who + ": scope is " + std::to_string(c.scope) +
                         ", not CONVEYOR_SCOPE_PROCESS (0) or CONVEYOR_SCOPE_FLEET (1)" + rule);
  } else if (c.rate_per_sec != 0 || c.burst != 0 || c.scope != 0) {
    problems.push_back(who + ": without CONVEYOR_KEY_FIELD_RATE it reports rate_per_sec " +
                       std::to_string(c.rate_per_sec) + ", burst " + std::to_string(c.burst) +
                       ", scope " + std::to_string(c.scope) +
                       " (storage_plugin.h list_key_settings: \"zero for the others\")");
  }
  if (c.fields & CONVEYOR_KEY_FIELD_WEIGHT) {
    if (c.weight < 1 || c.weight > CONVEYOR_KEY_WEIGHT_MAX)
      problems.push_back(who + ": weight is " + std::to_string(c.weight) +
                         ", not 1..CONVEYOR_KEY_WEIGHT_MAX" + rule);
  } else if (c.weight != 0) {
    problems.push_back(who + ": without CONVEYOR_KEY_FIELD_WEIGHT it reports weight " +
                       std::to_string(c.weight) +
                       " (storage_plugin.h list_key_settings: \"zero for the others\")");
  }
}

}  // namespace conveyor::conformance
