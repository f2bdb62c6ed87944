// Lost connections: the plugin's server connections are terminated (as a
// server restart or a network drop would do) and it must report
// CONVEYOR_E_UNAVAILABLE at worst, reconnect, and neither lose nor duplicate
// work.
#include "pg_test_support.hpp"

#include <pqxx/transaction>

#include <chrono>
#include <future>
#include <map>
#include <thread>

namespace conveyor::postgres::test {
namespace {

using std::chrono::milliseconds;

class PgReconnectTest : public PgTest {
 protected:
  // Terminates the plugin's connections and waits until they are gone.
  void kill_connections() {
    terminate_plugin_connections();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + schema_ +
              "'")[0][0]
              .as<int>() == 0)
        return;
      std::this_thread::sleep_for(milliseconds(5));
    }
    ADD_FAILURE() << "the plugin's backends did not exit";
  }
};

TEST_F(PgReconnectTest, IdleConnectionsKilledByTheServerAreReplacedUnnoticed) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q");
  kill_connections();
  // The pool notices its dead idle connection before using it.
  EXPECT_GT(enqueue(h, "q"), id);
  EXPECT_EQ(job(h, id, 0).state, CONVEYOR_JOB_AVAILABLE);
  kill_connections();
  EXPECT_EQ(claim(h, "q", 10, 1, 0, 100).size(), 2u);
}

TEST_F(PgReconnectTest, ClaimCutOffMidStatementIsUnavailableAndChangesNothing) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  enqueue_many(h, "q", 5);
  // Hold a lock the claim needs, so it is mid-statement when its backend dies.
  pqxx::work lock(*admin_);
  lock.exec("LOCK TABLE \"" + schema_ + "\".queues IN ACCESS EXCLUSIVE MODE");
  auto claimed = std::async(std::launch::async, [&] {
    std::vector<JobCopy> out;
    uint32_t n = 0;
    conveyor_error err{};
    conveyor_status st = api_->claim(
        h, str("q"), 10, 42, 0, 100,
        [](void* ctx, const conveyor_job* j) {
          JobCopy c;
          c.id = j->id;
          static_cast<std::vector<JobCopy>*>(ctx)->push_back(c);
        },
        &out, &n, &err);
    return std::make_pair(st, std::string(err.message));
  });
  // Wait (bounded) until the claim is blocked on the lock, then cut it off.
  pqxx::connection watcher(dsn_);
  bool blocked = false;
  for (int i = 0; i < 2000 && !blocked; ++i) {
    pqxx::nontransaction tx(watcher);
    blocked = tx.exec("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + schema_ +
                      "' AND wait_event_type = 'Lock'")[0][0]
                  .as<int>() > 0;
    if (!blocked) std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_TRUE(blocked) << "the claim never reached the lock";
  {
    pqxx::nontransaction tx(watcher);
    tx.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '" +
            schema_ + "' AND wait_event_type = 'Lock'");
  }
  auto [status, message] = claimed.get();
  lock.abort();
  EXPECT_EQ(status, CONVEYOR_E_UNAVAILABLE) << message;
  EXPECT_NE(message.find("lost the connection"), std::string::npos) << message;
  // Nothing was claimed: the next claim gets every job on its first attempt.
  auto got = claim(h, "q", 10, 43, 0, 100);
  ASSERT_EQ(got.size(), 5u);
  for (const auto& j : got) EXPECT_EQ(j.attempt, 1);
}

TEST_F(PgReconnectTest, DrainWhileConnectionsKeepDyingLosesAndDuplicatesNothing) {
  constexpr int kJobs = 1000;
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::vector<int64_t> ids = enqueue_many(h, "q", kJobs);
  std::map<int64_t, int> completed_ok;  // job id -> completions that returned OK
  int unavailable = 0;
  int64_t token = 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int round = 0; std::chrono::steady_clock::now() < deadline; ++round) {
    if (round % 4 == 3) terminate_plugin_connections();  // asynchronous: may hit mid-call
    std::vector<JobCopy> got;
    uint32_t n = 0;
    conveyor_error err{};
    conveyor_status st = api_->claim(
        h, str("q"), 50, ++token, 0, 1'000'000,
        [](void* ctx, const conveyor_job* j) {
          JobCopy c;
          c.id = j->id;
          c.attempt = j->attempt;
          c.lease_token = j->lease_token;
          static_cast<std::vector<JobCopy>*>(ctx)->push_back(c);
        },
        &got, &n, &err);
    if (st == CONVEYOR_E_UNAVAILABLE) {
      ++unavailable;
      continue;
    }
    ASSERT_EQ(st, CONVEYOR_OK) << err.message;
    if (n == 0) break;
    std::vector<conveyor_lease> leases = leases_of(got);
    for (int tries = 0;; ++tries) {
      std::vector<conveyor_status> res(leases.size());
      st = api_->complete(h, leases.data(), leases.size(), 5, res.data(), &err);
      if (st == CONVEYOR_OK) {
        for (size_t i = 0; i < res.size(); ++i)
          if (res[i] == CONVEYOR_OK) ++completed_ok[leases[i].job_id];
        break;
      }
      ASSERT_EQ(st, CONVEYOR_E_UNAVAILABLE) << err.message;
      ASSERT_LT(tries, 20) << "complete never got through: " << err.message;
      ++unavailable;  // unknown outcome: completing again is safe
    }
  }
  for (const auto& [id, n] : completed_ok) EXPECT_EQ(n, 1) << "job " << id << " completed twice";
  // Every job is completed. One whose claim reply was lost (and whose give-back
  // also failed) would still be running under a lease nobody holds; there is
  // none, but if there were, rescue would return it and it would count here.
  int not_completed = 0;
  for (int64_t id : ids) not_completed += job(h, id, 10).state != CONVEYOR_JOB_COMPLETED;
  EXPECT_EQ(not_completed, 0);
  auto st = stats(h, 10);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].completed, kJobs);
  EXPECT_EQ(st[0].running + st[0].pending, 0);
  RecordProperty("unavailable_calls", unavailable);
}

TEST_F(PgReconnectTest, ListenerReconnectsAndCatchesUp) {
  conveyor_storage* listener = open_store();
  conveyor_storage* producer = open_store();
  ASSERT_NE(listener, nullptr);
  ASSERT_NE(producer, nullptr);
  std::vector<Notice> got;
  std::string msg;
  ASSERT_EQ(wait_notify(listener, 1'000'000, &got, &msg), CONVEYOR_OK) << msg;  // catch-up
  enqueue(producer, "q");
  got.clear();
  ASSERT_EQ(wait_notify(listener, 5'000'000, &got, &msg), CONVEYOR_OK) << msg;
  ASSERT_EQ(got.size(), 1u);

  kill_connections();
  enqueue(producer, "q");  // sent while nobody listens: lost, hence the catch-up
  // The dead LISTEN connection is reported once, then reopened.
  got.clear();
  conveyor_status first = wait_notify(listener, 1'000'000, &got, &msg);
  EXPECT_EQ(first, CONVEYOR_E_UNAVAILABLE) << "the waiter learns its connection died";
  EXPECT_NE(msg.find("LISTEN"), std::string::npos) << msg;
  got.clear();
  ASSERT_EQ(wait_notify(listener, 1'000'000, &got, &msg), CONVEYOR_OK) << msg;
  ASSERT_EQ(got.size(), 2u) << "catch-up: overrides and the known queue";
  EXPECT_EQ(got[0].kind, CONVEYOR_NOTIFY_RATE_LIMITS);
  EXPECT_EQ(got[1].kind, CONVEYOR_NOTIFY_JOBS);
  EXPECT_EQ(got[1].queue, "q");
  enqueue(producer, "q");
  got.clear();
  ASSERT_EQ(wait_notify(listener, 5'000'000, &got, &msg), CONVEYOR_OK) << msg;
  ASSERT_EQ(got.size(), 1u) << "notifications flow again";
}

// Opens a handle that reaches the server through a TcpProxy.
class PgProxiedTest : public PgReconnectTest {
 protected:
  void SetUp() override {
    PgReconnectTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto fields = dsn_fields(dsn_);
    const std::string host = fields.count("host") ? fields["host"] : "";
    if (host != "127.0.0.1" && host != "localhost")
      GTEST_SKIP() << "the proxy needs a DSN with host=127.0.0.1 (got '" << host << "')";
    proxy_ = std::make_unique<TcpProxy>("127.0.0.1",
                                        fields.count("port") ? std::stoi(fields["port"]) : 5432);
    fields["host"] = "127.0.0.1";
    fields["port"] = std::to_string(proxy_->port());
    fields["application_name"] = schema_;
    proxied_dsn_ = keyvalue_dsn(fields);
  }
  void TearDown() override {
    for (conveyor_storage* h : handles_) api_->close(h);
    handles_.clear();
    proxy_.reset();
    PgReconnectTest::TearDown();
  }
  conveyor_storage* open_proxied() { return open_store({{"dsn", proxied_dsn_}}); }

  std::unique_ptr<TcpProxy> proxy_;
  std::string proxied_dsn_;
};

TEST_F(PgProxiedTest, UnreachableServerFailsFastWithBackoffThenRecovers) {
  conveyor_storage* h = open_proxied();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q");
  proxy_->go_down();
  int64_t m = 0;
  conveyor_error err{};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(api_->change_marker(h, &m, &err), CONVEYOR_E_UNAVAILABLE);
  const std::string first = err.message;
  EXPECT_EQ(api_->change_marker(h, &m, &err), CONVEYOR_E_UNAVAILABLE);
  const std::string second = err.message;
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_NE(
      first.find("cannot connect to PostgreSQL at 127.0.0.1:" + std::to_string(proxy_->port())),
      std::string::npos)
      << first;
  EXPECT_NE(second.find("next attempt in"), std::string::npos)
      << "a second call within the backoff fails at once: " << second;
  EXPECT_LT(took, std::chrono::seconds(3)) << "no hanging while the server is away";

  proxy_->come_back();
  bool back = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!back && std::chrono::steady_clock::now() < deadline) {
    back = api_->change_marker(h, &m, &err) == CONVEYOR_OK;
    if (!back) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(back) << err.message;
  EXPECT_EQ(job(h, id, 0).state, CONVEYOR_JOB_AVAILABLE) << "nothing stored was lost";
}

TEST_F(PgProxiedTest, ServerRestartUnderAWaitingListener) {
  conveyor_storage* listener = open_proxied();
  conveyor_storage* producer = open_store();  // direct, unaffected
  ASSERT_NE(listener, nullptr);
  ASSERT_NE(producer, nullptr);
  std::vector<Notice> got;
  std::string msg;
  ASSERT_EQ(wait_notify(listener, 1'000'000, &got, &msg), CONVEYOR_OK) << msg;
  proxy_->go_down();
  enqueue(producer, "q");  // nobody listens now
  // Calls made while the server is away fail (or time out quietly), quickly.
  for (int i = 0; i < 5; ++i) {
    got.clear();
    const auto start = std::chrono::steady_clock::now();
    conveyor_status st = wait_notify(listener, 100'000, &got, &msg);
    EXPECT_TRUE(st == CONVEYOR_OK || st == CONVEYOR_E_UNAVAILABLE) << msg;
    EXPECT_TRUE(got.empty());
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  }
  proxy_->come_back();
  // Back: the listener reconnects (after its backoff) and reports the catch-up.
  bool caught_up = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!caught_up && std::chrono::steady_clock::now() < deadline) {
    got.clear();
    if (wait_notify(listener, 100'000, &got, &msg) != CONVEYOR_OK) continue;
    for (const Notice& n : got) caught_up |= n.kind == CONVEYOR_NOTIFY_JOBS && n.queue == "q";
  }
  EXPECT_TRUE(caught_up) << msg;
  enqueue(producer, "q");
  got.clear();
  ASSERT_EQ(wait_notify(listener, 5'000'000, &got, &msg), CONVEYOR_OK) << msg;
  ASSERT_EQ(got.size(), 1u) << "notifications flow again";
}

}  // namespace
}  // namespace conveyor::postgres::test
