// The admin server's HTTP/1.1 transport (Boost.Beast on Boost.Asio).
//
// One I/O thread accepts and reads every connection without blocking, each
// against deadlines: the first request's header within header_timeout of the
// accept, an idle keep-alive connection closed after idle_timeout, a later
// request's header within header_timeout of its first byte, a body within
// body_timeout of its header, a response written within write_timeout. Only
// a complete request reaches the handler, on a small worker pool, so slow or
// idle clients hold a socket and some memory, never a thread. Above
// max_connections a new connection is answered by the refusal responder
// (503) and closed; the ones open are served as before.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor::http {

struct Limits {
  size_t max_connections = 1024;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};
  std::chrono::milliseconds idle_timeout{5'000};
  std::chrono::milliseconds write_timeout{10'000};
  // After this many requests a keep-alive connection is closed (with
  // "Connection: close" on the last answer).
  unsigned max_requests_per_connection = 100;
  uint64_t max_body_bytes = 1 << 20;
  uint32_t max_header_bytes = 16 * 1024;
  unsigned worker_threads = 4;
  // How long stop() waits for requests in flight before it closes them.
  std::chrono::milliseconds stop_grace{5'000};
};

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // percent-decoded, without the query; starts with '/'
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;                                          // de-chunked
  std::string remote_addr;
  // The first value of a header (name in any case), nullopt when absent.
  std::optional<std::string_view> header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type;  // none sent when empty
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// Why the transport answers by itself; the request never reached the handler.
enum class Refusal {
  kTooManyConnections,  // max_connections open
  kBodyTooLarge,        // over max_body_bytes (Content-Length or chunked)
  kHeaderTooLarge,      // over max_header_bytes
  kMalformed,           // not HTTP/1.x as it must be (also: two Host headers, or an
                        // HTTP/1.1 request without one, RFC 9112 section 3.2)
  kTimeout,             // header or body did not arrive by its deadline
};

// Called on a worker thread for every complete request; must be thread-safe.
// An exception is answered 500 by the responder below (Refusal is not used).
using Handler = std::function<Response(const Request&)>;

// The answer to a request, sent whenever it is ready: a long-poll returns
// from its handler at once and answers later, from any thread, holding no
// thread while it waits.
class Reply {
 public:
  struct State;
  explicit Reply(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // Sends the response; only the first call counts. Returns false when the
  // client is known to have closed the connection (nobody will read it).
  // Thread-safe.
  bool send(Response response) const;
  // f runs once (on the transport's I/O thread) if the client closes the
  // connection while no response was sent. Set it before the handler returns.
  void on_client_gone(std::function<void()> f) const;

 private:
  std::shared_ptr<State> state_;
};
// A handler that answers through reply (at once or later); it must send
// exactly one response (an exception before it did is answered 500).
using AsyncHandler = std::function<void(const Request&, const Reply&)>;
// Builds the answer to a refusal; message says what happened. Called on the
// I/O thread: it must be quick and must not throw.
using RefusalResponder = std::function<Response(Refusal, const std::string& message)>;

class Connection;

class Server {
 public:
  Server(Limits limits, Handler handler, RefusalResponder refuse);
  Server(Limits limits, AsyncHandler handler, RefusalResponder refuse);
  ~Server();  // stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (a name, IPv4 or IPv6 address; port 0 picks one), with
  // SO_REUSEADDR only: a second server on a busy port fails. Throws
  // std::runtime_error saying why.
  void bind(const std::string& host, uint16_t port);
  uint16_t port() const;  // the bound port (0 before bind()), also after stop()
  // Headers added to every response, refusals included, unless the response
  // already has a header of that name (before start()).
  void set_response_headers(std::vector<std::pair<std::string, std::string>> headers);
  // Starts the I/O thread and the workers (after bind()).
  void start();
  // Stops accepting, closes idle connections, lets requests in flight finish
  // (up to stop_grace), joins the threads. Idempotent.
  void stop();

  // Connections open now (not counting ones being refused).
  size_t connections() const;

 private:
  friend class Connection;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace conveyor::http
