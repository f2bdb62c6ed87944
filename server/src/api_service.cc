// AdminService and TaskService methods (api_service.hpp).
#include "api_service.hpp"

#include "auth.hpp"

#include <conveyor/api_messages.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace conveyor {
namespace {

namespace v1 = conveyor::v1;

constexpr std::string_view kAdmin = "/conveyor.v1.AdminService/";
constexpr std::string_view kTask = "/conveyor.v1.TaskService/";

// Runs a core validation for a request field: its error then names the field
// as the API spells it ("ratePerSec: rate must be ...").
template <typename Fn>
void validate_field(const std::string& field, Fn&& fn) {
  try {
    fn();
  } catch (const ValidationError& e) {
    throw ValidationError(field, field + ": " + e.what());
  }
}

const std::string& checked_queue(const std::string& queue) {
  validate_field("queue", [&] { validate_queue_name(queue); });
  return queue;
}

const std::string& checked_key(const std::string& key) {
  validate_field("key", [&] { validate_job_key(key); });
  return key;
}

// The key or perKey of a SetQueueRateLimit / DeleteQueueRateLimit request.
template <typename Request>
api::LimitTarget limit_target(const Request& request) {
  if (request.has_key() && request.per_key())
    throw ValidationError("perKey",
                          "perKey: give key (one key's own limit) or perKey (the limit of every "
                          "key of the queue), not both");
  if (request.has_key()) return {true, checked_key(request.key())};
  return {request.per_key(), std::nullopt};
}

// A job id field: 1 or more.
int64_t checked_id(int64_t id, const std::string& field) {
  if (id <= 0)
    throw ValidationError(
        field, fmt::format("{}: must be a job id (a whole number >= 1), got {}", field, id));
  return id;
}

// The ids of a RetryJobs/DeleteJobs call: 1..kJobBatchMax ids, each >= 1.
std::vector<int64_t> checked_ids(const google::protobuf::RepeatedField<int64_t>& ids) {
  if (ids.empty()) throw ValidationError("ids", "ids: give at least one job id");
  if (static_cast<size_t>(ids.size()) > Engine::kJobBatchMax)
    throw ValidationError("ids", fmt::format("ids: at most {} ids per call, got {}: send them in "
                                             "batches",
                                             Engine::kJobBatchMax, ids.size()));
  for (int i = 0; i < ids.size(); ++i) checked_id(ids.Get(i), fmt::format("ids[{}]", i));
  return {ids.begin(), ids.end()};
}

// A page size: 0 means dflt; otherwise 1..kListJobsMax.
uint32_t checked_limit(uint32_t limit, uint32_t dflt) {
  if (limit == 0) return dflt;
  if (limit > kListJobsMax)
    throw ValidationError("limit", fmt::format("limit: must be 1..{} (0: {}), got {}: page with "
                                               "afterId for more",
                                               kListJobsMax, dflt, limit));
  return limit;
}

int64_t checked_after_id(int64_t after_id) {
  if (after_id < 0)
    throw ValidationError("afterId",
                          fmt::format("afterId: must be a job id >= 0 (0: from the start; else the "
                                      "nextAfterId of the previous answer), got {}",
                                      after_id));
  return after_id;
}

// The queue, states, afterId and limit of a bulk CancelJobs / DeleteJobs
// call; op ("cancel", "delete") for the message of a missing queue. The
// engine checks that the states are ones op takes.
template <typename Request>
JobQuery bulk_filter(const Request& request, const char* op) {
  if (request.queue().empty())
    throw ValidationError("queue", fmt::format("queue: give the queue whose jobs to {} (a bulk {} "
                                               "acts on one queue, never on every queue)",
                                               op, op));
  JobQuery query;
  query.queue = checked_queue(request.queue());
  query.states = api::parse_job_states(request.states());
  query.after_id = checked_after_id(request.after_id());
  query.limit = checked_limit(request.limit(), static_cast<uint32_t>(Engine::kJobBatchMax));
  return query;
}

template <typename Response>
int64_t add_outcomes(const std::vector<JobOutcome>& outcomes, Response& response) {
  int64_t ok = 0;
  for (const JobOutcome& o : outcomes) {
    api::to_proto(o, *response.add_outcomes());
    ok += o.status == JobOutcome::Status::kOk;
  }
  return ok;
}

ApiCode code_for_storage(const StorageError& e) {
  switch (e.code()) {
    case CONVEYOR_E_INVALID:
      return ApiCode::kInvalidArgument;
    case CONVEYOR_E_NOT_FOUND:
      return ApiCode::kNotFound;
    case CONVEYOR_E_UNAVAILABLE:
      return ApiCode::kUnavailable;
    case CONVEYOR_E_UNSUPPORTED:
      return ApiCode::kUnimplemented;
    case CONVEYOR_E_LEASE_LOST:
      return ApiCode::kFailedPrecondition;
    default:
      return ApiCode::kInternal;
  }
}

}  // namespace

ApiService::ApiService(Engine& engine) : engine_(engine) {
  Engine& e = engine_;
  add<v1::SetQueueRateLimitRequest, v1::SetQueueRateLimitResponse>(
      kAdmin, "SetQueueRateLimit", true, [&e](const auto& request, auto& response) {
        const std::string& queue = checked_queue(request.queue());
        const api::LimitTarget target = limit_target(request);
        const double rate = request.rate_per_sec();
        validate_field("ratePerSec", [&] { validate_rate(rate); });
        const uint32_t burst = request.burst();
        validate_field("burst", [&] { validate_burst(burst, /*zero_means_auto=*/false); });
        const RateLimit limit{rate, burst, api::parse_scope(request.scope(), "scope")};
        if (target.keys) {
          // Refused (ValidationError) on a fifo queue, or fleet without ABI
          // 1.3; StorageError UNSUPPORTED before ABI 1.5.
          e.set_key_rate_limit(queue, target.key, limit);
          api::to_proto(
              api::followed_key_setting(e, KeyOverride{queue, target.key, limit, std::nullopt, 0}),
              *response.mutable_key_setting());
          return;
        }
        // A fleet limit on a plugin without ABI 1.2: ValidationError("scope").
        e.set_rate_limit(queue, limit);
        // The engine re-read its overrides; show what storage recorded.
        RateLimitOverride stored{queue, limit, 0};
        for (auto& o : EngineInternals::limits(e).overrides())
          if (o.queue == queue) stored = std::move(o);
        api::to_proto(stored, *response.mutable_override());
      });
  add<v1::DeleteQueueRateLimitRequest, v1::DeleteQueueRateLimitResponse>(
      kAdmin, "DeleteQueueRateLimit", true, [&e](const auto& request, auto&) {
        const std::string& queue = checked_queue(request.queue());
        const api::LimitTarget target = limit_target(request);
        const bool deleted =
            target.keys ? e.delete_key_rate_limit(queue, target.key) : e.delete_rate_limit(queue);
        if (!deleted) throw ApiError(ApiCode::kNotFound, api::no_limit_message(queue, target));
      });
  add<v1::ListRateLimitsRequest, v1::ListRateLimitsResponse>(
      kAdmin, "ListRateLimits", false,
      [&e](const auto&, auto& response) { api::to_proto(api::rate_limit_listing(e), response); });
  add<v1::SetRateLimitingEnabledRequest, v1::SetRateLimitingEnabledResponse>(
      kAdmin, "SetRateLimitingEnabled", true, [&e](const auto& request, auto& response) {
        // Turning every limit off on every process takes an explicit false:
        // an empty message (or, in JSON, null) is not one. (The JSON codec
        // has already refused anything but true and false.)
        if (!request.has_enabled())
          throw ValidationError("enabled", R"(enabled: is required; send {"enabled": true} or )"
                                           R"({"enabled": false})");
        // Stored, followed by this engine at once (StorageError UNSUPPORTED
        // on a plugin without ABI 1.2).
        e.set_rate_limiting_enabled(request.enabled());
        api::to_proto(e.rate_limiting(), response);
      });
  add<v1::ListQueuesRequest, v1::ListQueuesResponse>(
      kAdmin, "ListQueues", false, [&e](const auto&, auto& response) {
        std::map<std::string, uint64_t, std::less<>> dispatched;
        for (const auto& c : EngineInternals::metrics(e).snapshot())
          dispatched[c.queue] = c.dispatched;
        for (const QueueReport& r : e.queues()) {
          auto it = dispatched.find(r.stats.queue);
          api::to_proto(r, it == dispatched.end() ? 0 : it->second, *response.add_queues());
        }
      });
  add<v1::PauseQueueRequest, v1::PauseQueueResponse>(
      kAdmin, "PauseQueue", true, [&e](const auto& request, auto&) {
        e.set_queue_paused(checked_queue(request.queue()), true);
      });
  add<v1::ResumeQueueRequest, v1::ResumeQueueResponse>(
      kAdmin, "ResumeQueue", true, [&e](const auto& request, auto&) {
        e.set_queue_paused(checked_queue(request.queue()), false);
      });
  add<v1::ListJobsRequest, v1::ListJobsResponse>(
      kAdmin, "ListJobs", false, [&e](const auto& request, auto& response) {
        JobQuery query;
        query.queue = checked_queue(request.queue());
        query.states = api::parse_job_states(request.states());
        query.kind = request.kind();
        if (!query.kind.empty()) validate_field("kind", [&] { validate_job_kind(query.kind); });
        query.after_id = checked_after_id(request.after_id());
        query.limit = checked_limit(request.limit(), 100);
        const std::vector<Job> jobs = e.list_jobs(query);
        for (const Job& job : jobs) api::to_proto(job, *response.add_jobs());
        // A full page may have a successor; a short one is the last.
        response.set_next_after_id(jobs.size() == query.limit ? jobs.back().id : 0);
      });
  add<v1::ListKeysRequest, v1::ListKeysResponse>(
      kAdmin, "ListKeys", false, [&e](const auto& request, auto& response) {
        const std::string& queue = checked_queue(request.queue());
        const uint32_t limit = request.limit() == 0 ? 20 : request.limit();
        if (limit > kKeysMax)
          throw ValidationError(
              "limit", fmt::format("limit: must be 1..{} (0: 20), got {}", kKeysMax, limit));
        // Storage's ready keys with this server's live running/throttled
        // (StorageError UNSUPPORTED on a plugin before ABI 1.4).
        api::to_proto(e.keys(queue, limit), response);
      });
  add<v1::RetryJobsRequest, v1::RetryJobsResponse>(
      kAdmin, "RetryJobs", true, [&e](const auto& request, auto& response) {
        const bool bulk = !request.queue().empty() || !request.state().empty() ||
                          request.after_id() != 0 || request.limit() != 0;
        if (!request.ids().empty()) {
          if (bulk)
            throw ValidationError("ids",
                                  "ids: give either ids or queue + state (bulk), not both; "
                                  "afterId and limit belong to the bulk form");
          const std::vector<int64_t> ids = checked_ids(request.ids());
          response.set_retried(add_outcomes(e.retry_jobs(ids), response));
          return;
        }
        if (request.queue().empty())
          throw ValidationError("queue",
                                "queue: give ids, or queue and state (failed or cancelled) to "
                                "retry a queue's jobs in batches");
        JobQuery query;
        query.queue = checked_queue(request.queue());
        const std::string& state = request.state();
        if (state != "failed" && state != "cancelled")
          throw ValidationError("state",
                                "state: must be \"failed\" or \"cancelled\" (the states "
                                "a retry takes), got " +
                                    quote_for_message(state));
        query.states = {state == "failed" ? JobState::kFailed : JobState::kCancelled};
        query.after_id = checked_after_id(request.after_id());
        query.limit = checked_limit(request.limit(), static_cast<uint32_t>(Engine::kJobBatchMax));
        // One bounded batch per call: list a page, retry it, hand back the
        // cursor. Jobs retried here that fail again have ids <= the cursor, so
        // a caller that follows it visits each job once.
        const std::vector<Job> jobs = e.list_jobs(query);
        if (jobs.empty()) return;
        std::vector<int64_t> ids;
        ids.reserve(jobs.size());
        for (const Job& job : jobs) ids.push_back(job.id);
        int64_t retried = 0;
        for (const JobOutcome& o : e.retry_jobs(ids))
          retried += o.status == JobOutcome::Status::kOk;
        response.set_retried(retried);
        response.set_next_after_id(jobs.size() == query.limit ? jobs.back().id : 0);
      });
  add<v1::CancelJobRequest, v1::CancelJobResponse>(
      kAdmin, "CancelJob", true, [&e](const auto& request, auto& response) {
        const int64_t id = checked_id(request.id(), "id");
        const bool cancelled = e.cancel_job(id);
        const auto job = e.get_job(id);
        if (!job) throw ApiError(ApiCode::kNotFound, fmt::format("job {} not found", id));
        if (!cancelled)
          throw ApiError(ApiCode::kFailedPrecondition,
                         fmt::format("job {} is already {}: only jobs that are not final "
                                     "(available, scheduled, running) can be cancelled",
                                     id, to_string(job->state)));
        api::to_proto(*job, *response.mutable_job());
      });
  add<v1::DeleteJobsRequest, v1::DeleteJobsResponse>(
      kAdmin, "DeleteJobs", true, [&e](const auto& request, auto& response) {
        const bool bulk = !request.queue().empty() || !request.states().empty() ||
                          request.after_id() != 0 || request.limit() != 0;
        if (!request.ids().empty() || !bulk) {
          if (bulk)
            throw ValidationError("ids",
                                  "ids: give either ids or queue + states (bulk), not both; "
                                  "afterId and limit belong to the bulk form");
          const std::vector<int64_t> ids = checked_ids(request.ids());
          response.set_deleted(add_outcomes(e.delete_jobs(ids), response));
          return;
        }
        // One bounded batch: list a page of the final states, delete it.
        const Engine::JobBatchResult r = e.delete_jobs_batch(bulk_filter(request, "delete"));
        response.set_deleted(r.done);
        response.set_refused(r.refused);
        response.set_next_after_id(r.next_after_id);
      });
  add<v1::CancelJobsRequest, v1::CancelJobsResponse>(
      kAdmin, "CancelJobs", true, [&e](const auto& request, auto& response) {
        const Engine::JobBatchResult r = e.cancel_jobs_batch(bulk_filter(request, "cancel"));
        response.set_cancelled(r.done);
        response.set_refused(r.refused);
        response.set_next_after_id(r.next_after_id);
      });
  add<v1::DeleteQueueRequest, v1::DeleteQueueResponse>(
      kAdmin, "DeleteQueue", true, [&e](const auto& request, auto& response) {
        const std::string& queue = checked_queue(request.queue());
        const Engine::QueueRemoval r =
            e.remove_queue(queue, request.force(), checked_after_id(request.after_id()),
                           checked_limit(request.limit(), Engine::kJobBatchMax));
        if (r.not_found) throw ApiError(ApiCode::kNotFound, api::unknown_queue_message(queue));
        if (r.running_refused > 0)
          throw ApiError(ApiCode::kFailedPrecondition,
                         api::queue_running_message(queue, r.running_refused));
        response.set_deleted(r.deleted);
        response.set_cancelled(r.cancelled);
        response.set_running_cancelled(r.running_cancelled);
        response.set_kept(r.kept);
        response.set_next_after_id(r.next_after_id);
        response.set_override_removed(r.override_removed);
        response.set_key_settings_removed(r.key_settings_removed);
        response.set_was_paused(r.was_paused);
        response.set_configured(r.configured);
      });
  add<v1::SetKeyWeightRequest, v1::SetKeyWeightResponse>(
      kAdmin, "SetKeyWeight", true, [&e](const auto& request, auto& response) {
        const std::string& queue = checked_queue(request.queue());
        const std::string& key = checked_key(request.key());
        const uint32_t weight = request.weight();
        // Validated by the engine (ValidationError "weight": 1..1000).
        e.set_key_weight(queue, key, weight);
        api::to_proto(
            api::followed_key_setting(e, KeyOverride{queue, key, std::nullopt, weight, 0}),
            *response.mutable_key_setting());
      });
  add<v1::DeleteKeyWeightRequest, v1::DeleteKeyWeightResponse>(
      kAdmin, "DeleteKeyWeight", true, [&e](const auto& request, auto&) {
        const std::string& queue = checked_queue(request.queue());
        const std::string& key = checked_key(request.key());
        if (!e.delete_key_weight(queue, key))
          throw ApiError(ApiCode::kNotFound, api::no_key_weight_message(queue, key));
      });
  add_scoped<v1::EnqueueRequest, v1::EnqueueResponse>(
      kTask, "Enqueue", true, [&e](const auto& request, auto& response, const WorkerScope* scope) {
        const JobRequest r = api::from_proto(request.job(), "job.", &e.config());
        if (scope) scope->require_queue(r.queue, "enqueue to");
        const int64_t now = SystemClock::instance().wall_now_us();
        response.set_id(e.enqueue_batch({to_new_job(r, now)}).front());
      });
  add_scoped<v1::EnqueueBatchRequest, v1::EnqueueBatchResponse>(
      kTask, "EnqueueBatch", true,
      [&e](const auto& request, auto& response, const WorkerScope* scope) {
        if (request.jobs().empty()) return;
        const int64_t now = SystemClock::instance().wall_now_us();
        std::vector<NewJob> jobs;
        jobs.reserve(static_cast<size_t>(request.jobs_size()));
        for (int i = 0; i < request.jobs_size(); ++i) {
          const JobRequest r =
              api::from_proto(request.jobs(i), fmt::format("jobs[{}].", i), &e.config());
          // Every job is checked before any is stored (the batch is all or none).
          if (scope) scope->require_queue(r.queue, "enqueue to");
          jobs.push_back(to_new_job(r, now));
        }
        for (int64_t id : e.enqueue_batch(std::move(jobs))) response.add_ids(id);
      });
  add_scoped<v1::GetJobRequest, v1::GetJobResponse>(
      kTask, "GetJob", false, [&e](const auto& request, auto& response, const WorkerScope* scope) {
        const int64_t id = checked_id(request.id(), "id");
        const auto job = e.get_job(id);
        if (!job) throw ApiError(ApiCode::kNotFound, fmt::format("job {} not found", id));
        if (scope && !scope->covers(job->queue))
          throw ApiError(ApiCode::kPermissionDenied,
                         fmt::format("{} may not read job {}: it is in a queue outside the "
                                     "token's queues ({})",
                                     scope->who(), id, fmt::join(scope->queues, ", ")));
        api::to_proto(*job, *response.mutable_job());
      });
  add_worker_methods();
}

const ApiService::Method* ApiService::find(std::string_view path) const {
  auto it = methods_.find(path);
  return it == methods_.end() ? nullptr : &it->second;
}

std::vector<std::string> ApiService::paths() const {
  std::vector<std::string> out;
  for (const auto& [path, m] : methods_) out.push_back(path);
  return out;
}

namespace {

// Runs fn, turning what it throws into ApiError.
template <typename Fn>
auto as_api_errors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const ApiError&) {
    throw;
  } catch (const ValidationError& e) {
    // Errors from api::from_proto and validate_field already start with the
    // field's path; a core check deeper down names its own field.
    const std::string message = e.what();
    const std::string field = api::api_field_name(e.field());
    if (message.rfind(e.field() + ":", 0) == 0 || message.rfind(field + ":", 0) == 0 ||
        e.field() == "body")
      throw ApiError(ApiCode::kInvalidArgument, message);
    throw ApiError(ApiCode::kInvalidArgument, field + ": " + message);
  } catch (const StorageError& e) {
    throw ApiError(code_for_storage(e), std::string("storage: ") + e.what());
  } catch (const std::exception& e) {
    spdlog::error("admin API: unexpected error: {}", e.what());
    throw ApiError(ApiCode::kInternal, std::string("internal error: ") + e.what());
  }
}

}  // namespace

std::unique_ptr<google::protobuf::Message> ApiService::call(const Method& method,
                                                            const Message& request,
                                                            const WorkerScope* scope) const {
  return as_api_errors([&] { return method.call(request, scope); });
}

ApiService::Cancel ApiService::start(const Method& method, const Message& request, Done done,
                                     const WorkerScope* scope) const {
  return as_api_errors([&] { return method.call_async(request, std::move(done), scope); });
}

void ApiService::close_long_polls() { EngineInternals::remote_workers(engine_).close(); }

}  // namespace conveyor
