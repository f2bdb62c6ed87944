// AdminServer: the HTTP side of `conveyor serve` when [server] listen is set.
// One port serves:
//
//   POST /conveyor.v1.AdminService/<Method>   the admin API  } Connect protocol, unary,
//   POST /conveyor.v1.TaskService/<Method>    the task API   } JSON (proto/conveyor/v1/*.proto)
//   GET  /metrics                             Prometheus text format 0.0.4
//   GET  /healthz                             liveness: 200 "ok", calls nothing
//   GET  /readyz                              readiness: 200 "ready", or 503 "not ready: <why>"
//   GET  /  and any other GET path            the dashboard's static files (see below)
//
// Protocol (what a Connect client or curl sees):
// - Requests: Content-Type application/json (a charset=utf-8 parameter is
//   fine; anything else is HTTP 415 with Accept-Post: application/json).
//   An empty body is read as {}. Fields are accepted in lowerCamelCase and
//   in their .proto names; unknown fields are ignored (as connect-go does).
//   int64/uint64 are accepted as JSON numbers or strings.
// - Responses: lowerCamelCase; every field is emitted, defaults included,
//   except `optional` fields that are unset; int64/uint64 are JSON strings
//   (the proto3 JSON mapping); times are RFC 3339 in UTC.
// - Errors: {"code": "...", "message": "..."} with the Connect HTTP status:
//   invalid_argument 400, unauthenticated 401, permission_denied 403,
//   not_found 404, resource_exhausted 429 (body over max_body_bytes, as
//   connect-go answers), unimplemented 501 (unknown method: 404 with code
//   "unimplemented", as a Connect mux answers), unavailable 503, internal 500.
//   A GET on an API path is 405 (Allow: POST).
//
// Access:
// - With admin_token (or CONVEYOR_ADMIN_TOKEN) set, API calls and /metrics need
//   "Authorization: Bearer <token>" (compared in constant time); a wrong or
//   missing token is 401 unauthenticated. Prometheus sends it with
//   `authorization: {credentials: <token>}` in its scrape config.
// - allow_unauthenticated = true (without a token; a token that is set is
//   always required): calls without an Authorization header are accepted (a
//   token that is sent must still be right), and only when their Host header
//   is a loopback name, an IP address or the listen host (DNS rebinding).
//   "loopback": the same, and the server starts only on a loopback address.
// - Neither: the server starts only on a loopback address and answers every
//   API call and /metrics with 401 saying what to configure.
// - read_only = true: calls that change state (SetQueueRateLimit,
//   DeleteQueueRateLimit, PauseQueue, ResumeQueue, Enqueue, EnqueueBatch) are
//   403 permission_denied.
// - The dashboard's static files are public: they hold no data; the page calls
//   the API, which applies the rules above.
// - /healthz and /readyz (GET or HEAD; other methods 405) are public too, with
//   no Host check, so that orchestrators can probe them: they answer only
//   "ok", "ready" or a fixed reason (details go to the log), with
//   Cache-Control: no-store. /readyz is 503 while the engine is not running
//   (before start, from the start of a stop), once storage is declared
//   unusable, and when one cheap storage read (get_job(0)) fails now.
// - Every response carries X-Frame-Options: DENY and Content-Security-Policy:
//   frame-ancestors 'none': no other site may frame the dashboard.
//
// Connections (HTTP/1.1, Boost.Beast): one I/O thread reads every connection
// against deadlines, so idle and slow clients cost a socket, not a thread:
// - a request's header must arrive within 10 s (of the accept, or of its
//   first byte on a kept-alive connection), its body within 30 s of the
//   header; otherwise 408 and the connection is closed;
// - a kept-alive connection idle for 5 s is closed, and after 100 requests;
// - at most 1024 connections are open (fewer when the descriptor limit, whose
//   soft value the server raises toward the hard one, cannot hold them);
//   above that a new connection is answered 503 unavailable
//   (Retry-After: 1) and closed, while the open ones are served;
// - a header over 16 KiB is 431; a malformed request is 400, and so are two
//   Host headers, or an HTTP/1.1 request without one (RFC 9112 section 3.2).
//
// Threads: complete requests run on a small pool of HTTP threads that call
// the Engine's thread-safe methods (storage reads and writes of their own).
// The engine's dispatcher never waits on an HTTP thread.
#pragma once

#include <conveyor/config.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace conveyor {

class Engine;

// ---- The dashboard hook ------------------------------------------------------
//
// A static file served on GET. body must stay valid for the server's life
// (files embedded in the binary as static data are the intended use).
struct StaticFile {
  std::string content_type;  // e.g. "text/html; charset=utf-8"
  std::string_view body;
};

// Looks up a file by its path relative to the site root, without the leading
// slash: GET / asks for "index.html", GET /assets/app.js for "assets/app.js".
// Returns nullopt when there is no such file (the server answers 404).
// Called on HTTP threads, possibly at once: it must be thread-safe.
using StaticFileProvider = std::function<std::optional<StaticFile>(std::string_view path)>;

// The dashboard (web/) provides this function in a library target named
// `conveyor_dashboard` (files embedded by a generated C++ source). When that
// target exists, the `conveyor` binary links it and serves it; otherwise GET /
// answers a small page saying the dashboard is not built.
std::optional<StaticFile> dashboard_file(std::string_view path);

// ---- The server ----------------------------------------------------------------

// The server cannot listen (port in use, address not local, ...).
class ServerStartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws ConfigError when config would expose the API without a token on a
// non-loopback address (no admin_token and allow_unauthenticated = false).
// Loopback: 127.0.0.0/8, ::1, localhost. Checked before anything starts.
void check_server_security(const ServerConfig& config);

// Whether host (as in [server] listen, without brackets) is a loopback address.
bool is_loopback_host(std::string_view host);

class AdminServer {
 public:
  // Borrows engine, which must outlive the server. Throws ConfigError as
  // check_server_security does, ValidationError for a malformed listen.
  AdminServer(Engine& engine, ServerConfig config);
  ~AdminServer();  // stop()s
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Replaces the static file provider (before start()).
  void set_static_files(StaticFileProvider provider);

  // Binds the listen address and serves on background threads. Throws
  // ServerStartError naming the address and the reason.
  void start();
  // Stops accepting, finishes requests in flight, joins the threads. Idempotent.
  void stop();

  // The bound port (after start()).
  uint16_t port() const;

  // Replaces the worker tokens (worker_token and worker_tokens) with fresh's,
  // for the calls that start from now on (SIGHUP: a revoked token is refused
  // at once). The other settings of fresh are not applied. Thread-safe.
  void reload_worker_tokens(const ServerConfig& fresh);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace conveyor
