// Chaos on PostgreSQL: an engine process (tests/crash_worker: the embedded
// engine, a PostgreSQL plugin through the real loader, a handler that records
// every execution and does nothing else) drains 20,000 jobs (limited to
// 2,000/s, so the drain lasts at least 10 s) while every second the test
// terminates all of that process's backends
// (pg_terminate_backend: its pooled connections and its LISTEN connection).
// No job may be lost: every enqueued id runs and ends completed. A job may
// run twice only if it was claimed and not yet recorded as finished when one
// of the kills came (its claim or its outcome was on a killed connection);
// the test reports how many did.
//
// The engine's connections carry an application_name of their own, so only
// they are killed: other tests share the server named by
// CONVEYOR_TEST_PG_DSN. Skipped without a DSN or a built plugin; failed then
// when CI=true.
#include "crash_worker_process.hpp"
#include "pg_test_env.hpp"
#include "test_support.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/storage.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <set>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using test::CrashWorker;

std::vector<std::string> chaos_plugins() {
  std::vector<std::string> plugins = {"postgres"};
#ifdef CONVEYOR_TEST_HAS_POSTGRES_QUEUE
  plugins.push_back("postgres-queue");
#endif
  return plugins;
}

// dsn with application_name set (URI or key=value form).
std::string with_application_name(const std::string& dsn, const std::string& name) {
  if (dsn.rfind("postgresql://", 0) == 0 || dsn.rfind("postgres://", 0) == 0)
    return dsn + (dsn.find('?') == std::string::npos ? "?" : "&") + "application_name=" + name;
  return dsn + " application_name=" + name;
}

int count_lines_with(const std::string& log, const std::string& needle) {
  int n = 0;
  for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++n;
  return n;
}

class PostgresChaos : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& plugin = GetParam();
    CONVEYOR_NEED_BUILT_PLUGIN(plugin);
    CONVEYOR_NEED_PG_DSN();
    dsn_ = *test::pg_dsn();
    schema_ = test::fresh_schema_name("chaos_");
    // The schema name is unique, so it names this test's engine connections.
    app_name_ = "conveyor_" + schema_;
    config_ = test::write_postgres_config(dir_, plugin, with_application_name(dsn_, app_name_),
                                          schema_, kEngine);
  }

  void TearDown() override { test::drop_schema(dsn_, schema_); }

  // Ids of the jobs claimed and not finished (running), by the plugin's own
  // tables.
  std::set<int64_t> running_ids() {
    const std::string s = "\"" + schema_ + "\"";
    const std::string sql = GetParam() == "postgres"
                                ? "SELECT id FROM " + s + ".jobs WHERE state = 3"
                                : "SELECT job_id FROM " + s + ".entries WHERE state = 3";
    std::set<int64_t> ids;
    for (const auto& line : test::psql(dsn_, sql)) ids.insert(std::stoll(line));
    return ids;
  }

  // Leases far longer than the whole run: a job runs again only when the
  // engine gave it back or never learnt it had claimed it, not because a
  // lease expired on a slow machine. The queue's rate limit makes the drain
  // last at least 10 s however fast the machine, so it sees about ten kills.
  static constexpr const char* kEngine =
      "[engine]\npoll_interval_ms = 100\nlease_ms = 60000\nrescue_interval_ms = 500\n"
      "max_workers = 10\n"
      "[queues.chaos]\nrate_limit = { rate = 2000, burst = 100 }\n";

  test::TempDir dir_;
  std::filesystem::path config_;
  std::string dsn_, schema_, app_name_;
};

TEST_P(PostgresChaos, KilledConnectionsLoseNoJobs) {
  constexpr int kJobs = 20000;
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + 240s;
  std::vector<int64_t> ids;
  {
    Engine producer(load_config_file(config_));
    ids = producer.enqueue_batch(
        std::vector<NewJob>(kJobs, NewJob{"chaos", "record", "{}", 0, 25, 0}));
  }
  ASSERT_EQ(ids.size(), static_cast<size_t>(kJobs));
  // The test's own view, on connections without the engine's name.
  test::TempDir view_dir;
  auto storage = open_storage(
      load_config_file(test::write_postgres_config(view_dir, GetParam(), dsn_, schema_)).storage);
  auto stats = [&] {
    for (const auto& s : storage->queue_stats(SystemClock::instance().wall_now_us()))
      if (s.queue == "chaos") return s;
    return QueueStats{};
  };

  const auto record = dir_ / "runs.txt";
  const auto log = dir_ / "worker.log";
  const auto drain_started = std::chrono::steady_clock::now();
  CrashWorker worker(config_, record, log);
  int kills = 0;                // rounds that terminated at least one backend
  int64_t terminated = 0;       // backends terminated in all
  std::set<int64_t> in_flight;  // running when a kill came
  const std::string kill_sql =
      "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
      "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = '" +
      app_name_ + "'";
  // The first kill as soon as the drain runs, then one a second.
  ASSERT_TRUE(test::wait_until([&] { return stats().completed > 0; }, 60s)) << test::read_file(log);
  for (bool first = true; stats().completed < kJobs && std::chrono::steady_clock::now() < deadline;
       first = false) {
    if (!first) std::this_thread::sleep_for(1s);  // the kill schedule, not synchronisation
    ASSERT_TRUE(worker.alive()) << "the engine process died:\n" << test::read_file(log);
    // pg_terminate_backend(pid, timeout) returns once the backend is gone:
    // what it had not committed is rolled back, so the jobs still running
    // afterwards include every job whose claim or outcome it carried.
    const int64_t n = test::psql_int(dsn_, kill_sql);
    if (n == 0) continue;
    ++kills;
    terminated += n;
    const auto running = running_ids();
    in_flight.insert(running.begin(), running.end());
  }
  ASSERT_TRUE(test::wait_until(
      [&] { return stats().completed >= kJobs; },
      std::chrono::duration_cast<std::chrono::milliseconds>(std::max(
          deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(0)))))
      << "completed " << stats().completed << " of " << kJobs << " after " << kills
      << " kills; the engine's log:\n"
      << test::read_file(log).substr(0, 20000);
  const double drain_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - drain_started).count();
  ASSERT_TRUE(worker.alive()) << test::read_file(log);
  worker.kill(SIGTERM);
  const std::string text = test::read_file(log);
  EXPECT_TRUE(WIFEXITED(worker.exit_status()) && WEXITSTATUS(worker.exit_status()) == 0)
      << "wait status " << worker.exit_status() << "; its log:\n"
      << text.substr(0, 20000);

  // Nothing lost: every job completed, none failed, pending or running.
  const QueueStats end = stats();
  EXPECT_EQ(end.completed, kJobs);
  EXPECT_EQ(end.pending + end.scheduled + end.running + end.failed + end.cancelled, 0);
  // Every enqueued id ran, and nothing else did.
  const auto runs = test::read_executions(record);
  EXPECT_EQ(runs.size(), static_cast<size_t>(kJobs));
  for (int64_t id : ids) EXPECT_EQ(runs.count(id), 1u) << "job " << id << " never ran";
  int repeated = 0;
  for (const auto& [id, pids] : runs) {
    if (pids.size() == 1) continue;
    ++repeated;
    EXPECT_EQ(in_flight.count(id), 1u)
        << "job " << id << " ran " << pids.size() << " times but was not running at any kill";
  }
  // The kills came during the drain and hit the engine's connections.
  EXPECT_GE(kills, 5) << "the drain ended before the connections were killed a few times";
  EXPECT_GE(count_lines_with(text, "failed"), 1) << "no failure was logged despite the kills";
  // A non-transient error on a lost connection would give up outcomes.
  EXPECT_EQ(text.find("their leases will expire"), std::string::npos) << text.substr(0, 20000);

  RecordProperty("kills", kills);
  RecordProperty("jobs_run_more_than_once", repeated);
  std::printf(
      "chaos test on %s: %d jobs drained in %.1f s (%.1f s with setup) under %d kills "
      "(%lld backends terminated); %zu jobs were running at a kill, %d ran more than once; "
      "0 lost; log: %d claim failures, %d outcome-recording failures, %d outcomes refused on "
      "retry, %d rescues\n",
      GetParam().c_str(), kJobs, drain_s,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), kills,
      static_cast<long long>(terminated), in_flight.size(), repeated,
      count_lines_with(text, "claim failed"), count_lines_with(text, "outcomes failed"),
      count_lines_with(text, "recording it again was refused"),
      count_lines_with(text, "whose leases expired"));
}

INSTANTIATE_TEST_SUITE_P(Chaos, PostgresChaos, ::testing::ValuesIn(chaos_plugins()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace conveyor
