// The admin HTTP server: Connect unary JSON, /metrics, static files
// (admin_server.hpp). HTTP comes from cpp-httplib.
#include <conveyor/admin_server.hpp>

#include "api_request.hpp"
#include "api_service.hpp"
#include "auth.hpp"
#include "prometheus.hpp"
#include "proto_json.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/engine_internals.hpp>

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

namespace conveyor {
namespace {

using nlohmann::json;

// Few threads: the API is for operators and producers, not a hot path, and
// each request's storage work runs here, never on the dispatcher.
constexpr size_t kHttpThreads = 8;
// An idle keep-alive connection holds a thread this long; it also bounds how
// long stop() waits for one.
constexpr time_t kKeepAliveSeconds = 2;
constexpr time_t kIoTimeoutSeconds = 10;
// /metrics reads queue counts from storage at most this often.
constexpr auto kStatsMaxAge = std::chrono::seconds(1);

constexpr std::string_view kApiPrefix = "/conveyor.v1.";

bool is_api_path(std::string_view path) { return path.rfind(kApiPrefix, 0) == 0; }

void write(httplib::Response& res, const ApiResponse& response) {
  res.status = response.status;
  for (const auto& [name, value] : response.headers) res.set_header(name.c_str(), value);
  res.set_content(response.body, response.content_type);
}

void write_error(httplib::Response& res, const ApiError& e) { write(res, api_error_response(e)); }

// A request header's value (the first when repeated, as httplib's
// get_header_value), nullopt when absent.
std::optional<std::string_view> header(const httplib::Request& req, const char* name) {
  const auto [first, last] = req.headers.equal_range(name);
  if (first == last) return std::nullopt;
  return first->second;
}

std::optional<StaticFile> builtin_page(std::string_view path) {
  static constexpr std::string_view kPage =
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Conveyor</title></head>\n"
      "<body><h1>Conveyor</h1>\n<p>The dashboard is not built into this binary. The admin API "
      "is served here (POST /conveyor.v1.AdminService/ListQueues, ...), and metrics at "
      "<a href=\"/metrics\">/metrics</a>.</p></body></html>\n";
  if (path == "index.html") return StaticFile{"text/html; charset=utf-8", kPage};
  return std::nullopt;
}

}  // namespace

struct AdminServer::Impl {
  Impl(Engine& e, ServerConfig c)
      : engine(e),
        config(std::move(c)),
        address(parse_listen_address(config.listen)),
        api(engine),
        auth(config),
        static_files(builtin_page) {
    check_server_security(config);
    routes();
  }

  void routes() {
    http.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
    http.set_payload_max_length(config.max_body_bytes);
    http.set_keep_alive_timeout(kKeepAliveSeconds);
    http.set_read_timeout(kIoTimeoutSeconds);
    http.set_write_timeout(kIoTimeoutSeconds);
    // SO_REUSEADDR only: a second server on a busy port must fail, not share it.
    http.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    http.Post(".*", [this](const httplib::Request& req, httplib::Response& res) { rpc(req, res); });
    http.Get(".*", [this](const httplib::Request& req, httplib::Response& res) { get(req, res); });
    const auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
      const bool api_path = is_api_path(req.path);
      res.set_header("Allow", api_path ? "POST" : "GET");
      res.status = 405;
      res.set_content(
          api::to_text(json{{"code", "unknown"},
                            {"message", fmt::format("{} is not allowed on {}: use {}", req.method,
                                                    req.path, api_path ? "POST" : "GET")}}),
          "application/json");
    };
    http.Put(".*", not_allowed);
    http.Delete(".*", not_allowed);
    http.Patch(".*", not_allowed);
    http.Options(".*", not_allowed);
    // Answers httplib gives by itself (body too large, malformed request,
    // no route) become Connect errors too; answers we wrote stay as they are.
    http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                   httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 413) {
        write_error(res, ApiError(ApiCode::kResourceExhausted,
                                  "request body is larger than [server] max_body_bytes"));
      } else if (res.status == 404) {
        write_error(res, ApiError(ApiCode::kNotFound, "no such path: " + req.path));
      } else if (res.status == 400) {
        write_error(res, ApiError(ApiCode::kInvalidArgument,
                                  "malformed HTTP request (a POST needs a body with Content-Length "
                                  "or chunked encoding; send {} for an empty message)"));
      } else {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown exception";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          spdlog::error("admin server: request failed: {}", what);
          write_error(res, ApiError(ApiCode::kInternal, "internal error: " + what));
        });
  }

  // Throws ApiError when the caller may not proceed.
  void authenticate(const httplib::Request& req) const {
    if (auto error = auth.check(header(req, "Authorization"))) throw *error;
  }

  // The API call (api_request.hpp) over HTTP.
  void rpc(const httplib::Request& req, httplib::Response& res) {
    ApiRequest request;
    request.path = req.path;
    request.authorization = header(req, "Authorization");
    request.content_type = header(req, "Content-Type");
    request.connect_protocol_version = header(req, "Connect-Protocol-Version");
    request.body = req.body;
    request.remote_addr = req.remote_addr;
    write(res, handle_api_request(api, config, request));
  }

  void get(const httplib::Request& req, httplib::Response& res) {
    if (is_api_path(req.path)) {
      res.set_header("Allow", "POST");
      write_error(res, ApiError(ApiCode::kUnknown,
                                "API methods take POST with a JSON body (Connect unary), not GET"));
      res.status = 405;
      return;
    }
    if (req.path == "/metrics") return metrics(req, res);
    std::string_view path = req.path;
    path.remove_prefix(1);  // the leading '/'
    if (path.empty()) path = "index.html";
    std::optional<StaticFile> file;
    if (path.find("..") == std::string_view::npos) file = static_files(path);
    if (!file) {
      res.status = 404;
      res.set_content("not found\n", "text/plain; charset=utf-8");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_content(file->body.data(), file->body.size(), file->content_type.c_str());
  }

  void metrics(const httplib::Request& req, httplib::Response& res) {
    try {
      authenticate(req);
    } catch (const ApiError& e) {
      write_error(res, e);
      return;
    }
    res.set_content(render_prometheus(EngineInternals::metrics(engine).snapshot(), queue_stats()),
                    kPrometheusContentType);
  }

  // Storage's queue counts, read at most once per kStatsMaxAge; on a storage
  // error the last counts are kept (the counters still render).
  std::vector<QueueStats> queue_stats() {
    std::lock_guard lock(stats_mu);
    const auto now = std::chrono::steady_clock::now();
    if (!stats_read || now - stats_at >= kStatsMaxAge) {
      try {
        stats = engine.queue_stats();
        stats_read = true;
        stats_at = now;
      } catch (const std::exception& e) {
        spdlog::warn("/metrics: reading queue counts failed: {}", e.what());
      }
    }
    return stats;
  }

  Engine& engine;
  ServerConfig config;
  ListenAddress address;
  ApiService api;
  Authenticator auth;
  StaticFileProvider static_files;
  httplib::Server http;
  std::thread thread;
  std::atomic<bool> listener_done{false};
  int port = 0;

  std::mutex lifecycle_mu;
  bool started = false;
  bool stopped = false;

  std::mutex stats_mu;
  bool stats_read = false;
  std::chrono::steady_clock::time_point stats_at;
  std::vector<QueueStats> stats;
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
  errno = 0;
  if (!i.http.bind_to_port(i.address.host, i.address.port)) {
    const int err = errno;
    throw ServerStartError(fmt::format(
        "cannot listen on {}: {}", i.config.listen,
        err != 0 ? std::strerror(err) : "the address is not local or the port is taken"));
  }
  i.port = i.address.port;
  i.started = true;
  i.thread = std::thread([&i] {
    i.http.listen_after_bind();
    i.listener_done = true;
  });
  // httplib's stop() only works once the listener runs: wait for that, so a
  // stop() right after start() cannot leave the thread blocked in accept().
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!i.http.is_running() && !i.listener_done && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  spdlog::info("admin server listening on http://{} (API, /metrics, dashboard){}{}",
               i.config.listen, i.config.read_only ? ", read-only" : "",
               i.config.admin_token.empty()
                   ? (i.config.allow_unauthenticated ? ", no token required"
                                                     : ", no token set: API calls refused")
                   : ", bearer token required");
}

void AdminServer::stop() {
  std::lock_guard lock(impl_->lifecycle_mu);
  Impl& i = *impl_;
  if (!i.started || i.stopped) return;
  i.stopped = true;
  i.http.stop();
  if (i.thread.joinable()) i.thread.join();
  spdlog::info("admin server stopped");
}

uint16_t AdminServer::port() const { return static_cast<uint16_t>(impl_->port); }

}  // namespace conveyor
