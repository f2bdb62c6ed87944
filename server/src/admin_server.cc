// The admin HTTP server: Connect unary JSON, /metrics, static files
// (admin_server.hpp). HTTP comes from http_transport (Boost.Beast): slow and
// idle clients hold a socket there, never one of the request threads.
#include <conveyor/admin_server.hpp>

#include "api_codec.hpp"
#include "api_request.hpp"
#include "api_service.hpp"
#include "auth.hpp"
#include "http_transport.hpp"
#include "prometheus.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/engine_internals.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace conveyor {
namespace {

// Few threads: the API is for operators and producers, not a hot path, and
// each request's storage work runs here, never on the dispatcher.
constexpr unsigned kHttpThreads = 4;
// Connections open at once; more are answered 503 and closed. Idle ones
// cost a descriptor and a few kB, no thread.
constexpr size_t kMaxConnections = 1024;
// Descriptors kept free of connections for storage, logs and the like.
constexpr rlim_t kReservedDescriptors = 128;
// /metrics reads queue counts from storage at most this often.
constexpr auto kStatsMaxAge = std::chrono::seconds(1);

constexpr std::string_view kApiPrefix = "/conveyor.v1.";
constexpr std::string_view kHealthPath = "/healthz";
constexpr std::string_view kReadyPath = "/readyz";

// On every response: no page may frame the dashboard (its kill switch and
// pause buttons must not be clickjacked). CSP for browsers that know
// frame-ancestors, X-Frame-Options for those that do not.
const std::vector<std::pair<std::string, std::string>> kSecurityHeaders = {
    {"X-Frame-Options", "DENY"},
    {"Content-Security-Policy", "frame-ancestors 'none'"},
};

http::Response plain(int status, std::string body) {
  // Probes must see the state now, never a cached answer.
  return http::Response{
      status, "text/plain; charset=utf-8", {{"Cache-Control", "no-store"}}, std::move(body)};
}

bool is_api_path(std::string_view path) { return path.rfind(kApiPrefix, 0) == 0; }

http::Response to_http(const ApiResponse& response) {
  return http::Response{response.status, response.content_type, response.headers, response.body};
}

http::Response error_response(const ApiError& e) { return to_http(api_error_response(e)); }

std::optional<StaticFile> builtin_page(std::string_view path) {
  static constexpr std::string_view kPage =
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Conveyor</title></head>\n"
      "<body><h1>Conveyor</h1>\n<p>The dashboard is not built into this binary. The admin API "
      "is served here (POST /conveyor.v1.AdminService/ListQueues, ...), and metrics at "
      "<a href=\"/metrics\">/metrics</a>.</p></body></html>\n";
  if (path == "index.html") return StaticFile{"text/html; charset=utf-8", kPage};
  return std::nullopt;
}

// The connection cap this process can keep: kMaxConnections, after raising
// the soft descriptor limit toward the hard one if it is lower than that
// needs (Debian's soft default is 1024).
size_t connection_cap() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return kMaxConnections;
  const rlim_t wanted = kMaxConnections + kReservedDescriptors;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= wanted) return kMaxConnections;
  const rlim_t usable = limit.rlim_cur > 2 * kReservedDescriptors
                            ? limit.rlim_cur - kReservedDescriptors
                            : limit.rlim_cur / 2;
  return static_cast<size_t>(usable);
}

// What the transport answers by itself, as Connect errors.
http::Response refusal(http::Refusal why, const std::string& message) {
  switch (why) {
    case http::Refusal::kTooManyConnections: {
      http::Response r = error_response(ApiError(ApiCode::kUnavailable, message));
      r.headers.emplace_back("Retry-After", "1");
      return r;
    }
    case http::Refusal::kBodyTooLarge:
      return error_response(ApiError(ApiCode::kResourceExhausted,
                                     "request body is larger than [server] max_body_bytes"));
    case http::Refusal::kHeaderTooLarge: {
      http::Response r = error_response(ApiError(ApiCode::kResourceExhausted, message));
      r.status = 431;
      return r;
    }
    case http::Refusal::kTimeout: {
      http::Response r = error_response(ApiError(ApiCode::kDeadlineExceeded, message));
      r.status = 408;
      return r;
    }
    case http::Refusal::kMalformed:
      break;
  }
  return error_response(ApiError(ApiCode::kInvalidArgument, message));
}

}  // namespace

struct AdminServer::Impl {
  Impl(Engine& e, ServerConfig c)
      : engine(e),
        config(std::move(c)),
        address(parse_listen_address(config.listen)),
        api(engine),
        live(std::make_shared<const ServerConfig>(config)),
        static_files(builtin_page) {
    check_server_security(config);
  }

  // The config calls are checked against: config with the worker tokens
  // of the last reload. A call keeps the snapshot it started with.
  std::shared_ptr<const ServerConfig> snapshot() const {
    std::lock_guard lock(live_mu);
    return live;
  }

  // Every complete request, on a transport worker thread.
  http::Response handle(const http::Request& req) {
    try {
      if (req.method == "POST") return rpc(req);
      if (req.method == "GET" || req.method == "HEAD") return get(req);
      return not_allowed(req);
    } catch (const std::exception& e) {
      spdlog::error("admin server: request failed: {}", e.what());
      return error_response(
          ApiError(ApiCode::kInternal, std::string("internal error: ") + e.what()));
    }
  }

  static http::Response not_allowed(const http::Request& req) {
    const bool api_path = is_api_path(req.path);
    http::Response res;
    res.status = 405;
    res.headers.emplace_back("Allow", api_path ? "POST" : "GET");
    res.content_type = "application/json";
    res.body = api::error_body(
        ApiError(ApiCode::kUnknown, fmt::format("{} is not allowed on {}: use {}", req.method,
                                                req.path, api_path ? "POST" : "GET")));
    return res;
  }

  // Every complete request: API calls through handle_api_request_async
  // (a long-poll answers later), the rest at once.
  void handle_async(const http::Request& req, const http::Reply& reply) {
    if (req.path == kHealthPath || req.path == kReadyPath) {
      reply.send(health(req));
      return;
    }
    if (req.method != "POST") {
      reply.send(handle(req));
      return;
    }
    const ApiRequest request = api_request(req);
    ApiService::Cancel cancel =
        handle_api_request_async(api, *snapshot(), request,
                                 [reply](ApiResponse response) { reply.send(to_http(response)); });
    if (cancel) reply.on_client_gone([cancel] { cancel(); });
  }

  static ApiRequest api_request(const http::Request& req) {
    ApiRequest request;
    request.path = req.path;
    request.authorization = req.header("Authorization");
    request.host = req.header("Host");
    request.content_type = req.header("Content-Type");
    request.connect_protocol_version = req.header("Connect-Protocol-Version");
    request.body = req.body;
    request.remote_addr = req.remote_addr;
    return request;
  }

  // The API call (api_request.hpp) over HTTP.
  http::Response rpc(const http::Request& req) {
    return to_http(handle_api_request(api, *snapshot(), api_request(req)));
  }

  http::Response get(const http::Request& req) {
    if (is_api_path(req.path)) {
      http::Response res = error_response(
          ApiError(ApiCode::kUnknown,
                   "API methods take POST (Connect unary, JSON or binary protobuf), not GET"));
      res.status = 405;
      res.headers.emplace_back("Allow", "POST");
      return res;
    }
    if (req.path == "/metrics") return metrics(req);
    std::string_view path = req.path;
    path.remove_prefix(1);  // the leading '/' (the transport guarantees one)
    if (path.empty()) path = "index.html";
    std::optional<StaticFile> file;
    if (path.find("..") == std::string_view::npos) file = static_files(path);
    if (!file) return http::Response{404, "text/plain; charset=utf-8", {}, "not found\n"};
    return http::Response{
        200, file->content_type, {{"Cache-Control", "no-cache"}}, std::string(file->body)};
  }

  // GET /healthz and GET /readyz: no token, no Host check (they hold no
  // data), never cached. /healthz answers as long as the process serves
  // HTTP and calls nothing; /readyz also needs the engine running and one
  // cheap storage read (a lookup of job id 0, which never exists) to work.
  http::Response health(const http::Request& req) {
    if (req.method != "GET" && req.method != "HEAD") {
      http::Response res = plain(
          405, fmt::format("{} is not allowed on {}: use GET or HEAD\n", req.method, req.path));
      res.headers.emplace_back("Allow", "GET, HEAD");
      return res;
    }
    if (req.path == kHealthPath) return plain(200, "ok\n");
    return readiness();
  }

  http::Response readiness() {
    std::string reason;  // empty: ready
    std::string detail;  // for the log only: it may name files or hosts
    if (stopping.load()) {
      reason = "the server is stopping";
    } else if (std::optional<std::string> broken = engine.storage_failure()) {
      reason = "storage cannot be used";
      detail = *broken;
    } else if (!engine.running()) {
      reason = "the engine is not running (not started yet, or stopping)";
    } else {
      try {
        (void)engine.get_job(0);
      } catch (const std::exception& e) {
        reason = "storage is not answering";
        detail = e.what();
      }
    }
    note_readiness(reason, detail);
    if (reason.empty()) return plain(200, "ready\n");
    return plain(503, "not ready: " + reason + "\n");
  }

  // Logs a change of readiness once, not at every probe.
  void note_readiness(const std::string& reason, const std::string& detail) {
    std::lock_guard lock(readiness_mu);
    if (reason == last_not_ready) return;
    if (reason.empty())
      spdlog::info("admin server: /readyz: ready again");
    else
      spdlog::warn("admin server: /readyz: not ready: {}{}{}", reason, detail.empty() ? "" : ": ",
                   detail);
    last_not_ready = reason;
  }

  http::Response metrics(const http::Request& req) {
    const Authenticator auth(*snapshot());
    if (auto error = auth.check_host(req.header("Host"))) return error_response(*error);
    if (auto error = auth.check(req.header("Authorization"))) return error_response(*error);
    return http::Response{200,
                          std::string(kPrometheusContentType),
                          {},
                          render_prometheus(collect_metrics_page(engine, queue_stats.get()))};
  }

  Engine& engine;
  ServerConfig config;
  ListenAddress address;
  ApiService api;
  mutable std::mutex live_mu;
  std::shared_ptr<const ServerConfig> live;  // live_mu
  StaticFileProvider static_files;

  std::mutex lifecycle_mu;
  bool started = false;
  bool stopped = false;
  size_t max_connections = 0;
  std::atomic<bool> stopping{false};  // /readyz says so from stop()'s start

  std::mutex readiness_mu;
  std::string last_not_ready;  // readiness_mu: the reason last logged, empty: ready

  QueueStatsCache queue_stats{[this] { return engine.queue_stats(); }, SystemClock::instance(),
                              kStatsMaxAge};

  // Last: its threads call the members above, and its destructor joins them.
  std::unique_ptr<http::Server> http;
};

AdminServer::AdminServer(Engine& engine, ServerConfig config)
    : impl_(std::make_unique<Impl>(engine, std::move(config))) {}

AdminServer::~AdminServer() { stop(); }

void AdminServer::set_static_files(StaticFileProvider provider) {
  impl_->static_files = provider ? std::move(provider) : StaticFileProvider(builtin_page);
}

void AdminServer::start() {
  std::lock_guard lock(impl_->lifecycle_mu);
  Impl& i = *impl_;
  if (i.started) return;
  http::Limits limits;
  limits.max_connections = i.max_connections = connection_cap();
  limits.max_body_bytes = i.config.max_body_bytes;
  limits.worker_threads = kHttpThreads;
  auto server = std::make_unique<http::Server>(
      limits, http::AsyncHandler([&i](const http::Request& req, const http::Reply& reply) {
        i.handle_async(req, reply);
      }),
      refusal);
  server->set_response_headers(kSecurityHeaders);
  try {
    server->bind(i.address.host, i.address.port);
  } catch (const std::exception& e) {
    throw ServerStartError(fmt::format("cannot listen on {}: {}", i.config.listen, e.what()));
  }
  server->start();
  i.http = std::move(server);
  i.started = true;
  spdlog::info(
      "admin server listening on http://{} (API, /metrics, /healthz, /readyz, dashboard){}{}; at "
      "most {} connections",
      i.config.listen, i.config.read_only ? ", read-only" : "",
      i.config.admin_token.empty()
          ? (i.config.allow_unauthenticated ? ", no token required"
                                            : ", no token set: API calls refused")
          : ", bearer token required",
      i.max_connections);
}

void AdminServer::stop() {
  std::lock_guard lock(impl_->lifecycle_mu);
  Impl& i = *impl_;
  if (!i.started || i.stopped) return;
  i.stopped = true;
  i.stopping = true;
  i.api.close_long_polls();  // waiting workers get their (empty) answer now
  i.http->stop();
  spdlog::info("admin server stopped");
}

uint16_t AdminServer::port() const { return impl_->http ? impl_->http->port() : 0; }

void AdminServer::reload_worker_tokens(const ServerConfig& fresh) {
  auto next = std::make_shared<ServerConfig>(*impl_->snapshot());
  next->worker_token = fresh.worker_token;
  next->worker_tokens = fresh.worker_tokens;
  std::lock_guard lock(impl_->live_mu);
  impl_->live = std::move(next);
}

}  // namespace conveyor
