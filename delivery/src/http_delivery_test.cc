// Delivery against real HTTP servers on 127.0.0.1: cpp-httplib for ordinary
// responses, RawHttpServer for the odd ones.
#include "conveyor/http_delivery.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <ctime>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "testing/delivery_helpers.hpp"
#include "testing/hmac_hex.hpp"
#include "testing/raw_http_server.hpp"

namespace conveyor::http_delivery {
namespace {

using namespace std::chrono_literals;
using testing::deliver;
using testing::encoded;
using testing::eventually;
using testing::hmac_hex;
using testing::kBound;
using testing::private_allowed;
using testing::RawHttpServer;

// A cpp-httplib server: /status/<code> answers that status with body
// "body <code>" and the Retry-After given as ?retry_after=; /redirect
// answers 301 to the URL in ?to=; /signed checks the signature.
class TestServer {
 public:
  TestServer() {
    server_.Post(R"(/status/(\d+))", [](const httplib::Request& req, httplib::Response& res) {
      int code = std::stoi(req.matches[1]);
      res.status = code;
      if (req.has_param("retry_after"))
        res.set_header("Retry-After", req.get_param_value("retry_after"));
      if (req.has_param("body")) {
        res.set_content(req.get_param_value("body"), "text/plain");
      } else if (code != 204) {
        res.set_content(fmt::format("body {}", code), "text/plain");
      }
    });
    auto redirect = [this](const httplib::Request& req, httplib::Response& res) {
      redirects_.fetch_add(1);
      res.status = 301;
      res.set_header("Location", req.get_param_value("to"));
      res.set_content("moved", "text/plain");
    };
    server_.Post("/redirect", redirect);
    server_.Get("/redirect", redirect);
    server_.Get(R"(/status/(\d+))", [](const httplib::Request& req, httplib::Response& res) {
      res.status = std::stoi(req.matches[1]);
      res.set_content("got", "text/plain");
    });
    auto loop = [this](const httplib::Request&, httplib::Response& res) {
      loops_.fetch_add(1);
      res.status = 301;
      res.set_header("Location", "/loop");
    };
    server_.Post("/loop", loop);
    server_.Get("/loop", loop);  // curl follows a POST's 301 with a GET
    server_.Post("/signed", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      timestamp_ = req.get_header_value("Conveyor-Timestamp");
      signature_ = req.get_header_value("Conveyor-Signature");
      body_ = req.body;
      res.status = 200;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // A stop() before the loop runs would be lost and join() would hang.
    EXPECT_TRUE(eventually([&] { return server_.is_running(); }));
  }
  ~TestServer() {
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return fmt::format("http://127.0.0.1:{}{}", port_, path);
  }
  int port() const { return port_; }
  int loops() const { return loops_.load(); }
  int redirects() const { return redirects_.load(); }
  std::string timestamp() {
    std::lock_guard lock(mu_);
    return timestamp_;
  }
  std::string signature() {
    std::lock_guard lock(mu_);
    return signature_;
  }
  std::string body() {
    std::lock_guard lock(mu_);
    return body_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::string timestamp_, signature_, body_;
  std::atomic<int> loops_{0};
  std::atomic<int> redirects_{0};
};

Request post(std::string url) {
  Request r;
  r.url = std::move(url);
  r.body = "{\"job\":1}";
  r.headers = {{"Content-Type", "application/json"}};
  return r;
}

TEST(Delivery, SuccessStatuses) {
  TestServer server;
  Delivery delivery(private_allowed());
  for (int code : {200, 201, 204}) {
    Outcome o = deliver(delivery, post(server.url(fmt::format("/status/{}", code))));
    EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << code << " " << o.error;
    EXPECT_EQ(o.status, code);
    EXPECT_EQ(o.error, "");
  }
}

TEST(Delivery, BackpressureWithAndWithoutRetryAfter) {
  TestServer server;
  Delivery delivery(private_allowed());
  Outcome plain = deliver(delivery, post(server.url("/status/429")));
  EXPECT_EQ(plain.kind, OutcomeKind::kBackpressure);
  EXPECT_EQ(plain.status, 429);
  EXPECT_EQ(plain.retry_after, std::nullopt);

  Outcome seconds = deliver(delivery, post(server.url("/status/429?retry_after=7")));
  EXPECT_EQ(seconds.kind, OutcomeKind::kBackpressure);
  EXPECT_EQ(seconds.retry_after, 7000ms);

  auto when = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()) + 120s;
  std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char date[64];
  std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  Outcome dated = deliver(delivery, post(server.url("/status/429?retry_after=" + encoded(date))));
  EXPECT_EQ(dated.kind, OutcomeKind::kBackpressure);
  ASSERT_TRUE(dated.retry_after.has_value()) << date;
  EXPECT_GT(*dated.retry_after, 60s);  // 120 s ahead, less however long the request took
  EXPECT_LE(*dated.retry_after, 120s);

  Outcome unavailable = deliver(delivery, post(server.url("/status/503?retry_after=2")));
  EXPECT_EQ(unavailable.kind, OutcomeKind::kBackpressure);
  EXPECT_EQ(unavailable.status, 503);
  EXPECT_EQ(unavailable.retry_after, 2000ms);
}

TEST(Delivery, RetryStatuses) {
  TestServer server;
  Delivery delivery(private_allowed());
  for (int code : {408, 425, 500, 502, 504}) {
    Outcome o = deliver(delivery, post(server.url(fmt::format("/status/{}", code))));
    EXPECT_EQ(o.kind, OutcomeKind::kRetry) << code;
    EXPECT_EQ(o.status, code);
    EXPECT_EQ(o.error, fmt::format("HTTP {}: body {}", code, code));
  }
}

TEST(Delivery, PermanentStatusCarriesBodyPrefix) {
  TestServer server;
  Delivery delivery(private_allowed());
  std::string body = std::string(199, 'n') + "XYZ" + std::string(100, 'o');
  Outcome o = deliver(delivery, post(server.url("/status/404?body=" + body)));
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.status, 404);
  EXPECT_EQ(o.error, "HTTP 404: " + body.substr(0, 200));
  EXPECT_EQ(deliver(delivery, post(server.url("/status/422"))).kind, OutcomeKind::kPermanent);
}

TEST(Delivery, RedirectNotFollowedIsPermanent) {
  TestServer server;
  Delivery delivery(private_allowed());
  Outcome o =
      deliver(delivery, post(server.url("/redirect?to=" + encoded(server.url("/status/200")))));
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.status, 301);
  EXPECT_EQ(o.error, "HTTP 301: moved");
}

TEST(Delivery, RedirectFollowedWhenConfigured) {
  TestServer server;
  Delivery delivery(private_allowed());
  Request r = post(server.url("/redirect?to=" + encoded(server.url("/status/200"))));
  r.follow_redirects = true;
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  EXPECT_EQ(o.status, 200);
}

TEST(Delivery, RedirectLoopStopsAfterFiveHops) {
  TestServer server;
  Delivery delivery(private_allowed());
  Request r = post(server.url("/loop"));
  r.follow_redirects = true;
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(server.loops(), 6);  // the first request and five redirects
  EXPECT_NE(o.error.find("redirects"), std::string::npos) << o.error;
}

TEST(Delivery, EveryRedirectHopPassesTheGuard) {
  TestServer server;
  Policy policy;
  policy.allow_hosts = {"localhost"};
  Delivery delivery(policy);
  // localhost is allowed; the hop to 127.0.0.1 is not.
  Request r;
  r.method = "GET";
  r.url = fmt::format("http://localhost:{}/redirect?to={}", server.port(),
                      encoded(server.url("/status/200")));
  r.follow_redirects = true;
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(server.redirects(), 1);  // the first hop was let through
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.error,
            "target 127.0.0.1 is a loopback address; set [http] allow_private = true or list the "
            "host in [http] allow_hosts");
}

TEST(Delivery, NameResolvingToLoopbackIsRefused) {
  // The check is on the resolved address, not on how the URL spells the host.
  RawHttpServer server({});
  Delivery delivery(Policy{});
  Outcome o = deliver(delivery, post(fmt::format("http://localhost:{}/", server.port())));
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.error.rfind("target localhost (", 0), 0u) << o.error;
  EXPECT_NE(o.error.find(") is a loopback address; set [http] allow_private = true"),
            std::string::npos)
      << o.error;
  EXPECT_EQ(server.connections_accepted(), 0u);
}

TEST(Delivery, TimeoutIsRetry) {
  RawHttpServer server({.never_answer = true});
  Delivery delivery(private_allowed());
  Request r = post(fmt::format("http://127.0.0.1:{}/", server.port()));
  r.timeout = 300ms;
  auto start = std::chrono::steady_clock::now();
  Outcome o = deliver(delivery, r);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(o.kind, OutcomeKind::kRetry);
  EXPECT_EQ(o.status, 0);
  // Which limit fired, and what the request was doing then.
  EXPECT_EQ(o.error.rfind("timed out after ", 0), 0u) << o.error;
  EXPECT_NE(o.error.find(" ms (timeout_ms = 300) waiting for the response from 127.0.0.1"),
            std::string::npos)
      << o.error;
  EXPECT_GE(took, 250ms);  // curl's timer is millisecond-grained, not exact
  EXPECT_LT(took, 10s);
  EXPECT_EQ(server.requests_seen(), 1u);
}

TEST(Delivery, RequestsBeyondTheConnectionLimitWaitWithoutTheirTimeoutRunning) {
  // 20 requests, 4 at a time, each answered 300 ms after it arrives: the last
  // ones wait about 1.2 s for a connection, longer than their 1 s timeout,
  // which only starts when they are sent.
  RawHttpServer server({.answer_after = 300ms});
  Policy policy = private_allowed();
  policy.max_connections_per_host = 4;
  Delivery delivery(policy);
  std::mutex mu;
  std::vector<Outcome> outcomes;
  for (int i = 0; i < 20; ++i) {
    Request r = post(fmt::format("http://127.0.0.1:{}/", server.port()));
    r.timeout = 1000ms;
    delivery.submit(std::move(r), [&](Outcome o) {
      std::lock_guard lock(mu);
      outcomes.push_back(std::move(o));
    });
  }
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return outcomes.size() == 20;
  }));
  {
    std::lock_guard lock(mu);
    for (const Outcome& o : outcomes) EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  }
  EXPECT_EQ(server.requests_seen(), 20u);  // none sent twice, none cut off
  EXPECT_LE(server.max_open(), 4u);
  EXPECT_LE(server.max_held(), 4u);
  EXPECT_EQ(server.cut_short(), 0u);
}

TEST(Delivery, ShutdownEndsRequestsWaitingForAConnectionOnce) {
  RawHttpServer server({.never_answer = true});
  Policy policy = private_allowed();
  policy.max_connections_per_host = 1;
  Delivery delivery(policy);
  constexpr int kRequests = 5;
  std::array<std::atomic<int>, kRequests> done_calls{};
  std::mutex mu;
  std::vector<std::string> errors;
  for (int i = 0; i < kRequests; ++i) {
    delivery.submit(post(fmt::format("http://127.0.0.1:{}/", server.port())), [&, i](Outcome o) {
      done_calls[i].fetch_add(1);
      std::lock_guard lock(mu);
      errors.push_back(o.error);
    });
  }
  ASSERT_TRUE(eventually([&] { return server.requests_seen() == 1; }));
  delivery.shutdown(std::chrono::steady_clock::now() + 100ms);
  EXPECT_EQ(delivery.in_flight(), 0u);
  for (const auto& calls : done_calls) EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(errors, std::vector<std::string>(kRequests, "aborted at shutdown"));
  EXPECT_EQ(server.requests_seen(), 1u);  // the others never left the queue
  EXPECT_EQ(server.connections_accepted(), 1u);
}

TEST(Delivery, OtherHostsDoNotWaitForABusyOne) {
  RawHttpServer busy({.never_answer = true});
  RawHttpServer other({});
  Policy policy = private_allowed();
  policy.max_connections_per_host = 1;
  Delivery delivery(policy);
  delivery.submit(post(fmt::format("http://127.0.0.1:{}/", busy.port())), [](Outcome) {});
  ASSERT_TRUE(eventually([&] { return busy.requests_seen() == 1; }));
  Outcome o = deliver(delivery, post(fmt::format("http://127.0.0.1:{}/", other.port())));
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  delivery.shutdown(std::chrono::steady_clock::now());
}

TEST(Delivery, ATwoHundredWithAShortBodyIsDelivered) {
  for (bool reset : {false, true}) {
    SCOPED_TRACE(reset ? "reset" : "closed");
    RawHttpServer server({.body_bytes = 10, .short_by = 90, .reset_when_short = reset});
    Delivery delivery(private_allowed());
    Outcome o = deliver(delivery, post(fmt::format("http://127.0.0.1:{}/", server.port())));
    EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
    EXPECT_EQ(o.status, 200);
    EXPECT_EQ(o.error, "");
    EXPECT_EQ(o.warning.rfind("the HTTP 200 response broke off after its headers (", 0), 0u)
        << o.warning;
    EXPECT_NE(o.warning.find("); counted as delivered"), std::string::npos) << o.warning;
    EXPECT_EQ(server.requests_seen(), 1u);  // not sent again
  }
}

TEST(Delivery, AWholeResponseHasNoWarning) {
  RawHttpServer server({.body_bytes = 10});
  Delivery delivery(private_allowed());
  Outcome o = deliver(delivery, post(fmt::format("http://127.0.0.1:{}/", server.port())));
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  EXPECT_EQ(o.warning, "");
  EXPECT_EQ(o.response_bytes, 10u);
}

TEST(Delivery, ConnectionRefusedIsRetry) {
  // A port nothing listens on: bound, then closed.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  Delivery delivery(private_allowed());
  Outcome o = deliver(delivery, post(fmt::format("http://127.0.0.1:{}/", ntohs(addr.sin_port))));
  EXPECT_EQ(o.kind, OutcomeKind::kRetry);
  EXPECT_EQ(o.status, 0);
  EXPECT_FALSE(o.error.empty());
}

TEST(Delivery, LoopbackRefusedByDefault) {
  RawHttpServer server({});
  Delivery delivery(Policy{});
  Outcome o = deliver(delivery, post(fmt::format("http://127.0.0.1:{}/", server.port())));
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(o.error,
            "target 127.0.0.1 is a loopback address; set [http] allow_private = true or list the "
            "host in [http] allow_hosts");
  EXPECT_EQ(server.connections_accepted(), 0u);  // refused before connecting
}

TEST(Delivery, LoopbackAllowedByAllowPrivateOrAllowHosts) {
  RawHttpServer server({});
  std::string url = fmt::format("http://127.0.0.1:{}/", server.port());
  {
    Delivery delivery(private_allowed());
    EXPECT_EQ(deliver(delivery, post(url)).kind, OutcomeKind::kSucceeded);
  }
  {
    Policy policy;
    policy.allow_hosts = {"127.0.0.1"};
    Delivery delivery(policy);
    EXPECT_EQ(deliver(delivery, post(url)).kind, OutcomeKind::kSucceeded);
  }
  {
    Policy policy;
    policy.allow_hosts = {"localhost"};  // a different host: still refused
    Delivery delivery(policy);
    EXPECT_EQ(deliver(delivery, post(url)).kind, OutcomeKind::kPermanent);
  }
}

TEST(Delivery, OnlyHttpAndHttpsUrls) {
  Delivery delivery(private_allowed());
  for (const char* url : {"ftp://example.com/x", "file:///etc/passwd", "gopher://example.com/"}) {
    Outcome o = deliver(delivery, post(url));
    EXPECT_EQ(o.kind, OutcomeKind::kPermanent) << url;
    EXPECT_NE(o.error.find("only http and https"), std::string::npos) << o.error;
  }
  Outcome bad = deliver(delivery, post("not a url"));
  EXPECT_EQ(bad.kind, OutcomeKind::kPermanent);
  EXPECT_NE(bad.error.find("not a valid http or https URL"), std::string::npos) << bad.error;
}

TEST(Delivery, HeaderWithLineBreakIsPermanent) {
  Delivery delivery(private_allowed());
  Request r = post("http://127.0.0.1:1/");
  r.headers.push_back({"X-Evil", "a\r\nInjected: 1"});
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_NE(o.error.find("X-Evil"), std::string::npos) << o.error;
}

TEST(Delivery, NonPositiveTimeoutIsPermanent) {
  Delivery delivery(private_allowed());
  Request r = post("http://127.0.0.1:1/");
  r.timeout = 0ms;
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.error, "timeout must be positive, got 0 ms");
}

TEST(Delivery, SignatureVerifiesAtTheReceiver) {
  TestServer server;
  Delivery delivery(private_allowed());
  Request r = post(server.url("/signed"));
  r.secret = "s3cret";
  r.body = "{\"id\":42,\"x\":\"\xc3\xa9\"}";
  ASSERT_EQ(deliver(delivery, r).kind, OutcomeKind::kSucceeded);
  std::string ts = server.timestamp();
  ASSERT_FALSE(ts.empty());
  long long sent = std::stoll(ts);
  long long now = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  EXPECT_LE(std::llabs(now - sent), 60);
  EXPECT_EQ(server.body(), r.body);
  EXPECT_EQ(server.signature(), "v1=" + hmac_hex("s3cret", ts + "." + server.body()));

  Request unsigned_request = post(server.url("/signed"));
  ASSERT_EQ(deliver(delivery, unsigned_request).kind, OutcomeKind::kSucceeded);
  EXPECT_EQ(server.signature(), "");
  EXPECT_EQ(server.timestamp(), "");
}

TEST(Delivery, ResponseBodyIsBounded) {
  constexpr size_t kTen = 10 * 1024 * 1024;
  RawHttpServer server({.body_bytes = kTen, .send_buffer = 64 * 1024});
  Policy policy = private_allowed();
  policy.max_response_bytes = 64 * 1024;
  Delivery delivery(policy);
  Outcome o = deliver(delivery, post(fmt::format("http://127.0.0.1:{}/", server.port())));
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  EXPECT_EQ(o.status, 200);
  EXPECT_EQ(o.response_bytes, 64u * 1024);
  // The client hung up rather than reading (or buffering) the rest.
  EXPECT_TRUE(eventually([&] { return server.cut_short() == 1; }));
  EXPECT_LT(server.body_bytes_sent(), kTen);
}

// The process's thread count, from /proc/self/status.
int threads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(Delivery, ThousandInFlightOnOneThread) {
  constexpr size_t kRequests = 1000;
  // The server answers none until it holds all of them: all are in flight at once.
  RawHttpServer server({.hold_until = kRequests});
  Policy policy = private_allowed();
  policy.max_connections_per_host = kRequests;
  int before = threads();
  Delivery delivery(policy);
  std::atomic<size_t> succeeded{0}, finished{0};
  std::string url = fmt::format("http://127.0.0.1:{}/", server.port());
  for (size_t i = 0; i < kRequests; ++i) {
    Request r = post(url);
    r.timeout = 60s;
    delivery.submit(std::move(r), [&](Outcome o) {
      if (o.kind == OutcomeKind::kSucceeded) succeeded.fetch_add(1);
      finished.fetch_add(1);
    });
  }
  EXPECT_EQ(delivery.in_flight(), kRequests);  // none can finish before all arrive
  int during = threads();
  // Sample again while the server is filling up (still all in flight).
  EXPECT_TRUE(eventually([&] {
    if (delivery.in_flight() == kRequests) during = std::max(during, threads());
    return finished.load() == kRequests;
  }));
  EXPECT_EQ(succeeded.load(), kRequests);
  EXPECT_EQ(server.max_held(), kRequests);
  // in_flight drops just after each done returns.
  EXPECT_TRUE(eventually([&] { return delivery.in_flight() == 0; }));
  EXPECT_LT(during, 20);
  std::cout << fmt::format("in flight {} at once; threads before {}, during {}\n", kRequests,
                           before, during);
}

TEST(Delivery, SequentialRequestsReuseTheConnection) {
  RawHttpServer server({});
  Delivery delivery(private_allowed());
  std::string url = fmt::format("http://127.0.0.1:{}/", server.port());
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(deliver(delivery, post(url)).kind, OutcomeKind::kSucceeded);
  }
  EXPECT_EQ(server.requests_seen(), 50u);
  EXPECT_LE(server.connections_accepted(), 2u);
}

TEST(Delivery, ShutdownAbortsWhatIsLeftAtTheDeadline) {
  RawHttpServer server({.never_answer = true});
  Delivery delivery(private_allowed());
  std::mutex mu;
  std::vector<Outcome> outcomes;
  for (int i = 0; i < 3; ++i) {
    delivery.submit(post(fmt::format("http://127.0.0.1:{}/", server.port())), [&](Outcome o) {
      std::lock_guard lock(mu);
      outcomes.push_back(std::move(o));
    });
  }
  ASSERT_TRUE(eventually([&] { return server.requests_seen() == 3; }));
  auto start = std::chrono::steady_clock::now();
  delivery.shutdown(start + 200ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_EQ(delivery.in_flight(), 0u);
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(outcomes.size(), 3u);
    for (const Outcome& o : outcomes) {
      EXPECT_EQ(o.kind, OutcomeKind::kRetry);
      EXPECT_EQ(o.error, "aborted at shutdown");
    }
  }
  // After shutdown: refused at once, on this thread.
  std::thread::id ran_on;
  Outcome late;
  delivery.submit(post("http://127.0.0.1:1/"), [&](Outcome o) {
    ran_on = std::this_thread::get_id();
    late = std::move(o);
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(late.kind, OutcomeKind::kRetry);
  EXPECT_EQ(late.error, "delivery is shut down");
}

TEST(Delivery, ShutdownWaitsForRequestsThatFinishInTime) {
  // Answered once all 20 have arrived: still in flight when shutdown begins.
  RawHttpServer server({.hold_until = 20});
  Delivery delivery(private_allowed());
  std::atomic<int> ok{0};
  for (int i = 0; i < 20; ++i) {
    delivery.submit(post(fmt::format("http://127.0.0.1:{}/", server.port())), [&](Outcome o) {
      if (o.kind == OutcomeKind::kSucceeded) ok.fetch_add(1);
    });
  }
  delivery.shutdown(std::chrono::steady_clock::now() + kBound);
  EXPECT_EQ(ok.load(), 20);
}

TEST(Delivery, DoneRunsOnTheDeliveryThreadAndMaySubmit) {
  TestServer server;
  Delivery delivery(private_allowed());
  auto second = std::make_shared<std::promise<Outcome>>();
  auto future = second->get_future();
  std::thread::id first_thread;
  delivery.submit(post(server.url("/status/200")), [&, second](Outcome) {
    first_thread = std::this_thread::get_id();
    delivery.submit(post(server.url("/status/500")),
                    [second](Outcome o) { second->set_value(std::move(o)); });
  });
  ASSERT_EQ(future.wait_for(kBound), std::future_status::ready);
  EXPECT_EQ(future.get().kind, OutcomeKind::kRetry);
  EXPECT_NE(first_thread, std::this_thread::get_id());
}

TEST(Delivery, ShutdownFromDoneIsRefused) {
  TestServer server;
  Delivery delivery(private_allowed());
  auto refused = std::make_shared<std::promise<std::string>>();
  auto future = refused->get_future();
  delivery.submit(post(server.url("/status/200")), [&delivery, refused](Outcome) {
    try {
      delivery.shutdown(std::chrono::steady_clock::now());
      refused->set_value("returned");
    } catch (const std::logic_error& e) {
      refused->set_value(e.what());
    }
  });
  ASSERT_EQ(future.wait_for(kBound), std::future_status::ready);
  EXPECT_EQ(future.get(), "Delivery::shutdown called from a done callback");
}

}  // namespace
}  // namespace conveyor::http_delivery
