// The API's request path without HTTP (api_request.hpp).
#include "api_request.hpp"

#include "api_codec.hpp"
#include "auth.hpp"

#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <variant>

namespace conveyor {
namespace {

// "ListQueues" of "/conveyor.v1.AdminService/ListQueues".
std::string_view method_name(std::string_view path) { return path.substr(path.rfind('/') + 1); }

// Changes to limits and queues are logged for the audit trail; enqueues
// (frequent, payloads may be private) only at debug level, without payloads.
void log_call(const ApiRequest& request, const google::protobuf::Message& message,
              const ApiService::Method& method) {
  const std::string_view name = method_name(request.path);
  if (!method.mutates || !method.audited || name == "Enqueue" || name == "EnqueueBatch") {
    spdlog::debug("admin API: {} from {}", name, request.remote_addr);
  } else {
    spdlog::info("admin API: {} {} from {}", name,
                 api::encode(api::Codec::kJson, message).substr(0, 300), request.remote_addr);
  }
}

// A request that passed every check, decoded, ready to call.
struct Prepared {
  const ApiService::Method* method = nullptr;
  api::Codec codec = api::Codec::kJson;
  std::unique_ptr<google::protobuf::Message> message;
  std::optional<WorkerScope> scope;  // a worker token's; nullopt: the admin's call
  const WorkerScope* caller() const { return scope ? &*scope : nullptr; }
};

ApiResponse encoded(api::Codec codec, const google::protobuf::Message& result) {
  ApiResponse response;
  response.content_type = api::content_type(codec);
  response.body = api::encode(codec, result);
  return response;
}

// The steps of handle_api_request up to the call: the answer when one of
// them already has it (404, 415), else the decoded request. Failures throw
// ApiError.
std::variant<ApiResponse, Prepared> prepare(const ApiService& api, const ServerConfig& config,
                                            const ApiRequest& request) {
  const Authenticator auth(config);
  Authenticator::Access access = auth.authorize(request.authorization, request.path);
  if (access.error) throw *access.error;
  if (auto error = auth.check_host(request.host)) throw *error;
  const ApiService::Method* method = api.find(request.path);
  if (!method) {
    // As a Connect mux does: HTTP 404, read by clients as unimplemented.
    ApiResponse response = api_error_response(
        ApiError(ApiCode::kUnimplemented, fmt::format("no API method at {} (methods: {})",
                                                      request.path, fmt::join(api.paths(), ", "))));
    response.status = 404;
    return response;
  }
  const std::string_view content_type = request.content_type.value_or("");
  const std::optional<api::Codec> codec = api::codec_for_content_type(content_type);
  if (!codec) {
    ApiResponse response = api_error_response(ApiError(
        ApiCode::kUnknown,
        "Content-Type must be application/json or application/proto (the Connect protocol's "
        "unary codecs), got " +
            quote_for_message(content_type)));
    response.status = 415;
    response.headers.emplace_back("Accept-Post", "application/json, application/proto");
    return response;
  }
  if (request.connect_protocol_version && *request.connect_protocol_version != "1")
    throw ApiError(ApiCode::kInvalidArgument, "Connect-Protocol-Version must be 1");
  if (method->mutates && config.read_only)
    throw ApiError(ApiCode::kPermissionDenied,
                   "this server is read-only ([server] read_only = true): " +
                       std::string(method_name(request.path)) + " changes state");
  if (request.body.size() > config.max_body_bytes)
    throw ApiError(ApiCode::kResourceExhausted,
                   "request body is larger than [server] max_body_bytes");
  Prepared prepared{method, *codec, method->new_request(), std::move(access.scope)};
  api::decode(*codec, request.body, *prepared.message);
  return prepared;
}

ApiResponse answer(const ApiService& api, const ServerConfig& config, const ApiRequest& request) {
  auto step = prepare(api, config, request);
  if (auto* response = std::get_if<ApiResponse>(&step)) return std::move(*response);
  Prepared& p = std::get<Prepared>(step);
  if (p.method->call_async)
    throw ApiError(ApiCode::kUnimplemented,
                   std::string(method_name(request.path)) + " is served by the admin server only");
  const std::unique_ptr<google::protobuf::Message> result =
      api.call(*p.method, *p.message, p.caller());
  log_call(request, *p.message, *p.method);
  return encoded(p.codec, *result);
}

// The answer for an exception caught on the way.
ApiResponse failure_response(std::exception_ptr error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const ApiError& e) {
    return api_error_response(e);
  } catch (const std::exception& e) {
    spdlog::error("admin server: request failed: {}", e.what());
    return api_error_response(
        ApiError(ApiCode::kInternal, std::string("internal error: ") + e.what()));
  } catch (...) {
    spdlog::error("admin server: request failed: unknown exception");
    return api_error_response(ApiError(ApiCode::kInternal, "internal error: unknown exception"));
  }
}

}  // namespace

ApiResponse api_error_response(const ApiError& e) {
  ApiResponse response;
  response.status = http_status(e.code());
  response.body = api::error_body(e);
  return response;
}

ApiResponse handle_api_request(const ApiService& api, const ServerConfig& config,
                               const ApiRequest& request) noexcept {
  try {
    return answer(api, config, request);
  } catch (...) {
    return failure_response(std::current_exception());
  }
}

ApiService::Cancel handle_api_request_async(const ApiService& api, const ServerConfig& config,
                                            const ApiRequest& request,
                                            std::function<void(ApiResponse)> reply) noexcept {
  try {
    auto step = prepare(api, config, request);
    if (auto* response = std::get_if<ApiResponse>(&step)) {
      reply(std::move(*response));
      return nullptr;
    }
    Prepared& p = std::get<Prepared>(step);
    if (!p.method->call_async) {
      const std::unique_ptr<google::protobuf::Message> result =
          api.call(*p.method, *p.message, p.caller());
      log_call(request, *p.message, *p.method);
      reply(encoded(p.codec, *result));
      return nullptr;
    }
    log_call(request, *p.message, *p.method);
    return api.start(
        *p.method, *p.message,
        [codec = p.codec, reply](std::unique_ptr<google::protobuf::Message> result) {
          ApiResponse response;
          try {
            response = encoded(codec, *result);
          } catch (...) {
            response = failure_response(std::current_exception());
          }
          reply(std::move(response));
        },
        p.caller());
  } catch (...) {
    reply(failure_response(std::current_exception()));
    return nullptr;
  }
}

}  // namespace conveyor
