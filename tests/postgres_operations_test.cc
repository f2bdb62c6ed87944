// PostgreSQL as operators run it (issue 47), end to end: an engine process
// (tests/crash_worker: the real plugins through the real loader, a "record"
// kind that notes every execution) against a real server.
//
// - A database-level statement_timeout of 50 ms: the plugins set their own
//   on their connections and the completer splits a batch that fails, so
//   100,000 jobs all complete, each executed once, with the engine's memory
//   bounded; the setting is removed mid-drain as well. Before, a completion
//   batch timed out, was retried whole and grew for ever: the drain stalled
//   at a third and rescue ran jobs up to nine times.
// - The server crashed (pg_ctl stop -m immediate) for 30 s, three leases of
//   10 s, with lease_commit = "sync": no job whose first run had ended runs
//   again (the rescue step extends this process's leases, finished ones
//   too, before it rescues). Before, 50 to 92 jobs ran twice.
//
// Both on the canonical plugin and on postgres-queue. The first uses a
// database of its own on the shared server (CONVEYOR_TEST_PG_DSN); the
// second a cluster of its own (ports 5470-5479). Skipped without them,
// failed then when CI=true.
#include "crash_worker_process.hpp"
#include "pg_test_env.hpp"
#include "test_support.hpp"

#include <conveyor/engine.hpp>
#include <conveyor/internal/storage.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using test::CrashWorker;

int64_t wall_us() { return SystemClock::instance().wall_now_us(); }

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// The peak resident memory of a process (VmHWM), in MiB.
int64_t peak_rss_mib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) / 1024;
  return -1;
}

// Jobs executed more than once, by the record file.
std::vector<int64_t> run_twice(const std::filesystem::path& record) {
  std::vector<int64_t> ids;
  for (const auto& [id, pids] : test::read_executions(record))
    if (pids.size() > 1) ids.push_back(id);
  return ids;
}

// dsn (a URI or key=value pairs) naming database db instead.
std::string dsn_for_database(const std::string& dsn, const std::string& db) {
  if (dsn.rfind("postgresql://", 0) != 0 && dsn.rfind("postgres://", 0) != 0)
    return dsn + " dbname=" + db;  // libpq: the last dbname wins
  const size_t host = dsn.find("://") + 3;
  const size_t path = dsn.find('/', host);
  const size_t query = dsn.find('?', host);
  const std::string rest = query == std::string::npos ? "" : dsn.substr(query);
  return dsn.substr(0, path == std::string::npos ? std::min(query, dsn.size()) : path) + "/" + db +
         rest;
}

std::string first_ids(const std::vector<int64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 20; ++i) out += std::to_string(ids[i]) + " ";
  return out;
}

class PostgresOperations : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { CONVEYOR_NEED_BUILT_PLUGIN(GetParam()); }
  // Completed jobs of queue, or -1 while storage cannot answer.
  static int64_t completed(Storage& storage, const std::string& queue) {
    try {
      for (const auto& s : storage.queue_stats(wall_us()))
        if (s.queue == queue) return s.completed;
      return 0;
    } catch (const StorageError&) {
      return -1;
    }
  }
  test::TempDir dir_;
};

TEST_P(PostgresOperations, ADatabaseStatementTimeoutOf50msNeitherStallsNorRunsJobsTwice) {
  CONVEYOR_NEED_PG_DSN();
  constexpr int kJobs = 100'000;
  const std::string admin = *test::pg_dsn();
  const std::string db = test::fresh_schema_name("conveyor_st_");
  test::psql(admin, "CREATE DATABASE " + db);
  test::psql(admin, "ALTER DATABASE " + db + " SET statement_timeout = '50ms'");
  const std::string dsn = dsn_for_database(admin, db);
  // A client of its own in that database is held to 50 ms: the setting bites.
  EXPECT_THROW(test::psql(dsn, "SELECT pg_sleep(0.2)"), std::runtime_error);
  {
    const auto config = test::write_postgres_config(
        dir_, GetParam(), dsn, "ops",
        "[engine]\npoll_interval_ms = 200\nlease_ms = 10000\nrescue_interval_ms = 500\n"
        "max_workers = 50\n");
    {
      Engine producer(load_config_file(config));
      for (int i = 0; i < kJobs; i += 10'000)
        producer.enqueue_batch(
            std::vector<NewJob>(10'000, NewJob{"ops", "record", "{}", 0, 25, 0}));
    }
    auto storage = open_storage(load_config_file(config).storage);
    const auto record = dir_ / "runs.txt";
    const auto log = dir_ / "worker.log";
    CrashWorker worker(config, record, log);
    ASSERT_TRUE(test::wait_until([&] { return completed(*storage, "ops") >= kJobs / 3; }, 180s))
        << test::read_file(log).substr(0, 5000);
    // Removed mid-drain: pooled connections never had it, nothing changes.
    test::psql(admin, "ALTER DATABASE " + db + " RESET statement_timeout");
    ASSERT_TRUE(test::wait_until([&] { return completed(*storage, "ops") == kJobs; }, 300s))
        << "completed " << completed(*storage, "ops") << " of " << kJobs << "\n"
        << test::read_file(log).substr(0, 5000);
    const int64_t rss = peak_rss_mib(worker.pid());
    worker.kill(SIGTERM);
    EXPECT_TRUE(WIFEXITED(worker.exit_status()) && WEXITSTATUS(worker.exit_status()) == 0)
        << test::read_file(log).substr(0, 5000);
    const auto twice = run_twice(record);
    EXPECT_TRUE(twice.empty()) << twice.size() << " jobs ran twice: " << first_ids(twice);
    EXPECT_EQ(test::read_executions(record).size(), static_cast<size_t>(kJobs));
    // Bounded: the engine's own, not a backlog of unsaved outcomes (20 MiB
    // measured; AddressSanitizer's shadow and 256 MiB quarantine add more).
    EXPECT_GT(rss, 0);
    EXPECT_LT(rss, kSanitized ? 1536 : 512) << "MiB at its peak";
    const std::string text = test::read_file(log);
    EXPECT_EQ(text.find("rescued"), std::string::npos) << "nothing was rescued";
    std::cout << fmt::format(
        "{}: {} jobs under a database statement_timeout of 50 ms, peak RSS "
        "{} MiB, {} run twice\n",
        GetParam(), kJobs, rss, twice.size());
  }
  test::psql(admin, "DROP DATABASE " + db + " WITH (FORCE)");
}

TEST_P(PostgresOperations, AServerDownForThreeLeasesRunsNoFinishedJobAgain) {
  CONVEYOR_NEED_PG_SERVER_BINARIES();
  test::ThrowawayCluster cluster(5470, 5479);
  constexpr int kJobs = 8000;
  const auto config = test::write_postgres_config(
      dir_, GetParam(), cluster.dsn(), "outage",
      "lease_commit = \"sync\"\n[engine]\npoll_interval_ms = 200\nlease_ms = 10000\n"
      "rescue_interval_ms = 500\nmax_workers = 50\n");
  {
    // 50 to 200 ms each: about 25 s of work for 50 workers.
    std::mt19937 random(47);
    std::uniform_int_distribution<int> ms(50, 200);
    std::vector<NewJob> jobs;
    for (int i = 0; i < kJobs; ++i)
      jobs.push_back(
          NewJob{"outage", "record", fmt::format(R"({{"ms": {}}})", ms(random)), 0, 25, 0});
    Engine producer(load_config_file(config));
    producer.enqueue_batch(std::move(jobs));
  }
  auto storage = open_storage(load_config_file(config).storage);
  const auto record = dir_ / "runs.txt";
  const auto log = dir_ / "worker.log";
  CrashWorker worker(config, record, log);
  ASSERT_TRUE(test::wait_until([&] { return completed(*storage, "outage") >= 1000; }, 60s))
      << test::read_file(log).substr(0, 5000);
  cluster.halt("immediate");
  const auto down = std::chrono::steady_clock::now();
  // Three leases: every lease taken before the crash has expired when it is back.
  std::this_thread::sleep_until(down + 30s);
  ASSERT_TRUE(worker.alive()) << test::read_file(log).substr(0, 5000);
  cluster.resume();
  ASSERT_TRUE(test::wait_until([&] { return completed(*storage, "outage") == kJobs; }, 120s))
      << "completed " << completed(*storage, "outage") << " of " << kJobs << "\n"
      << test::read_file(log).substr(0, 5000);
  worker.kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(worker.exit_status()) && WEXITSTATUS(worker.exit_status()) == 0);
  const auto twice = run_twice(record);
  EXPECT_TRUE(twice.empty()) << twice.size() << " jobs ran twice: " << first_ids(twice) << "\n"
                             << test::read_file(log).substr(0, 5000);
  std::cout << fmt::format("{}: {} jobs, server down 30 s (3 leases): {} run twice\n", GetParam(),
                           kJobs, twice.size());
}

// A server whose max_connections cannot hold two engines' pools (2 x (8 +
// 1 LISTEN) > 12): the second engine says so at start, with the numbers and
// the fix, and once the drain is over idle pooled connections are closed
// (idle_close_s), so other clients get a connection again. Before, two
// servers held every slot idle after the drain and the CLI and psql got
// "too many clients", with no word at start.
TEST_P(PostgresOperations, AConnectionBudgetThatDoesNotFitIsNamedAndIdleSlotsComeBack) {
  CONVEYOR_NEED_PG_SERVER_BINARIES();
  // PostgreSQL's own settings (the test clusters' -c max_connections=200
  // would win over ALTER SYSTEM).
  ::setenv("PG_CLUSTER_SETTINGS", "default", 1);
  test::ThrowawayCluster cluster(5480, 5489);
  ::unsetenv("PG_CLUSTER_SETTINGS");
  test::psql(cluster.dsn(), "ALTER SYSTEM SET max_connections = 12");
  cluster.halt("fast");
  cluster.resume();
  ASSERT_EQ(test::psql_int(cluster.dsn(), "SELECT current_setting('max_connections')::int"), 12);
  constexpr int kJobs = 2000;
  const auto config = test::write_postgres_config(
      dir_, GetParam(), cluster.dsn(), "budget",
      "idle_close_s = 2\n[engine]\npoll_interval_ms = 200\nmax_workers = 20\n");
  {
    Engine producer(load_config_file(config));
    producer.enqueue_batch(
        std::vector<NewJob>(kJobs, NewJob{"budget", "record", R"({"ms": 5})", 0, 25, 0}));
  }
  const auto record = dir_ / "runs.txt";
  const auto log_a = dir_ / "a.log", log_b = dir_ / "b.log";
  auto storage = open_storage(load_config_file(config).storage);
  CrashWorker a(config, record, log_a);
  ASSERT_TRUE(test::wait_until([&] { return completed(*storage, "budget") >= 200; }, 60s))
      << test::read_file(log_a).substr(0, 5000);
  CrashWorker b(config, record, log_b);
  ASSERT_TRUE(test::wait_until([&] { return completed(*storage, "budget") == kJobs; }, 120s))
      << test::read_file(log_a).substr(0, 3000) << test::read_file(log_b).substr(0, 3000);
  const std::string warned = test::read_file(log_b);
  EXPECT_NE(warned.find("this process may open 9 connections (pool_size 8 + 1 for LISTEN)"),
            std::string::npos)
      << warned.substr(0, 5000);
  EXPECT_NE(warned.find("max_connections 12"), std::string::npos) << warned.substr(0, 5000);
  // Idle pooled connections go back within idle_close_s (2 s): what stays
  // open is, per engine, its LISTEN connection and the one its maintenance
  // (overrides every 250 ms) keeps busy; 8 of 12 are free for others.
  storage.reset();
  int64_t open = -1;
  EXPECT_TRUE(test::wait_until(
      [&] {
        try {
          open = test::psql_int(cluster.dsn(),
                                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                                "'client backend' AND pid <> pg_backend_pid()");
        } catch (const std::runtime_error&) {
          open = -1;  // too many clients, still
        }
        return open >= 0 && open <= 4;
      },
      20s))
      << open << " connections still open";
  a.kill(SIGTERM);
  b.kill(SIGTERM);
  std::cout << fmt::format(
      "{}: two engines on max_connections 12: warned at start; idle "
      "connections closed after the drain ({} open)\n",
      GetParam(), open);
}

// PgBouncer (Debian's package) on a free port of 127.0.0.1 in front of the
// server at host:port, in pool_mode mode; stopped when destroyed.
class Pgbouncer {
 public:
  static bool available() { return std::filesystem::exists("/usr/sbin/pgbouncer"); }
  Pgbouncer(const std::string& host, int port, const std::string& mode) : port_(test::free_port()) {
    // Files PgBouncer (which will not run as root: -u postgres) can read.
    std::filesystem::permissions(dir_.path(), std::filesystem::perms::all);
    std::ofstream(dir_ / "users.txt") << "\"postgres\" \"\"\n";
    std::ofstream(dir_ / "pgbouncer.ini")
        << "[databases]\n* = host=" << host << " port=" << port << "\n[pgbouncer]\n"
        << "listen_addr = 127.0.0.1\nlisten_port = " << port_ << "\nauth_type = trust\n"
        << "auth_file = " << (dir_ / "users.txt").string() << "\npool_mode = " << mode
        << "\nmax_client_conn = 500\ndefault_pool_size = 40\nunix_socket_dir =\n"
        << "logfile = " << (dir_ / "pgbouncer.log").string() << "\n";
    std::vector<std::string> args = {(dir_ / "pgbouncer.ini").string()};
    if (::geteuid() == 0) args.insert(args.begin(), {"-u", "postgres"});
    process_ = std::make_unique<test::Process>(test::Process::program("/usr/sbin/pgbouncer", args));
    ready_ = test::wait_until([&] {
      try {
        test::psql(dsn("postgres"), "SELECT 1");
        return true;
      } catch (const std::runtime_error&) {
        return false;
      }
    });
  }
  ~Pgbouncer() { process_->signal(SIGTERM); }
  bool ready() const { return ready_; }
  std::string dsn(const std::string& db) const {
    return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + db;
  }
  std::string log() const { return test::read_file(dir_ / "pgbouncer.log"); }

 private:
  test::TempDir dir_;
  uint16_t port_;
  std::unique_ptr<test::Process> process_;
  bool ready_ = false;
};

// Behind PgBouncer in transaction mode the plugins cannot keep their session
// (named prepared statements, LISTEN): opening fails at once, naming the
// pooler mode and the fix. Before, `serve` exited later with a bare
// 'prepared statement "conveyor_shared_swap" already exists'. In session
// mode the same drain works.
TEST_P(PostgresOperations, PgbouncerTransactionModeFailsAtStartSayingWhyAndSessionModeWorks) {
  CONVEYOR_NEED_PG_DSN();
  if (!Pgbouncer::available()) {
    if (test::running_in_ci()) FAIL() << "CI=true but pgbouncer is not installed";
    GTEST_SKIP() << "pgbouncer not installed (scripts/install-deps.sh test)";
  }
  // The shared server as test_env names it: postgresql://USER@HOST:PORT/DB.
  const std::string admin = *test::pg_dsn();
  const size_t at = admin.find('@'), colon = admin.find(':', at), slash = admin.find('/', at);
  ASSERT_TRUE(at != std::string::npos && colon != std::string::npos && slash != std::string::npos)
      << "expected a postgresql:// URI: " << admin;
  const std::string host = admin.substr(at + 1, colon - at - 1);
  const int port = std::stoi(admin.substr(colon + 1, slash - colon - 1));
  const std::string db = admin.substr(slash + 1, admin.find('?', slash) - slash - 1);
  {
    Pgbouncer transaction(host, port, "transaction");
    ASSERT_TRUE(transaction.ready()) << transaction.log();
    const auto config =
        test::write_postgres_config(dir_, GetParam(), transaction.dsn(db), "pgb_tx");
    try {
      open_storage(load_config_file(config).storage);
      ADD_FAILURE() << "opened through a pooler in transaction mode";
    } catch (const StorageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("pooler in transaction mode"), std::string::npos) << what;
      EXPECT_NE(what.find("pool_mode = session"), std::string::npos) << what;
    }
  }
  Pgbouncer session(host, port, "session");
  ASSERT_TRUE(session.ready()) << session.log();
  const auto config = test::write_postgres_config(
      dir_, GetParam(), session.dsn(db), test::fresh_schema_name("pgb_s"),
      "[engine]\npoll_interval_ms = 200\nmax_workers = 20\n");
  constexpr int kJobs = 2000;
  {
    Engine producer(load_config_file(config));
    producer.enqueue_batch(std::vector<NewJob>(kJobs, NewJob{"pgb", "record", "{}", 0, 25, 0}));
  }
  auto storage = open_storage(load_config_file(config).storage);
  const auto record = dir_ / "runs.txt";
  CrashWorker worker(config, record, dir_ / "worker.log");
  EXPECT_TRUE(test::wait_until([&] { return completed(*storage, "pgb") == kJobs; }, 120s))
      << test::read_file(dir_ / "worker.log").substr(0, 5000);
  worker.kill(SIGTERM);
  EXPECT_EQ(test::read_executions(record).size(), static_cast<size_t>(kJobs));
  EXPECT_TRUE(run_twice(record).empty());
}

INSTANTIATE_TEST_SUITE_P(Postgres, PostgresOperations,
                         ::testing::Values("postgres", "postgres-queue"), [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace conveyor
