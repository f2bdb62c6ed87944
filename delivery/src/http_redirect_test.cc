// Followed redirects keep the request: a 301, 302, 307 or 308 sends the same
// method and body to the new location; a 303 is not followed by a request
// with a body (it would arrive as a GET without it), and the job fails
// instead of completing. Against a cpp-httplib server on 127.0.0.1 that
// records the method and body that arrive. The configured headers (and the
// signature) go to the request's origin only: a hop to another origin (here
// another port of 127.0.0.1) carries none of them but Content-Type.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "conveyor/http_delivery.hpp"
#include "testing/delivery_helpers.hpp"
#include "testing/raw_http_server.hpp"

namespace conveyor::http_delivery {
namespace {

using testing::deliver;
using testing::encoded;
using testing::eventually;
using testing::private_allowed;
using testing::RawHttpServer;
using namespace std::chrono_literals;

struct Arrival {
  std::string method, body;
};

// /from/<code> answers that redirect status with Location: /to, whatever the
// method; /to records what arrived and answers 200.
class RedirectServer {
 public:
  RedirectServer() {
    auto from = [this](const httplib::Request& req, httplib::Response& res) {
      from_hits_.fetch_add(1);
      res.status = std::stoi(req.matches[1]);
      res.set_header("Location", "/to");
      res.set_content("moved", "text/plain");
    };
    auto to = [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      arrivals_.push_back({req.method, req.body});
      res.status = 200;
      res.set_content("ok", "text/plain");
    };
    const char* from_path = R"(/from/(\d+))";
    server_.Get(from_path, from);
    server_.Post(from_path, from);
    server_.Put(from_path, from);
    server_.Patch(from_path, from);
    server_.Delete(from_path, from);
    server_.Get("/to", to);
    server_.Post("/to", to);
    server_.Put("/to", to);
    server_.Patch("/to", to);
    server_.Delete("/to", to);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    EXPECT_TRUE(eventually([&] { return server_.is_running(); }));
  }
  ~RedirectServer() {
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return fmt::format("http://127.0.0.1:{}{}", port_, path);
  }
  std::vector<Arrival> arrivals() {
    std::lock_guard lock(mu_);
    return arrivals_;
  }
  int from_hits() const { return from_hits_.load(); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Arrival> arrivals_;
  std::atomic<int> from_hits_{0};
};

struct Case {
  int status;
  const char* method;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.method << " answered " << c.status; }

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  return fmt::format("{}_{}", info.param.method, info.param.status);
}

class FollowedRedirect : public ::testing::TestWithParam<Case> {};

// 301, 302, 307, 308: the same method and body arrive at the new location.
TEST_P(FollowedRedirect, SendsTheSameMethodAndBody) {
  const Case c = GetParam();
  RedirectServer server;
  Delivery delivery(private_allowed());
  Request r;
  r.method = c.method;
  r.url = server.url(fmt::format("/from/{}", c.status));
  r.body = fmt::format("{{\"job\":\"{} {}\"}}", c.method, c.status);
  r.headers = {{"Content-Type", "application/json"}};
  r.follow_redirects = true;
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  EXPECT_EQ(o.status, 200);
  EXPECT_EQ(server.from_hits(), 1);
  auto arrivals = server.arrivals();
  ASSERT_EQ(arrivals.size(), 1u);
  EXPECT_EQ(arrivals[0].method, c.method);
  EXPECT_EQ(arrivals[0].body, r.body);
}

INSTANTIATE_TEST_SUITE_P(Statuses, FollowedRedirect,
                         ::testing::Values(Case{301, "POST"}, Case{302, "POST"}, Case{307, "POST"},
                                           Case{308, "POST"}, Case{301, "PUT"}, Case{302, "PUT"},
                                           Case{307, "PUT"}, Case{308, "PUT"}, Case{301, "PATCH"},
                                           Case{302, "DELETE"}),
                         name_of);

class SeeOther : public ::testing::TestWithParam<const char*> {};

// 303 to a request with a body: not followed (nothing arrives at /to), and
// the outcome is permanent, saying why, so the job never completes with its
// body dropped.
TEST_P(SeeOther, WithABodyIsNotFollowedAndFails) {
  const std::string method = GetParam();
  RedirectServer server;
  Delivery delivery(private_allowed());
  Request r;
  r.method = method;
  r.url = server.url("/from/303");
  r.body = "{\"job\":1}";
  r.headers = {{"Content-Type", "application/json"}};
  r.follow_redirects = true;
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent) << o.error;
  EXPECT_EQ(o.status, 303);
  EXPECT_EQ(o.error, fmt::format("the downstream answered 303 See Other to {} {} (Location: /to): "
                                 "following it would send a GET without the body, so it was not "
                                 "followed; point the url at the location that takes the {}",
                                 method, r.url, method));
  EXPECT_EQ(server.from_hits(), 1);
  EXPECT_TRUE(server.arrivals().empty());
}

INSTANTIATE_TEST_SUITE_P(Methods, SeeOther, ::testing::Values("POST", "PUT"));

TEST(SeeOther, AGetWithoutABodyFollowsIt) {
  RedirectServer server;
  Delivery delivery(private_allowed());
  Request r;
  r.method = "GET";
  r.url = server.url("/from/303");
  r.follow_redirects = true;
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  auto arrivals = server.arrivals();
  ASSERT_EQ(arrivals.size(), 1u);
  EXPECT_EQ(arrivals[0].method, "GET");
}

TEST(SeeOther, NotFollowingIsPermanentAsBefore) {
  RedirectServer server;
  Delivery delivery(private_allowed());
  Request r;
  r.url = server.url("/from/303");
  r.body = "x";
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.status, 303);
  EXPECT_EQ(o.error, "HTTP 303: moved");
  EXPECT_TRUE(server.arrivals().empty());
}

// Headers as they arrived, by lower-cased name.
using Headers = std::map<std::string, std::string>;

struct Hit {
  std::string path, method, body;
  Headers headers;
};

// An origin (one port of 127.0.0.1): /hop/<code>?to=<location> answers that
// redirect status with that Location; /end answers 200. Every request is
// recorded with its headers.
class Origin {
 public:
  Origin() {
    auto hop = [this](const httplib::Request& req, httplib::Response& res) {
      record(req);
      res.status = std::stoi(req.matches[1]);
      res.set_header("Location", req.get_param_value("to"));
      res.set_content("moved", "text/plain");
    };
    auto end = [this](const httplib::Request& req, httplib::Response& res) {
      record(req);
      res.status = 200;
      res.set_content("ok", "text/plain");
    };
    const char* hop_path = R"(/hop/(\d+))";
    server_.Get(hop_path, hop);
    server_.Post(hop_path, hop);
    server_.Put(hop_path, hop);
    server_.Get("/end", end);
    server_.Post("/end", end);
    server_.Put("/end", end);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    EXPECT_TRUE(eventually([&] { return server_.is_running(); }));
  }
  ~Origin() {
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return fmt::format("http://127.0.0.1:{}{}", port_, path);
  }
  std::vector<Hit> hits() {
    std::lock_guard lock(mu_);
    return hits_;
  }

 private:
  void record(const httplib::Request& req) {
    Hit hit{req.path, req.method, req.body, {}};
    for (const auto& [name, value] : req.headers) {
      std::string key = name;
      for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      hit.headers[key] = value;
    }
    std::lock_guard lock(mu_);
    hits_.push_back(std::move(hit));
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Hit> hits_;
};

// The configured headers of the requests below (lower-cased), and the
// signature's.
const std::vector<std::pair<std::string, std::string>> kConfigured = {
    {"X-Api-Key", "key-123"}, {"Authorization", "Bearer token-456"}, {"X-Tenant", "acme"}};
const char* const kSecretHeaders[] = {"x-api-key", "authorization", "x-tenant",
                                      "conveyor-timestamp", "conveyor-signature"};

Request configured(const Case& c, std::string url) {
  Request r;
  r.method = c.method;
  r.url = std::move(url);
  if (std::string(c.method) != "GET") r.body = fmt::format("{{\"job\":\"{}\"}}", c.status);
  r.headers = kConfigured;
  r.headers.emplace_back("Content-Type", "application/json");
  r.secret = "s3cret";
  r.follow_redirects = true;
  return r;
}

class ConfiguredHeaders : public ::testing::TestWithParam<Case> {};

// A -> B, B another origin: B gets the method, the body and Content-Type, but
// none of the configured headers nor the signature; A got them all.
TEST_P(ConfiguredHeaders, DoNotFollowARedirectToAnotherOrigin) {
  const Case c = GetParam();
  Origin a, b;
  Delivery delivery(private_allowed());
  Request r = configured(c, a.url(fmt::format("/hop/{}?to={}", c.status, encoded(b.url("/end")))));
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  EXPECT_EQ(o.status, 200);

  auto at_a = a.hits();
  ASSERT_EQ(at_a.size(), 1u);
  for (const char* name : kSecretHeaders) EXPECT_EQ(at_a[0].headers.count(name), 1u) << name;
  EXPECT_EQ(at_a[0].headers["x-api-key"], "key-123");

  auto at_b = b.hits();
  ASSERT_EQ(at_b.size(), 1u);
  EXPECT_EQ(at_b[0].path, "/end");
  EXPECT_EQ(at_b[0].method, c.method);
  EXPECT_EQ(at_b[0].body, r.body);
  for (const char* name : kSecretHeaders) {
    EXPECT_EQ(at_b[0].headers.count(name), 0u)
        << name << ": " << at_b[0].headers[name] << " reached the other origin";
  }
  EXPECT_EQ(at_b[0].headers["content-type"], "application/json");
}

// A -> A: the same origin keeps every configured header and the signature.
TEST_P(ConfiguredHeaders, FollowARedirectWithinTheOrigin) {
  const Case c = GetParam();
  Origin a;
  Delivery delivery(private_allowed());
  Request r = configured(c, a.url(fmt::format("/hop/{}?to=%2Fend", c.status)));
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;

  auto hits = a.hits();
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[1].path, "/end");
  EXPECT_EQ(hits[1].method, c.method);
  EXPECT_EQ(hits[1].body, r.body);
  for (const char* name : kSecretHeaders) EXPECT_EQ(hits[1].headers.count(name), 1u) << name;
  EXPECT_EQ(hits[1].headers["x-api-key"], "key-123");
  EXPECT_EQ(hits[1].headers["authorization"], "Bearer token-456");
  EXPECT_EQ(hits[1].headers["x-tenant"], "acme");
  EXPECT_EQ(hits[1].headers["content-type"], "application/json");
}

INSTANTIATE_TEST_SUITE_P(Statuses, ConfiguredHeaders,
                         ::testing::Values(Case{301, "POST"}, Case{302, "POST"}, Case{303, "GET"},
                                           Case{307, "POST"}, Case{308, "PUT"}),
                         name_of);

// A -> B -> A: back on the request's origin, the headers are sent again; B,
// in between, gets none of them.
TEST(ConfiguredHeaders, ReturnToTheOriginOnly) {
  Origin a, b;
  Delivery delivery(private_allowed());
  const std::string back = a.url("/end");
  const std::string via_b = b.url("/hop/307?to=" + encoded(back));
  Request r = configured(Case{307, "POST"}, a.url("/hop/307?to=" + encoded(via_b)));
  Outcome o = deliver(delivery, r);
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  auto at_b = b.hits();
  ASSERT_EQ(at_b.size(), 1u);
  for (const char* name : kSecretHeaders) EXPECT_EQ(at_b[0].headers.count(name), 0u) << name;
  auto at_a = a.hits();
  ASSERT_EQ(at_a.size(), 2u);
  EXPECT_EQ(at_a[1].path, "/end");
  EXPECT_EQ(at_a[1].body, r.body);
  EXPECT_EQ(at_a[1].headers["x-api-key"], "key-123");
}

// The request's timeout covers every hop: a hop to a downstream that never
// answers times out, naming it, with the time of the hops before counted.
TEST(FollowedRedirect, TheTimeoutCoversTheNextHop) {
  Origin a;
  RawHttpServer silent({.never_answer = true});
  Delivery delivery(private_allowed());
  Request r = configured(
      Case{307, "POST"},
      a.url("/hop/307?to=" + encoded(fmt::format("http://127.0.0.1:{}/", silent.port()))));
  r.timeout = 300ms;
  auto start = std::chrono::steady_clock::now();
  Outcome o = deliver(delivery, r);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(o.kind, OutcomeKind::kRetry);
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(o.error.rfind("timed out after ", 0), 0u) << o.error;
  EXPECT_NE(o.error.find(" ms (timeout_ms = 300) waiting for the response from 127.0.0.1"),
            std::string::npos)
      << o.error;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 10s);
  EXPECT_EQ(a.hits().size(), 1u);
  EXPECT_EQ(silent.requests_seen(), 1u);
}

}  // namespace
}  // namespace conveyor::http_delivery
