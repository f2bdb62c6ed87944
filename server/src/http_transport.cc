// The admin server's HTTP transport (http_transport.hpp): Boost.Beast's
// HTTP/1.1 parser and serializer over Boost.Asio sockets, one I/O thread,
// handlers on an asio::thread_pool.
//
// Deadlines are a steady_timer per connection, not beast::tcp_stream's own:
// that one closes the socket when it fires, and a client whose header or
// body is late should still be told why (408) before the close.
#include "http_transport.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_set>

namespace conveyor::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// After the last answer on a connection: how long its unread input is
// drained (so the close is a FIN, not a reset that could destroy the answer
// before the client reads it), and at most how much of it.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr auto kStopLingerTime = std::chrono::milliseconds(300);
constexpr size_t kMaxLingerBytes = 1 << 20;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

std::string_view view(beast::string_view s) { return {s.data(), s.size()}; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The request target's path, percent-decoded, without query or fragment;
// nullopt when it is not a path (nor an absolute URL with one).
std::optional<std::string> target_path(std::string_view target) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.rfind(scheme, 0) == 0) {
      const size_t slash = target.find('/', scheme.size());
      target = slash == std::string_view::npos ? "/" : target.substr(slash);
    }
  }
  target = target.substr(0, target.find_first_of("?#"));
  if (target.empty() || target.front() != '/') return std::nullopt;
  std::string path;
  path.reserve(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' && i + 2 < target.size()) {
      const int hi = hex_value(target[i + 1]);
      const int lo = hex_value(target[i + 2]);
      if (hi >= 0 && lo >= 0) {
        path += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    path += target[i];
  }
  return path;
}

std::string seconds_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return fmt::format("{} s", d.count() / 1000);
  return fmt::format("{} ms", d.count());
}

}  // namespace

std::optional<std::string_view> Request::header(std::string_view name) const {
  const std::string key = lower(name);
  for (const auto& [n, v] : headers)
    if (n == key) return std::string_view(v);
  return std::nullopt;
}

struct Reply::State {
  std::mutex mu;
  std::shared_ptr<Connection> connection;  // mu: until the response is sent
  bool sent = false;                       // mu
  bool gone = false;                       // mu: the client closed first
  std::function<void()> on_gone;           // mu
};

struct Server::Impl {
  Impl(Limits l, AsyncHandler h, RefusalResponder r)
      : limits(l), handler(std::move(h)), refuse(std::move(r)) {}

  void accept();
  void begin_stop();
  void closed(Connection* c, bool refusing);

  const Limits limits;
  const AsyncHandler handler;
  const RefusalResponder refuse;
  // Set before start(); read-only afterwards.
  std::vector<std::pair<std::string, std::string>> response_headers;

  // Touched on the I/O thread only (and by destructors after it is joined).
  std::unordered_set<Connection*> live;
  size_t refusing = 0;
  bool stopping = false;
  Clock::time_point last_accept_warning{};
  std::atomic<size_t> open_count{0};
  uint16_t bound_port = 0;

  std::mutex drain_mu;
  std::condition_variable drain_cv;
  bool drained = false;

  std::mutex lifecycle_mu;
  bool started = false;
  bool stopped = false;

  // Declared after what connections touch in their destructors: the
  // io_context destroys handlers (and with them connections) first.
  asio::io_context ioc{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};
  std::optional<asio::thread_pool> workers;
  std::thread io_thread;
};

// One accepted socket; lives while an operation or a queued request holds it.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server::Impl& server, tcp::socket socket, bool refusing)
      : server_(server),
        limits_(server.limits),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        refusing_(refusing) {
    beast::error_code ec;
    // Answers go out in one write; without this a client's delayed ACK can
    // hold a keep-alive answer back by tens of milliseconds (Nagle).
    socket_.set_option(tcp::no_delay(true), ec);
    const auto remote = socket_.remote_endpoint(ec);
    if (!ec) remote_ = remote.address().to_string();
    if (refusing_) {
      ++server_.refusing;
    } else {
      server_.live.insert(this);
      server_.open_count = server_.live.size();
    }
  }

  ~Connection() { server_.closed(this, refusing_); }

  void start() {
    if (refusing_) {
      refuse(Refusal::kTooManyConnections,
             fmt::format("the admin server has {} connections open, its limit; retry later",
                         limits_.max_connections));
      return;
    }
    read_header(limits_.header_timeout);
  }

  // The response is ready (any thread posted it here).
  void answer(Response response) {
    if (watching_) {
      beast::error_code ignored;
      socket_.cancel(ignored);  // the watch read ends; its handler continues nothing
    }
    write(std::move(response));
  }

  tcp::socket& socket() { return socket_; }

  // The server stops: what waits for a request ends now; a request being
  // read, handled or answered finishes (stop_grace bounds it).
  void on_stop() {
    if (phase_ == Phase::kIdle || phase_ == Phase::kHeader || phase_ == Phase::kLinger) close();
  }

 private:
  enum class Phase { kIdle, kHeader, kBody, kWorking, kWriting, kLinger, kClosed };

  // Arms the deadline of the current phase; on expiry the pending read or
  // write is cancelled (reads then see timed_out_) or, for writes and the
  // linger, the socket is closed.
  void arm(std::chrono::milliseconds timeout) {
    timed_out_ = false;
    const unsigned generation = ++timer_generation_;
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
      if (ec || generation != self->timer_generation_ || self->phase_ == Phase::kClosed) return;
      self->timed_out_ = true;
      if (self->phase_ == Phase::kWriting || self->phase_ == Phase::kLinger) {
        self->close();
      } else {
        beast::error_code ignored;
        self->socket_.cancel(ignored);
      }
    });
  }

  void read_header(std::chrono::milliseconds timeout) {
    if (server_.stopping) return close();
    parser_.emplace();
    parser_->header_limit(limits_.max_header_bytes);
    parser_->body_limit(limits_.max_body_bytes);
    phase_ = Phase::kHeader;
    arm(timeout);
    bhttp::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  // A keep-alive connection between requests: closed quietly after
  // idle_timeout without a byte; the next header has header_timeout from
  // its first byte.
  void wait_idle() {
    if (server_.stopping) return close();
    if (buffer_.size() > 0) return read_header(limits_.header_timeout);  // pipelined
    phase_ = Phase::kIdle;
    arm(limits_.idle_timeout);
    socket_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->buffer_.commit(n);
                              if (ec) return self->close();
                              self->read_header(self->limits_.header_timeout);
                            });
  }

  // A read failed: say why when there is someone to tell, else close.
  void on_read_error(beast::error_code ec, bool header) {
    if (phase_ == Phase::kClosed) return;
    if (timed_out_) {
      if (header && !parser_->got_some() && buffer_.size() == 0) return close();
      return refuse(Refusal::kTimeout,
                    header ? fmt::format("the request's header did not arrive within {}",
                                         seconds_text(limits_.header_timeout))
                           : fmt::format("the request's body did not arrive within {}",
                                         seconds_text(limits_.body_timeout)));
    }
    if (ec == bhttp::error::body_limit)
      return refuse(Refusal::kBodyTooLarge,
                    fmt::format("request body is larger than {} bytes", limits_.max_body_bytes));
    if (ec == bhttp::error::header_limit)
      return refuse(Refusal::kHeaderTooLarge, fmt::format("request header is larger than {} bytes",
                                                          limits_.max_header_bytes));
    // The client went away (or the server closed the socket).
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
        ec == asio::error::operation_aborted || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::bad_descriptor)
      return close();
    refuse(Refusal::kMalformed, "malformed HTTP request: " + ec.message());
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec, true);
    phase_ = Phase::kBody;
    arm(limits_.body_timeout);
    const auto& header = parser_->get();
    const auto expect = header[bhttp::field::expect];
    if (!parser_->is_done() && beast::iequals(expect, "100-continue")) {
      // curl waits for this (or a second) before it sends a larger body.
      asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = shared_from_this()](beast::error_code wec, size_t) {
                          if (wec) return self->close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    bhttp::async_read(socket_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return self->on_read_error(ec, false);
                        self->dispatch();
                      });
  }

  // A complete request: to a worker, and its answer back to this thread.
  void dispatch() {
    ++timer_generation_;  // no deadline while the handler runs
    timer_.cancel();
    phase_ = Phase::kWorking;
    auto message = parser_->release();
    parser_.reset();
    version_ = message.version();
    head_ = message.method() == bhttp::verb::head;
    keep_alive_ = message.keep_alive() && ++served_ < limits_.max_requests_per_connection;
    // RFC 9112 section 3.2: a request with more than one Host field, or an
    // HTTP/1.1 request without one, must be answered 400.
    const auto hosts = message.count(bhttp::field::host);
    if (hosts > 1 || (hosts == 0 && version_ >= 11)) {
      keep_alive_ = false;
      return refuse(Refusal::kMalformed,
                    hosts > 1 ? "malformed HTTP request: more than one Host header"
                              : "malformed HTTP request: an HTTP/1.1 request needs a Host header");
    }
    auto path = target_path(view(message.target()));
    if (!path) {
      keep_alive_ = false;
      return refuse(Refusal::kMalformed, "malformed HTTP request: the target " +
                                             std::string(view(message.target())) +
                                             " is not a path");
    }
    Request request;
    request.method = std::string(view(message.method_string()));
    request.path = std::move(*path);
    for (const auto& field : message)
      request.headers.emplace_back(lower(view(field.name_string())),
                                   std::string(view(field.value())));
    request.body = std::move(message.body());
    request.remote_addr = remote_;
    auto state = std::make_shared<Reply::State>();
    state->connection = shared_from_this();
    asio::post(*server_.workers,
               [self = shared_from_this(), state, request = std::move(request)]() mutable {
                 const Reply reply(state);
                 try {
                   self->server_.handler(request, reply);
                 } catch (const std::exception& e) {
                   spdlog::error("admin server: request failed: {}", e.what());
                   reply.send(Response{500, "text/plain; charset=utf-8", {}, "internal error\n"});
                 }
                 // Not answered yet (a long-poll): watch for the client closing.
                 // self moves to the I/O thread: a connection is destroyed there only
                 // (its destructor touches the server's I/O-thread state).
                 auto io = self->socket_.get_executor();
                 asio::post(io, [self = std::move(self), state] { self->watch_for_close(state); });
               });
  }

  // While a handler holds the request unanswered, a read notices the client
  // going away (EOF, reset), so a long-poll can give back what it holds.
  void watch_for_close(const std::shared_ptr<Reply::State>& state) {
    {
      std::lock_guard lock(state->mu);
      if (state->sent) return;
    }
    if (phase_ != Phase::kWorking || watching_) return;
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this(), state](beast::error_code ec, size_t n) {
                              self->watch_ended(ec, n, state);
                            });
  }

  void watch_ended(beast::error_code ec, size_t n, const std::shared_ptr<Reply::State>& state) {
    buffer_.commit(n);  // a pipelined request's bytes, if any: read after the answer
    watching_ = false;
    if (ec && ec != asio::error::operation_aborted) {
      // The client went away: nobody reads an answer, so none is written
      // (send() says so) and the connection closes now, not when its
      // handler gives up.
      std::function<void()> gone;
      std::shared_ptr<Connection> held;
      {
        std::lock_guard lock(state->mu);
        if (!state->sent) {
          state->gone = true;
          state->sent = true;
          gone = std::move(state->on_gone);
          held = std::move(state->connection);
        }
      }
      if (gone) gone();
      if (held) return close();
    }
    if (after_watch_) std::exchange(after_watch_, nullptr)();
  }

  // Runs next once no watch read is pending (one read at a time).
  void after_watch(std::function<void()> next) {
    if (watching_)
      after_watch_ = std::move(next);
    else
      next();
  }

 public:
  void refuse(Refusal why, const std::string& message) {
    keep_alive_ = false;
    write(server_.refuse(why, message));
  }

  void write(Response r) {
    if (phase_ == Phase::kClosed) return;
    if (server_.stopping) keep_alive_ = false;
    phase_ = Phase::kWriting;
    response_.emplace();
    response_->version(version_);
    response_->result(static_cast<unsigned>(r.status));
    if (!r.content_type.empty()) response_->set(bhttp::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) response_->insert(name, value);
    for (const auto& [name, value] : server_.response_headers)
      if (response_->find(name) == response_->end()) response_->insert(name, value);
    response_->keep_alive(keep_alive_);
    if (keep_alive_) {
      response_->set(bhttp::field::keep_alive,
                     fmt::format("timeout={}, max={}", limits_.idle_timeout.count() / 1000,
                                 limits_.max_requests_per_connection - served_));
    }
    response_->body() = std::move(r.body);
    response_->prepare_payload();
    if (head_) response_->body().clear();  // Content-Length stays the GET's
    arm(refusing_ ? std::chrono::milliseconds(1000) : limits_.write_timeout);
    bhttp::async_write(socket_, *response_,
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         if (ec || self->phase_ == Phase::kClosed) return self->close();
                         self->response_.reset();
                         self->after_watch([self] {
                           if (self->phase_ == Phase::kClosed) return;
                           if (self->keep_alive_ && !self->server_.stopping)
                             return self->wait_idle();
                           self->linger();
                         });
                       });
  }

  // The last answer is out: send FIN, read and drop what the client still
  // sends until it closes (bounded in time and bytes), then close.
  void linger() {
    phase_ = Phase::kLinger;
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    arm(server_.stopping ? std::chrono::duration_cast<std::chrono::milliseconds>(kStopLingerTime)
                         : std::chrono::duration_cast<std::chrono::milliseconds>(kLingerTime));
    drain();
  }

  void drain() {
    socket_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->lingered_ += n;
                              if (ec || self->lingered_ > kMaxLingerBytes) return self->close();
                              self->drain();
                            });
  }

  void close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    ++timer_generation_;
    timer_.cancel();
    beast::error_code ignored;
    socket_.close(ignored);
  }

  Server::Impl& server_;
  const Limits& limits_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  const bool refusing_;
  std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::optional<bhttp::response<bhttp::string_body>> response_;
  std::array<char, 4096> scratch_{};
  Phase phase_ = Phase::kHeader;
  unsigned timer_generation_ = 0;
  bool timed_out_ = false;
  unsigned version_ = 11;
  bool head_ = false;
  bool keep_alive_ = false;
  unsigned served_ = 0;
  size_t lingered_ = 0;
  bool watching_ = false;              // a watch_for_close read is pending
  std::function<void()> after_watch_;  // what runs when it ends
};

bool Reply::send(Response response) const {
  std::shared_ptr<Connection> connection;
  bool gone = false;
  {
    std::lock_guard lock(state_->mu);
    if (state_->sent) return !state_->gone;
    state_->sent = true;
    gone = state_->gone;
    connection = std::move(state_->connection);
    state_->on_gone = nullptr;
  }
  // The last reference goes with the handler to the I/O thread (see dispatch).
  auto io = connection->socket().get_executor();
  asio::post(io, [connection = std::move(connection), response = std::move(response)]() mutable {
    connection->answer(std::move(response));
  });
  return !gone;
}

void Reply::on_client_gone(std::function<void()> f) const {
  std::lock_guard lock(state_->mu);
  if (!state_->sent) state_->on_gone = std::move(f);
}

void Server::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (stopping || !acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE) and the like: wait a little rather than
      // spin; the connections open are still served.
      const auto now = Clock::now();
      if (now - last_accept_warning > std::chrono::seconds(10)) {
        spdlog::warn("admin server: accepting a connection failed: {} ({} open)", ec.message(),
                     live.size());
        last_accept_warning = now;
      }
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](beast::error_code wec) {
        if (!wec) accept();
      });
      return;
    }
    // Over the cap every connection is still accepted and answered (a short
    // 503 with Retry-After and Connection: close, then closed after its
    // input drains): a client never gets a bare reset. Those answers are
    // quick (1 s to write, then the linger), so they are bounded by the
    // descriptor limit only; accept errors (EMFILE) back off above.
    std::make_shared<Connection>(*this, std::move(socket), live.size() >= limits.max_connections)
        ->start();
    accept();
  });
}

void Server::Impl::begin_stop() {
  stopping = true;
  beast::error_code ignored;
  acceptor.close(ignored);
  accept_retry.cancel();
  // close() only cancels: the handlers hold the connections, so none is
  // destroyed (and erased from live) during this loop.
  for (Connection* c : live) c->on_stop();
  if (live.empty()) {
    std::lock_guard lock(drain_mu);
    drained = true;
    drain_cv.notify_all();
  }
}

void Server::Impl::closed(Connection* c, bool was_refusing) {
  if (was_refusing) {
    --refusing;
    return;
  }
  live.erase(c);
  open_count = live.size();
  if (stopping && live.empty()) {
    std::lock_guard lock(drain_mu);
    drained = true;
    drain_cv.notify_all();
  }
}

Server::Server(Limits limits, AsyncHandler handler, RefusalResponder refuse)
    : impl_(std::make_unique<Impl>(limits, std::move(handler), std::move(refuse))) {}

Server::Server(Limits limits, Handler handler, RefusalResponder refuse)
    : Server(
          limits,
          AsyncHandler([handler = std::move(handler)](const Request& request, const Reply& reply) {
            reply.send(handler(request));
          }),
          std::move(refuse)) {}

Server::~Server() { stop(); }

void Server::bind(const std::string& host, uint16_t port) {
  Impl& i = *impl_;
  beast::error_code ec;
  tcp::resolver resolver(i.ioc);
  const auto endpoints = resolver.resolve(
      host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) throw std::runtime_error(ec.message());
  beast::error_code last = asio::error::host_not_found;
  for (const auto& entry : endpoints) {
    const tcp::endpoint endpoint = entry.endpoint();
    i.acceptor.open(endpoint.protocol(), ec);
    if (ec) {
      last = ec;
      continue;
    }
    i.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) i.acceptor.bind(endpoint, ec);
    if (!ec) i.acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) {
      i.bound_port = i.acceptor.local_endpoint(ec).port();
      return;
    }
    last = ec;
    beast::error_code ignored;
    i.acceptor.close(ignored);
  }
  throw std::runtime_error(last.message());
}

uint16_t Server::port() const { return impl_->bound_port; }

void Server::set_response_headers(std::vector<std::pair<std::string, std::string>> headers) {
  std::lock_guard lock(impl_->lifecycle_mu);
  if (!impl_->started) impl_->response_headers = std::move(headers);
}

size_t Server::connections() const { return impl_->open_count; }

void Server::start() {
  Impl& i = *impl_;
  std::lock_guard lock(i.lifecycle_mu);
  if (i.started) return;
  i.started = true;
  i.workers.emplace(std::max(1u, i.limits.worker_threads));
  asio::post(i.ioc, [&i] { i.accept(); });
  i.io_thread = std::thread([&i] { i.ioc.run(); });
}

void Server::stop() {
  Impl& i = *impl_;
  std::lock_guard lock(i.lifecycle_mu);
  if (!i.started || i.stopped) return;
  i.stopped = true;
  asio::post(i.ioc, [&i] { i.begin_stop(); });
  {
    std::unique_lock drain_lock(i.drain_mu);
    i.drain_cv.wait_for(drain_lock, i.limits.stop_grace, [&i] { return i.drained; });
  }
  i.work.reset();
  i.ioc.stop();
  if (i.io_thread.joinable()) i.io_thread.join();
  // Handlers still running finish; their answers go nowhere.
  i.workers->join();
}

}  // namespace conveyor::http
