// The API client (admin_client.hpp), on cpp-httplib.
#include <conveyor/admin_client.hpp>
#include <conveyor/validation.hpp>

#include "proto_json.hpp"

#include <fmt/format.h>
#include <httplib.h>

#include <regex>

namespace conveyor {
namespace {

using nlohmann::json;

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

}  // namespace

struct AdminClient::Impl {
  explicit Impl(const std::string& url) : http(url) {
    http.set_connection_timeout(std::chrono::seconds(5));
    http.set_read_timeout(std::chrono::seconds(60));
    http.set_write_timeout(std::chrono::seconds(60));
  }
  httplib::Client http;
};

AdminClient::AdminClient(std::string url, std::string token)
    : url_(normalize_url(std::move(url))),
      token_(std::move(token)),
      impl_(std::make_unique<Impl>(url_)) {}

AdminClient::~AdminClient() = default;

json AdminClient::call(std::string_view method, const json& request) {
  httplib::Headers headers = {{"Connect-Protocol-Version", "1"}};
  if (!token_.empty()) headers.emplace("Authorization", "Bearer " + token_);
  const std::string path = "/" + std::string(method);
  auto res = impl_->http.Post(path, headers, api::to_text(request), "application/json");
  if (!res)
    throw ApiError(ApiCode::kUnavailable, fmt::format("cannot reach conveyor server at {}: {}",
                                                      url_, describe(res.error())));
  json body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (res->status == 200) {
    if (!body.is_object()) unexpected(url_, res->status, res->body);
    return body;
  }
  if (body.is_object() && body.contains("code") && body["code"].is_string()) {
    const auto code = parse_api_code(body["code"].get<std::string>());
    std::string message = body.contains("message") && body["message"].is_string()
                              ? body["message"].get<std::string>()
                              : std::string("(no message)");
    throw ApiError(code.value_or(ApiCode::kUnknown), message);
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

RateLimitOverride AdminClient::set_rate_limit(std::string_view queue, const RateLimit& limit) {
  json r = call(std::string(kAdmin) + "SetQueueRateLimit",
                json{{"queue", queue}, {"ratePerSec", limit.rate_per_sec}, {"burst", limit.burst}});
  return read_response(url_, [&] {
    api::MessageReader m(r, "");
    return api::parse_override(m.message_field("override", "override").value(), "override.");
  });
}

bool AdminClient::delete_rate_limit(std::string_view queue) {
  try {
    call(std::string(kAdmin) + "DeleteQueueRateLimit", json{{"queue", queue}});
    return true;
  } catch (const ApiError& e) {
    if (e.code() == ApiCode::kNotFound) return false;
    throw;
  }
}

api::RateLimitListing AdminClient::list_rate_limits() {
  json r = call(std::string(kAdmin) + "ListRateLimits", json::object());
  return read_response(url_, [&] { return api::parse_listing(r); });
}

std::vector<QueueReport> AdminClient::list_queues() {
  json r = call(std::string(kAdmin) + "ListQueues", json::object());
  return read_response(url_, [&] {
    std::vector<QueueReport> out;
    for (const auto& q : api::MessageReader(r, "").repeated_messages("queues", "queues"))
      out.push_back(api::parse_queue_info(q.value(), q.path()));
    return out;
  });
}

void AdminClient::set_queue_paused(std::string_view queue, bool paused) {
  call(std::string(kAdmin) + (paused ? "PauseQueue" : "ResumeQueue"), json{{"queue", queue}});
}

std::vector<int64_t> AdminClient::enqueue_batch(const std::vector<JobRequest>& jobs) {
  json list = json::array();
  for (const auto& j : jobs) list.push_back(api::new_job_json(j));
  json r = call(std::string(kTask) + "EnqueueBatch", json{{"jobs", std::move(list)}});
  auto ids = read_response(
      url_, [&] { return api::MessageReader(r, "").repeated_integers("ids", "ids"); });
  if (ids.size() != jobs.size())
    throw ApiError(ApiCode::kInternal, fmt::format("server {} returned {} ids for {} jobs", url_,
                                                   ids.size(), jobs.size()));
  return ids;
}

std::optional<Job> AdminClient::get_job(int64_t id) {
  try {
    json r = call(std::string(kTask) + "GetJob", json{{"id", std::to_string(id)}});
    return read_response(url_, [&] {
      api::MessageReader m(r, "");
      return api::parse_job(m.message_field("job", "job").value(), "job.");
    });
  } catch (const ApiError& e) {
    if (e.code() == ApiCode::kNotFound) return std::nullopt;
    throw;
  }
}

}  // namespace conveyor
