// A real `conveyor serve` as orchestrators see it: /healthz and /readyz
// (unauthenticated with a token set; /readyz 503 once its storage fails),
// the anti-framing headers on the dashboard, and SIGHUP, which reloads the
// worker tokens (a revoked one is refused at once) without stopping it,
// while SIGTERM still stops it cleanly.
#include "test_support.hpp"

#include <conveyor/config.hpp>

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

// How many times text is in the process's log.
size_t log_count(test::ServeProcess& s, const std::string& text) {
  const std::string err = s.process().stderr_text();
  size_t n = 0;
  for (size_t at = err.find(text); at != std::string::npos; at = err.find(text, at + 1)) ++n;
  return n;
}

// Sends SIGHUP and waits for the n-th log line with text (or the exit).
bool sighup_logged(test::ServeProcess& s, const std::string& text, size_t n) {
  s.process().signal(SIGHUP);
  return test::wait_until([&] {
           return log_count(s, text) >= n || s.process().wait(std::chrono::milliseconds(1)) >= 0;
         }) &&
         log_count(s, text) == n;
}

TEST(ServeSignals, SighupReloadsWithoutStoppingAndSigtermStillStopsCleanly) {
  test::TempDir dir;
  test::ServeProcess s(dir, kEngine, kToken);
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  ASSERT_TRUE(becomes_ready(s)) << s.process().stderr_text();
  for (int i = 0; i < 2; ++i) {
    // The log line says it was handled; the process is still there after it.
    ASSERT_TRUE(sighup_logged(s, "SIGHUP: reloaded ", static_cast<size_t>(i + 1)))
        << s.process().stderr_text();
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
  // The file did not change: nothing to restart for.
  EXPECT_EQ(err.find("apply only after a restart"), std::string::npos) << err;
}

// Revocation without a restart: SIGHUP re-reads the file, a removed worker
// token is refused from then on and a new one accepted; a setting that
// needs a restart is named; a file that no longer parses changes nothing.
TEST(ServeSignals, SighupRevokesAWorkerTokenAndAcceptsANewOne) {
  const auto block = [](const std::string& name, const std::string& token) {
    return "[server.worker_tokens." + name + "]\nsha256 = \"" + sha256_hex(token) +
           "\"\nqueues = [\"q\"]\n";
  };
  test::TempDir dir;
  test::ServeProcess s(dir, kEngine, kToken + block("old", "old-s3cret"));
  ASSERT_TRUE(s.ready()) << s.process().stderr_text();
  ASSERT_TRUE(becomes_ready(s)) << s.process().stderr_text();
  const auto claim = [&](const std::string& token) {
    return s.post("/conveyor.v1.WorkerService/Claim",
                  R"({"queues":[{"queue":"q"}],"kinds":["k"],"maxJobs":1,"waitSeconds":0})",
                  {"Authorization: Bearer " + token});
  };
  HttpResponse r = claim("old-s3cret");
  ASSERT_EQ(r.status, 200) << r.body;
  r = claim("new-s3cret");
  EXPECT_EQ(r.status, 401) << r.body;

  // The file now names "new" instead of "old", and a slower poll (restart only).
  const std::string listen = "listen = \"127.0.0.1:" + std::to_string(s.port()) + "\"\n";
  test::write_sqlite_config(dir, "[engine]\npoll_interval_ms = 60\n[server]\n" + listen + kToken +
                                     block("new", "new-s3cret"));
  ASSERT_TRUE(sighup_logged(s, "SIGHUP: reloaded ", 1)) << s.process().stderr_text();
  r = claim("old-s3cret");
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_NE(r.body.find("unauthenticated"), std::string::npos) << r.body;
  r = claim("new-s3cret");
  EXPECT_EQ(r.status, 200) << r.body;
  std::string err = s.process().stderr_text();
  EXPECT_NE(err.find("SIGHUP: [engine] changed in " + (dir / "conveyor.toml").string() +
                     " but apply only after a restart"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("new-s3cret"), std::string::npos) << "a token in the log: " << err;

  // A broken file: logged, and the tokens in force stay.
  test::write_sqlite_config(dir, "[server\n");
  ASSERT_TRUE(sighup_logged(s, "SIGHUP: the config file cannot be used", 1))
      << s.process().stderr_text();
  EXPECT_EQ(claim("new-s3cret").status, 200);
  EXPECT_EQ(claim("old-s3cret").status, 401);
  ASSERT_LT(s.process().wait(std::chrono::milliseconds(1)), 0) << s.process().stderr_text();
  s.process().signal(SIGTERM);
  EXPECT_EQ(s.process().wait(), 0) << s.process().stderr_text();
}

}  // namespace
}  // namespace conveyor
