// `conveyor enqueue --timeout DURATION` and what `jobs show` / `jobs ls`
// print of ABI 1.6's fields (a job's own timeout, when its latest attempt
// started), through the real command on SQLite; the refusal on a plugin
// without enqueue_v5 (the SDK's memory_c example), naming the plugin.
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>

namespace conveyor {
namespace {

using nlohmann::json;
using test::run_conveyor;
using test::TempDir;

class TimeoutCli : public ::testing::Test {
 protected:
  void SetUp() override { config_ = test::write_sqlite_config(dir_); }
  test::CommandResult run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--config", config_.string()});
    return run_conveyor(args);
  }
  json show(int id) { return json::parse(run({"--json", "jobs", "show", std::to_string(id)}).out); }

  TempDir dir_;
  std::filesystem::path config_;
};

TEST_F(TimeoutCli, EnqueueTimeoutTakesDurationsWithUnits) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"30s", 30'000},   {"1.5m", 90'000},    {"500ms", 500}, {"90", 90'000},
      {"2h", 7'200'000}, {"7d", 604'800'000}, {"0.0004s", 0}, {"1ms", 1}};
  int id = 0;
  for (const auto& [text, ms] : cases) {
    auto r = run({"enqueue", "t", "noop", "--delay", "3600", "--timeout", text});
    if (ms == 0) {  // under half a millisecond: not a timeout at all
      EXPECT_EQ(r.exit_code, 2) << text << ": " << r.err;
      continue;
    }
    ASSERT_EQ(r.exit_code, 0) << text << ": " << r.err;
    ++id;
    const json j = show(id);
    EXPECT_EQ(j["timeout_ms"], ms) << text;
    EXPECT_TRUE(j["started_at"].is_null()) << "never started: " << j.dump();
  }
  // Without --timeout: 0, the queue's.
  ASSERT_EQ(run({"enqueue", "t", "noop", "--delay", "3600"}).exit_code, 0);
  EXPECT_EQ(show(id + 1)["timeout_ms"], 0);
  auto r = run({"jobs", "show", "1"});
  EXPECT_NE(r.out.find("\ntimeout:          30000 ms per attempt (the job's own)\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("started at"), std::string::npos) << r.out;
}

TEST_F(TimeoutCli, BadTimeoutsExitTwoNamingTheOptionAndEnqueueNothing) {
  ASSERT_EQ(run({"enqueue", "other", "noop", "--delay", "3600"}).exit_code, 0);  // the database
  for (const std::string bad : {"0", "0s", "-1s", "8d", "604800001ms", "10 s", "abc", "1e400", "s",
                                "5x", "0x10", "", "nan"}) {
    auto r = run({"enqueue", "t", "noop", "--timeout", bad});
    EXPECT_EQ(r.exit_code, 2) << "\"" << bad << "\": " << r.err;
    EXPECT_NE(r.err.find("--timeout"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("1ms to 7d"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  auto r = run({"--json", "jobs", "ls", "--queue", "t"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out)["jobs"].empty()) << r.out;
}

// A job that ran shows when its attempt started, kept once it completed,
// and how long the attempt ran; ls has a STARTED column.
TEST_F(TimeoutCli, FinishedJobsShowWhenTheirLastAttemptStarted) {
  std::ofstream(config_, std::ios::app) << "[engine]\npoll_interval_ms = 50\n";
  ASSERT_EQ(run({"enqueue", "runs", "noop", "--timeout", "10s"}).exit_code, 0);
  ASSERT_EQ(run({"enqueue", "waits", "noop", "--delay", "3600"}).exit_code, 0);
  {
    test::Process serve({"--config", config_.string(), "serve"});
    ASSERT_TRUE(test::wait_until([&] { return show(1)["state"] == "completed"; }))
        << serve.stderr_text();
    serve.signal(SIGINT);
    EXPECT_EQ(serve.wait(), 0) << serve.stderr_text();
  }
  const json done = show(1);
  ASSERT_TRUE(done["started_at"].is_string()) << done.dump();
  EXPECT_LE(done["created_at"].get<std::string>(), done["started_at"].get<std::string>());
  EXPECT_LE(done["started_at"].get<std::string>(), done["finalized_at"].get<std::string>());
  EXPECT_EQ(done["timeout_ms"], 10'000);
  auto r = run({"jobs", "show", "1"});
  EXPECT_NE(r.out.find("\nstarted at:       " + done["started_at"].get<std::string>() + "\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nlast attempt ran: "), std::string::npos) << r.out;
  r = run({"jobs", "ls"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("STARTED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(done["started_at"].get<std::string>()), std::string::npos) << r.out;
}

// memory_c has no enqueue_v5: a timeout is refused naming the plugin and the
// ABI it needs, exit 2, nothing enqueued; without --timeout it enqueues.
TEST(TimeoutCliOnAnOlderPlugin, TimeoutNeedsAbi16) {
  TempDir dir;
  const auto config = dir / "conveyor.toml";
  std::ofstream(config) << "[storage]\nplugin = \"" << CONVEYOR_TEST_EXAMPLE_PLUGIN_DIR
                        << "/libconveyor-memory_c.so\"\n";
  auto r = run_conveyor({"--config", config.string(), "enqueue", "q", "noop", "--timeout", "5s"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const std::string last = r.err.substr(r.err.rfind("conveyor: "));
  EXPECT_NE(last.find("memory_c"), std::string::npos) << r.err;
  EXPECT_NE(last.find("1.6"), std::string::npos) << r.err;
  EXPECT_NE(last.find("enqueue_v5"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace conveyor
