// Where the data commands act: storage opened directly (an Engine in this
// process) or a running server's API (--server URL). The commands are written
// once against this interface.
#pragma once

#include "commands.hpp"

#include <conveyor/api_messages.hpp>
#include <conveyor/config.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/job_request.hpp>
#include <conveyor/queue_report.hpp>
#include <conveyor/rate_limit.hpp>

#include <cstdint>
#include <memory>
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
  virtual api::RateLimitListing rate_limits() = 0;
  virtual std::vector<QueueReport> queues() = 0;
};

// An Engine on config's storage. A plugin's refusal of [storage.options]
// (CONVEYOR_E_INVALID naming an option) is thrown as a ConfigError naming
// file:line:key (exit 2), not as a storage failure.
std::unique_ptr<Engine> open_engine(const Config& config);

// The server's API when g.server_url is set, else storage from the config.
// read_only: the command only reads, so it must not create a database (the
// sqlite plugin gets create = false unless the config sets it).
std::unique_ptr<Backend> open_backend(const GlobalOptions& g, bool read_only = false);

}  // namespace conveyor::cli
