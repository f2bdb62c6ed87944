// A job that was enqueued is never lost when workers die: several worker
// processes drain a queue while one of them is killed with SIGKILL about
// every second and replaced. Every job completes; a job ran more than once
// only if one of its runs was in a killed process (at-least-once delivery).
#include "test_support.hpp"

#include <conveyor/engine.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace conveyor {
namespace {

using namespace std::chrono_literals;

// A crash_worker process; SIGKILLed if still alive when destroyed.
class Worker {
 public:
  Worker(const std::string& config, const std::string& record) {
    std::string bin = std::string(CONVEYOR_TEST_BIN_DIR) + "/crash_worker";
    std::vector<std::string> args = {bin, config, record};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Worker() { kill(SIGKILL); }
  void kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exit_status_ = status;
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  int exit_status() const { return exit_status_; }

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

struct Runs {
  std::map<int64_t, std::vector<int>> by_job;  // job id -> pids that ran it
};

Runs read_runs(const std::filesystem::path& file) {
  Runs runs;
  std::ifstream in(file);
  int64_t id;
  int pid;
  while (in >> id >> pid) runs.by_job[id].push_back(pid);
  return runs;
}

TEST(Crash, KilledWorkersLoseNoJobsOnSqlite) {
  test::TempDir dir;
  const auto config = test::write_sqlite_config(
      dir,
      "[engine]\npoll_interval_ms = 100\nlease_ms = 1500\nrescue_interval_ms = 200\n"
      "max_workers = 8\nretry_backoff_base_ms = 10\n");
  const auto record = dir / "runs.txt";
  const int kJobs = 20000;
  {
    Engine producer(load_config_file(config));
    std::vector<NewJob> jobs(kJobs, NewJob{"crash", "record", R"({"ms": 10})", 0, 25, 0});
    producer.enqueue_batch(std::move(jobs));
  }

  std::mt19937 rng(42);
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < 3; ++i) workers.push_back(std::make_unique<Worker>(config.string(), record.string()));
  std::set<int> killed;
  auto storage = open_storage(load_config_file(config).storage);
  auto completed = [&] {
    for (const auto& s : storage->queue_stats(SystemClock::instance().wall_now_us()))
      if (s.queue == "crash") return s.completed;
    return int64_t{0};
  };
  const auto deadline = std::chrono::steady_clock::now() + 180s;
  int kills = 0;
  while (completed() < kJobs && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1s);  // the kill schedule itself, not synchronisation
    if (completed() >= kJobs) break;
    auto& victim = workers[rng() % workers.size()];
    killed.insert(victim->pid());
    victim->kill(SIGKILL);
    ++kills;
    victim = std::make_unique<Worker>(config.string(), record.string());
  }
  ASSERT_EQ(completed(), kJobs) << "after " << kills << " kills";
  for (auto& w : workers) {
    w->kill(SIGTERM);
    EXPECT_TRUE(WIFEXITED(w->exit_status()) && WEXITSTATUS(w->exit_status()) == 0);
  }

  const Runs runs = read_runs(record);
  ASSERT_EQ(runs.by_job.size(), static_cast<size_t>(kJobs));
  int repeated = 0;
  for (const auto& [id, pids] : runs.by_job) {
    if (pids.size() == 1) continue;
    ++repeated;
    bool ran_in_killed = false;
    for (size_t i = 0; i + 1 < pids.size(); ++i) ran_in_killed |= killed.count(pids[i]) > 0;
    EXPECT_TRUE(ran_in_killed) << "job " << id << " ran " << pids.size()
                               << " times without a killed process among its runs";
  }
  EXPECT_GE(kills, 5);
  RecordProperty("kills", kills);
  RecordProperty("jobs_run_more_than_once", repeated);
  std::printf("crash test: %d jobs, %d kills, %d jobs ran more than once, all completed\n", kJobs,
              kills, repeated);
}

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
    producer.enqueue_batch(std::vector<NewJob>(kJobs, NewJob{"drain", "record", R"({"ms": 20})", 0, 25, 0}));
  }
  auto storage = open_storage(load_config_file(config).storage);
  auto stats = [&] {
    for (const auto& s : storage->queue_stats(SystemClock::instance().wall_now_us()))
      if (s.queue == "drain") return s;
    return QueueStats{};
  };
  {
    Worker first(config.string(), record.string());
    ASSERT_TRUE(test::wait_until([&] { return stats().completed >= 50; }));
    first.kill(SIGTERM);
    EXPECT_TRUE(WIFEXITED(first.exit_status()) && WEXITSTATUS(first.exit_status()) == 0);
  }
  const QueueStats after_stop = stats();
  EXPECT_EQ(after_stop.running, 0) << "a graceful stop leaves nothing leased";
  EXPECT_LT(after_stop.completed, kJobs) << "the stop came mid-drain";
  {
    Worker second(config.string(), record.string());
    ASSERT_TRUE(test::wait_until([&] { return stats().completed == kJobs; }));
    second.kill(SIGTERM);
  }
  const Runs runs = read_runs(record);
  ASSERT_EQ(runs.by_job.size(), static_cast<size_t>(kJobs));
  for (const auto& [id, pids] : runs.by_job) EXPECT_EQ(pids.size(), 1u) << "job " << id;
}

}  // namespace
}  // namespace conveyor
