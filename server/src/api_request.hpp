// One admin/task API call as the admin server answers it, apart from HTTP:
// the parts of a POST the API reads in, the HTTP answer out. admin_server.cc
// adapts the HTTP transport to it and the API fuzzer (fuzz/api_fuzz.cc) calls it
// directly, so both run the same steps.
#pragma once

#include "api_service.hpp"

#include <conveyor/api_error.hpp>
#include <conveyor/config.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor {

// What the API reads of a POST. Views: what they see must outlive the call.
struct ApiRequest {
  std::string_view path;  // "/conveyor.v1.AdminService/ListQueues"
  // Header values; nullopt when the header is absent.
  std::optional<std::string_view> authorization;
  // The Host header; checked against the listen address when the server has
  // no token (Authenticator::check_host). A transport must fill it in.
  std::optional<std::string_view> host;
  std::optional<std::string_view> content_type;
  std::optional<std::string_view> connect_protocol_version;
  std::string_view body;
  std::string_view remote_addr;  // for the audit log only
};

// The HTTP answer.
struct ApiResponse {
  int status = 200;
  // The request's codec for a response message; application/json for errors.
  std::string content_type = "application/json";
  // The response message (binary or JSON), or a Connect error
  // {"code": ..., "message": ...} (always JSON, as the Connect protocol says).
  std::string body;
  // Headers to send besides Content-Type (Accept-Post with a 415).
  std::vector<std::pair<std::string, std::string>> headers;
};

// The Connect answer for e: http_status(e.code()) and {"code", "message"}.
ApiResponse api_error_response(const ApiError& e);

// Answers one call, in this order: the Authorization header against
// config's admin_token / allow_unauthenticated (401), without a token the
// Host header against loopback and the listen address (403), the method at path
// (404 "unimplemented"), Content-Type application/json or application/proto
// (415), Connect-Protocol-Version 1 when sent (400), config.read_only for
// methods that change state (403), config.max_body_bytes (429), the body as
// the method's request message in that codec (400), then ApiService::call
// (200 with the response message in the request's codec, or its ApiError's
// status). Mutating calls are logged for the audit trail.
//
// Never throws: an exception other than ApiError (a bug) is logged and
// answered 500 "internal". Only running out of memory while building that
// answer ends the process (noexcept).
ApiResponse handle_api_request(const ApiService& api, const ServerConfig& config,
                               const ApiRequest& request) noexcept;

// The same for every method, asynchronous ones (WorkerService.Claim's
// long-poll) too: reply runs once with the answer, on this thread or, for a
// call that waits, later on another. The views in request need to live only
// until this returns. Returns the way to give up a call still waiting (the
// client went away; reply then never runs), or null.
ApiService::Cancel handle_api_request_async(const ApiService& api, const ServerConfig& config,
                                            const ApiRequest& request,
                                            std::function<void(ApiResponse)> reply) noexcept;

}  // namespace conveyor
