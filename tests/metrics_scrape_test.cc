// /metrics of a real `conveyor serve` (SQLite in a temp dir) with limited,
// paused, failing and idle queues: `promtool check metrics` accepts the
// scrape, and the series operators alert on are there with the right values.
// Without promtool the check is skipped, except under CI=true where it fails.
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace conveyor {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

// The path of promtool on PATH, or "".
std::string find_promtool() {
  FILE* p = ::popen("command -v promtool 2>/dev/null", "r");
  if (p == nullptr) return "";
  char buf[4096];
  std::string out;
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

TEST(MetricsScrape, PromtoolAcceptsAScrapeWithLimitedPausedFailingAndIdleQueues) {
  const std::string promtool = find_promtool();
  const char* ci = std::getenv("CI");
  if (promtool.empty()) {
    if (ci != nullptr && std::string(ci) == "true")
      FAIL() << "promtool not found on PATH: install Debian's prometheus package "
                "(scripts/install-deps.sh test set)";
    GTEST_SKIP() << "promtool not found (apt-get install prometheus)";
  }

  test::TempDir dir;
  test::ServeProcess serve(dir,
                           "[engine]\npoll_interval_ms = 50\nunknown_kind_grace_s = 0\n"
                           "[queues.limited]\nrate_limit = { rate = 0.5, burst = 1 }\n"
                           "[queues.idle]\nmax_workers = 2\n"
                           "[queues.keyed]\nkey_rate_limit = { rate = 0.01, burst = 1 }\n",
                           "allow_unauthenticated = \"loopback\"\n");
  ASSERT_TRUE(serve.ready()) << serve.process().stderr_text();
  ASSERT_EQ(serve.post("/conveyor.v1.AdminService/PauseQueue", R"({"queue":"paused"})").status,
            200);
  const std::string config = (dir / "conveyor.toml").string();
  // Direct enqueues (another process), as an operator's script would.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"enqueue", "paused", "noop", "--count", "3"},
           {"enqueue", "limited", "noop", "--count", "5"},
           // An http job to loopback fails at once (the address guard).
           {"enqueue", "failing", "http", "--payload", R"({"url":"http://127.0.0.1:9/"})",
            "--count", "2"},
           // No consumer serves this kind: it waits, and is named.
           {"enqueue", "unserved", "no-such-kind", "--count", "2"},
           // A keyed queue: key a's bucket holds one job, so two wait throttled.
           {"enqueue", "keyed", "noop", "--key", "a", "--count", "3"}}) {
    std::vector<std::string> full{"--config", config};
    full.insert(full.end(), args.begin(), args.end());
    const auto r = test::run_conveyor(full);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  std::string text;
  const auto scrape = [&] {
    const auto r = test::http_send(serve.port(), test::http_request("GET", "/metrics", {}, ""));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
    text = "\n" + r.body;
  };
  // Counts are read in the background at most once a second: wait for them.
  ASSERT_TRUE(test::wait_until([&] {
    scrape();
    return has_line(text, R"(conveyor_queue_jobs{queue="failing",state="failed"} 2)") &&
           has_line(text, R"(conveyor_queue_jobs{queue="limited",state="completed"} 1)") &&
           has_line(text, R"(conveyor_jobs_failed_total{queue="failing"} 2)") &&
           has_line(text,
                    R"(conveyor_queue_unserved_jobs{queue="unserved",kind="no-such-kind"} 2)") &&
           has_line(text, R"(conveyor_jobs_completed_total{queue="keyed"} 1)") &&
           has_line(text, R"(conveyor_queue_keys{queue="keyed",state="ready"} 1)") &&
           text.find("\nconveyor_ratelimit_key_throttled_total{queue=\"keyed\"} 0\n") ==
               std::string::npos;
  })) << text;

  const auto file = dir / "scrape.txt";
  std::ofstream(file) << text.substr(1);
  const std::string command = promtool + " check metrics < " + file.string() + " 2>&1";
  FILE* p = ::popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  std::string out;
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << "promtool check metrics:\n" << out;
  EXPECT_EQ(out, "") << "lint problems";

  // Keys: counted per queue, never labelled per key.
  EXPECT_TRUE(has_line(text, R"(conveyor_queue_keys{queue="keyed",state="running"} 0)")) << text;
  EXPECT_NE(text.find("\nconveyor_ratelimit_key_throttled_total{queue=\"keyed\"} "),
            std::string::npos);
  EXPECT_TRUE(has_line(text, R"(conveyor_ratelimit_key_throttled_total{queue="limited"} 0)"));
  EXPECT_EQ(text.find("key=\"a\""), std::string::npos);
  EXPECT_TRUE(has_line(text, R"(conveyor_queue_paused{queue="paused"} 1)")) << text;
  EXPECT_TRUE(has_line(text, R"(conveyor_queue_jobs{queue="paused",state="pending"} 3)"));
  EXPECT_TRUE(has_line(text, R"(conveyor_queue_jobs{queue="limited",state="pending"} 4)"));
  EXPECT_TRUE(has_line(text, R"(conveyor_queue_jobs{queue="idle",state="pending"} 0)"));
  EXPECT_TRUE(has_line(
      text,
      R"(conveyor_ratelimit_rate{queue="limited",source="queue-config",scope="process"} 0.5)"));
  EXPECT_TRUE(has_line(
      text,
      R"(conveyor_ratelimit_burst{queue="limited",source="queue-config",scope="process"} 1)"));
  EXPECT_TRUE(has_line(text, "conveyor_ratelimit_enabled 1"));
  EXPECT_EQ(text.find(R"(conveyor_ratelimit_rate{queue="idle")"), std::string::npos);
  EXPECT_TRUE(has_line(text, R"(conveyor_jobs_completed_total{queue="limited"} 1)"));
  EXPECT_TRUE(has_line(text, R"(conveyor_leases_lost_total{queue="failing"} 0)"));
  EXPECT_TRUE(has_line(text, R"(conveyor_jobs_rescued_total{queue="limited"} 0)"));
  EXPECT_EQ(text.find(R"(conveyor_jobs_rescued_total{queue=""})"), std::string::npos)
      << "the SQLite plugin reports rescued jobs' queues";
  EXPECT_TRUE(has_line(text, R"(conveyor_queue_oldest_pending_age_seconds{queue="idle"} 0)"));
  {
    // The paused queue's three jobs have waited since they were enqueued.
    const std::string key = "\nconveyor_queue_oldest_pending_age_seconds{queue=\"paused\"} ";
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << text;
    EXPECT_GT(std::stod(text.substr(at + key.size())), 0.0);
  }
  EXPECT_TRUE(has_line(text, R"(conveyor_jobs_enqueued_total{queue="paused"} 0)"))
      << "direct CLI enqueues are another process's";
  EXPECT_NE(text.find("\nconveyor_build_info{version=\"0.1.0\",storage_plugin=\"sqlite\","),
            std::string::npos);
  EXPECT_NE(text.find("\nprocess_resident_memory_bytes "), std::string::npos);
  EXPECT_NE(text.find("\nprocess_open_fds "), std::string::npos);
  EXPECT_NE(text.find(R"(conveyor_job_pickup_latency_seconds_bucket{queue="limited",le="3600"})"),
            std::string::npos);
}

}  // namespace
}  // namespace conveyor
