// The PostgreSQL that operators really run (issue 47), against the real
// server, for both plugins (this file is compiled into each one's tests):
//   * the database's own statement_timeout / idle_session_timeout do not
//     reach the plugin's connections: it sets its own (statement_timeout_ms,
//     idle_in_transaction_session_timeout, idle_session_timeout = 0);
//   * a statement cancelled by statement_timeout fails as unavailable, names
//     the option, and its connection is closed;
//   * the LISTEN connection outlives idle_session_timeout, and an outage of
//     it is reported once, not per reconnect attempt;
//   * a pool that does not fit the server's connection budget is warned
//     about at open; idle pooled connections are closed after idle_close_s;
//   * claims work again within about half a second of the server coming back.
// Settings are changed on a scratch database (ScratchDatabase), never on the
// one other tests share.
#include "connection_budget.hpp"
#include "pg_log.hpp"
#include "pg_test_support.hpp"

#include <pqxx/nontransaction>
#include <pqxx/transaction>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

namespace conveyor::postgres::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

class PgServerSettingsTest : public PgTest {
 protected:
  void SetUp() override {
    PgTest::SetUp();
    set_log_capture([this](LogLevel level, std::string_view line) {
      std::lock_guard lock(log_mu_);
      (level == LogLevel::kWarning ? warnings_ : infos_).emplace_back(line);
    });
  }
  void TearDown() override {
    close_all();
    set_log_capture({});
    PgTest::TearDown();
  }

  // Options for a handle on dsn (another database, or through a proxy) under
  // application_name app.
  Opts opts_on(const std::string& dsn, const std::string& app, const Opts& extra = {}) const {
    auto fields = dsn_fields(dsn);
    fields["application_name"] = app;
    Opts o{{"dsn", keyvalue_dsn(fields)}, {"schema", schema_}};
    for (const auto& kv : extra) o.push_back(kv);
    return o;
  }

  // A TcpProxy in front of the test server, or nullptr when the server is not
  // on 127.0.0.1 (the proxy forwards there only).
  std::unique_ptr<TcpProxy> proxy_to_server() const {
    auto fields = dsn_fields(dsn_);
    if (fields["host"] != "127.0.0.1" && fields["host"] != "localhost") return nullptr;
    return std::make_unique<TcpProxy>("127.0.0.1",
                                      fields.count("port") ? std::stoi(fields["port"]) : 5432);
  }
  // The test server's DSN through proxy.
  std::string dsn_through(const TcpProxy& proxy) const {
    auto fields = dsn_fields(dsn_);
    fields["host"] = "127.0.0.1";
    fields["port"] = std::to_string(proxy.port());
    return keyvalue_dsn(fields);
  }

  // Backend pids of app's connections (on any database).
  std::vector<int> backends(const std::string& app, const std::string& extra_where = "") {
    std::vector<int> out;
    pqxx::nontransaction tx(*admin_);
    for (const auto& row : tx.exec_params("SELECT pid FROM pg_stat_activity WHERE "
                                          "application_name = $1 " +
                                              extra_where + " ORDER BY pid",
                                          app))
      out.push_back(row[0].as<int>());
    return out;
  }

  // Waits (bounded) until app has n or fewer backends; returns how many it has.
  size_t wait_for_at_most(const std::string& app, size_t n, milliseconds limit) {
    const auto deadline = steady_clock::now() + limit;
    size_t have = backends(app).size();
    while (have > n && steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(20));
      have = backends(app).size();
    }
    return have;
  }

  // Enqueues, claims and completes n jobs in batches of `batch`.
  void drain_in_batches(conveyor_storage* h, int n, int batch) {
    for (int done = 0; done < n; done += batch) enqueue_many(h, "big", batch);
    int completed = 0;
    for (int64_t token = 1; completed < n; ++token) {
      std::vector<JobCopy> got = claim(h, "big", batch, token, wall_us(), wall_us() + 600'000'000);
      ASSERT_FALSE(got.empty()) << "drained after " << completed << " of " << n;
      for (conveyor_status st : complete(h, leases_of(got), wall_us())) ASSERT_EQ(st, CONVEYOR_OK);
      completed += static_cast<int>(got.size());
    }
    EXPECT_EQ(completed, n);
    EXPECT_TRUE(claim(h, "big", batch, 999'999, wall_us(), wall_us() + 1'000'000).empty());
  }

  std::vector<std::string> warnings() {
    std::lock_guard lock(log_mu_);
    return warnings_;
  }
  std::vector<std::string> infos() {
    std::lock_guard lock(log_mu_);
    return infos_;
  }

  std::mutex log_mu_;
  std::vector<std::string> warnings_, infos_;
};

TEST_F(PgServerSettingsTest, DatabaseTimeoutsDoNotReachThePluginsConnections) {
  ScratchDatabase db(dsn_);
  db.sql("ALTER DATABASE \"" + db.name() + "\" SET statement_timeout = '1ms'");
  db.sql("ALTER DATABASE \"" + db.name() + "\" SET idle_session_timeout = '1s'");
  {
    // The settings are in force for a client that does not set its own.
    pqxx::connection plain(db.dsn());
    pqxx::nontransaction tx(plain);
    try {
      tx.exec("SELECT pg_sleep(0.05)");
      ADD_FAILURE() << "the database's statement_timeout of 1 ms did not cancel a 50 ms statement";
    } catch (const pqxx::sql_error& e) {
      EXPECT_EQ(e.sqlstate(), "57014") << e.what();
    }
  }
  const std::string app = schema_;
  conveyor_storage* h = open_tracked(opts_on(db.dsn(), app));  // migrations too
  ASSERT_NE(h, nullptr);
  // 10,000 jobs in batches of 2,000: each statement takes far longer than 1 ms.
  drain_in_batches(h, 10'000, 2'000);

  // Idle for longer than the database's idle_session_timeout: the same
  // connections serve the next call (none was closed by the server and
  // quietly replaced).
  const std::vector<int> before = backends(app);
  ASSERT_FALSE(before.empty());
  std::this_thread::sleep_for(milliseconds(1500));  // the timeout must be able to pass
  EXPECT_EQ(marker(h), marker(h));
  EXPECT_EQ(backends(app), before) << "the server closed an idle pooled connection";
  EXPECT_TRUE(warnings().empty()) << warnings().front();
  close_store(h);
  db.sql("ALTER DATABASE \"" + db.name() + "\" RESET statement_timeout");
  db.sql("ALTER DATABASE \"" + db.name() + "\" RESET idle_session_timeout");
}

TEST_F(PgServerSettingsTest, StatementTimeoutOptionCancelsABigStatementAndNamesIt) {
  ASSERT_NE(open_store(), nullptr);  // migrated with the default timeout
  const std::string app = schema_ + "_1ms";
  conveyor_storage* h = open_tracked(opts_on(dsn_, app, {{"statement_timeout_ms", "1"}}), false);
  ASSERT_NE(h, nullptr);
  std::vector<conveyor_new_job> jobs(50'000);
  const std::string payload = "{}";
  for (auto& j : jobs) {
    j = conveyor_new_job{};
    j.queue = str("big");
    j.kind = str("noop");
    j.payload = str(payload);
    j.max_attempts = 3;
  }
  std::vector<int64_t> ids(jobs.size());
  conveyor_error err{};
  ASSERT_EQ(api_->enqueue(h, jobs.data(), jobs.size(), ids.data(), &err), CONVEYOR_E_UNAVAILABLE)
      << "a 50,000-job insert finished within 1 ms?";
  const std::string message = err.message;
  EXPECT_NE(message.find("the statement was cancelled by statement_timeout (1 ms, plugin option "
                         "statement_timeout_ms)"),
            std::string::npos)
      << message;
  // The cancelled statement's connection was closed, not given back.
  EXPECT_EQ(wait_for_at_most(app, 0, milliseconds(10'000)), 0u)
      << "the connection whose statement was cancelled is still open";
}

TEST_F(PgServerSettingsTest, KilledConnectionIsNamedInPlainWords) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  enqueue_many(h, "q", 3);
  // A claim blocked on a lock, its backend terminated mid-statement.
  pqxx::connection locker(dsn_);
  pqxx::work lock(locker);
  const std::string lock_sql =
      lock.exec(
              "SELECT format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', string_agg(format('%I.%I', "
              "schemaname, tablename), ', ')) FROM pg_tables WHERE schemaname = " +
              lock.quote(schema_))[0][0]
          .as<std::string>();
  lock.exec(lock_sql);
  auto claimed = std::async(std::launch::async, [&] {
    conveyor_error e{};
    uint32_t n = 0;
    const conveyor_status st = api_->claim(
        h, str("q"), 10, 7, wall_us(), wall_us() + 60'000'000, [](void*, const conveyor_job*) {},
        nullptr, &n, &e);
    return std::make_pair(st, std::string(e.message));
  });
  std::vector<int> blocked;
  for (int i = 0; i < 1000 && blocked.empty(); ++i) {
    pqxx::connection watcher(dsn_);
    pqxx::nontransaction tx(watcher);
    for (const auto& row : tx.exec_params("SELECT pid FROM pg_stat_activity WHERE "
                                          "application_name = $1 AND wait_event_type = 'Lock'",
                                          schema_))
      blocked.push_back(row[0].as<int>());
    if (blocked.empty()) std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_FALSE(blocked.empty()) << "the claim never reached the lock";
  {
    pqxx::connection killer(dsn_);
    pqxx::nontransaction tx(killer);
    tx.exec("SELECT pg_terminate_backend(" + std::to_string(blocked[0]) + ")");
  }
  lock.abort();  // the claim's give-back of what it may have taken needs the tables
  auto [status, message] = claimed.get();
  EXPECT_EQ(status, CONVEYOR_E_UNAVAILABLE) << message;
  EXPECT_EQ(message.find("client encoding"), std::string::npos) << message;
  EXPECT_NE(message.find("the PostgreSQL server"), std::string::npos) << message;
  EXPECT_NE(message.find("lost the connection"), std::string::npos) << message;
}

TEST_F(PgServerSettingsTest, ListenerOutlivesIdleSessionTimeout) {
  ScratchDatabase db(dsn_);
  db.sql("ALTER DATABASE \"" + db.name() + "\" SET idle_session_timeout = '1s'");
  const std::string app = schema_;
  conveyor_storage* listener = open_tracked(opts_on(db.dsn(), app));
  conveyor_storage* producer = open_tracked(opts_on(db.dsn(), app + "_p"), false);
  ASSERT_NE(listener, nullptr);
  ASSERT_NE(producer, nullptr);
  std::vector<Notice> got;
  std::string msg;
  ASSERT_EQ(wait_notify(listener, 100'000, &got, &msg), CONVEYOR_OK) << msg;  // connects
  const std::vector<int> listening = backends(app, "AND query LIKE 'LISTEN%'");
  ASSERT_EQ(listening.size(), 1u);
  // 5 s of waiting: the LISTEN session runs no statement, idle_session_timeout
  // (1 s) would close it five times over.
  const auto until = steady_clock::now() + std::chrono::seconds(5);
  while (steady_clock::now() < until) {
    got.clear();
    ASSERT_EQ(wait_notify(listener, 200'000, &got, &msg), CONVEYOR_OK) << msg;
  }
  EXPECT_EQ(backends(app, "AND query LIKE 'LISTEN%'"), listening)
      << "the LISTEN connection was replaced";
  // And it still delivers.
  enqueue(producer, "mail");
  bool woken = false;
  for (int i = 0; i < 50 && !woken; ++i) {
    got.clear();
    ASSERT_EQ(wait_notify(listener, 100'000, &got, &msg), CONVEYOR_OK) << msg;
    for (const Notice& n : got) woken |= n.kind == CONVEYOR_NOTIFY_JOBS && n.queue == "mail";
  }
  EXPECT_TRUE(woken) << "no notification for the enqueue";
  EXPECT_TRUE(warnings().empty()) << warnings().front();
  close_store(listener);
  close_store(producer);
  db.sql("ALTER DATABASE \"" + db.name() + "\" RESET idle_session_timeout");
}

TEST_F(PgServerSettingsTest, ListenerOutageIsReportedOnceAndItsEndOnce) {
  const std::unique_ptr<TcpProxy> through = proxy_to_server();
  if (!through) GTEST_SKIP() << "the proxy needs a DSN with host=127.0.0.1";
  TcpProxy& proxy = *through;
  conveyor_storage* h = open_tracked(opts_on(dsn_through(proxy), schema_));
  ASSERT_NE(h, nullptr);
  std::vector<Notice> got;
  std::string msg;
  ASSERT_EQ(wait_notify(h, 100'000, &got, &msg), CONVEYOR_OK) << msg;
  proxy.go_down();
  // Two seconds of waits with the server unreachable: one failure reported
  // (the host logs it), the reconnect attempts after it are quiet.
  int failures = 0;
  std::string first_failure;
  const auto until = steady_clock::now() + std::chrono::seconds(2);
  while (steady_clock::now() < until) {
    if (wait_notify(h, 100'000, &got, &msg) != CONVEYOR_OK) {
      if (++failures == 1) first_failure = msg;
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  EXPECT_EQ(failures, 1) << first_failure;
  EXPECT_NE(first_failure.find("lost the LISTEN connection"), std::string::npos) << first_failure;
  EXPECT_EQ(first_failure.find("client encoding"), std::string::npos) << first_failure;
  EXPECT_TRUE(infos().empty());
  proxy.come_back();
  // Back within the reconnect backoff (at most about 600 ms): one info line.
  const auto back = steady_clock::now();
  while (infos().empty() && steady_clock::now() - back < std::chrono::seconds(5))
    EXPECT_EQ(wait_notify(h, 50'000, &got, &msg), CONVEYOR_OK) << msg;
  ASSERT_EQ(infos().size(), 1u);
  EXPECT_NE(infos()[0].find("LISTEN connection"), std::string::npos) << infos()[0];
  EXPECT_LT(steady_clock::now() - back, milliseconds(1500));
  EXPECT_TRUE(warnings().empty());
}

TEST(PgConnectionBudget, WarnsWhenThePoolDoesNotFitAndNamesTheFix) {
  ConnectionBudget b;
  b.max_connections = 8;
  b.reserved = 3;
  b.others = 2;
  EXPECT_EQ(connection_budget_warning(b, 2, "db:5432/x"), std::nullopt) << "3 of 3 fit";
  auto w = connection_budget_warning(b, 8, "db:5432/x");
  ASSERT_TRUE(w);
  for (const char* needle :
       {"may open 9 connections (pool_size 8 + 1 for LISTEN)", "only 3 connection(s) are left",
        "max_connections 8 - 3 reserved for superusers - 2 open by other clients",
        "Lower pool_size, raise max_connections, or put a pooler in front",
        "servers x (pool_size + 1) + other clients <= max_connections - "
        "superuser_reserved_connections (here 5)"})
    EXPECT_NE(w->find(needle), std::string::npos) << needle << " in: " << *w;
}

TEST_F(PgServerSettingsTest, PoolThatDoesNotFitIsWarnedAboutAtOpen) {
  ASSERT_NE(open_tracked(opts_on(dsn_, schema_, {{"pool_size", "2"}})), nullptr);
  EXPECT_TRUE(warnings().empty()) << warnings().front();
  close_all();
  // A database that admits 4 connections: pool_size 8 + LISTEN do not fit.
  ScratchDatabase db(dsn_, "CONNECTION LIMIT 4");
  ASSERT_NE(open_tracked(opts_on(db.dsn(), schema_, {{"pool_size", "8"}})), nullptr);
  const std::vector<std::string> w = warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("pool_size 8 + 1 for LISTEN"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("database " + db.name() + " allows 4 connection(s) (CONNECTION LIMIT)"),
            std::string::npos)
      << w[0];
  EXPECT_NE(w[0].find("servers x (pool_size + 1)"), std::string::npos) << w[0];
  close_all();
}

TEST_F(PgServerSettingsTest, IdleConnectionsAreClosedAfterIdleCloseS) {
  conveyor_storage* h = open_tracked(opts_on(dsn_, schema_, {{"idle_close_s", "1"}}));
  ASSERT_NE(h, nullptr);
  // Four calls held on a lock at once: four pooled connections.
  const std::string lock_sql =
      sql("SELECT format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', string_agg(format('%I.%I', "
          "schemaname, tablename), ', ')) FROM pg_tables WHERE schemaname = '" +
          schema_ + "'")[0][0]
          .as<std::string>();
  {
    pqxx::connection locker(dsn_);
    pqxx::work lock(locker);
    lock.exec(lock_sql);
    std::vector<std::future<void>> calls;
    for (int i = 0; i < 4; ++i)
      calls.push_back(std::async(std::launch::async, [&] { enqueue(h, "q"); }));
    size_t waiting = 0;
    for (int i = 0; i < 2000 && waiting < 4; ++i) {
      waiting = backends(schema_, "AND wait_event_type = 'Lock'").size();
      if (waiting < 4) std::this_thread::sleep_for(milliseconds(5));
    }
    ASSERT_EQ(waiting, 4u);
    lock.commit();
    for (auto& c : calls) c.get();
  }
  ASSERT_EQ(backends(schema_).size(), 4u);
  const auto idle_from = steady_clock::now();
  EXPECT_EQ(wait_for_at_most(schema_, 0, milliseconds(10'000)), 0u);
  const auto took = steady_clock::now() - idle_from;
  EXPECT_GE(took, milliseconds(900)) << "closed before idle_close_s";
  EXPECT_LT(took, milliseconds(3000));
  // The next call opens a connection again.
  enqueue(h, "q");
  EXPECT_EQ(backends(schema_).size(), 1u);
}

TEST_F(PgServerSettingsTest, ClaimsWorkAgainWithinHalfASecondOfTheServerComingBack) {
  const std::unique_ptr<TcpProxy> through = proxy_to_server();
  if (!through) GTEST_SKIP() << "the proxy needs a DSN with host=127.0.0.1";
  TcpProxy& proxy = *through;
  conveyor_storage* h = open_tracked(opts_on(dsn_through(proxy), schema_));
  ASSERT_NE(h, nullptr);
  enqueue_many(h, "q", 100);
  ASSERT_EQ(claim(h, "q", 1, 1, wall_us(), wall_us() + 60'000'000).size(), 1u);
  proxy.go_down();
  // Three seconds down, claimed from four threads as fast as they fail (the
  // postgres-queue plugin's maintenance threads add their own attempts).
  std::atomic<bool> up{false};
  std::atomic<int64_t> first_ok_ns{0};
  std::atomic<int64_t> token{100};
  std::vector<std::thread> claimers;
  for (int t = 0; t < 4; ++t)
    claimers.emplace_back([&] {
      while (first_ok_ns.load() == 0) {
        conveyor_error e{};
        uint32_t n = 0;
        const conveyor_status st = api_->claim(
            h, str("q"), 1, ++token, wall_us(), wall_us() + 60'000'000,
            [](void*, const conveyor_job*) {}, nullptr, &n, &e);
        if (st == CONVEYOR_OK && n == 1 && up.load()) {
          int64_t zero = 0;
          first_ok_ns.compare_exchange_strong(zero, steady_clock::now().time_since_epoch().count());
        }
        if (st != CONVEYOR_OK) std::this_thread::sleep_for(milliseconds(5));
      }
    });
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the outage
  proxy.come_back();
  const int64_t back_ns = steady_clock::now().time_since_epoch().count();
  up.store(true);
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (first_ok_ns.load() == 0 && steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(5));
  const int64_t ok_ns = first_ok_ns.load();
  first_ok_ns.store(1);  // stops the claimers if none got through
  for (auto& t : claimers) t.join();
  ASSERT_NE(ok_ns, 0) << "no claim got through within 10 s of the server coming back";
  const auto resumed = std::chrono::nanoseconds(ok_ns - back_ns);
  EXPECT_LT(resumed, milliseconds(800))
      << std::chrono::duration_cast<milliseconds>(resumed).count() << " ms";
  RecordProperty("resumed_ms",
                 static_cast<int>(std::chrono::duration_cast<milliseconds>(resumed).count()));
}

}  // namespace
}  // namespace conveyor::postgres::test
