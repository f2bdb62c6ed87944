// AdminClient: calls a running server's admin and task API (Connect unary
// over HTTP, binary protobuf: application/proto), as `conveyor --server URL
// ...` does. Failures are ApiError:
// the server's code and message, or unavailable when it cannot be reached.
#pragma once

#include <conveyor/api_error.hpp>
#include <conveyor/api_messages.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/job_request.hpp>
#include <conveyor/queue_report.hpp>
#include <conveyor/rate_limit.hpp>

#include <google/protobuf/message.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

// One page of ListJobs: the jobs and the cursor of the next page (0: none).
struct JobPage {
  std::vector<Job> jobs;
  int64_t next_after_id = 0;
};

// One batch of a bulk RetryJobs: jobs made available, and the cursor to
// call again with (0: done).
struct RetryBatch {
  int64_t retried = 0;
  int64_t next_after_id = 0;
};

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
  // SetQueueRateLimit / DeleteQueueRateLimit with key (nullopt: perKey): a
  // key's own limit, or every key's; the setting as the server stored it.
  // delete: false when there was none (not_found).
  KeyOverride set_key_rate_limit(std::string_view queue, const std::optional<std::string>& key,
                                 const RateLimit& limit);
  bool delete_key_rate_limit(std::string_view queue, const std::optional<std::string>& key);
  // SetKeyWeight / DeleteKeyWeight (false when the key had none).
  KeyOverride set_key_weight(std::string_view queue, std::string_view key, uint32_t weight);
  bool delete_key_weight(std::string_view queue, std::string_view key);
  api::RateLimitListing list_rate_limits();
  // SetRateLimitingEnabled: the kill switch stored; the state now in force.
  RateLimitingState set_rate_limiting_enabled(bool enabled);
  std::vector<QueueReport> list_queues();
  void set_queue_paused(std::string_view queue, bool paused);
  // All or none; ids in the order of jobs.
  std::vector<int64_t> enqueue_batch(const std::vector<JobRequest>& jobs);
  // nullopt when there is no such job.
  std::optional<Job> get_job(int64_t id);
  // ListJobs; query.limit 0 is the server's default (100).
  JobPage list_jobs(const JobQuery& query);
  // ListKeys: queue's keys, busiest first, at most limit (0: the server's 20).
  KeysReport list_keys(std::string_view queue, uint32_t limit);
  // RetryJobs, ids form: one outcome per id, in order.
  std::vector<JobOutcome> retry_jobs(std::span<const int64_t> ids);
  // RetryJobs, bulk form: up to limit (0: 1000) jobs of queue in state
  // (failed or cancelled) with id > after_id.
  RetryBatch retry_jobs_bulk(std::string_view queue, JobState state, int64_t after_id,
                             uint32_t limit);
  // CancelJob: the job as it is after the cancel. ApiError not_found for an
  // unknown id, failed_precondition for a final job.
  Job cancel_job(int64_t id);
  // DeleteJobs: one outcome per id, in order.
  std::vector<JobOutcome> delete_jobs(std::span<const int64_t> ids);
  // DeleteJobs / CancelJobs, bulk form: one batch of up to filter.limit jobs
  // of filter.queue in filter.states with id > filter.after_id.
  Engine::JobBatchResult delete_jobs_bulk(const JobQuery& filter);
  Engine::JobBatchResult cancel_jobs_bulk(const JobQuery& filter);
  // DeleteQueue: one batch (Engine::remove_queue). ApiError not_found for an
  // unknown queue, failed_precondition while jobs run (without force).
  Engine::QueueRemoval delete_queue(std::string_view queue, bool force, int64_t after_id,
                                    uint32_t limit);

 private:
  bool call_delete(std::string_view method, const google::protobuf::Message& request,
                   google::protobuf::Message& response);

  struct Impl;
  std::string url_;
  std::string token_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace conveyor
