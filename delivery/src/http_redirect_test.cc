// Followed redirects keep the request: a 301, 302, 307 or 308 sends the same
// method and body to the new location; a 303 is not followed by a request
// with a body (it would arrive as a GET without it), and the job fails
// instead of completing. Against a cpp-httplib server on 127.0.0.1 that
// records the method and body that arrive.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "conveyor/http_delivery.hpp"
#include "testing/delivery_helpers.hpp"

namespace conveyor::http_delivery {
namespace {

using testing::deliver;
using testing::eventually;
using testing::private_allowed;

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

}  // namespace
}  // namespace conveyor::http_delivery
