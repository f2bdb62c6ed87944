// Where the data commands act: storage opened directly (an Engine in this
// process) or a running server's API (--server URL). The commands are written
// once against this interface.
#pragma once

#include "commands.hpp"

#include <conveyor/admin_client.hpp>
#include <conveyor/api_messages.hpp>
#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/job_request.hpp>
#include <conveyor/queue_report.hpp>
#include <conveyor/rate_limit.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace conveyor::cli {

class Backend {
 public:
  virtual ~Backend() = default;
  // count copies of job (already validated), all or none: one storage
  // transaction (one EnqueueBatch call through the API). Returns their ids.
  virtual std::vector<int64_t> enqueue(const JobRequest& job, int64_t count) = 0;
  virtual void set_rate_limit(const std::string& queue, const RateLimit& limit) = 0;
  // false when the queue had no override.
  virtual bool delete_rate_limit(const std::string& queue) = 0;
  // Settings of a queue's keys (storage ABI 1.5), as the Engine's: a key's
  // own limit (key) or every key's (nullopt), a key's weight. The deletes
  // return false when there was nothing to clear.
  virtual void set_key_rate_limit(const std::string& queue, const std::optional<std::string>& key,
                                  const RateLimit& limit) = 0;
  virtual bool delete_key_rate_limit(const std::string& queue,
                                     const std::optional<std::string>& key) = 0;
  virtual void set_key_weight(const std::string& queue, const std::string& key,
                              uint32_t weight) = 0;
  virtual bool delete_key_weight(const std::string& queue, const std::string& key) = 0;
  virtual api::RateLimitListing rate_limits() = 0;
  // The live kill switch, stored; returns the state now in force.
  virtual RateLimitingState set_rate_limiting_enabled(bool enabled) = 0;
  virtual std::vector<QueueReport> queues() = 0;
  virtual void set_queue_paused(const std::string& queue, bool paused) = 0;
  // The queue's keys, busiest first, at most limit (1..kKeysMax): storage's
  // ready counts; running and throttled only through a server (live).
  virtual KeysReport keys(const std::string& queue, uint32_t limit) = 0;

  // Job operations. Batches of ids are at most Engine::kJobBatchMax.
  // list_jobs: query.limit is 1..kListJobsMax (checked by the caller).
  virtual JobPage list_jobs(const JobQuery& query) = 0;
  virtual std::optional<Job> get_job(int64_t id) = 0;
  virtual std::vector<JobOutcome> retry_jobs(std::span<const int64_t> ids) = 0;
  virtual RetryBatch retry_jobs_bulk(const std::string& queue, JobState state, int64_t after_id,
                                     uint32_t limit) = 0;
  // CONVEYOR_OK with the job after the cancel, CONVEYOR_E_NOT_FOUND, or
  // CONVEYOR_E_WRONG_STATE with the (final) job as it is.
  struct Cancelled {
    conveyor_status status = CONVEYOR_OK;
    std::optional<Job> job;
  };
  virtual Cancelled cancel_job(int64_t id) = 0;
  virtual std::vector<JobOutcome> delete_jobs(std::span<const int64_t> ids) = 0;
  // One batch of a bulk cancel / delete over filter.queue (Engine's
  // cancel_jobs_batch, delete_jobs_batch; the API's CancelJobs, DeleteJobs).
  virtual Engine::JobBatchResult cancel_jobs_bulk(const JobQuery& filter) = 0;
  virtual Engine::JobBatchResult delete_jobs_bulk(const JobQuery& filter) = 0;
  // One batch of a queue's removal (Engine::remove_queue; DeleteQueue):
  // NotFound for an unknown queue, a runtime error naming the running jobs
  // without force.
  virtual Engine::QueueRemoval remove_queue(const std::string& queue, bool force, int64_t after_id,
                                            uint32_t limit) = 0;
};

// An Engine on config's storage. A plugin's refusal of [storage.options]
// (CONVEYOR_E_INVALID naming an option) is thrown as a ConfigError naming
// file:line:key (exit 2), not as a storage failure.
std::unique_ptr<Engine> open_engine(const Config& config);

// The plugin's name when the engine's storage is neither durable nor shared
// with other processes (CONVEYOR_CAP_DURABLE and _MULTI_PROCESS both unset):
// its jobs live in the process that opened it and vanish with it, and no
// other process sees them. Nothing otherwise.
std::optional<std::string> process_local_storage(Engine& engine);

// The server's API when g.server_url is set, else storage from the config.
// read_only: the command only reads, so it must not create a database (the
// sqlite plugin gets create = false unless the config sets it).
std::unique_ptr<Backend> open_backend(const GlobalOptions& g, bool read_only = false);

}  // namespace conveyor::cli
