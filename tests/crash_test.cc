// A job that was enqueued is never lost when workers die: several worker
// processes drain a queue while one of them is killed with SIGKILL about
// every second and replaced. Every job completes; a job ran more than once
// only if one of its runs was in a killed process (at-least-once delivery).
//
// The kill test runs on every storage plugin of this tree that is built:
// sqlite always; postgres (and postgres-queue, when that plugin is part of
// the build) on the server named by CONVEYOR_TEST_PG_DSN, each test in a
// schema of its own. Without a DSN or a built plugin they are skipped, or
// fail when CI=true.
#include "crash_worker_process.hpp"
#include "pg_test_env.hpp"
#include "test_support.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/storage.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <random>
#include <set>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using test::CrashWorker;

// The plugins the kill test runs on.
std::vector<std::string> crash_plugins() {
  std::vector<std::string> plugins = {"sqlite", "postgres"};
#ifdef CONVEYOR_TEST_HAS_POSTGRES_QUEUE
  plugins.push_back("postgres-queue");
#endif
  return plugins;
}

// A queue store for one test: SQLite in the test's directory, or a fresh
// schema on the PostgreSQL server, dropped afterwards.
class CrashOnPlugin : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& plugin = GetParam();
    CONVEYOR_NEED_BUILT_PLUGIN(plugin);
    if (plugin == "sqlite") {
      config_ = test::write_sqlite_config(dir_, kEngine);
      return;
    }
    CONVEYOR_NEED_PG_DSN();
    dsn_ = *test::pg_dsn();
    schema_ = test::fresh_schema_name("crash_");
    config_ = test::write_postgres_config(dir_, plugin, dsn_, schema_, kEngine);
  }

  void TearDown() override { test::drop_schema(dsn_, schema_); }

  // Short leases and frequent rescue: a killed worker's jobs come back fast.
  // Not shorter: on a loaded machine (CI, sanitizers) a live worker's
  // heartbeat (every lease_ms / 3) must still land before its lease expires,
  // or a job runs twice without a kill and the test cannot tell why.
  static constexpr const char* kEngine =
      "[engine]\npoll_interval_ms = 100\nlease_ms = 3000\nrescue_interval_ms = 200\n"
      "max_workers = 8\nretry_backoff_base_ms = 10\n";

  test::TempDir dir_;
  std::filesystem::path config_;
  std::string dsn_, schema_;
};

TEST_P(CrashOnPlugin, KilledWorkersLoseNoJobs) {
  const auto record = dir_ / "runs.txt";
  const int kJobs = 20000;
  {
    Engine producer(load_config_file(config_));
    std::vector<NewJob> jobs(kJobs, NewJob{"crash", "record", R"({"ms": 10})", 0, 25, 0});
    producer.enqueue_batch(std::move(jobs));
  }

  std::mt19937 rng(42);
  std::vector<std::unique_ptr<CrashWorker>> workers;
  // Each worker logs to a file of its own, shown when it misbehaves.
  int started = 0;
  auto log_of = [&](int n) { return dir_ / ("worker-" + std::to_string(n) + ".log"); };
  std::map<pid_t, std::filesystem::path> logs;
  auto start_worker = [&] {
    auto w = std::make_unique<CrashWorker>(config_, record, log_of(started));
    logs[w->pid()] = log_of(started++);
    return w;
  };
  for (int i = 0; i < 3; ++i) workers.push_back(start_worker());
  std::set<int> killed;
  auto storage = open_storage(load_config_file(config_).storage);
  auto completed = [&] {
    for (const auto& s : storage->queue_stats(SystemClock::instance().wall_now_us()))
      if (s.queue == "crash") return s.completed;
    return int64_t{0};
  };
  // Kill about every second while the drain runs (at most kMaxKills times, so
  // a slow build, e.g. under sanitizers, is not kept from finishing by the
  // restarts themselves), then let the survivors finish.
  constexpr int kMaxKills = 15;
  const auto deadline = std::chrono::steady_clock::now() + 240s;
  int kills = 0;
  while (completed() < kJobs && kills < kMaxKills && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1s);  // the kill schedule itself, not synchronisation
    if (completed() >= kJobs) break;
    auto& victim = workers[rng() % workers.size()];
    killed.insert(victim->pid());
    victim->kill(SIGKILL);
    ++kills;
    victim = start_worker();
  }
  test::wait_until([&] { return completed() >= kJobs; },
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                       deadline - std::chrono::steady_clock::now()));
  ASSERT_EQ(completed(), kJobs) << "after " << kills << " kills";
  for (auto& w : workers) {
    const pid_t pid = w->pid();
    w->kill(SIGTERM);
    EXPECT_TRUE(WIFEXITED(w->exit_status()) && WEXITSTATUS(w->exit_status()) == 0)
        << "worker " << pid << " wait status " << w->exit_status() << "; its log:\n"
        << test::read_file(logs[pid]);
  }

  const auto runs = test::read_executions(record);
  ASSERT_EQ(runs.size(), static_cast<size_t>(kJobs));
  int repeated = 0;
  for (const auto& [id, pids] : runs) {
    if (pids.size() == 1) continue;
    ++repeated;
    bool ran_in_killed = false;
    for (size_t i = 0; i + 1 < pids.size(); ++i) ran_in_killed |= killed.count(pids[i]) > 0;
    EXPECT_TRUE(ran_in_killed) << "job " << id << " ran " << pids.size()
                               << " times without a killed process among its runs";
  }
  EXPECT_GE(kills, 5);
  RecordProperty("kills", kills);
  RecordProperty("jobs_run_once", kJobs - repeated);
  RecordProperty("jobs_run_more_than_once", repeated);
  std::printf(
      "crash test on %s: %d jobs, %d kills; %d jobs ran once, %d more than once; all "
      "completed\n",
      GetParam().c_str(), kJobs, kills, kJobs - repeated, repeated);
}

INSTANTIATE_TEST_SUITE_P(Crash, CrashOnPlugin, ::testing::ValuesIn(crash_plugins()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

// SIGTERM during a drain: running jobs finish, nothing is left leased, and a
// restarted worker finishes the rest; no job runs twice (nothing crashed).
TEST(Crash, SigtermDuringDrainFinishesRunningJobsAndLosesNothing) {
  test::TempDir dir;
  const auto config = test::write_sqlite_config(
      dir, "[engine]\npoll_interval_ms = 100\nmax_workers = 8\nshutdown_timeout_ms = 10000\n");
  const auto record = dir / "runs.txt";
  const int kJobs = 400;
  {
    Engine producer(load_config_file(config));
    producer.enqueue_batch(
        std::vector<NewJob>(kJobs, NewJob{"drain", "record", R"({"ms": 20})", 0, 25, 0}));
  }
  auto storage = open_storage(load_config_file(config).storage);
  auto stats = [&] {
    for (const auto& s : storage->queue_stats(SystemClock::instance().wall_now_us()))
      if (s.queue == "drain") return s;
    return QueueStats{};
  };
  {
    CrashWorker first(config, record);
    ASSERT_TRUE(test::wait_until([&] { return stats().completed >= 50; }));
    first.kill(SIGTERM);
    EXPECT_TRUE(WIFEXITED(first.exit_status()) && WEXITSTATUS(first.exit_status()) == 0);
  }
  const QueueStats after_stop = stats();
  EXPECT_EQ(after_stop.running, 0) << "a graceful stop leaves nothing leased";
  EXPECT_LT(after_stop.completed, kJobs) << "the stop came mid-drain";
  {
    CrashWorker second(config, record);
    ASSERT_TRUE(test::wait_until([&] { return stats().completed == kJobs; }));
    second.kill(SIGTERM);
  }
  const auto runs = test::read_executions(record);
  ASSERT_EQ(runs.size(), static_cast<size_t>(kJobs));
  for (const auto& [id, pids] : runs) EXPECT_EQ(pids.size(), 1u) << "job " << id;
}

// A worker stopped the instant it was started (the kill test replaces a
// worker just as the drain ends, then stops them all) still stops
// gracefully: the stop waits for its main instead of killing it.
TEST(Crash, SigtermRightAfterStartIsStillAGracefulStop) {
  test::TempDir dir;
  const auto config = test::write_sqlite_config(dir, "[engine]\npoll_interval_ms = 100\n");
  for (int i = 0; i < 5; ++i) {
    CrashWorker worker(config, dir / "runs.txt");
    worker.kill(SIGTERM);
    EXPECT_TRUE(WIFEXITED(worker.exit_status()) && WEXITSTATUS(worker.exit_status()) == 0)
        << "start " << i << ": wait status " << worker.exit_status();
  }
}

}  // namespace
}  // namespace conveyor
