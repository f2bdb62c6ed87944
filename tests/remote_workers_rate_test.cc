// One rate-limited queue served at once by the engine's own handler and two
// remote workers: the reference Python worker (clients/python) in two real
// processes, over the worker API of a real admin server on 127.0.0.1. The
// limit holds for all three together, as the starts every consumer records
// show: the achieved rate, and the token bucket's bound in every window.
#include "test_support.hpp"

#include <conveyor/admin_server.hpp>
#include <conveyor/engine.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;

constexpr const char* kWorkerToken = "rate-test-worker-token";

// A remote worker that appends "<start wall us> <job id>" per job it runs.
constexpr const char* kWorkerScript = R"(import sys, time
sys.path.insert(0, sys.argv[1])
from conveyor_worker import Worker
url, token, log_path = sys.argv[2], sys.argv[3], sys.argv[4]
log = open(log_path, "a", buffering=1)
w = Worker(url, token=token, queues=["mixed"], concurrency=20, wait_seconds=5)
@w.handler("remote")
def run(job):
    log.write(f"{time.time_ns() // 1000} {job.id}\n")
w.run()
)";

struct Start {
  int64_t at_us;
  int64_t id;
  int consumer;  // 0: the engine's handler; 1, 2: the remote workers
};

std::vector<Start> read_starts(const std::filesystem::path& log, int consumer) {
  std::vector<Start> out;
  std::ifstream in(log);
  int64_t at = 0, id = 0;
  while (in >> at >> id) out.push_back({at, id, consumer});
  return out;
}

bool python_available() { return std::system("python3 -c 'import sys' >/dev/null 2>&1") == 0; }

TEST(RemoteWorkersRate, TheLimitHoldsForLocalHandlersAndRemoteWorkersTogether) {
  if (!python_available()) {
    if (std::getenv("CI") && std::string(std::getenv("CI")) == "true")
      FAIL() << "python3 is missing (scripts/install-deps.sh test installs it)";
    GTEST_SKIP() << "python3 is missing";
  }
  test::TempDir dir;
  Config config = test::sqlite_config(dir);
  config.queues["mixed"].rate_limit = RateLimit{50, 10};
  config.queues["mixed"].max_workers = 100;
  Engine engine(config);
  std::mutex mu;
  std::vector<Start> local;
  engine.register_handler("local", [&](const Job& j) {
    std::lock_guard lock(mu);
    local.push_back({SystemClock::instance().wall_now_us(), j.id, 0});
  });
  // A deep backlog of both kinds, interleaved.
  std::vector<NewJob> jobs;
  for (int i = 0; i < 2000; ++i) {
    NewJob j;
    j.queue = "mixed";
    j.kind = i % 2 == 0 ? "local" : "remote";
    j.payload = "{}";
    jobs.push_back(std::move(j));
  }
  engine.enqueue_batch(std::move(jobs));

  ServerConfig server;
  const uint16_t port = test::free_port();
  server.listen = fmt::format("127.0.0.1:{}", port);
  server.admin_token = "rate-test-admin-token";
  server.worker_token = kWorkerToken;
  AdminServer admin(engine, server);
  admin.start();
  engine.start();

  const std::filesystem::path script = dir.path() / "worker.py";
  std::ofstream(script) << kWorkerScript;
  const std::string client_dir = std::string(CONVEYOR_TEST_SOURCE_DIR) + "/clients/python";
  const std::string url = fmt::format("http://127.0.0.1:{}", port);
  std::vector<std::filesystem::path> logs = {dir.path() / "w1.log", dir.path() / "w2.log"};
  std::vector<test::Process> workers;
  for (const auto& log : logs)
    workers.push_back(test::Process::program(
        "python3", {script.string(), client_dir, url, kWorkerToken, log.string()}));

  // The window starts once every consumer has started a job.
  int64_t window_start = 0;
  ASSERT_TRUE(test::wait_until(
      [&] {
        for (const auto& log : logs)
          if (read_starts(log, 1).empty()) return false;
        std::lock_guard lock(mu);
        if (local.empty()) return false;
        window_start = SystemClock::instance().wall_now_us();
        return true;
      },
      30s))
      << "a remote worker never started a job: " << workers[0].stderr_text();
  const int64_t window_us = 10'000'000;
  ASSERT_TRUE(test::wait_until(
      [&] { return SystemClock::instance().wall_now_us() > window_start + window_us + 500'000; },
      20s));
  for (auto& w : workers) w.signal(SIGTERM);
  for (auto& w : workers) EXPECT_EQ(w.wait(40s), 0) << w.stderr_text();
  admin.stop();
  engine.stop();

  std::vector<Start> starts;
  {
    std::lock_guard lock(mu);
    starts = local;
  }
  for (size_t i = 0; i < logs.size(); ++i) {
    auto remote = read_starts(logs[i], static_cast<int>(i) + 1);
    starts.insert(starts.end(), remote.begin(), remote.end());
  }
  std::sort(starts.begin(), starts.end(),
            [](const Start& a, const Start& b) { return a.at_us < b.at_us; });
  std::set<int64_t> ids;
  for (const Start& s : starts) EXPECT_TRUE(ids.insert(s.id).second) << "job " << s.id << " twice";

  // Achieved rate over the 10 s window, all consumers together.
  int in_window[3] = {0, 0, 0};
  for (const Start& s : starts)
    if (s.at_us >= window_start && s.at_us < window_start + window_us) ++in_window[s.consumer];
  const int total = in_window[0] + in_window[1] + in_window[2];
  const double rate = total / (window_us / 1e6);
  std::cout << fmt::format(
      "10 s window: {} starts = {:.1f}/s (engine {}, worker 1 {}, worker 2 {})\n", total, rate,
      in_window[0], in_window[1], in_window[2]);
  EXPECT_NEAR(rate, 50.0, 0.5) << "outside 1% of the limit";
  for (int c = 0; c < 3; ++c) EXPECT_GE(in_window[c], 50) << "consumer " << c << " starved";

  // The bucket's bound in every window: starts in [t_i, t_j] <= burst + rate * (t_j - t_i).
  // A remote start is stamped in the worker, after the grant crossed the
  // network and Python's event loop: a grant seen D late makes a window look
  // D shorter, i.e. rate * D jobs of apparent excess. 3 jobs allow 60 ms of
  // such jitter (ASan builds on 2 loaded cores showed 21 ms); a limit that
  // did not hold across consumers shows in the achieved rate above, and a
  // second bucket would add its whole burst (10) at once.
  double worst = -1e9;
  for (size_t i = 0; i < starts.size(); ++i)
    for (size_t j = i; j < starts.size(); ++j) {
      const double allowed =
          10 + 50.0 * static_cast<double>(starts[j].at_us - starts[i].at_us) / 1e6;
      worst = std::max(worst, static_cast<double>(j - i + 1) - allowed);
    }
  std::cout << fmt::format("largest excess over burst + rate*t in any window: {:.2f} jobs\n",
                           worst);
  EXPECT_LE(worst, 3.0);
}

}  // namespace
}  // namespace conveyor
