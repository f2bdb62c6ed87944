// The engine's job operations (list, retry, delete): the argument checks,
// then one storage call. Kept out of engine.cc, which only wires parts.
#pragma once

#include <conveyor/engine.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/job.hpp>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace conveyor {

std::vector<Job> checked_list_jobs(Storage& storage, const JobQuery& query, int64_t now_us);
std::vector<JobOutcome> checked_retry_jobs(Storage& storage, std::span<const int64_t> ids,
                                           int64_t now_us);
std::vector<JobOutcome> checked_delete_jobs(Storage& storage, std::span<const int64_t> ids);

// One batch of a bulk cancel or delete over a queue (Engine::cancel_jobs_batch,
// Engine::delete_jobs_batch): the filter checked (ValidationError), one page
// listed, the operation on its ids.
Engine::JobBatchResult checked_cancel_batch(Storage& storage, JobQuery filter, int64_t now_us);
Engine::JobBatchResult checked_delete_batch(Storage& storage, JobQuery filter, int64_t now_us);

// The jobs part of Engine::remove_queue: one page of the queue's jobs (every
// state) after after_id, at most limit; those not final are cancelled (a
// running one only with force, else kept), then the page is deleted. Adds
// to out's counts and sets out.next_after_id.
void remove_queue_jobs_batch(Storage& storage, std::string_view queue, bool force, int64_t after_id,
                             uint32_t limit, int64_t now_us, Engine::QueueRemoval& out);

}  // namespace conveyor
