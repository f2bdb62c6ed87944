// Bearer-token checks and the start-up security rule (auth.hpp, admin_server.hpp).
#include "auth.hpp"

#include <conveyor/admin_server.hpp>

#include <conveyor/validation.hpp>

#include <arpa/inet.h>
#include <spdlog/spdlog.h>

#include <fmt/format.h>

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

std::optional<WorkerMethod> worker_method_of(std::string_view path) {
  static constexpr std::pair<std::string_view, WorkerMethod> kPaths[] = {
      {"/conveyor.v1.WorkerService/Claim", WorkerMethod::kClaim},
      {"/conveyor.v1.WorkerService/Complete", WorkerMethod::kComplete},
      {"/conveyor.v1.WorkerService/Fail", WorkerMethod::kFail},
      {"/conveyor.v1.WorkerService/Heartbeat", WorkerMethod::kHeartbeat},
      {"/conveyor.v1.WorkerService/Release", WorkerMethod::kRelease},
      {"/conveyor.v1.TaskService/Enqueue", WorkerMethod::kEnqueue},
      {"/conveyor.v1.TaskService/EnqueueBatch", WorkerMethod::kEnqueue},
      {"/conveyor.v1.TaskService/GetJob", WorkerMethod::kGetJob}};
  for (const auto& [p, method] : kPaths)
    if (p == path) return method;
  return std::nullopt;
}

WorkerScope WorkerScope::of(const WorkerTokenConfig& token) {
  WorkerScope scope;
  scope.name = token.name;
  scope.every_queue = token.every_queue;
  scope.queues = token.queues;
  scope.methods = token.methods;
  if (token.max_backpressure_s)
    scope.max_backpressure = std::chrono::seconds(*token.max_backpressure_s);
  return scope;
}

std::string WorkerScope::who() const {
  return name.empty() ? "the worker token ([server] worker_token)"
                      : "worker token " + quote_for_message(name);
}

bool WorkerScope::covers(std::string_view queue) const {
  return every_queue || std::binary_search(queues.begin(), queues.end(), queue);
}

void WorkerScope::require(WorkerMethod method) const {
  if (methods & method_bit(method)) return;
  std::vector<const char*> granted;
  for (WorkerMethod m : kWorkerMethods)
    if (methods & method_bit(m)) granted.push_back(to_string(m));
  throw ApiError(
      ApiCode::kPermissionDenied,
      fmt::format("{} lacks the method {} (its methods: {}): add \"{}\" to methods "
                  "in [server.worker_tokens.{}], or use another token",
                  who(), to_string(method), fmt::join(granted, ", "), to_string(method), name));
}

void WorkerScope::require_queue(std::string_view queue, std::string_view what) const {
  if (covers(queue)) return;
  throw ApiError(ApiCode::kPermissionDenied,
                 fmt::format("{} may not {} queue {} (its queues: {}): add the queue to queues in "
                             "[server.worker_tokens.{}], or use another token",
                             who(), what, quote_for_message(queue), fmt::join(queues, ", "), name));
}

Authenticator::Authenticator(const ServerConfig& config)
    : token_(config.admin_token),
      worker_token_(config.worker_token),
      worker_tokens_(config.worker_tokens),
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
  return authorize(authorization, path).error;
}

Authenticator::Access Authenticator::authorize(std::optional<std::string_view> authorization,
                                               std::string_view path) const {
  const std::optional<std::string_view> presented = bearer_token(authorization);
  if (presented && !worker_token_.empty() && constant_time_equal(*presented, worker_token_) &&
      !(token_.size() == worker_token_.size() && constant_time_equal(*presented, token_))) {
    if (worker_may_call(path)) return {std::nullopt, WorkerScope{}};
    return {ApiError(ApiCode::kPermissionDenied,
                     "the worker token may call only WorkerService and TaskService's Enqueue, "
                     "EnqueueBatch and GetJob, not " +
                         std::string(path.empty() ? "this" : path) + ": use the admin token"),
            std::nullopt};
  }
  if (presented && !worker_tokens_.empty()) {
    // Only hashes are kept: compare the presented token's, in constant
    // time, with every named token's (no early exit).
    const std::string hash = sha256_hex(*presented);
    const WorkerTokenConfig* match = nullptr;
    for (const WorkerTokenConfig& t : worker_tokens_)
      if (constant_time_equal(hash, t.sha256) && match == nullptr) match = &t;
    if (match != nullptr) {
      WorkerScope scope = WorkerScope::of(*match);
      const std::optional<WorkerMethod> method = worker_method_of(path);
      if (!method)
        return {ApiError(ApiCode::kPermissionDenied,
                         scope.who() +
                             " may call only the worker methods (WorkerService, and TaskService's "
                             "Enqueue, EnqueueBatch and GetJob when granted), not " +
                             std::string(path.empty() ? "this" : path) + ": use the admin token"),
                std::nullopt};
      try {
        scope.require(*method);
      } catch (const ApiError& e) {
        return {e, std::nullopt};
      }
      return {std::nullopt, std::move(scope)};
    }
  }
  return {check_admin(authorization, presented), std::nullopt};
}

std::optional<ApiError> Authenticator::check_admin(
    std::optional<std::string_view> authorization,
    std::optional<std::string_view> presented) const {
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
  const std::optional<std::string_view> value = presented;
  if (!value)
    return ApiError(ApiCode::kUnauthenticated,
                    "Authorization header must be \"Bearer <admin token>\"");
  if (!constant_time_equal(*value, token_))
    return ApiError(ApiCode::kUnauthenticated,
                    worker_token_.empty() && worker_tokens_.empty() ? "wrong admin token"
                    : worker_tokens_.empty()
                        ? "wrong token (neither the admin token nor the worker token)"
                        : "wrong token (neither the admin token nor a worker token)");
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
