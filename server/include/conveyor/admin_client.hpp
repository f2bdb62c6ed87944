// AdminClient: calls a running server's admin and task API (Connect unary
// over HTTP, binary protobuf: application/proto), as `conveyor --server URL
// ...` does. Failures are ApiError:
// the server's code and message, or unavailable when it cannot be reached.
#pragma once

#include <conveyor/api_error.hpp>
#include <conveyor/api_messages.hpp>
#include <conveyor/job_request.hpp>
#include <conveyor/queue_report.hpp>
#include <conveyor/rate_limit.hpp>

#include <google/protobuf/message.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

class AdminClient {
 public:
  // url: "http://host:port" or "https://host:port" (a trailing slash is
  // fine; no path). token: sent as "Authorization: Bearer <token>" unless
  // empty. Throws ValidationError("server", ...) for a malformed url.
  AdminClient(std::string url, std::string token);
  ~AdminClient();
  AdminClient(const AdminClient&) = delete;
  AdminClient& operator=(const AdminClient&) = delete;

  const std::string& url() const { return url_; }

  // POST /<method> ("conveyor.v1.AdminService/ListQueues") with request;
  // reads the answer into response.
  void call(std::string_view method, const google::protobuf::Message& request,
            google::protobuf::Message& response);

  RateLimitOverride set_rate_limit(std::string_view queue, const RateLimit& limit);
  // false when the queue had no override (not_found).
  bool delete_rate_limit(std::string_view queue);
  api::RateLimitListing list_rate_limits();
  std::vector<QueueReport> list_queues();
  void set_queue_paused(std::string_view queue, bool paused);
  // All or none; ids in the order of jobs.
  std::vector<int64_t> enqueue_batch(const std::vector<JobRequest>& jobs);
  // nullopt when there is no such job.
  std::optional<Job> get_job(int64_t id);

 private:
  struct Impl;
  std::string url_;
  std::string token_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace conveyor
