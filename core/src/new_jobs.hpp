// The engine's checks and defaults for jobs about to be enqueued.
#pragma once

#include <conveyor/config.hpp>
#include <conveyor/enqueue_options.hpp>
#include <conveyor/internal/limit_resolver.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/job.hpp>

#include <map>
#include <span>
#include <string>

#include <cstdint>
#include <string_view>
#include <vector>

namespace conveyor {

// The job Engine::enqueue makes of its arguments (run_at now_us + delay).
NewJob make_new_job(std::string_view queue, std::string_view kind, std::string_view payload,
                    const EnqueueOptions& options, int64_t now_us);

// Validates every job (queue name, kind, payload size, max_attempts:
// ValidationError naming the field) and fills the defaults: max_attempts 0
// becomes [engine] max_attempts, run_at_us 0 becomes now_us.
void prepare_new_jobs(std::vector<NewJob>& jobs, const EngineConfig& engine, int64_t now_us);

// Checks each job's cost (ValidationError("cost", ...), nothing enqueued):
// 1..kMaxJobCost; above 1 only on a plugin with enqueue_v3 (ABI 1.2); at
// most the burst of the queue's effective limit, since a dearer job would
// take more than the burst at once (one already queued when the burst is
// lowered still runs, paying its whole cost: the bucket goes into debt). A
// queue without a limit takes any cost (no bucket, no cost).
void check_job_costs(std::span<const NewJob> jobs, const LimitResolver& limits,
                     const Storage& storage);

// Fills each job's key from its queue's key_from when it has none, then
// checks every key (ValidationError("key", ...), nothing enqueued): at most
// kMaxJobKeyBytes bytes, valid UTF-8, and a non-empty key only on a plugin
// with enqueue_v4 (ABI 1.4).
void apply_job_keys(std::span<NewJob> jobs, const std::map<std::string, QueueConfig>& queues,
                    const Storage& storage);

// Checks each job's own timeout (ValidationError("timeout", ...), nothing
// enqueued): 0 or 1..kMaxJobTimeoutMs (validate_job_timeout_ms), and a
// non-zero timeout only on a plugin with enqueue_v5 (ABI 1.6), the message
// naming the plugin and the minor it needs.
void check_job_timeouts(std::span<const NewJob> jobs, const Storage& storage);

}  // namespace conveyor
