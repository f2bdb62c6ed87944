// A PostgreSQL restart pauses work and loses none: an engine process
// (tests/crash_worker: the embedded engine, the real postgres plugin through
// the real loader, a handler that records every execution) drains a backlog;
// in the middle the server is stopped for about three seconds and started
// again. The process must survive, log the loss and the recovery, and finish
// the drain: every job completed, and the outcomes of jobs that finished
// while the server was down recorded once it was back. Each job executed
// exactly once (its lease, far longer than the outage, never expired)
// unless the server crashed (halt "immediate") while claims and outcomes
// committed without waiting for their WAL flush (lease_commit = "async",
// the default): the crash may lose the last of those commits, and such a job
// runs again (at-least-once), which is all the test then asks.
//
// The test starts a cluster of its own (scripts/pg-cluster.sh, ports
// 5460-5469), never the shared one other tests use. Skipped when the
// PostgreSQL 15 server binaries are missing; failed then when CI=true.
#include "crash_worker_process.hpp"
#include "pg_test_env.hpp"
#include "test_support.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/storage.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using test::CrashWorker;

int64_t wall_us() { return SystemClock::instance().wall_now_us(); }

// Completed jobs of queue "restart", or -1 while the server cannot answer
// (the test's own plugin reconnects too).
int64_t completed_restart_jobs(Storage& storage) {
  try {
    for (const auto& s : storage.queue_stats(wall_us()))
      if (s.queue == "restart") return s.completed;
    return 0;
  } catch (const StorageError&) {
    return -1;
  }
}

int count_lines_with(const std::string& log, const std::string& needle) {
  int n = 0;
  for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++n;
  return n;
}

// The outage as the engine logged it: the first and last failure of each
// kind (text up to the first ':' after the level) and every recovery line.
std::string outage_summary(const std::string& log) {
  std::map<std::string, std::pair<std::string, std::string>> failures;  // kind -> first, last
  std::map<std::string, int> counts;
  std::stringstream in(log), out;
  for (std::string line; std::getline(in, line);) {
    if (line.find("again") != std::string::npos) out << "  " << line << "\n";
    const size_t at = line.find(" failed");
    if (at == std::string::npos) continue;
    const std::string kind = line.substr(0, at).substr(std::min(at, line.find("] ", 2) + 2));
    auto& [first, last] = failures[kind];
    if (first.empty()) first = line.substr(0, 200);
    last = line.substr(0, 200);
    ++counts[kind];
  }
  for (const auto& [kind, lines] : failures)
    out << "  " << counts[kind] << " x '" << kind << " failed', first: " << lines.first
        << "\n      last: " << lines.second << "\n";
  return out.str();
}

// What explains a bad exit: a sanitizer's report if there is one, else the
// end of the log.
std::string log_excerpt(const std::string& log) {
  size_t from = log.find("==ERROR: ");
  if (from == std::string::npos) from = log.size() - std::min<size_t>(log.size(), 6000);
  return log.substr(from, 20000);
}

// Job ids of the lines the completer logs when it records an outcome again
// after a failed attempt and the storage refuses it ("job N finished;
// recording it again was refused: ..."): the first attempt committed and
// only its reply was lost, or the lease was lost meanwhile.
std::vector<int64_t> refused_on_retry(const std::string& log) {
  std::vector<int64_t> ids;
  const std::string tail = " finished; recording it again was refused";
  std::stringstream in(log);
  for (std::string line; std::getline(in, line);) {
    const size_t end = line.find(tail);
    if (end == std::string::npos) continue;
    const size_t start = line.rfind("job ", end);
    if (start != std::string::npos)
      ids.push_back(std::stoll(line.substr(start + 4, end - start - 4)));
  }
  return ids;
}

// The halt mode: "fast" (backends told to exit, clients disconnected; the
// shutdown checkpoint flushes every commit) or "immediate" (a crash: no
// goodbye, crash recovery at the next start); and the plugin's lease_commit.
struct RestartCase {
  const char* halt;
  const char* lease_commit;
  // Whether every job runs exactly once: unless a crash may lose commits
  // that did not wait for their flush.
  bool exactly_once() const {
    return std::string(halt) != "immediate" || std::string(lease_commit) != "async";
  }
};

std::string case_name(const ::testing::TestParamInfo<RestartCase>& info) {
  return std::string(info.param.halt) + "_" + info.param.lease_commit;
}

class PostgresRestart : public ::testing::TestWithParam<RestartCase> {
 protected:
  void SetUp() override {
    CONVEYOR_NEED_PG_SERVER_BINARIES();
    cluster_ = std::make_unique<test::ThrowawayCluster>(5460, 5469);
  }

  std::unique_ptr<test::ThrowawayCluster> cluster_;
  test::TempDir dir_;
};

TEST_P(PostgresRestart, EngineRidesOutAServerRestartMidDrainAndLosesNothing) {
  constexpr int kJobs = 4000;
  constexpr auto kOutage = 3s;
  const std::string schema = "restart";
  // Leases far longer than the outage plus reconnect backoff: no job may be
  // rescued, so any second execution would be a lost outcome.
  const RestartCase c = GetParam();
  const auto config = test::write_postgres_config(
      dir_, "postgres", cluster_->dsn(), schema,
      std::string("lease_commit = \"") + c.lease_commit +
          "\"\n[engine]\npoll_interval_ms = 200\nlease_ms = 20000\nrescue_interval_ms = 500\n"
          "max_workers = 10\n");
  const auto record = dir_ / "runs.txt";
  const auto log = dir_ / "worker.log";
  {
    Engine producer(load_config_file(config));
    producer.enqueue_batch(
        std::vector<NewJob>(kJobs, NewJob{"restart", "record", R"({"ms": 20})", 0, 25, 0}));
  }
  auto storage = open_storage(load_config_file(config).storage);
  auto completed = [&] { return completed_restart_jobs(*storage); };

  CrashWorker worker(config, record, log);
  ASSERT_TRUE(test::wait_until([&] { return completed() >= kJobs / 4; }, 60s))
      << test::read_file(log);
  const int64_t completed_before = completed();

  const int64_t halt_started_us = wall_us();
  cluster_->halt(c.halt);
  const int64_t down_us = wall_us();
  // While the server is down the engine keeps trying, and says so.
  EXPECT_TRUE(test::wait_until(
      [&] { return test::read_file(log).find("claim failed, retrying in") != std::string::npos; },
      2s))
      << test::read_file(log);
  std::this_thread::sleep_for(kOutage - std::chrono::microseconds(wall_us() - down_us));
  ASSERT_TRUE(worker.alive()) << "the engine process died with the server:\n"
                              << test::read_file(log);
  const int64_t up_started_us = wall_us();
  cluster_->resume();
  const int64_t up_us = wall_us();

  ASSERT_TRUE(test::wait_until([&] { return completed() == kJobs; }, 60s))
      << "completed " << completed() << " of " << kJobs << "\n"
      << test::read_file(log);
  ASSERT_TRUE(worker.alive()) << test::read_file(log);
  worker.kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(worker.exit_status()) && WEXITSTATUS(worker.exit_status()) == 0)
      << "wait status " << worker.exit_status() << "; its log:\n"
      << log_excerpt(test::read_file(log));
  EXPECT_LT(completed_before, kJobs) << "the outage came mid-drain";

  // The log: the loss (claims and outcome recording failed) and the recovery.
  const std::string text = test::read_file(log);
  EXPECT_GE(count_lines_with(text, "claim failed, retrying in"), 1) << text;
  EXPECT_GE(count_lines_with(text, "claims work again"), 1) << text;
  EXPECT_GE(count_lines_with(text, "job outcomes failed, will retry"), 1) << text;
  EXPECT_GE(count_lines_with(text, "recording job outcomes works again"), 1) << text;

  // Storage: every job completed, none failed, pending or running.
  const std::string dsn = cluster_->dsn();
  const std::string jobs = "\"" + schema + "\".jobs";
  EXPECT_EQ(test::psql_int(dsn, "SELECT count(*) FROM " + jobs), kJobs);
  EXPECT_EQ(test::psql_int(dsn, "SELECT count(*) FROM " + jobs + " WHERE state = 4"), kJobs);
  // Jobs claimed before the server died (it died during halt(): nothing was
  // claimed between then and down_us) whose outcome was recorded only after
  // it was started again: they ran across the outage and were not lost.
  const int64_t held_outcomes = test::psql_int(
      dsn, "SELECT count(*) FROM " + jobs + " WHERE claimed_at < " + std::to_string(down_us) +
               " AND finalized_at >= " + std::to_string(up_started_us));
  // (After a crash that lost the claims' commits, those jobs were claimed
  // again after it: none need have held an outcome.)
  if (c.exactly_once()) {
    EXPECT_GE(held_outcomes, 1);
  }
  // Jobs claimed twice (a claim whose reply was lost with its connection is
  // given back on the next one): reported, not an error.
  const int64_t reclaimed =
      test::psql_int(dsn, "SELECT count(*) FROM " + jobs + " WHERE attempt > 1");
  const int64_t first_claim_after_us =
      test::psql_int(dsn, "SELECT coalesce(min(claimed_at), 0) FROM " + jobs +
                              " WHERE claimed_at >= " + std::to_string(down_us));
  const int64_t first_outcome_after_us =
      test::psql_int(dsn, "SELECT coalesce(min(finalized_at), 0) FROM " + jobs +
                              " WHERE finalized_at >= " + std::to_string(down_us));
  EXPECT_GT(first_claim_after_us, 0) << "nothing was claimed after the restart";

  // Executions, as the handler recorded them: every job at least once, and
  // exactly once unless a crash lost unflushed lease commits.
  const auto runs = test::read_executions(record);
  EXPECT_EQ(runs.size(), static_cast<size_t>(kJobs));
  int repeated = 0;
  for (const auto& [id, pids] : runs) repeated += pids.size() > 1;
  if (!c.exactly_once()) {
    // The runs the crash may have cost again, and the job's outcome is
    // still recorded below: nothing else to hold to.
  } else {
    EXPECT_EQ(repeated, 0) << "jobs executed more than once although no lease expired";
    // A completion whose commit reached the server but whose reply was lost is
    // retried and then refused: harmless only if that job
    // is completed and ran once, its first completion having counted.
    // No lease can be lost here (see lease_ms): the only refusals allowed
    // are those of outcomes recorded again after a lost reply.
    EXPECT_EQ(text.find("after its lease was lost"), std::string::npos) << log_excerpt(text);
  }
  const std::vector<int64_t> discarded = refused_on_retry(text);
  for (int64_t id : discarded) {
    EXPECT_EQ(
        test::psql_int(dsn, "SELECT state FROM " + jobs + " WHERE id = " + std::to_string(id)), 4)
        << "job " << id;
    if (c.exactly_once()) {
      EXPECT_EQ(runs.count(id) ? runs.at(id).size() : 0u, 1u) << "job " << id;
    }
  }

  const auto ms = [](int64_t us) { return static_cast<double>(us) / 1000.0; };
  RecordProperty("outage_ms", static_cast<int>(ms(up_us - halt_started_us)));
  RecordProperty("recovery_to_first_claim_ms", static_cast<int>(ms(first_claim_after_us - up_us)));
  std::printf(
      "restart test (%s, lease_commit %s): %lld of %d jobs done before the outage; server down "
      "%.0f ms "
      "(halt took %.0f ms, start took %.0f ms); after it was back: first claim %.0f ms, first "
      "recorded outcome %.0f ms; %lld outcomes held through the outage; %lld jobs claimed twice, "
      "%d executed twice; %zu late completions refused; claim failures logged %d\n",
      c.halt, c.lease_commit, static_cast<long long>(completed_before), kJobs,
      ms(up_us - halt_started_us), ms(down_us - halt_started_us), ms(up_us - up_started_us),
      ms(first_claim_after_us - up_us), ms(first_outcome_after_us - up_us),
      static_cast<long long>(held_outcomes), static_cast<long long>(reclaimed), repeated,
      discarded.size(), count_lines_with(text, "claim failed, retrying in"));
  std::printf("the engine's log of the outage:\n%s", outage_summary(text).c_str());
}

INSTANTIATE_TEST_SUITE_P(Postgres, PostgresRestart,
                         ::testing::Values(RestartCase{"fast", "async"},
                                           RestartCase{"immediate", "async"},
                                           RestartCase{"immediate", "sync"}),
                         case_name);

// The plugins the two-restart test runs on.
std::vector<std::string> restart_plugins() {
  std::vector<std::string> plugins = {"postgres"};
#ifdef CONVEYOR_TEST_HAS_POSTGRES_QUEUE
  plugins.push_back("postgres-queue");
#endif
  return plugins;
}

// Two restarts in one drain, on each PostgreSQL plugin and lease_commit:
// the first a fast shutdown, the second a crash (immediate), each once the
// engine has recovered from the one before. Every job completes; each runs
// once with lease_commit = "sync", at least once with "async".
using TwiceCase = std::tuple<std::string, std::string>;  // plugin, lease_commit

std::string twice_name(const ::testing::TestParamInfo<TwiceCase>& info) {
  std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class PostgresRestartTwice : public ::testing::TestWithParam<TwiceCase> {
 protected:
  void SetUp() override {
    CONVEYOR_NEED_BUILT_PLUGIN(std::get<0>(GetParam()));
    CONVEYOR_NEED_PG_SERVER_BINARIES();
    cluster_ = std::make_unique<test::ThrowawayCluster>(5460, 5469);
  }

  std::unique_ptr<test::ThrowawayCluster> cluster_;
  test::TempDir dir_;
};

TEST_P(PostgresRestartTwice, EngineRidesOutTwoRestartsInOneDrainAndLosesNothing) {
  constexpr int kJobs = 4000;
  constexpr auto kOutage = 2s;
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + 240s;
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::max(
        deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(0)));
  };
  // Leases far longer than an outage plus reconnect backoff: a second run of
  // any job would be a lost outcome or a lost claim handed out again.
  const auto& [plugin, lease_commit] = GetParam();
  const bool exactly_once = lease_commit == "sync";
  const auto config = test::write_postgres_config(
      dir_, plugin, cluster_->dsn(), "restart",
      "lease_commit = \"" + lease_commit +
          "\"\n[engine]\npoll_interval_ms = 200\nlease_ms = 20000\nrescue_interval_ms = 500\n"
          "max_workers = 10\n");
  const auto record = dir_ / "runs.txt";
  const auto log = dir_ / "worker.log";
  std::vector<int64_t> ids;
  {
    Engine producer(load_config_file(config));
    ids = producer.enqueue_batch(
        std::vector<NewJob>(kJobs, NewJob{"restart", "record", R"({"ms": 20})", 0, 25, 0}));
  }
  auto storage = open_storage(load_config_file(config).storage);
  auto completed = [&] { return completed_restart_jobs(*storage); };

  CrashWorker worker(config, record, log);
  struct Outage {
    const char* mode;
    int64_t completed_before = 0;
    double down_ms = 0;
    double to_progress_ms = 0;  // from the server's start to new completions
  };
  std::array<Outage, 2> outages = {Outage{"fast"}, Outage{"immediate"}};
  int64_t threshold = kJobs / 4;
  for (Outage& o : outages) {
    ASSERT_TRUE(test::wait_until([&] { return completed() >= threshold; }, left()))
        << "completed " << completed() << " of " << kJobs << " before the " << o.mode
        << " restart\n"
        << log_excerpt(test::read_file(log));
    o.completed_before = completed();
    const int64_t halt_started_us = wall_us();
    cluster_->halt(o.mode);
    std::this_thread::sleep_for(kOutage);
    ASSERT_TRUE(worker.alive()) << "the engine process died with the server:\n"
                                << log_excerpt(test::read_file(log));
    cluster_->resume();
    const int64_t up_us = wall_us();
    o.down_ms = static_cast<double>(up_us - halt_started_us) / 1000.0;
    // Recovered: jobs complete again (not only those finished during the
    // outage, whose outcomes wait in the engine).
    const int64_t after = o.completed_before + 200;
    ASSERT_TRUE(test::wait_until([&] { return completed() >= after; }, left()))
        << "no progress after the " << o.mode << " restart\n"
        << log_excerpt(test::read_file(log));
    o.to_progress_ms = static_cast<double>(wall_us() - up_us) / 1000.0;
    threshold = std::max<int64_t>(kJobs / 2, completed() + 200);
    ASSERT_LT(threshold, kJobs) << "the drain outran the restarts";
  }
  ASSERT_TRUE(test::wait_until([&] { return completed() == kJobs; }, left()))
      << "completed " << completed() << " of " << kJobs << "\n"
      << log_excerpt(test::read_file(log));
  const double drain_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(worker.alive()) << log_excerpt(test::read_file(log));
  worker.kill(SIGTERM);
  const std::string text = test::read_file(log);
  EXPECT_TRUE(WIFEXITED(worker.exit_status()) && WEXITSTATUS(worker.exit_status()) == 0)
      << "wait status " << worker.exit_status() << "; its log:\n"
      << log_excerpt(text);

  // Each outage was noticed and recovered from.
  EXPECT_GE(count_lines_with(text, "claims work again"), 2) << outage_summary(text);
  // Nothing lost: every job completed, none failed, pending or running.
  QueueStats end;
  for (const auto& s : storage->queue_stats(wall_us()))
    if (s.queue == "restart") end = s;
  EXPECT_EQ(end.completed, kJobs);
  EXPECT_EQ(end.pending + end.scheduled + end.running + end.failed + end.cancelled, 0);
  // Every enqueued id ran, exactly once unless the crash lost unflushed
  // lease commits.
  const auto runs = test::read_executions(record);
  EXPECT_EQ(runs.size(), static_cast<size_t>(kJobs));
  int repeated = 0;
  for (int64_t id : ids) {
    const size_t n = runs.count(id) ? runs.at(id).size() : 0;
    EXPECT_GE(n, 1u) << "job " << id << " never ran";
    repeated += n > 1;
  }
  if (exactly_once) {
    EXPECT_EQ(repeated, 0) << "jobs executed more than once although no lease expired";
    EXPECT_EQ(text.find("after its lease was lost"), std::string::npos) << log_excerpt(text);
  }
  const std::vector<int64_t> discarded = refused_on_retry(text);
  for (int64_t id : discarded) {
    const auto job = storage->get_job(id, wall_us());
    EXPECT_TRUE(job && job->state == JobState::kCompleted) << "job " << id;
  }

  std::printf(
      "two-restart test on %s, lease_commit %s: %d jobs of 20 ms, 10 workers, drained in %.1f s; "
      "%d executed more than once\n",
      plugin.c_str(), lease_commit.c_str(), kJobs, drain_s, repeated);
  for (const Outage& o : outages)
    std::printf(
        "  %s restart after %lld jobs: server down %.0f ms; %.0f ms from its start to 200 more "
        "completions\n",
        o.mode, static_cast<long long>(o.completed_before), o.down_ms, o.to_progress_ms);
  std::printf(
      "  0 lost, %d executed more than once, %zu late completions refused; the engine's log:\n%s",
      repeated, discarded.size(), outage_summary(text).c_str());
}

INSTANTIATE_TEST_SUITE_P(Postgres, PostgresRestartTwice,
                         ::testing::Combine(::testing::ValuesIn(restart_plugins()),
                                            ::testing::Values("sync", "async")),
                         twice_name);

}  // namespace
}  // namespace conveyor
