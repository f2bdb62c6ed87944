// AdminService and TaskService methods (api_service.hpp).
#include "api_service.hpp"

#include "proto_json.hpp"

#include <conveyor/api_messages.hpp>
#include <conveyor/engine.hpp>
#include <conveyor/storage.hpp>
#include <conveyor/engine_internals.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace conveyor {
namespace {

using api::MessageReader;
using nlohmann::json;

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

std::string queue_field(const MessageReader& m) {
  std::string queue = m.string_field("queue", "queue");
  validate_field(m.path_of("queue"), [&] { validate_queue_name(queue); });
  return queue;
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
    default:
      return ApiCode::kInternal;
  }
}

}  // namespace

ApiService::ApiService(Engine& engine) : engine_(engine) {
  auto add = [&](std::string_view service, const char* name, bool mutates,
                 json (ApiService::*fn)(const json&)) {
    methods_[std::string(service) + name] =
        Method{mutates, [this, fn](const json& request) { return (this->*fn)(request); }};
  };
  add(kAdmin, "SetQueueRateLimit", true, &ApiService::set_queue_rate_limit);
  add(kAdmin, "DeleteQueueRateLimit", true, &ApiService::delete_queue_rate_limit);
  add(kAdmin, "ListRateLimits", false, &ApiService::list_rate_limits);
  add(kAdmin, "ListQueues", false, &ApiService::list_queues);
  methods_[std::string(kAdmin) + "PauseQueue"] =
      Method{true, [this](const json& r) { return set_paused(r, true); }};
  methods_[std::string(kAdmin) + "ResumeQueue"] =
      Method{true, [this](const json& r) { return set_paused(r, false); }};
  add(kTask, "Enqueue", true, &ApiService::enqueue);
  add(kTask, "EnqueueBatch", true, &ApiService::enqueue_batch);
  add(kTask, "GetJob", false, &ApiService::get_job);
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

json ApiService::call(const Method& method, const json& request) const {
  try {
    return method.call(request);
  } catch (const ApiError&) {
    throw;
  } catch (const ValidationError& e) {
    // Errors from MessageReader and validate_field already start with the
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

json ApiService::set_queue_rate_limit(const json& request) {
  MessageReader m(request, "");
  const std::string queue = queue_field(m);
  const double rate = m.double_field("ratePerSec", "rate_per_sec");
  validate_field("ratePerSec", [&] { validate_rate(rate); });
  const int64_t burst = m.integer_field("burst", "burst");
  validate_field("burst", [&] { validate_burst(burst, /*zero_means_auto=*/false); });
  const RateLimit limit{rate, static_cast<uint32_t>(burst)};
  engine_.set_rate_limit(queue, limit);
  // The engine re-read its overrides; show what storage recorded.
  RateLimitOverride stored{queue, limit, 0};
  for (auto& o : EngineInternals::limits(engine_).overrides())
    if (o.queue == queue) stored = std::move(o);
  return json{{"override", api::override_json(stored)}};
}

json ApiService::delete_queue_rate_limit(const json& request) {
  MessageReader m(request, "");
  const std::string queue = queue_field(m);
  if (!engine_.delete_rate_limit(queue))
    throw ApiError(ApiCode::kNotFound, fmt::format("queue {} has no rate-limit override", queue));
  return json::object();
}

json ApiService::list_rate_limits(const json& request) {
  MessageReader m(request, "");  // no fields; still must be an object
  const LimitResolver& limits = EngineInternals::limits(engine_);
  return api::listing_json(
      api::RateLimitListing{limits.enabled(), limits.default_limit(), limits.overrides()});
}

json ApiService::list_queues(const json& request) {
  MessageReader m(request, "");
  std::map<std::string, uint64_t, std::less<>> dispatched;
  for (const auto& c : EngineInternals::metrics(engine_).snapshot()) dispatched[c.queue] = c.dispatched;
  json queues = json::array();
  for (const QueueReport& r : engine_.queues()) {
    auto it = dispatched.find(r.stats.queue);
    queues.push_back(api::queue_info_json(r, it == dispatched.end() ? 0 : it->second));
  }
  return json{{"queues", std::move(queues)}};
}

json ApiService::set_paused(const json& request, bool paused) {
  MessageReader m(request, "");
  engine_.set_queue_paused(queue_field(m), paused);
  return json::object();
}

json ApiService::enqueue(const json& request) {
  MessageReader m(request, "");
  const MessageReader job = m.message_field("job", "job");
  const JobRequest r = api::parse_new_job(job.value(), job.path());
  const int64_t now = SystemClock::instance().wall_now_us();
  const auto ids = engine_.enqueue_batch({to_new_job(r, now)});
  return json{{"id", std::to_string(ids.front())}};
}

json ApiService::enqueue_batch(const json& request) {
  MessageReader m(request, "");
  const std::vector<MessageReader> given = m.repeated_messages("jobs", "jobs");
  json ids = json::array();
  if (given.empty()) return json{{"ids", std::move(ids)}};
  const int64_t now = SystemClock::instance().wall_now_us();
  std::vector<NewJob> jobs;
  jobs.reserve(given.size());
  for (const MessageReader& job : given)
    jobs.push_back(to_new_job(api::parse_new_job(job.value(), job.path()), now));
  for (int64_t id : engine_.enqueue_batch(std::move(jobs))) ids.push_back(std::to_string(id));
  return json{{"ids", std::move(ids)}};
}

json ApiService::get_job(const json& request) {
  MessageReader m(request, "");
  const int64_t id = m.integer_field("id", "id");
  if (id <= 0)
    throw ValidationError("id",
                          fmt::format("id: must be a job id (a whole number >= 1), got {}", id));
  const auto job = engine_.get_job(id);
  if (!job) throw ApiError(ApiCode::kNotFound, fmt::format("job {} not found", id));
  return json{{"job", api::job_json(*job)}};
}

}  // namespace conveyor
