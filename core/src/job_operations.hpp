// The engine's job operations (list, retry, delete): the argument checks,
// then one storage call. Kept out of engine.cc, which only wires parts.
#pragma once

#include <conveyor/internal/storage.hpp>
#include <conveyor/job.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace conveyor {

std::vector<Job> checked_list_jobs(Storage& storage, const JobQuery& query, int64_t now_us);
std::vector<JobOutcome> checked_retry_jobs(Storage& storage, std::span<const int64_t> ids,
                                           int64_t now_us);
std::vector<JobOutcome> checked_delete_jobs(Storage& storage, std::span<const int64_t> ids);

}  // namespace conveyor
