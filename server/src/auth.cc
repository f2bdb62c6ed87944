// Bearer-token checks and the start-up security rule (auth.hpp, admin_server.hpp).
#include "auth.hpp"

#include <conveyor/admin_server.hpp>

#include <conveyor/validation.hpp>

#include <arpa/inet.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

namespace conveyor {

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  // Walk the longer length whatever the contents; a length difference also
  // counts as a difference. volatile keeps the compiler from ending early.
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

namespace {

// The token of an "Authorization: Bearer <token>" value (the scheme name in
// any case, RFC 9110; spaces around the token dropped); nullopt otherwise.
std::optional<std::string_view> bearer_token(std::optional<std::string_view> authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (!authorization) return std::nullopt;
  std::string_view value = *authorization;
  const bool bearer = value.size() > kScheme.size() &&
                      std::equal(kScheme.begin(), kScheme.end(), value.begin(), [](char a, char b) {
                        return a == std::tolower(static_cast<unsigned char>(b));
                      });
  if (!bearer) return std::nullopt;
  value.remove_prefix(kScheme.size());
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  return value;
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool is_ip_literal(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

// The host of a Host header value ("name", "name:port", "[v6]", "[v6]:port"),
// lower case and without brackets; nullopt when malformed.
std::optional<std::string> host_of(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  std::string_view host = value;
  if (!value.empty() && value.front() == '[') {
    const size_t close = value.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = value.substr(1, close - 1);
    const std::string_view rest = value.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return std::nullopt;
  } else if (const size_t colon = value.find(':'); colon != std::string_view::npos) {
    host = value.substr(0, colon);
  }
  // A fully qualified name may end with a dot ("localhost.").
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty()) return std::nullopt;
  return lower(host);
}

}  // namespace

Authenticator::Authenticator(const ServerConfig& config)
    : token_(config.admin_token),
      worker_token_(config.worker_token),
      allow_unauthenticated_(config.allow_unauthenticated) {
  try {
    listen_host_ = lower(parse_listen_address(config.listen).host);
  } catch (const ValidationError&) {
    // No usable listen (a test harness, the fuzzer): only loopback and IP Hosts pass.
  }
}

std::optional<ApiError> Authenticator::check_host(std::optional<std::string_view> host) const {
  // With a token, the token is what protects the API (a rebinding page has none).
  if (!token_.empty() || !host) return std::nullopt;
  const std::optional<std::string> name = host_of(*host);
  if (name && (is_loopback_host(*name) || is_ip_literal(*name) ||
               (!listen_host_.empty() && *name == listen_host_)))
    return std::nullopt;
  return ApiError(ApiCode::kPermissionDenied,
                  "Host " + quote_for_message(*host) +
                      " is not this server's address: without an admin token the API only "
                      "answers requests addressed to localhost, a loopback or other IP address, "
                      "or the [server] listen host" +
                      (listen_host_.empty() ? std::string() : " (" + listen_host_ + ")") +
                      " (this blocks DNS rebinding from web pages); use one of those, or set "
                      "[server] admin_token");
}

bool Authenticator::worker_may_call(std::string_view path) {
  return path.rfind("/conveyor.v1.WorkerService/", 0) == 0 ||
         path == "/conveyor.v1.TaskService/Enqueue" ||
         path == "/conveyor.v1.TaskService/EnqueueBatch" ||
         path == "/conveyor.v1.TaskService/GetJob";
}

std::optional<ApiError> Authenticator::check(std::optional<std::string_view> authorization,
                                             std::string_view path) const {
  if (auto token = bearer_token(authorization);
      token && !worker_token_.empty() && constant_time_equal(*token, worker_token_) &&
      !(token_.size() == worker_token_.size() && constant_time_equal(*token, token_))) {
    if (worker_may_call(path)) return std::nullopt;
    return ApiError(ApiCode::kPermissionDenied,
                    "the worker token may call only WorkerService and TaskService's Enqueue, "
                    "EnqueueBatch and GetJob, not " +
                        std::string(path.empty() ? "this" : path) + ": use the admin token");
  }
  if (token_.empty()) {
    if (allow_unauthenticated_) return std::nullopt;  // check_host still applies
    return ApiError(
        ApiCode::kUnauthenticated,
        "this server has no admin token and does not allow unauthenticated calls: "
        "set [server] admin_token (or CONVEYOR_ADMIN_TOKEN), or allow_unauthenticated = "
        "true");
  }
  // A token is set: it is required, whatever allow_unauthenticated says
  // (that setting only means something for a server without a token).
  if (!authorization)
    return ApiError(ApiCode::kUnauthenticated,
                    "missing Authorization header: send \"Authorization: Bearer <admin token>\"");
  const std::optional<std::string_view> value = bearer_token(authorization);
  if (!value)
    return ApiError(ApiCode::kUnauthenticated,
                    "Authorization header must be \"Bearer <admin token>\"");
  if (!constant_time_equal(*value, token_))
    return ApiError(ApiCode::kUnauthenticated, worker_token_.empty()
                                                   ? "wrong admin token"
                                                   : "wrong token (neither the admin token nor "
                                                     "the worker token)");
  return std::nullopt;
}

bool is_loopback_host(std::string_view host) {
  std::string h(host);
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

void check_server_security(const ServerConfig& config) {
  const ListenAddress address = parse_listen_address(config.listen);
  if (!config.admin_token.empty()) {
    if (config.allow_unauthenticated)
      spdlog::warn(
          "[server] admin_token (or CONVEYOR_ADMIN_TOKEN) is set, so every API call needs it: "
          "allow_unauthenticated is ignored");
    return;
  }
  if (is_loopback_host(address.host)) return;
  if (config.allow_unauthenticated && config.unauthenticated_loopback_only)
    throw ConfigError(
        "[server] allow_unauthenticated = \"loopback\" allows calls without a token "
        "only on a loopback address, but listen = " +
        config.listen + ": set admin_token (or CONVEYOR_ADMIN_TOKEN), or listen on 127.0.0.1");
  if (config.allow_unauthenticated) return;
  throw ConfigError("[server] listen = " + config.listen +
                    " is not a loopback address: set admin_token (or CONVEYOR_ADMIN_TOKEN), or "
                    "allow_unauthenticated = true to accept the risk");
}

}  // namespace conveyor
