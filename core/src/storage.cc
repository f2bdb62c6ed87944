#include <conveyor/config.hpp>
#include <conveyor/internal/storage.hpp>

#include "plugin_storage.hpp"

#include <conveyor/host/plugin_binding.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstddef>

namespace conveyor {
namespace {

JobState state_from_c(int32_t s) {
  switch (s) {
    case CONVEYOR_JOB_AVAILABLE:
      return JobState::kAvailable;
    case CONVEYOR_JOB_SCHEDULED:
      return JobState::kScheduled;
    case CONVEYOR_JOB_RUNNING:
      return JobState::kRunning;
    case CONVEYOR_JOB_COMPLETED:
      return JobState::kCompleted;
    case CONVEYOR_JOB_FAILED:
      return JobState::kFailed;
    case CONVEYOR_JOB_CANCELLED:
      return JobState::kCancelled;
    default:
      throw StorageError(CONVEYOR_E_INTERNAL,
                         fmt::format("plugin reported unknown job state {}", s));
  }
}

// Reported counts (copied by the binding) as the engine's QueueStats.
QueueStats stats_from_copy(host::StatsCopy&& s) {
  QueueStats q{std::move(s.queue), s.paused != 0, s.pending, s.scheduled,
               s.running,          s.completed,   s.failed,  s.cancelled};
  q.oldest_pending_known = s.reports_oldest_pending;
  q.oldest_pending_run_at_us = s.oldest_pending_run_at;
  return q;
}

// A reported job (copied by the binding) as the engine's Job.
Job job_from_copy(host::JobCopy&& c) {
  Job j;
  j.id = c.id;
  j.state = state_from_c(c.state);
  j.queue = std::move(c.queue);
  j.kind = std::move(c.kind);
  j.payload = std::move(c.payload);
  j.priority = c.priority;
  j.attempt = c.attempt;
  j.max_attempts = c.max_attempts;
  j.run_at_us = c.run_at;
  j.created_at_us = c.created_at;
  j.finalized_at_us = c.finalized_at;
  j.lease_token = c.lease_token;
  j.lease_expires_us = c.lease_expires;
  j.last_error = std::move(c.last_error);
  j.cost = c.cost;
  j.key = std::move(c.key);
  j.timeout_ms = c.timeout_ms;
  j.started_at_us = c.started_at;
  return j;
}

host::PluginBinding binding(const conveyor_storage_plugin* t, conveyor_storage* handle) {
  return host::PluginBinding(*t, handle);
}

[[noreturn]] void throw_failed(const std::string& plugin, const char* op, const host::Status& st) {
  throw StorageError(st.code, fmt::format("storage plugin '{}': {} failed: {}", plugin, op,
                                          st.message.empty() ? "no message" : st.message));
}

// Throws StorageError for a failed call (with the plugin's message) or for a
// report that broke the ABI's rules; returns the result's value otherwise.
template <typename T>
T value_or_throw(const std::string& plugin, const char* op, host::Result<T>&& r) {
  if (!r.ok()) throw_failed(plugin, op, r.status);
  if (!r.problems.empty())
    throw StorageError(CONVEYOR_E_INTERNAL, fmt::format("storage plugin '{}': {} reported {}",
                                                        plugin, op, r.problems.front()));
  return std::move(r.value);
}

// Per lease: CONVEYOR_OK or CONVEYOR_E_LEASE_LOST, anything else is a broken plugin.
std::vector<conveyor_status> checked_results(const std::string& plugin, const char* op,
                                             host::Result<std::vector<conveyor_status>>&& r) {
  std::vector<conveyor_status> results = value_or_throw(plugin, op, std::move(r));
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i] != CONVEYOR_OK && results[i] != CONVEYOR_E_LEASE_LOST)
      throw StorageError(CONVEYOR_E_INTERNAL,
                         fmt::format("storage plugin '{}': {} returned CONVEYOR_OK but results[{}] "
                                     "is {}, not CONVEYOR_OK or CONVEYOR_E_LEASE_LOST",
                                     plugin, op, i,
                                     results[i] == host::kUnwritten ? std::string("unwritten")
                                                                    : std::to_string(results[i])));
  return results;
}

}  // namespace

// job.hpp writes these out rather than include the C header.
static_assert(kListJobsMax == CONVEYOR_LIST_JOBS_MAX);
static_assert(kMaxJobCost == CONVEYOR_JOB_COST_MAX);
static_assert(kMaxJobTimeoutMs == CONVEYOR_JOB_TIMEOUT_MAX_MS);

const char* to_string(JobState state) noexcept {
  switch (state) {
    case JobState::kAvailable:
      return "available";
    case JobState::kScheduled:
      return "scheduled";
    case JobState::kRunning:
      return "running";
    case JobState::kCompleted:
      return "completed";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

PluginStorage::PluginStorage(std::shared_ptr<const Plugin> plugin, conveyor_storage* handle)
    : plugin_(std::move(plugin)), t_(&plugin_->table()), handle_(handle) {}

PluginStorage::~PluginStorage() { t_->close(handle_); }

std::shared_ptr<PluginStorage> PluginStorage::open(
    std::shared_ptr<const Plugin> plugin,
    const std::vector<std::pair<std::string, std::string>>& options) {
  host::PluginBinding b(plugin->table(), nullptr);
  host::Result<conveyor_storage*> opened = b.open(options);
  if (!opened.ok() || opened.value == nullptr) {
    throw StorageError(opened.ok() ? CONVEYOR_E_INTERNAL : opened.status.code,
                       fmt::format("storage plugin '{}' could not open: {}", plugin->info().name,
                                   opened.ok() ? "it returned no handle" : opened.status.message));
  }
  std::shared_ptr<PluginStorage> storage(new PluginStorage(std::move(plugin), opened.value));
  host::Status st = b.migrate();
  if (!st.ok()) throw_failed(storage->plugin_info().name, "migrate", st);
  return storage;
}

std::vector<int64_t> PluginStorage::enqueue(std::span<const NewJob> jobs, int64_t now_us) {
  host::PluginBinding b = binding(t_, handle_);
  const bool timed =
      std::any_of(jobs.begin(), jobs.end(), [](const NewJob& j) { return j.timeout_ms != 0; });
  if (timed || has_slot(StorageSlot::kEnqueueV5)) {
    if (!has_slot(StorageSlot::kEnqueueV5))
      throw StorageError(CONVEYOR_E_UNSUPPORTED,
                         b.missing_slot(StorageSlot::kEnqueueV5, "a job timeout").message);
    std::vector<conveyor_new_job_v4> c = host::new_jobs_v4(jobs);
    for (conveyor_new_job_v4& j : c)
      if (j.job.job.job.run_at_us == 0) j.job.job.job.run_at_us = now_us;
    return value_or_throw(plugin_->info().name, "enqueue", b.enqueue_v5(c, now_us));
  }
  const bool keyed =
      std::any_of(jobs.begin(), jobs.end(), [](const NewJob& j) { return !j.key.empty(); });
  if (keyed || has_slot(StorageSlot::kEnqueueV4)) {
    if (!has_slot(StorageSlot::kEnqueueV4))
      throw StorageError(CONVEYOR_E_UNSUPPORTED,
                         b.missing_slot(StorageSlot::kEnqueueV4, "a job key").message);
    std::vector<conveyor_new_job_v3> c = host::new_jobs_v3(jobs);
    for (conveyor_new_job_v3& j : c)
      if (j.job.job.run_at_us == 0) j.job.job.run_at_us = now_us;
    return value_or_throw(plugin_->info().name, "enqueue", b.enqueue_v4(c, now_us));
  }
  if (has_slot(StorageSlot::kEnqueueV3)) {
    std::vector<conveyor_new_job_v2> c = host::new_jobs_v2(jobs);
    for (conveyor_new_job_v2& j : c)
      if (j.job.run_at_us == 0) j.job.run_at_us = now_us;
    return value_or_throw(plugin_->info().name, "enqueue", b.enqueue_v3(c, now_us));
  }
  for (const NewJob& j : jobs)
    if (j.cost != 1)
      throw StorageError(
          CONVEYOR_E_UNSUPPORTED,
          b.missing_slot(StorageSlot::kEnqueueV3, "a job cost other than 1").message);
  std::vector<conveyor_new_job> c = host::new_jobs(jobs);
  for (conveyor_new_job& j : c)
    if (j.run_at_us == 0) j.run_at_us = now_us;
  if (has_slot(StorageSlot::kEnqueueV2))
    return value_or_throw(plugin_->info().name, "enqueue", b.enqueue_v2(c, now_us));
  return value_or_throw(plugin_->info().name, "enqueue", b.enqueue(c));
}

std::vector<Job> PluginStorage::claim(std::string_view queue, uint32_t max_jobs,
                                      int64_t lease_token, int64_t now_us,
                                      int64_t lease_expires_us) {
  host::PluginBinding::Claimed claimed = value_or_throw(
      plugin_->info().name, "claim",
      binding(t_, handle_).claim(queue, max_jobs, lease_token, now_us, lease_expires_us));
  if (claimed.out_claimed != claimed.jobs.size() || claimed.out_claimed > max_jobs)
    throw StorageError(CONVEYOR_E_INTERNAL,
                       fmt::format("storage plugin '{}': claim reported {} jobs but delivered {}",
                                   plugin_->info().name, claimed.out_claimed, claimed.jobs.size()));
  std::vector<Job> jobs;
  jobs.reserve(claimed.jobs.size());
  for (host::JobCopy& c : claimed.jobs) jobs.push_back(job_from_copy(std::move(c)));
  return jobs;
}

std::vector<conveyor_status> PluginStorage::complete(std::span<const conveyor_lease> leases,
                                                     int64_t now_us) {
  if (leases.empty()) return {};
  return checked_results(plugin_->info().name, "complete",
                         binding(t_, handle_).complete(leases, now_us));
}

conveyor_status PluginStorage::fail(conveyor_lease lease, std::string_view error_text,
                                    int64_t retry_at_us, int64_t now_us) {
  host::Status st = binding(t_, handle_).fail(lease, error_text, retry_at_us, now_us);
  if (st.code == CONVEYOR_OK || st.code == CONVEYOR_E_LEASE_LOST) return st.code;
  throw_failed(plugin_->info().name, "fail", st);
}

std::vector<conveyor_status> PluginStorage::extend_leases(std::span<const conveyor_lease> leases,
                                                          int64_t lease_expires_us) {
  if (leases.empty()) return {};
  return checked_results(plugin_->info().name, "extend_leases",
                         binding(t_, handle_).extend_leases(leases, lease_expires_us));
}

std::vector<conveyor_status> PluginStorage::release(std::span<const conveyor_lease> leases,
                                                    int64_t now_us) {
  if (leases.empty()) return {};
  return checked_results(plugin_->info().name, "release",
                         binding(t_, handle_).release(leases, now_us));
}

Storage::Rescued PluginStorage::rescue_expired(int64_t now_us, uint32_t max_jobs) {
  Rescued out;
  if (!has_slot(StorageSlot::kRescueExpiredV2)) {
    out.count = value_or_throw(plugin_->info().name, "rescue_expired",
                               binding(t_, handle_).rescue_expired(now_us, max_jobs));
    return out;
  }
  host::PluginBinding::Rescued r =
      value_or_throw(plugin_->info().name, "rescue_expired_v2",
                     binding(t_, handle_).rescue_expired_v2(now_us, max_jobs));
  out.count = r.out_rescued;
  out.jobs.reserve(r.jobs.size());
  for (host::JobCopy& c : r.jobs) out.jobs.push_back(job_from_copy(std::move(c)));
  return out;
}

bool PluginStorage::cancel(int64_t job_id, int64_t now_us) {
  host::Status st = binding(t_, handle_).cancel(job_id, now_us);
  if (st.code == CONVEYOR_E_NOT_FOUND) return false;
  if (!st.ok()) throw_failed(plugin_->info().name, "cancel", st);
  return true;
}

void PluginStorage::set_queue_paused(std::string_view queue, bool paused, int64_t now_us) {
  host::Status st = binding(t_, handle_).set_queue_paused(queue, paused, now_us);
  if (!st.ok()) throw_failed(plugin_->info().name, paused ? "pause" : "resume", st);
}

std::vector<QueueStats> PluginStorage::queue_stats(int64_t now_us) {
  std::vector<host::StatsCopy> reported =
      value_or_throw(plugin_->info().name, "queue_stats", binding(t_, handle_).queue_stats(now_us));
  std::vector<QueueStats> out;
  out.reserve(reported.size());
  for (host::StatsCopy& s : reported) out.push_back(stats_from_copy(std::move(s)));
  return out;
}

std::vector<std::pair<std::string, bool>> PluginStorage::list_queues() {
  std::vector<host::QueueCopy> reported =
      value_or_throw(plugin_->info().name, "list_queues", binding(t_, handle_).list_queues());
  std::vector<std::pair<std::string, bool>> out;
  out.reserve(reported.size());
  for (host::QueueCopy& q : reported) out.emplace_back(std::move(q.queue), q.paused != 0);
  return out;
}

std::optional<Job> PluginStorage::get_job(int64_t job_id, int64_t now_us) {
  host::Result<std::vector<host::JobCopy>> r = binding(t_, handle_).get_job(job_id, now_us);
  if (r.status.code == CONVEYOR_E_NOT_FOUND) return std::nullopt;
  std::vector<host::JobCopy> jobs = value_or_throw(plugin_->info().name, "get_job", std::move(r));
  if (jobs.size() != 1)
    throw StorageError(CONVEYOR_E_INTERNAL,
                       "get_job delivered " + std::to_string(jobs.size()) + " jobs");
  return job_from_copy(std::move(jobs.front()));
}

uint64_t PluginStorage::purge_finished(int64_t finalized_before_us, uint32_t max_jobs) {
  return value_or_throw(plugin_->info().name, "purge_finished",
                        binding(t_, handle_).purge_finished(finalized_before_us, max_jobs));
}

void PluginStorage::set_rate_limit(std::string_view queue, const RateLimit& limit, int64_t now_us) {
  host::PluginBinding b = binding(t_, handle_);
  // With set_rate_limit_v2 always, so the scope is stored either way.
  if (has_slot(StorageSlot::kSetRateLimitV2)) {
    const int32_t scope =
        limit.scope == LimitScope::kFleet ? CONVEYOR_SCOPE_FLEET : CONVEYOR_SCOPE_PROCESS;
    host::Status st = b.set_rate_limit_v2(queue, limit.rate_per_sec, limit.burst, scope, now_us);
    if (!st.ok()) throw_failed(plugin_->info().name, "set_rate_limit", st);
    return;
  }
  if (limit.scope == LimitScope::kFleet)
    throw StorageError(
        CONVEYOR_E_UNSUPPORTED,
        b.missing_slot(StorageSlot::kSetRateLimitV2, "a fleet-wide rate limit").message);
  host::Status st = b.set_rate_limit(queue, limit.rate_per_sec, limit.burst, now_us);
  if (!st.ok()) throw_failed(plugin_->info().name, "set_rate_limit", st);
}

bool PluginStorage::delete_rate_limit(std::string_view queue) {
  host::Status st = binding(t_, handle_).delete_rate_limit(queue);
  if (st.code == CONVEYOR_E_NOT_FOUND) return false;
  if (!st.ok()) throw_failed(plugin_->info().name, "delete_rate_limit", st);
  return true;
}

std::vector<RateLimitOverride> PluginStorage::list_rate_limits() {
  std::vector<host::LimitCopy> reported = value_or_throw(plugin_->info().name, "list_rate_limits",
                                                         binding(t_, handle_).list_rate_limits());
  std::vector<RateLimitOverride> out;
  out.reserve(reported.size());
  for (host::LimitCopy& l : reported) {
    if (l.scope != CONVEYOR_SCOPE_PROCESS && l.scope != CONVEYOR_SCOPE_FLEET)
      throw StorageError(CONVEYOR_E_INTERNAL,
                         fmt::format("storage plugin '{}': list_rate_limits reported scope {} for "
                                     "queue '{}', not CONVEYOR_SCOPE_PROCESS or _FLEET",
                                     plugin_->info().name, l.scope, l.queue));
    const LimitScope scope =
        l.scope == CONVEYOR_SCOPE_FLEET ? LimitScope::kFleet : LimitScope::kProcess;
    out.push_back(RateLimitOverride{std::move(l.queue), RateLimit{l.rate_per_sec, l.burst, scope},
                                    l.updated_at_us});
  }
  return out;
}

Storage::SharedRecord PluginStorage::swap_shared_state(std::string_view key,
                                                       int64_t expected_version,
                                                       int64_t new_value) {
  host::PluginBinding b = binding(t_, handle_);
  if (!has_slot(StorageSlot::kSwapSharedState))
    throw StorageError(
        CONVEYOR_E_UNSUPPORTED,
        b.missing_slot(StorageSlot::kSwapSharedState, "sharing state across processes").message);
  host::PluginBinding::Shared r =
      value_or_throw(plugin_->info().name, "swap_shared_state",
                     b.swap_shared_state(key, expected_version, new_value));
  if (r.version == host::kUnwrittenValue || r.value == host::kUnwrittenValue ||
      (r.applied != 0 && r.applied != 1))
    throw StorageError(CONVEYOR_E_INTERNAL,
                       fmt::format("storage plugin '{}': swap_shared_state returned CONVEYOR_OK "
                                   "without writing every out-parameter",
                                   plugin_->info().name));
  if (r.applied == 1 && (expected_version < 0 || r.version != expected_version + 1))
    throw StorageError(CONVEYOR_E_INTERNAL,
                       fmt::format("storage plugin '{}': swap_shared_state applied a swap from "
                                   "version {} but reports version {}",
                                   plugin_->info().name, expected_version, r.version));
  return SharedRecord{r.version, r.value, r.applied == 1};
}

namespace {
// A plugin's answer to one add, checked against what add_shared_state
// promises (every out-parameter written, a count in range, the value within
// high).
Storage::SharedAdded checked_add(const std::string& plugin, const char* op,
                                 const Storage::SharedAdd& add, int64_t version, int64_t value,
                                 uint32_t count) {
  if (version == host::kUnwrittenValue || value == host::kUnwrittenValue ||
      count == host::kUnwrittenCount)
    throw StorageError(CONVEYOR_E_INTERNAL,
                       fmt::format("storage plugin '{}': {} returned CONVEYOR_OK "
                                   "without writing every out-parameter",
                                   plugin, op));
  if ((count != 0 && (count < add.min_count || count > add.max_count)) ||
      (count != 0 && value > add.high))
    throw StorageError(
        CONVEYOR_E_INTERNAL,
        fmt::format("storage plugin '{}': {} added {} units (asked for {}..{}) "
                    "leaving value {} (high {})",
                    plugin, op, count, add.min_count, add.max_count, value, add.high));
  return Storage::SharedAdded{version, value, count};
}
}  // namespace

Storage::SharedAdded PluginStorage::add_shared_state(std::string_view key, const SharedAdd& add) {
  host::PluginBinding b = binding(t_, handle_);
  if (!has_slot(StorageSlot::kAddSharedState))
    throw StorageError(
        CONVEYOR_E_UNSUPPORTED,
        b.missing_slot(StorageSlot::kAddSharedState, "a fleet take in one call").message);
  host::PluginBinding::SharedAdded r =
      value_or_throw(plugin_->info().name, "add_shared_state",
                     b.add_shared_state(key, add.credit, add.low, add.high, add.unit, add.min_count,
                                        add.max_count));
  return checked_add(plugin_->info().name, "add_shared_state", add, r.version, r.value, r.count);
}

int64_t PluginStorage::change_marker() {
  return value_or_throw(plugin_->info().name, "change_marker",
                        binding(t_, handle_).change_marker());
}

void PluginStorage::wait_for_notification(
    int64_t timeout_us, const std::function<void(int32_t kind, std::string_view queue)>& fn) {
  if (t_->wait_for_notification == nullptr)
    throw StorageError(CONVEYOR_E_UNSUPPORTED, "storage plugin '" + plugin_->info().name +
                                                   "' does not support notifications");
  value_or_throw(plugin_->info().name, "wait_for_notification",
                 binding(t_, handle_).wait_for_notification(timeout_us, fn));
}

namespace {

int32_t state_to_c(JobState s) {
  switch (s) {
    case JobState::kAvailable:
      return CONVEYOR_JOB_AVAILABLE;
    case JobState::kScheduled:
      return CONVEYOR_JOB_SCHEDULED;
    case JobState::kRunning:
      return CONVEYOR_JOB_RUNNING;
    case JobState::kCompleted:
      return CONVEYOR_JOB_COMPLETED;
    case JobState::kFailed:
      return CONVEYOR_JOB_FAILED;
    case JobState::kCancelled:
      return CONVEYOR_JOB_CANCELLED;
  }
  return 0;
}

// Per id: CONVEYOR_OK, NOT_FOUND or WRONG_STATE; anything else is a broken plugin.
std::vector<conveyor_status> checked_id_results(const std::string& plugin, const char* op,
                                                host::Result<std::vector<conveyor_status>>&& r) {
  std::vector<conveyor_status> results = value_or_throw(plugin, op, std::move(r));
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i] != CONVEYOR_OK && results[i] != CONVEYOR_E_NOT_FOUND &&
        results[i] != CONVEYOR_E_WRONG_STATE)
      throw StorageError(CONVEYOR_E_INTERNAL,
                         fmt::format("storage plugin '{}': {} returned CONVEYOR_OK but results[{}] "
                                     "is {}, not CONVEYOR_OK, CONVEYOR_E_NOT_FOUND or "
                                     "CONVEYOR_E_WRONG_STATE",
                                     plugin, op, i,
                                     results[i] == host::kUnwritten ? std::string("unwritten")
                                                                    : std::to_string(results[i])));
  return results;
}

std::vector<Job> jobs_from_copies(std::vector<host::JobCopy>&& copies) {
  std::vector<Job> jobs;
  jobs.reserve(copies.size());
  for (host::JobCopy& c : copies) jobs.push_back(job_from_copy(std::move(c)));
  return jobs;
}

}  // namespace

bool PluginStorage::has_slot(StorageSlot slot) const { return binding(t_, handle_).has_slot(slot); }

std::vector<Job> PluginStorage::claim_kinds(std::string_view queue,
                                            std::span<const std::string> kinds, uint32_t max_jobs,
                                            int64_t lease_token, int64_t now_us,
                                            int64_t lease_expires_us) {
  if (kinds.empty()) return claim(queue, max_jobs, lease_token, now_us, lease_expires_us);
  host::Result<host::PluginBinding::Claimed> r =
      binding(t_, handle_)
          .claim_kinds(queue, kinds, max_jobs, lease_token, now_us, lease_expires_us);
  if (r.status.code == CONVEYOR_E_UNSUPPORTED && !has_slot(StorageSlot::kClaimKinds))
    throw StorageError(CONVEYOR_E_UNSUPPORTED, r.status.message);
  host::PluginBinding::Claimed claimed =
      value_or_throw(plugin_->info().name, "claim_kinds", std::move(r));
  if (claimed.out_claimed != claimed.jobs.size() || claimed.out_claimed > max_jobs)
    throw StorageError(CONVEYOR_E_INTERNAL,
                       fmt::format("storage plugin '{}': claim_kinds reported {} jobs but "
                                   "delivered {}",
                                   plugin_->info().name, claimed.out_claimed, claimed.jobs.size()));
  return jobs_from_copies(std::move(claimed.jobs));
}

std::vector<Job> PluginStorage::list_jobs(const JobQuery& query, int64_t now_us) {
  std::vector<int32_t> states;
  for (JobState s : query.states) states.push_back(state_to_c(s));
  host::Result<host::PluginBinding::Listed> r =
      binding(t_, handle_)
          .list_jobs(query.queue, states, query.kind, query.after_id, query.limit, now_us);
  if (r.status.code == CONVEYOR_E_UNSUPPORTED && !has_slot(StorageSlot::kListJobs))
    throw StorageError(CONVEYOR_E_UNSUPPORTED, r.status.message);
  host::PluginBinding::Listed listed =
      value_or_throw(plugin_->info().name, "list_jobs", std::move(r));
  if (listed.out_listed != listed.jobs.size() || listed.out_listed > query.limit)
    throw StorageError(
        CONVEYOR_E_INTERNAL,
        fmt::format("storage plugin '{}': list_jobs reported {} jobs but "
                    "delivered {} (limit {})",
                    plugin_->info().name, listed.out_listed, listed.jobs.size(), query.limit));
  return jobs_from_copies(std::move(listed.jobs));
}

std::vector<conveyor_status> PluginStorage::retry_jobs(std::span<const int64_t> ids,
                                                       int64_t now_us) {
  if (!has_slot(StorageSlot::kRetryJobs))
    throw StorageError(
        CONVEYOR_E_UNSUPPORTED,
        binding(t_, handle_).missing_slot(StorageSlot::kRetryJobs, "retrying jobs").message);
  if (ids.empty()) return {};
  return checked_id_results(plugin_->info().name, "retry_jobs",
                            binding(t_, handle_).retry_jobs(ids, now_us));
}

std::vector<conveyor_status> PluginStorage::delete_jobs(std::span<const int64_t> ids) {
  if (!has_slot(StorageSlot::kDeleteJobs))
    throw StorageError(
        CONVEYOR_E_UNSUPPORTED,
        binding(t_, handle_).missing_slot(StorageSlot::kDeleteJobs, "deleting jobs").message);
  if (ids.empty()) return {};
  return checked_id_results(plugin_->info().name, "delete_jobs",
                            binding(t_, handle_).delete_jobs(ids));
}

std::vector<QueueStats> PluginStorage::job_counts(int64_t now_us) {
  if (!has_slot(StorageSlot::kJobCounts)) return queue_stats(now_us);
  std::vector<host::StatsCopy> reported =
      value_or_throw(plugin_->info().name, "job_counts", binding(t_, handle_).job_counts(now_us));
  std::vector<QueueStats> out;
  out.reserve(reported.size());
  for (host::StatsCopy& s : reported) out.push_back(stats_from_copy(std::move(s)));
  return out;
}

std::string missing_slot_reason(const Storage& storage, StorageSlot slot, std::string_view what) {
  if (storage.has_slot(slot)) return {};
  const PluginInfo& p = storage.plugin_info();
  const uint32_t minor = host::slot_minor(slot);
  if (p.abi_major == 1 && p.abi_minor >= minor)
    return fmt::format(
        "storage plugin '{}' (ABI {}.{}) does not implement the optional slot {}, which {} needs",
        p.name, p.abi_major, p.abi_minor, host::slot_name(slot), what);
  return fmt::format(
      "storage plugin '{}' implements ABI {}.{}; {} needs ABI 1.{} (slot {}): upgrade the plugin",
      p.name, p.abi_major, p.abi_minor, what, minor, host::slot_name(slot));
}

std::shared_ptr<Storage> Storage::open(
    std::shared_ptr<const Plugin> plugin,
    const std::vector<std::pair<std::string, std::string>>& options) {
  return PluginStorage::open(std::move(plugin), options);
}

std::shared_ptr<Storage> open_storage(const StorageConfig& config) {
  auto path = resolve_plugin_path(config.plugin, config.plugin_dir);
  return PluginStorage::open(load_plugin(path), config.options);
}

std::vector<Job> PluginStorage::claim_keys(std::string_view queue,
                                           std::span<const std::string> kinds,
                                           std::span<const KeyClaim> keys, int64_t lease_token,
                                           int64_t now_us, int64_t lease_expires_us) {
  std::vector<host::PluginBinding::KeyClaim> c;
  c.reserve(keys.size());
  uint64_t asked = 0;
  for (const KeyClaim& k : keys) {
    c.push_back(host::PluginBinding::KeyClaim{k.key, k.max_jobs});
    asked += k.max_jobs;
  }
  host::Result<host::PluginBinding::Claimed> r =
      binding(t_, handle_).claim_keys(queue, kinds, c, lease_token, now_us, lease_expires_us);
  if (r.status.code == CONVEYOR_E_UNSUPPORTED && !has_slot(StorageSlot::kClaimKeys))
    throw StorageError(CONVEYOR_E_UNSUPPORTED, r.status.message);
  host::PluginBinding::Claimed claimed =
      value_or_throw(plugin_->info().name, "claim_keys", std::move(r));
  if (claimed.out_claimed != claimed.jobs.size() || claimed.out_claimed > asked)
    throw StorageError(
        CONVEYOR_E_INTERNAL,
        fmt::format("storage plugin '{}': claim_keys reported {} jobs but "
                    "delivered {} (asked for {})",
                    plugin_->info().name, claimed.out_claimed, claimed.jobs.size(), asked));
  return jobs_from_copies(std::move(claimed.jobs));
}

std::vector<Storage::ReadyKey> PluginStorage::list_ready_keys(
    std::string_view queue, const std::optional<std::string>& after_key, uint32_t limit,
    uint32_t count_limit, int64_t now_us) {
  host::Result<host::PluginBinding::ReadyKeys> r =
      binding(t_, handle_).list_ready_keys(queue, after_key, limit, count_limit, now_us);
  if (r.status.code == CONVEYOR_E_UNSUPPORTED && !has_slot(StorageSlot::kListReadyKeys))
    throw StorageError(CONVEYOR_E_UNSUPPORTED, r.status.message);
  host::PluginBinding::ReadyKeys listed =
      value_or_throw(plugin_->info().name, "list_ready_keys", std::move(r));
  if (listed.out_listed != listed.keys.size() || listed.out_listed > limit)
    throw StorageError(
        CONVEYOR_E_INTERNAL,
        fmt::format("storage plugin '{}': list_ready_keys reported {} keys but "
                    "delivered {} (limit {})",
                    plugin_->info().name, listed.out_listed, listed.keys.size(), limit));
  std::vector<ReadyKey> keys;
  keys.reserve(listed.keys.size());
  for (host::ReadyKeyCopy& k : listed.keys) keys.push_back(ReadyKey{std::move(k.key), k.ready});
  return keys;
}

namespace {
uint32_t key_fields(bool limit, bool weight) {
  return (limit ? CONVEYOR_KEY_FIELD_RATE : 0u) | (weight ? CONVEYOR_KEY_FIELD_WEIGHT : 0u);
}
}  // namespace

void PluginStorage::set_key_setting(const KeyOverride& setting, int64_t now_us) {
  conveyor_key_setting s{};
  s.struct_size = sizeof s;
  s.fields = key_fields(setting.limit.has_value(), setting.weight.has_value());
  s.queue = sdk::str(setting.queue);
  s.key = setting.key ? sdk::str(*setting.key) : conveyor_str{};
  s.target = setting.key ? CONVEYOR_KEY_TARGET_ONE : CONVEYOR_KEY_TARGET_EVERY;
  if (setting.limit) {
    s.rate_per_sec = setting.limit->rate_per_sec;
    s.burst = setting.limit->burst;
    s.scope =
        setting.limit->scope == LimitScope::kFleet ? CONVEYOR_SCOPE_FLEET : CONVEYOR_SCOPE_PROCESS;
  }
  if (setting.weight) s.weight = *setting.weight;
  const host::Status st = binding(t_, handle_).set_key_setting(s, now_us);
  if (!st.ok()) throw StorageError(st.code, st.message);
}

bool PluginStorage::delete_key_setting(std::string_view queue,
                                       const std::optional<std::string>& key, bool limit,
                                       bool weight) {
  const int32_t cleared = value_or_throw(
      plugin_->info().name, "delete_key_setting",
      binding(t_, handle_)
          .delete_key_setting(queue, key ? CONVEYOR_KEY_TARGET_ONE : CONVEYOR_KEY_TARGET_EVERY,
                              key ? std::string_view(*key) : std::string_view(),
                              key_fields(limit, weight)));
  if (cleared != 0 && cleared != 1)
    throw StorageError(CONVEYOR_E_INTERNAL,
                       fmt::format("storage plugin '{}': delete_key_setting set *out_cleared = {}, "
                                   "not 0 or 1",
                                   plugin_->info().name, cleared));
  return cleared == 1;
}

std::vector<KeyOverride> PluginStorage::list_key_settings() {
  std::vector<host::KeySettingCopy> reported = value_or_throw(
      plugin_->info().name, "list_key_settings", binding(t_, handle_).list_key_settings());
  std::vector<KeyOverride> out;
  out.reserve(reported.size());
  for (host::KeySettingCopy& k : reported) {
    const auto bad = [&](std::string_view what) {
      return StorageError(
          CONVEYOR_E_INTERNAL,
          fmt::format("storage plugin '{}': list_key_settings reported {} for queue '{}' key '{}'",
                      plugin_->info().name, what, k.queue, k.key));
    };
    if (k.target != CONVEYOR_KEY_TARGET_ONE && k.target != CONVEYOR_KEY_TARGET_EVERY)
      throw bad(fmt::format("target {}", k.target));
    KeyOverride o;
    o.queue = std::move(k.queue);
    if (k.target == CONVEYOR_KEY_TARGET_ONE) o.key = std::move(k.key);
    if (k.fields & CONVEYOR_KEY_FIELD_RATE) {
      if (!(k.rate_per_sec > 0) || !std::isfinite(k.rate_per_sec) || k.burst < 1 ||
          (k.scope != CONVEYOR_SCOPE_PROCESS && k.scope != CONVEYOR_SCOPE_FLEET))
        throw bad(fmt::format("rate {} burst {} scope {}", k.rate_per_sec, k.burst, k.scope));
      o.limit =
          RateLimit{k.rate_per_sec, k.burst,
                    k.scope == CONVEYOR_SCOPE_FLEET ? LimitScope::kFleet : LimitScope::kProcess};
    }
    if (k.fields & CONVEYOR_KEY_FIELD_WEIGHT) {
      if (k.weight < 1 || k.weight > kKeyWeightMax) throw bad(fmt::format("weight {}", k.weight));
      o.weight = k.weight;
    }
    o.updated_at_us = k.updated_at;
    out.push_back(std::move(o));
  }
  return out;
}

uint32_t PluginStorage::delete_shared_states(std::string_view prefix, int64_t value_below,
                                             uint32_t limit) {
  const uint32_t deleted =
      value_or_throw(plugin_->info().name, "delete_shared_states",
                     binding(t_, handle_).delete_shared_states(prefix, value_below, limit));
  if (deleted > limit)
    throw StorageError(CONVEYOR_E_INTERNAL,
                       fmt::format("storage plugin '{}': delete_shared_states deleted {} records, "
                                   "more than the limit {}",
                                   plugin_->info().name, deleted, limit));
  return deleted;
}

std::vector<Storage::SharedAdded> PluginStorage::add_shared_states(std::span<const KeyedAdd> adds) {
  std::vector<SharedAdded> out;
  out.reserve(adds.size());
  if (!has_slot(StorageSlot::kAddSharedStates)) {
    for (const KeyedAdd& a : adds) out.push_back(add_shared_state(a.key, a.add));
    return out;
  }
  for (size_t start = 0; start < adds.size(); start += CONVEYOR_SHARED_ADDS_MAX) {
    const size_t n = std::min<size_t>(CONVEYOR_SHARED_ADDS_MAX, adds.size() - start);
    std::vector<host::PluginBinding::KeyedAdd> in;
    in.reserve(n);
    for (size_t i = start; i < start + n; ++i) {
      const SharedAdd& a = adds[i].add;
      in.push_back(host::PluginBinding::KeyedAdd{std::string(adds[i].key), a.credit, a.low, a.high,
                                                 a.unit, a.min_count, a.max_count});
    }
    std::vector<host::PluginBinding::SharedAdded> got = value_or_throw(
        plugin_->info().name, "add_shared_states", binding(t_, handle_).add_shared_states(in));
    for (size_t i = 0; i < n; ++i)
      out.push_back(checked_add(plugin_->info().name, "add_shared_states", adds[start + i].add,
                                got[i].version, got[i].value, got[i].count));
  }
  return out;
}

}  // namespace conveyor
