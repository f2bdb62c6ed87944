// What a plugin author relies on from the host, checked with real processes:
// the host never calls into a handle from inside one of that handle's
// callbacks (storage_plugin.h "Callbacks": the reentry_guard test plugin
// aborts when it does) under `conveyor serve` with its admin server and under
// conveyor-bench; conveyor-bench says what is wrong with a plugin whose
// handles do not share storage; the CLI warns when its jobs would vanish with
// it; `conveyor plugin info` shows a newer minor's kind and capability bits.
#include "test_support.hpp"

#include <conveyor/storage_plugin.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace conveyor {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kTestPlugins = CONVEYOR_TEST_BROKEN_PLUGIN_DIR;

std::string test_plugin(const std::string& name) {
  return (kTestPlugins / ("libconveyor-" + name + ".so")).string();
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A finished program: exit code (128+N for signal N, -1 when it was killed
// for running past its time) and its stdout and stderr together.
struct Ran {
  int exit_code = -1;
  std::string output;
};

// Runs a program other than conveyor (conveyor-bench) with a time limit, so
// a hang fails the test instead of CI.
Ran run_bounded(const std::vector<std::string>& args, std::chrono::seconds limit) {
  test::TempDir io;
  const fs::path out = io / "output";
  std::vector<std::string> argv_s = args;
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  Ran r;
  if (rc != 0) {
    r.output = "posix_spawn " + args[0] + " failed: " + std::to_string(rc);
    return r;
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    done = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!done) std::this_thread::sleep_for(20ms);
  }
  if (!done) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  } else {
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  r.output = test::read_file(out);
  if (!done) r.output += "\n[killed after " + std::to_string(limit.count()) + " s]";
  return r;
}

// ---------------------------------------------------------------- serve

class ServeOnReentryGuard : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint16_t port = test::free_port();
    url_ = "http://127.0.0.1:" + std::to_string(port);
    config_ = dir_ / "conveyor.toml";
    std::ofstream(config_) << "[storage]\nplugin = \"" << test_plugin("reentry_guard")
                           << "\"\n[engine]\npoll_interval_ms = 50\n[server]\nlisten = "
                              "\"127.0.0.1:"
                           << port << "\"\nadmin_token = \"" << kToken << "\"\n";
  }
  test::CommandResult cli(std::vector<std::string> args) {
    args.insert(args.begin(), {"--server", url_});
    return test::run_conveyor(args, {std::string("CONVEYOR_ADMIN_TOKEN=") + kToken});
  }
  int64_t completed(const std::string& queue) {
    const auto r = cli({"--json", "queues"});
    if (r.exit_code != 0) return -1;
    for (const auto& q : nlohmann::json::parse(r.out))
      if (q["queue"] == queue) return q["completed"].get<int64_t>();
    return -1;
  }

  static constexpr const char* kToken = "reentry-guard-test-token";
  test::TempDir dir_;
  fs::path config_;
  std::string url_;
};

// The engine hears of an override change through the plugin's notification
// and must reload overrides after the callback returned, not inside it: the
// guard aborts on change_marker/list_rate_limits called from on_notify.
TEST_F(ServeOnReentryGuard, NotificationsDoNotReenterAndTheServerKeepsAnsweringAndStops) {
  test::Process serve({"--config", config_.string(), "serve"}, {"REENTRY_GUARD_TRACE=1"});
  auto running = [&] { return serve.wait(20ms) < 0; };
  ASSERT_TRUE(test::wait_until([&] { return !running() || cli({"queues"}).exit_code == 0; }))
      << serve.stderr_text();
  ASSERT_TRUE(running()) << serve.stderr_text();

  auto r = cli({"enqueue", "guarded", "noop", "--count", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(test::wait_until([&] { return !running() || completed("guarded") == 5; }, 10s))
      << serve.stderr_text();
  ASSERT_TRUE(running()) << serve.stderr_text();

  // A rate-limit override fires a CONVEYOR_NOTIFY_RATE_LIMITS notification;
  // the plugin traces the callback's return.
  r = cli({"ratelimit", "set", "guarded", "--rate", "50"});
  EXPECT_FALSE(has(serve.stderr_text(), "re-entered from a callback")) << serve.stderr_text();
  ASSERT_EQ(r.exit_code, 0) << r.err << "\nserve's stderr:\n" << serve.stderr_text();
  const std::string returned = "reentry_guard: on_notify(kind 2, queue guarded) returned";
  EXPECT_TRUE(
      test::wait_until([&] { return !running() || has(serve.stderr_text(), returned); }, 10s));
  EXPECT_FALSE(has(serve.stderr_text(), "re-entered from a callback")) << serve.stderr_text();
  ASSERT_TRUE(running()) << "serve died: " << serve.stderr_text();

  // The admin API still answers and the engine still runs jobs.
  r = cli({"--json", "ratelimit", "ls"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "guarded")) << r.out;
  ASSERT_EQ(cli({"enqueue", "guarded", "noop", "--count", "5"}).exit_code, 0);
  EXPECT_TRUE(test::wait_until([&] { return !running() || completed("guarded") == 10; }, 10s))
      << serve.stderr_text();

  serve.signal(SIGINT);
  EXPECT_EQ(serve.wait(20s), 0) << serve.stderr_text();
  EXPECT_FALSE(has(serve.stderr_text(), "re-entered from a callback")) << serve.stderr_text();
}

// ---------------------------------------------------------------- conveyor-bench

const std::string kBench = std::string(CONVEYOR_TEST_BIN_DIR) + "/conveyor-bench";

bool bench_built() {
#ifndef CONVEYOR_TEST_WITH_BENCH
  return false;  // configured with CONVEYOR_BUILD_BENCHMARKS=OFF
#endif
  if (fs::exists(kBench)) return true;
  if (const char* ci = std::getenv("CI"); ci != nullptr && std::string(ci) == "true")
    ADD_FAILURE() << kBench << " is missing: build conveyor-bench";
  return false;
}

TEST(BenchOnReentryGuard, ADrainRunsWithoutReentry) {
  if (!bench_built()) GTEST_SKIP() << kBench << " not built";
  test::TempDir dir;
  const Ran r =
      run_bounded({kBench, "--quick", "--plugin", test_plugin("reentry_guard"), "--workloads",
                   "drain", "--drain-jobs", "500", "--repeat", "1", "--out", (dir / "out").string(),
                   "--scratch", (dir / "scratch").string()},
                  120s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(has(r.output, "re-entered from a callback")) << r.output;
  EXPECT_TRUE(fs::exists(dir / "out" / "bench-results.json")) << r.output;
}

// A store per handle is legal without CONVEYOR_CAP_MULTI_PROCESS; the
// separate producer's jobs then never reach the engine, and the bench must
// say so instead of "only 0 of N jobs ran".
TEST(BenchOnPerHandleStore, TheSeparateProducerSaysTheHandlesDoNotShareStorage) {
  if (!bench_built()) GTEST_SKIP() << kBench << " not built";
  test::TempDir dir;
  const Ran r = run_bounded({kBench, "--quick", "--plugin", test_plugin("per_handle_store"),
                             "--workloads", "latency", "--latency-seconds", "1", "--out",
                             (dir / "out").string(), "--scratch", (dir / "scratch").string()},
                            120s);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output,
                  "storage plugin 'per_handle_store' does not share storage between "
                  "handles"))
      << r.output;
  EXPECT_TRUE(has(r.output, "It does not advertise CONVEYOR_CAP_MULTI_PROCESS")) << r.output;
  EXPECT_FALSE(has(r.output, "jobs ran")) << r.output;
}

// ---------------------------------------------------------------- the CLI

fs::path write_config(const test::TempDir& dir, const std::string& plugin) {
  const fs::path path = dir / "conveyor.toml";
  std::ofstream(path) << "[storage]\nplugin = \"" << plugin << "\"\n";
  return path;
}

TEST(CliEnqueue, WarnsThatJobsVanishWithAStoreThatIsNeitherDurableNorShared) {
  test::TempDir dir;
  const fs::path config =
      write_config(dir, std::string(CONVEYOR_TEST_EXAMPLE_PLUGIN_DIR) + "/libconveyor-memory_c.so");
  auto r =
      test::run_conveyor({"--config", config.string(), "enqueue", "q", "noop", "--count", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enqueued 3 jobs on queue q (ids 1..3)\n");
  EXPECT_EQ(r.err,
            "conveyor: warning: storage plugin 'memory_c' is neither durable nor multi-process, "
            "so the 3 jobs enqueued here vanish when this command exits; enqueue through the "
            "server that runs them (conveyor --server URL enqueue ...) or use a durable plugin\n");
}

TEST(CliEnqueue, DoesNotWarnOnDurableStorage) {
  test::TempDir dir;
  const fs::path config = test::write_sqlite_config(dir);
  auto r = test::run_conveyor({"--config", config.string(), "enqueue", "q", "noop"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has(r.err, "warning")) << r.err;
}

TEST(CliPluginInfo, ShowsAKindAndCapabilityBitsThisHostDoesNotKnow) {
  auto r = test::run_conveyor({"plugin", "info", test_plugin("unknown_kind")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The host's own ABI is named (1.1 since job operations).
  const std::string abi =
      std::to_string(CONVEYOR_ABI_MAJOR) + "." + std::to_string(CONVEYOR_ABI_MINOR);
  EXPECT_TRUE(has(r.out, "kind:          unknown(99) (not defined by ABI " + abi +
                             ", perhaps a newer minor's; loaded anyway)"))
      << r.out;
  EXPECT_TRUE(has(r.out, "capabilities:  durable,bit40 (bit40 not defined by ABI " + abi +
                             ", perhaps a newer minor's; ignored)"))
      << r.out;
  r = test::run_conveyor({"--json", "plugin", "info", test_plugin("unknown_kind")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"kind_known\": false")) << r.out;
  EXPECT_TRUE(has(r.out, "\"unknown_capabilities\": \"bit40\"")) << r.out;
  EXPECT_TRUE(has(r.out, "\"loads\": true")) << r.out;
}

}  // namespace
}  // namespace conveyor
