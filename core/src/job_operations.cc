#include "job_operations.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/validation.hpp>

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

}  // namespace conveyor
