// Where the data commands act: storage opened directly (an Engine in this
// process) or a running server's API (--server URL). The commands are written
// once against this interface.
#pragma once

#include "commands.hpp"

#include <conveyor/api_messages.hpp>
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
  // count copies of job (already validated); returns the first and last id.
  virtual std::pair<int64_t, int64_t> enqueue(const JobRequest& job, int64_t count) = 0;
  virtual void set_rate_limit(const std::string& queue, const RateLimit& limit) = 0;
  // false when the queue had no override.
  virtual bool delete_rate_limit(const std::string& queue) = 0;
  virtual api::RateLimitListing rate_limits() = 0;
  virtual std::vector<QueueReport> queues() = 0;
};

// The server's API when g.server_url is set, else storage from the config.
std::unique_ptr<Backend> open_backend(const GlobalOptions& g);

}  // namespace conveyor::cli
