#include "job_operations.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/validation.hpp>

#include <algorithm>
#include <string>

namespace conveyor {

std::vector<Job> checked_list_jobs(Storage& storage, const JobQuery& query, int64_t now_us) {
  validate_queue_name(query.queue);
  if (!query.kind.empty()) validate_job_kind(query.kind);
  if (query.limit == 0 || query.limit > kListJobsMax)
    throw ValidationError("limit", "limit must be 1.." + std::to_string(kListJobsMax) +
                                       " jobs per page, got " + std::to_string(query.limit) +
                                       ": page with after_id for more");
  if (query.after_id < 0)
    throw ValidationError("after_id",
                          "after_id must be a job id >= 0 (0: from the first job), got " +
                              std::to_string(query.after_id));
  return storage.list_jobs(query, now_us);
}

namespace {
void check_id_batch(std::span<const int64_t> ids, const char* op) {
  if (ids.size() > Engine::kJobBatchMax)
    throw ValidationError("ids", std::string(op) + " takes at most " +
                                     std::to_string(Engine::kJobBatchMax) + " ids per call, got " +
                                     std::to_string(ids.size()) + ": send them in batches");
}
// Storage has checked that each result is one of these three.
JobOutcome::Status outcome_status(conveyor_status status) {
  switch (status) {
    case CONVEYOR_OK:
      return JobOutcome::Status::kOk;
    case CONVEYOR_E_NOT_FOUND:
      return JobOutcome::Status::kNotFound;
    default:
      return JobOutcome::Status::kWrongState;
  }
}
std::vector<JobOutcome> outcomes(std::span<const int64_t> ids,
                                 const std::vector<conveyor_status>& results) {
  std::vector<JobOutcome> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    out.push_back(JobOutcome{ids[i], outcome_status(results.at(i))});
  return out;
}
}  // namespace

std::vector<JobOutcome> checked_retry_jobs(Storage& storage, std::span<const int64_t> ids,
                                           int64_t now_us) {
  check_id_batch(ids, "retry");
  return outcomes(ids, storage.retry_jobs(ids, now_us));
}

std::vector<JobOutcome> checked_delete_jobs(Storage& storage, std::span<const int64_t> ids) {
  check_id_batch(ids, "delete");
  return outcomes(ids, storage.delete_jobs(ids));
}

namespace {

bool is_final(JobState s) {
  return s == JobState::kCompleted || s == JobState::kFailed || s == JobState::kCancelled;
}

std::string state_names(const std::vector<JobState>& states) {
  std::string out;
  for (JobState s : states) out += (out.empty() ? "" : ", ") + std::string(to_string(s));
  return out;
}

void check_batch_limit(uint32_t limit) {
  if (limit == 0 || limit > Engine::kJobBatchMax)
    throw ValidationError("limit", "limit must be 1.." + std::to_string(Engine::kJobBatchMax) +
                                       " jobs per batch, got " + std::to_string(limit) +
                                       ": follow next_after_id for the next batch");
}

// The page's ids, and the cursor of the next page (0: this one is the last).
Engine::JobBatchResult page_cursor(const std::vector<Job>& page, uint32_t limit) {
  Engine::JobBatchResult r;
  if (page.size() == limit && !page.empty()) r.next_after_id = page.back().id;
  return r;
}

std::vector<int64_t> ids_of(const std::vector<Job>& jobs) {
  std::vector<int64_t> ids;
  ids.reserve(jobs.size());
  for (const Job& j : jobs) ids.push_back(j.id);
  return ids;
}

}  // namespace

Engine::JobBatchResult checked_cancel_batch(Storage& storage, JobQuery filter, int64_t now_us) {
  for (JobState s : filter.states)
    if (is_final(s))
      throw ValidationError("states",
                            "a cancel takes jobs that are not final: available (pending), "
                            "scheduled, running; got " +
                                state_names(filter.states) +
                                " (delete final jobs instead: jobs rm --queue Q --state S)");
  if (filter.states.empty())
    filter.states = {JobState::kAvailable, JobState::kScheduled, JobState::kRunning};
  check_batch_limit(filter.limit);
  const std::vector<Job> page = checked_list_jobs(storage, filter, now_us);
  Engine::JobBatchResult r = page_cursor(page, filter.limit);
  // No batch slot for cancel: one storage call per job. false: it ended (or
  // was deleted) since the listing.
  for (const Job& job : page) ++(storage.cancel(job.id, now_us) ? r.done : r.refused);
  return r;
}

Engine::JobBatchResult checked_delete_batch(Storage& storage, JobQuery filter, int64_t now_us) {
  if (filter.states.empty())
    throw ValidationError("states",
                          "give the final states to delete (completed, failed, cancelled): a "
                          "bulk delete never means every job of the queue");
  for (JobState s : filter.states)
    if (!is_final(s))
      throw ValidationError("states",
                            "a delete takes final jobs: completed, failed, cancelled; got " +
                                state_names(filter.states) +
                                " (cancel jobs that are not final first: jobs cancel --queue Q)");
  check_batch_limit(filter.limit);
  const std::vector<Job> page = checked_list_jobs(storage, filter, now_us);
  Engine::JobBatchResult r = page_cursor(page, filter.limit);
  if (page.empty()) return r;
  for (const JobOutcome& o : checked_delete_jobs(storage, ids_of(page)))
    ++(o.status == JobOutcome::Status::kOk ? r.done : r.refused);
  return r;
}

void remove_queue_jobs_batch(Storage& storage, std::string_view queue, bool force, int64_t after_id,
                             uint32_t limit, int64_t now_us, Engine::QueueRemoval& out) {
  check_batch_limit(limit);
  JobQuery query;
  query.queue = std::string(queue);
  query.after_id = after_id;
  query.limit = limit;
  const std::vector<Job> page = checked_list_jobs(storage, query, now_us);
  out.next_after_id = page_cursor(page, limit).next_after_id;
  std::vector<int64_t> ids;
  ids.reserve(page.size());
  for (const Job& job : page) {
    if (job.state == JobState::kRunning && !force) {
      ++out.kept;  // started after the check (the queue was paused meanwhile)
      continue;
    }
    if (!is_final(job.state) && storage.cancel(job.id, now_us)) {
      ++out.cancelled;
      if (job.state == JobState::kRunning) ++out.running_cancelled;
    }
    ids.push_back(job.id);
  }
  if (ids.empty()) return;
  for (const JobOutcome& o : checked_delete_jobs(storage, ids)) {
    if (o.status == JobOutcome::Status::kOk)
      ++out.deleted;
    else if (o.status == JobOutcome::Status::kWrongState)
      ++out.kept;  // not final: it changed between the cancel and the delete
  }
}

}  // namespace conveyor
