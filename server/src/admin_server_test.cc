// AdminServer in this process over real HTTP on 127.0.0.1: the health
// endpoints (/healthz, /readyz), the headers every response carries against
// framing, and the Host header rules of RFC 9112 section 3.2. Requests are
// raw bytes so that malformed ones are sent exactly as written.
#include "test_support.hpp"

#include <conveyor/admin_server.hpp>
#include <conveyor/engine.hpp>

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

namespace conveyor {
namespace {

using test::http_request;
using test::http_send;
using test::HttpResponse;

class AdminServerTest : public ::testing::Test {
 protected:
  AdminServerTest() { engine_ = std::make_unique<Engine>(test::sqlite_config(dir_)); }
  ~AdminServerTest() override {
    server_.reset();
    engine_->stop();
    engine_.reset();
  }
  // A token is set: the health endpoints must not need it.
  void serve(const std::string& token = "secret-token") {
    ServerConfig s;
    s.admin_token = token;
    for (int attempt = 0; attempt < 3; ++attempt) {
      s.listen = "127.0.0.1:" + std::to_string(test::free_port());
      server_ = std::make_unique<AdminServer>(*engine_, s);
      try {
        server_->start();
        return;
      } catch (const ServerStartError&) {
      }
    }
    FAIL() << "no free port";
  }
  HttpResponse get(const std::string& path, std::vector<std::string> headers = {}) {
    return http_send(server_->port(), http_request("GET", path, headers, ""));
  }
  HttpResponse send(const std::string& raw) { return http_send(server_->port(), raw); }

  test::TempDir dir_;  // removed after the engine
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AdminServer> server_;
};

// Sends raw bytes to 127.0.0.1:port, returns all the server answers until it closes.
std::string exchange(uint16_t port, const std::string& raw) {
  const int fd = test::connect_loopback(port);
  if (fd < 0) return "";
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  test::send_all(fd, raw);
  std::string data;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    data.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return data;
}

void expect_not_cached(const HttpResponse& r) {
  EXPECT_EQ(r.header("cache-control"), "no-store") << r.body;
  EXPECT_EQ(r.header("content-type"), "text/plain; charset=utf-8") << r.body;
}

TEST_F(AdminServerTest, HealthzIsAliveAndReadyzFollowsTheEngineWithoutAToken) {
  serve();
  // The server is up, the engine not started yet.
  HttpResponse r = get("/healthz");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "ok\n");
  expect_not_cached(r);
  r = get("/readyz");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.body, "not ready: the engine is not running (not started yet, or stopping)\n");
  expect_not_cached(r);

  engine_->start();
  r = get("/readyz");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "ready\n");
  expect_not_cached(r);
  // No token, any Host (no DNS-rebinding check: they hold no data), HEAD too.
  for (const std::string path : {"/healthz", "/readyz"}) {
    r = get(path, {"Authorization: Bearer wrong"});
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    r = send("GET " + path + " HTTP/1.1\r\nHost: rebound.example.com\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    r = send(http_request("HEAD", path, {}, ""));
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.body, "") << path;
    expect_not_cached(r);
    // Only GET and HEAD.
    r = send(http_request("POST", path, {}, ""));
    EXPECT_EQ(r.status, 405) << path << ": " << r.body;
    EXPECT_EQ(r.header("allow"), "GET, HEAD") << path;
  }
  // The rest of the server still wants the token.
  EXPECT_EQ(get("/metrics").status, 401);

  // Stopping: not ready at once.
  engine_->stop();
  r = get("/readyz");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(get("/healthz").status, 200);
}

TEST_F(AdminServerTest, ReadyzIs503WhenStorageFailsAndHealthzStill200) {
  serve();
  engine_->start();
  ASSERT_EQ(get("/readyz").status, 200);
  // The SQLite file is gone: every storage call fails from now on (the
  // engine gives up on it only after several seconds of failures).
  const std::filesystem::path db = dir_ / "conveyor.db";  // test::sqlite_config's
  ASSERT_TRUE(std::filesystem::remove(db)) << db;
  HttpResponse r = get("/readyz");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.body.rfind("not ready: storage ", 0), 0u) << r.body;
  EXPECT_EQ(r.body.find('\n'), r.body.size() - 1) << "one line: " << r.body;
  // The error's text (it names the file) goes to the log, not to the probe.
  EXPECT_EQ(r.body.find(db.string()), std::string::npos) << r.body;
  expect_not_cached(r);
  r = get("/healthz");
  EXPECT_EQ(r.status, 200) << r.body;
}

// Clickjacking: no page may frame the dashboard (and its kill switch).
TEST_F(AdminServerTest, EveryResponseForbidsFraming) {
  serve();
  const auto expect_frame_headers = [](const HttpResponse& r, const std::string& what) {
    EXPECT_EQ(r.header("x-frame-options"), "DENY") << what;
    EXPECT_EQ(r.header("content-security-policy"), "frame-ancestors 'none'") << what;
  };
  HttpResponse r = get("/");
  ASSERT_EQ(r.status, 200) << r.body;
  expect_frame_headers(r, "GET /");
  expect_frame_headers(send(http_request("HEAD", "/", {}, "")), "HEAD /");
  expect_frame_headers(get("/no/such/file.js"), "404");
  expect_frame_headers(get("/metrics"), "401 /metrics");
  expect_frame_headers(get("/healthz"), "/healthz");
  r = send(http_request("POST", "/conveyor.v1.AdminService/ListQueues",
                        {"Content-Type: application/json"}, "{}"));
  EXPECT_EQ(r.status, 401) << r.body;
  expect_frame_headers(r, "API error");
  // The transport's own answers too.
  r = send("GET nopath HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_EQ(r.status, 400) << r.body;
  expect_frame_headers(r, "malformed request");
}

// RFC 9112 section 3.2: more than one Host header, or none on HTTP/1.1, is 400.
TEST_F(AdminServerTest, TwoHostHeadersOrNoneOnHttp11Are400) {
  serve();
  HttpResponse r = send(
      "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example.com\r\n"
      "Connection: close\r\n\r\n");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("more than one Host header"), std::string::npos) << r.body;
  // The same, differently cased, on an API call.
  r = send(
      "POST /conveyor.v1.AdminService/ListQueues HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "HOST: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(r.status, 400) << r.body;
  r = send("GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("needs a Host header"), std::string::npos) << r.body;
  // HTTP/1.0 has no such rule (answered as HTTP/1.0, which http_send does
  // not read).
  const std::string answer = exchange(server_->port(), "GET /healthz HTTP/1.0\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.0 200 ", 0), 0u) << answer;
  // One Host: as before.
  EXPECT_EQ(send(http_request("GET", "/healthz", {}, "")).status, 200);
}

}  // namespace
}  // namespace conveyor
