// The API client (admin_client.hpp), on cpp-httplib.
#include <conveyor/admin_client.hpp>
#include <conveyor/config.hpp>
#include <conveyor/validation.hpp>

#include "api_codec.hpp"

#include <fmt/format.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <regex>

namespace conveyor {
namespace {

using nlohmann::json;
namespace v1 = conveyor::v1;

constexpr std::string_view kAdmin = "conveyor.v1.AdminService/";
constexpr std::string_view kTask = "conveyor.v1.TaskService/";

// The scheme://host:port of url without a trailing slash; throws for anything else.
std::string normalize_url(std::string url) {
  static const std::regex kForm(
      R"(^(https?)://(\[[0-9A-Fa-f:.%]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?/?$)");
  std::smatch m;
  if (!std::regex_match(url, m, kForm))
    throw ValidationError("server",
                          "--server must be a URL like http://127.0.0.1:8080 (scheme, "
                          "host and port, no path), got " +
                              quote_for_message(url));
  if (m[3].matched) {
    const int port = std::stoi(m[3].str().substr(1));  // at most 5 digits: no overflow
    if (port < 1 || port > 65535)
      throw ValidationError("server", "--server port must be from 1 to 65535, got " +
                                          std::to_string(port) + " in " + quote_for_message(url));
  }
  if (url.back() == '/') url.pop_back();
  return url;
}

// A response that is not what the API sends (a proxy's page, a wrong port).
[[noreturn]] void unexpected(const std::string& url, int status, const std::string& body) {
  throw ApiError(api_code_for_http_status(status),
                 fmt::format("unexpected answer from {} (HTTP {}): {}", url, status,
                             quote_for_message(body, 120)));
}

// httplib's error names are terse ("Connection"); say what happened.
std::string describe(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "connection refused or host unreachable (is `conveyor serve` running with [server] "
             "listen?)";
    case httplib::Error::ConnectionTimeout:
      return "timed out connecting";
    case httplib::Error::Read:
      return "the connection failed or timed out while reading the answer";
    case httplib::Error::Write:
      return "the connection failed while sending the request";
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLLoadingCerts:
    case httplib::Error::SSLServerVerification:
      return "TLS failed (" + httplib::to_string(e) + ")";
    default:
      return httplib::to_string(e);
  }
}

// The server refuses a body over its [server] max_body_bytes; the smallest
// it may be set to, and its default. The server does not say its value.
constexpr size_t kSmallestBodyLimit = 1024;
const uint64_t kDefaultBodyLimit = ServerConfig{}.max_body_bytes;

// How long a call waits for the server's answer.
constexpr std::chrono::seconds kReadTimeout(60);

// The server's refusal of a body over max_body_bytes (429 resource_exhausted).
bool over_body_limit(const ApiError& e) {
  return e.code() == ApiCode::kResourceExhausted &&
         std::string_view(e.what()).find("max_body_bytes") != std::string_view::npos;
}

}  // namespace

struct AdminClient::Impl {
  explicit Impl(const std::string& url) : http(url) {
    http.set_connection_timeout(std::chrono::seconds(5));
    http.set_read_timeout(kReadTimeout);
    http.set_write_timeout(std::chrono::seconds(60));
  }
  httplib::Client http;
};

AdminClient::AdminClient(std::string url, std::string token)
    : url_(normalize_url(std::move(url))),
      token_(std::move(token)),
      impl_(std::make_unique<Impl>(url_)) {}

AdminClient::~AdminClient() = default;

void AdminClient::call(std::string_view method, const google::protobuf::Message& request,
                       google::protobuf::Message& response) {
  httplib::Headers headers = {{"Connect-Protocol-Version", "1"}};
  if (!token_.empty()) headers.emplace("Authorization", "Bearer " + token_);
  const std::string path = "/" + std::string(method);
  const api::Codec codec = api::Codec::kProto;
  const std::string sent = api::encode(codec, request);
  const auto started = std::chrono::steady_clock::now();
  auto res = impl_->http.Post(path, headers, sent, api::content_type(codec));
  if (!res) {
    // The server answers a body over its max_body_bytes as soon as it has
    // the header, and closes the connection after draining some of the
    // rest: a client still sending then fails to write (or, when the reset
    // overtakes the answer, to read before the read timeout). A server that
    // still answers did that.
    const httplib::Error error = res.error();
    const bool cut_short = error == httplib::Error::Write ||
                           (error == httplib::Error::Read &&
                            std::chrono::steady_clock::now() - started < kReadTimeout);
    if (cut_short && sent.size() > kSmallestBodyLimit && impl_->http.Get("/"))
      throw ApiError(ApiCode::kResourceExhausted,
                     fmt::format("the server at {} closed the connection while the request's "
                                 "{}-byte body was being sent, as it does for a body over its "
                                 "[server] max_body_bytes (default {} bytes)",
                                 url_, sent.size(), kDefaultBodyLimit));
    throw ApiError(ApiCode::kUnavailable,
                   fmt::format("cannot reach conveyor server at {}: {}", url_, describe(error)));
  }
  if (res->status == 200) {
    if (api::codec_for_content_type(res->get_header_value("Content-Type")) != codec)
      unexpected(url_, res->status, res->body);
    try {
      api::decode(codec, res->body, response);
    } catch (const ApiError& e) {
      throw ApiError(ApiCode::kInternal,
                     fmt::format("malformed response from {}: {}", url_, e.what()));
    }
    return;
  }
  // Connect error bodies are JSON whatever the request's codec.
  const json body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (body.is_object() && body.contains("code") && body["code"].is_string()) {
    const auto code = parse_api_code(body["code"].get<std::string>());
    std::string message = body.contains("message") && body["message"].is_string()
                              ? body["message"].get<std::string>()
                              : std::string("(no message)");
    ApiError error(code.value_or(ApiCode::kUnknown), message);
    // Its words do not say how large the request was.
    if (over_body_limit(error))
      throw ApiError(error.code(),
                     fmt::format("{} (this request's body is {} bytes)", message, sent.size()));
    throw error;
  }
  unexpected(url_, res->status, res->body);
}

namespace {
// Reads a response message; a malformed one is the server's fault, not the user's.
template <typename Fn>
auto read_response(const std::string& url, Fn&& fn) {
  try {
    return fn();
  } catch (const ValidationError& e) {
    throw ApiError(ApiCode::kInternal,
                   fmt::format("malformed response from {}: {}", url, e.what()));
  }
}
}  // namespace

namespace {
v1::SetQueueRateLimitRequest set_limit_request(std::string_view queue, const RateLimit& limit) {
  v1::SetQueueRateLimitRequest request;
  request.set_queue(std::string(queue));
  request.set_rate_per_sec(limit.rate_per_sec);
  request.set_burst(limit.burst);
  request.set_scope(to_string(limit.scope));
  return request;
}

// A request's key, or per_key for every key (nullopt).
template <typename Request>
void set_key_target(Request& request, const std::optional<std::string>& key) {
  if (key)
    request.set_key(*key);
  else
    request.set_per_key(true);
}
}  // namespace

RateLimitOverride AdminClient::set_rate_limit(std::string_view queue, const RateLimit& limit) {
  v1::SetQueueRateLimitResponse response;
  call(std::string(kAdmin) + "SetQueueRateLimit", set_limit_request(queue, limit), response);
  return read_response(url_, [&] { return api::from_proto(response.override(), "override."); });
}

KeyOverride AdminClient::set_key_rate_limit(std::string_view queue,
                                            const std::optional<std::string>& key,
                                            const RateLimit& limit) {
  v1::SetQueueRateLimitRequest request = set_limit_request(queue, limit);
  set_key_target(request, key);
  v1::SetQueueRateLimitResponse response;
  call(std::string(kAdmin) + "SetQueueRateLimit", request, response);
  return read_response(url_,
                       [&] { return api::from_proto(response.key_setting(), "keySetting."); });
}

// Calls a Delete method: false when the server answers not_found.
bool AdminClient::call_delete(std::string_view method, const google::protobuf::Message& request,
                              google::protobuf::Message& response) {
  try {
    call(std::string(kAdmin) + std::string(method), request, response);
    return true;
  } catch (const ApiError& e) {
    if (e.code() == ApiCode::kNotFound) return false;
    throw;
  }
}

bool AdminClient::delete_rate_limit(std::string_view queue) {
  v1::DeleteQueueRateLimitRequest request;
  request.set_queue(std::string(queue));
  v1::DeleteQueueRateLimitResponse response;
  return call_delete("DeleteQueueRateLimit", request, response);
}

bool AdminClient::delete_key_rate_limit(std::string_view queue,
                                        const std::optional<std::string>& key) {
  v1::DeleteQueueRateLimitRequest request;
  request.set_queue(std::string(queue));
  set_key_target(request, key);
  v1::DeleteQueueRateLimitResponse response;
  return call_delete("DeleteQueueRateLimit", request, response);
}

KeyOverride AdminClient::set_key_weight(std::string_view queue, std::string_view key,
                                        uint32_t weight) {
  v1::SetKeyWeightRequest request;
  request.set_queue(std::string(queue));
  request.set_key(std::string(key));
  request.set_weight(weight);
  v1::SetKeyWeightResponse response;
  call(std::string(kAdmin) + "SetKeyWeight", request, response);
  return read_response(url_,
                       [&] { return api::from_proto(response.key_setting(), "keySetting."); });
}

bool AdminClient::delete_key_weight(std::string_view queue, std::string_view key) {
  v1::DeleteKeyWeightRequest request;
  request.set_queue(std::string(queue));
  request.set_key(std::string(key));
  v1::DeleteKeyWeightResponse response;
  return call_delete("DeleteKeyWeight", request, response);
}

api::RateLimitListing AdminClient::list_rate_limits() {
  v1::ListRateLimitsResponse response;
  call(std::string(kAdmin) + "ListRateLimits", v1::ListRateLimitsRequest(), response);
  return read_response(url_, [&] { return api::from_proto(response); });
}

RateLimitingState AdminClient::set_rate_limiting_enabled(bool enabled) {
  v1::SetRateLimitingEnabledRequest request;
  request.set_enabled(enabled);
  v1::SetRateLimitingEnabledResponse response;
  call(std::string(kAdmin) + "SetRateLimitingEnabled", request, response);
  return read_response(url_, [&] { return api::from_proto(response); });
}

std::vector<QueueReport> AdminClient::list_queues() {
  v1::ListQueuesResponse response;
  call(std::string(kAdmin) + "ListQueues", v1::ListQueuesRequest(), response);
  return read_response(url_, [&] {
    std::vector<QueueReport> out;
    for (int i = 0; i < response.queues_size(); ++i)
      out.push_back(api::from_proto(response.queues(i), fmt::format("queues[{}].", i)));
    return out;
  });
}

void AdminClient::set_queue_paused(std::string_view queue, bool paused) {
  v1::PauseQueueRequest request;  // ResumeQueueRequest has the same fields
  request.set_queue(std::string(queue));
  v1::PauseQueueResponse response;
  call(std::string(kAdmin) + (paused ? "PauseQueue" : "ResumeQueue"), request, response);
}

std::vector<int64_t> AdminClient::enqueue_batch(const std::vector<JobRequest>& jobs) {
  v1::EnqueueBatchRequest request;
  for (const auto& j : jobs) api::to_proto(j, *request.add_jobs());
  v1::EnqueueBatchResponse response;
  try {
    call(std::string(kTask) + "EnqueueBatch", request, response);
  } catch (const ApiError& e) {
    if (!over_body_limit(e) || jobs.size() < 2) throw;
    // How many of these jobs one request under the default limit holds.
    const uint64_t bytes = request.ByteSizeLong();
    const uint64_t fit = kDefaultBodyLimit * jobs.size() / std::max<uint64_t>(bytes, 1);
    throw ApiError(e.code(),
                   fmt::format("{}; it holds {} jobs of about {} bytes each, {}", e.what(),
                               jobs.size(), (bytes + jobs.size() - 1) / jobs.size(),
                               fit == 0 ? fmt::format("each over the default limit of {} bytes",
                                                      kDefaultBodyLimit)
                                        : fmt::format("of which the default limit ({} bytes) "
                                                      "takes about {} a request",
                                                      kDefaultBodyLimit, fit)));
  }
  std::vector<int64_t> ids(response.ids().begin(), response.ids().end());
  if (ids.size() != jobs.size())
    throw ApiError(ApiCode::kInternal, fmt::format("server {} returned {} ids for {} jobs", url_,
                                                   ids.size(), jobs.size()));
  return ids;
}

std::optional<Job> AdminClient::get_job(int64_t id) {
  v1::GetJobRequest request;
  request.set_id(id);
  v1::GetJobResponse response;
  try {
    call(std::string(kTask) + "GetJob", request, response);
  } catch (const ApiError& e) {
    if (e.code() == ApiCode::kNotFound) return std::nullopt;
    throw;
  }
  return read_response(url_, [&] { return api::from_proto(response.job(), "job."); });
}

namespace {
// The outcomes of a RetryJobs/DeleteJobs answer, one per id asked for.
template <typename Response>
std::vector<JobOutcome> outcomes_of(const std::string& url, const Response& response,
                                    size_t asked) {
  if (static_cast<size_t>(response.outcomes_size()) != asked)
    throw ApiError(ApiCode::kInternal, fmt::format("server {} returned {} outcomes for {} ids", url,
                                                   response.outcomes_size(), asked));
  return read_response(url, [&] {
    std::vector<JobOutcome> out;
    for (int i = 0; i < response.outcomes_size(); ++i)
      out.push_back(api::from_proto(response.outcomes(i), fmt::format("outcomes[{}].", i)));
    return out;
  });
}
}  // namespace

KeysReport AdminClient::list_keys(std::string_view queue, uint32_t limit) {
  v1::ListKeysRequest request;
  request.set_queue(std::string(queue));
  request.set_limit(limit);
  v1::ListKeysResponse response;
  call(std::string(kAdmin) + "ListKeys", request, response);
  return read_response(url_, [&] { return api::from_proto(response, std::string(queue)); });
}

JobPage AdminClient::list_jobs(const JobQuery& query) {
  v1::ListJobsRequest request;
  request.set_queue(query.queue);
  for (JobState s : query.states) request.add_states(to_string(s));
  request.set_kind(query.kind);
  request.set_after_id(query.after_id);
  request.set_limit(query.limit);
  v1::ListJobsResponse response;
  call(std::string(kAdmin) + "ListJobs", request, response);
  return read_response(url_, [&] {
    JobPage page;
    for (int i = 0; i < response.jobs_size(); ++i)
      page.jobs.push_back(api::from_proto(response.jobs(i), fmt::format("jobs[{}].", i)));
    page.next_after_id = response.next_after_id();
    return page;
  });
}

std::vector<JobOutcome> AdminClient::retry_jobs(std::span<const int64_t> ids) {
  v1::RetryJobsRequest request;
  for (int64_t id : ids) request.add_ids(id);
  v1::RetryJobsResponse response;
  call(std::string(kAdmin) + "RetryJobs", request, response);
  return outcomes_of(url_, response, ids.size());
}

RetryBatch AdminClient::retry_jobs_bulk(std::string_view queue, JobState state, int64_t after_id,
                                        uint32_t limit) {
  v1::RetryJobsRequest request;
  request.set_queue(std::string(queue));
  request.set_state(to_string(state));
  request.set_after_id(after_id);
  request.set_limit(limit);
  v1::RetryJobsResponse response;
  call(std::string(kAdmin) + "RetryJobs", request, response);
  return RetryBatch{response.retried(), response.next_after_id()};
}

Job AdminClient::cancel_job(int64_t id) {
  v1::CancelJobRequest request;
  request.set_id(id);
  v1::CancelJobResponse response;
  call(std::string(kAdmin) + "CancelJob", request, response);
  return read_response(url_, [&] { return api::from_proto(response.job(), "job."); });
}

std::vector<JobOutcome> AdminClient::delete_jobs(std::span<const int64_t> ids) {
  v1::DeleteJobsRequest request;
  for (int64_t id : ids) request.add_ids(id);
  v1::DeleteJobsResponse response;
  call(std::string(kAdmin) + "DeleteJobs", request, response);
  return outcomes_of(url_, response, ids.size());
}

namespace {
template <typename Request>
void set_bulk_filter(const JobQuery& filter, Request& request) {
  request.set_queue(filter.queue);
  for (JobState s : filter.states) request.add_states(to_string(s));
  request.set_after_id(filter.after_id);
  request.set_limit(filter.limit);
}
}  // namespace

Engine::JobBatchResult AdminClient::delete_jobs_bulk(const JobQuery& filter) {
  v1::DeleteJobsRequest request;
  set_bulk_filter(filter, request);
  v1::DeleteJobsResponse response;
  call(std::string(kAdmin) + "DeleteJobs", request, response);
  return {response.deleted(), response.refused(), response.next_after_id()};
}

Engine::JobBatchResult AdminClient::cancel_jobs_bulk(const JobQuery& filter) {
  v1::CancelJobsRequest request;
  set_bulk_filter(filter, request);
  v1::CancelJobsResponse response;
  call(std::string(kAdmin) + "CancelJobs", request, response);
  return {response.cancelled(), response.refused(), response.next_after_id()};
}

Engine::QueueRemoval AdminClient::delete_queue(std::string_view queue, bool force, int64_t after_id,
                                               uint32_t limit) {
  v1::DeleteQueueRequest request;
  request.set_queue(std::string(queue));
  request.set_force(force);
  request.set_after_id(after_id);
  request.set_limit(limit);
  v1::DeleteQueueResponse response;
  call(std::string(kAdmin) + "DeleteQueue", request, response);
  Engine::QueueRemoval r;
  r.deleted = response.deleted();
  r.cancelled = response.cancelled();
  r.running_cancelled = response.running_cancelled();
  r.kept = response.kept();
  r.next_after_id = response.next_after_id();
  r.override_removed = response.override_removed();
  r.key_settings_removed = response.key_settings_removed();
  r.was_paused = response.was_paused();
  r.configured = response.configured();
  return r;
}

}  // namespace conveyor
