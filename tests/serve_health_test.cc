// A real `conveyor serve` as orchestrators see it: /healthz and /readyz
// (unauthenticated with a token set; /readyz 503 once its storage fails),
// the anti-framing headers on the dashboard, and SIGHUP, which is logged and
// ignored, while SIGTERM still stops it cleanly.
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <string>

namespace conveyor {
namespace {

using test::http_request;
using test::http_send;
using test::HttpResponse;

constexpr const char* kEngine = "[engine]\npoll_interval_ms = 50\n";
constexpr const char* kToken = "admin_token = \"health-test-token\"\n";

HttpResponse get(test::ServeProcess& s, const std::string& path) {
  return http_send(s.port(), http_request("GET", path, {}, ""));
}

// serve binds before it starts the engine: ready once the engine runs.
bool becomes_ready(test::ServeProcess& s) {
  return test::wait_until([&] { return get(s, "/readyz").status == 200; });
}

TEST(ServeHealth, HealthzAndReadyzAre200WithoutTheToken) {
  test::TempDir dir;
  test::ServeProcess s(dir, kEngine, kToken);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  ASSERT_TRUE(becomes_ready(s)) << get(s, "/readyz").body << s.process().stderr_text();
  HttpResponse r = get(s, "/readyz");
  EXPECT_EQ(r.body, "ready\n");
  EXPECT_EQ(r.header("cache-control"), "no-store");
  r = get(s, "/healthz");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "ok\n");
  EXPECT_EQ(r.header("cache-control"), "no-store");
  r = http_send(s.port(), http_request("HEAD", "/readyz", {}, ""));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "");
  // The API still wants the token.
  EXPECT_EQ(get(s, "/metrics").status, 401);
}

TEST(ServeHealth, ReadyzIs503OnceTheDatabaseFileIsRemoved) {
  test::TempDir dir;
  test::ServeProcess s(dir, kEngine, kToken);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  ASSERT_TRUE(becomes_ready(s)) << s.process().stderr_text();
  ASSERT_TRUE(std::filesystem::remove(dir / "conveyor.db"));
  // Every storage call fails at once; serve itself gives up (exit 1) only
  // after 5 s or more of failures, so it is still there to answer.
  const HttpResponse r = get(s, "/readyz");
  EXPECT_EQ(r.status, 503) << r.body << s.process().stderr_text();
  EXPECT_EQ(r.body.rfind("not ready: storage ", 0), 0u) << r.body;
  EXPECT_EQ(get(s, "/healthz").status, 200);
  EXPECT_EQ(s.process().wait(std::chrono::seconds(90)), 1) << s.process().stderr_text();
}

TEST(ServeHealth, TheDashboardCannotBeFramed) {
  test::TempDir dir;
  test::ServeProcess s(dir, kEngine, kToken);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  const HttpResponse r = get(s, "/");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.header("content-type").find("text/html"), std::string::npos);
  EXPECT_EQ(r.header("x-frame-options"), "DENY");
  EXPECT_EQ(r.header("content-security-policy"), "frame-ancestors 'none'");
}

TEST(ServeHealth, TwoHostHeadersAre400) {
  test::TempDir dir;
  test::ServeProcess s(dir, kEngine, kToken);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  HttpResponse r = http_send(s.port(),
                             "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: a.example\r\n"
                             "Connection: close\r\n\r\n");
  EXPECT_EQ(r.status, 400) << r.body;
  r = http_send(s.port(), "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.status, 400) << r.body;
}

TEST(ServeSignals, SighupIsLoggedAndIgnoredAndSigtermStillStopsCleanly) {
  test::TempDir dir;
  test::ServeProcess s(dir, kEngine, kToken);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  ASSERT_TRUE(becomes_ready(s)) << s.process().stderr_text();
  const std::string kIgnored =
      "SIGHUP: configuration reload is not supported; send SIGTERM to stop";
  for (int i = 0; i < 2; ++i) {
    s.process().signal(SIGHUP);
    // The log line says it was handled; the process is still there after it.
    ASSERT_TRUE(test::wait_until([&] {
      const std::string err = s.process().stderr_text();
      size_t n = 0;
      for (size_t at = err.find(kIgnored); at != std::string::npos; at = err.find(kIgnored, at + 1))
        ++n;
      return n == static_cast<size_t>(i + 1) || s.process().wait(std::chrono::milliseconds(1)) >= 0;
    })) << s.process().stderr_text();
    ASSERT_LT(s.process().wait(std::chrono::milliseconds(1)), 0) << s.process().stderr_text();
    const HttpResponse r = get(s, "/healthz");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(get(s, "/readyz").status, 200);
  }
  s.process().signal(SIGTERM);
  EXPECT_EQ(s.process().wait(), 0) << s.process().stderr_text();
  const std::string err = s.process().stderr_text();
  EXPECT_NE(err.find("received SIGTERM, stopping"), std::string::npos) << err;
  EXPECT_NE(err.find("engine stopped"), std::string::npos) << err;
  EXPECT_EQ(err.find("received SIGHUP"), std::string::npos) << err;
}

}  // namespace
}  // namespace conveyor
