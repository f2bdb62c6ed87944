// The postgres plugin against a real PostgreSQL (CONVEYOR_TEST_PG_DSN),
// driven through its C ABI table. Each test has a schema of its own.
#include "pg_schema.hpp"
#include "pg_test_support.hpp"

#include <pqxx/nontransaction>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <thread>

namespace conveyor::postgres::test {
namespace {

class PgStorageTest : public PgTest {};

TEST(PgEntryPoint, DescribesThePlugin) {
  const conveyor_storage_plugin* api =
      conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
  ASSERT_NE(api, nullptr);
  EXPECT_STREQ(api->name, "postgres");
  EXPECT_STREQ(api->version, "0.1.0");
  EXPECT_EQ(api->kind, static_cast<uint32_t>(CONVEYOR_KIND_CANONICAL));
  EXPECT_EQ(api->capabilities, CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_PROCESS |
                                   CONVEYOR_CAP_MULTI_HOST | CONVEYOR_CAP_NOTIFY |
                                   CONVEYOR_CAP_NOTIFY_DUE);
  EXPECT_EQ(api->struct_size, sizeof(conveyor_storage_plugin));
  EXPECT_EQ(api->abi_major, static_cast<uint32_t>(CONVEYOR_ABI_MAJOR));
  EXPECT_EQ(api->abi_minor, static_cast<uint32_t>(CONVEYOR_ABI_MINOR));
  EXPECT_NE(api->wait_for_notification, nullptr) << "NOTIFY is advertised, so the slot is set";
  EXPECT_EQ(conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR + 1, 0), nullptr);
  api->close(nullptr);  // a no-op
}

TEST_F(PgStorageTest, EnqueueClaimCompleteRoundTrip) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string binary("a\0b\xff\x01", 5);
  const int64_t before = wall_us();
  std::vector<conveyor_new_job> batch = {
      {str("emails"), str("send"), str(binary), 0, 5, 0},
      {str("emails"), str("send"), conveyor_str{nullptr, 0}, 0, 1, 0},
      {str("emails"), str("other"), str("{\"x\":1}"), 0, 2, 0},
  };
  std::vector<int64_t> ids(3, 0);
  conveyor_error err{};
  ASSERT_EQ(api_->enqueue(h, batch.data(), batch.size(), ids.data(), &err), CONVEYOR_OK)
      << err.message;
  EXPECT_GT(ids[0], 0);
  EXPECT_LT(ids[0], ids[1]) << "ids in batch order";
  EXPECT_LT(ids[1], ids[2]) << "ids in batch order";
  EXPECT_EQ(api_->enqueue(h, nullptr, 0, nullptr, &err), CONVEYOR_OK) << "n == 0 is a no-op";

  JobCopy fresh = job(h, ids[0], 10);
  EXPECT_EQ(fresh.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(fresh.queue, "emails");
  EXPECT_EQ(fresh.kind, "send");
  EXPECT_EQ(fresh.payload, binary) << "payload bytes (with NUL and 0xff) must round-trip";
  EXPECT_EQ(fresh.attempt, 0);
  EXPECT_EQ(fresh.max_attempts, 5);
  EXPECT_EQ(fresh.lease_token, 0);
  EXPECT_EQ(fresh.finalized_at, 0);
  EXPECT_GE(fresh.created_at, before - 1'000'000);
  EXPECT_LE(fresh.created_at, before + 60'000'000);

  auto got = claim(h, "emails", 10, /*token=*/77, /*now=*/100, /*expires=*/1100);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(ids_of(got), ids);
  for (const auto& j : got) {
    EXPECT_EQ(j.state, CONVEYOR_JOB_RUNNING);
    EXPECT_EQ(j.queue, "emails");
    EXPECT_EQ(j.attempt, 1) << "attempt += 1 on claim";
    EXPECT_EQ(j.lease_token, 77);
    EXPECT_EQ(j.lease_expires, 1100);
    EXPECT_EQ(j.finalized_at, 0);
  }
  EXPECT_EQ(got[0].payload, binary);
  EXPECT_EQ(got[1].payload, "");
  EXPECT_EQ(got[2].kind, "other");
  EXPECT_EQ(got[2].max_attempts, 2);
  EXPECT_TRUE(claim(h, "emails", 10, 78, 100, 1100).empty()) << "nothing left to claim";

  JobCopy running = job(h, ids[1], 150);
  EXPECT_EQ(running.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(running.lease_token, 77);
  EXPECT_EQ(running.lease_expires, 1100);

  EXPECT_EQ(complete(h, leases_of(got), 200), std::vector<conveyor_status>(3, CONVEYOR_OK));
  JobCopy done = job(h, ids[0], 300);
  EXPECT_EQ(done.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(done.finalized_at, 200);
  EXPECT_EQ(done.lease_token, 0);
  EXPECT_EQ(done.lease_expires, 0);
  EXPECT_EQ(done.attempt, 1);
  EXPECT_EQ(complete(h, leases_of(got), 300),
            std::vector<conveyor_status>(3, CONVEYOR_E_LEASE_LOST))
      << "completing twice: the job is no longer running";
  EXPECT_EQ(get(h, 999999999, 0, nullptr), CONVEYOR_E_NOT_FOUND);
}

TEST_F(PgStorageTest, ClaimOrdersByPriorityRunAtIdUsingTheHostClock) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  // Times are tiny on purpose: eligibility must use the host's now_us, not
  // the server's clock (which is decades later).
  int64_t p5 = enqueue(h, "q", 5, 10);
  int64_t p1_30 = enqueue(h, "q", 1, 30);
  int64_t p1_20a = enqueue(h, "q", 1, 20);
  int64_t p1_20b = enqueue(h, "q", 1, 20);
  int64_t not_due = enqueue(h, "q", 0, 50);
  int64_t neg = enqueue(h, "q", -3, 40);
  enqueue(h, "other", -100, 0);  // other queues are never claimed

  EXPECT_EQ(job(h, not_due, 49).state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(job(h, not_due, 50).state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(ids_of(claim(h, "q", 2, 1, 40, 1000)), (std::vector<int64_t>{neg, p1_20a}))
      << "LIMIT picks the first jobs by priority, run_at, id";
  EXPECT_EQ(ids_of(claim(h, "q", 100, 2, 40, 1000)), (std::vector<int64_t>{p1_20b, p1_30, p5}))
      << "callbacks in priority, run_at, id order; the job due at 50 is not claimable at 40";
  EXPECT_EQ(ids_of(claim(h, "q", 100, 3, 50, 1000)), (std::vector<int64_t>{not_due}));
  EXPECT_TRUE(claim(h, "q", 0, 4, 1'000, 5'000).empty()) << "max_jobs == 0 claims nothing";
  EXPECT_TRUE(claim(h, "never-used", 10, 5, 1'000, 5'000).empty());
}

TEST_F(PgStorageTest, ClaimReadsOnlyReadyRowsThroughThePartialIndex) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  enqueue_many(h, "q", 50);
  sql("ANALYZE \"" + schema_ + "\".jobs");
  // On a table this small a scan would be as cheap; ask what serves the claim.
  sql("SET enable_seqscan = off");
  pqxx::result plan = sql("EXPLAIN WITH picked AS (SELECT id FROM \"" + schema_ +
                          "\".jobs WHERE queue = 'q' AND state = 1 AND run_at <= 5"
                          " ORDER BY priority, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED)"
                          " SELECT * FROM picked");
  sql("RESET enable_seqscan");
  std::string text;
  for (const auto& row : plan) text += std::string(row[0].c_str()) + "\n";
  EXPECT_NE(text.find("jobs_ready"), std::string::npos) << text;
}

// Prepared statements run on generic plans, which cannot see how many leases
// a batch has and use statistics from whenever ANALYZE last ran. Even after
// an ANALYZE that saw no running job, every statement that touches jobs by id
// must look them up by primary key, never scan an index of running jobs (that
// made each completion read every running job and dead index entry), and a
// batch must cost in proportion to its size (a drain that fell behind sends
// tens of thousands of leases at once).
TEST_F(PgStorageTest, GenericPlansLookJobsUpByPrimaryKey) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  for (int i = 0; i < 4; ++i) enqueue_many(h, "q", 5000);
  sql("VACUUM ANALYZE \"" + schema_ + "\".jobs");  // 20,000 available, none running
  struct Case {
    const char* statement;
    const char* args;
  };
  const Case cases[] = {
      {stmt::kClaim, "('q', 5, 100, 1, 2, 'host:1')"},
      {stmt::kComplete, "(1, '{1,2,3}', '{7,7,7}')"},
      {stmt::kExtend, "(1, '{1,2,3}', '{7,7,7}')"},
      {stmt::kRelease, "(1, '{1,2,3}', '{7,7,7}')"},
      {stmt::kFailRetry, "(1, 'x', 1, 7)"},
      {stmt::kCancel, "(1, 1)"},
  };
  for (const Case& c : cases) {
    const std::string plan = generic_plan(statement_sql(c.statement, schema_), c.args);
    EXPECT_NE(plan.find("jobs_pkey"), std::string::npos) << c.statement << ":\n" << plan;
    EXPECT_EQ(plan.find("jobs_lease"), std::string::npos) << c.statement << ":\n" << plan;
    EXPECT_EQ(plan.find("Seq Scan"), std::string::npos) << c.statement << ":\n" << plan;
    // A join filter over all pairs would make a big batch quadratic.
    EXPECT_EQ(plan.find("Join Filter"), std::string::npos) << c.statement << ":\n" << plan;
  }
}

// lease_commit: the statements that claim, complete and fail jobs set
// synchronous_commit for their own transaction to the session's
// conveyor.lease_commit ("off": no wait for the WAL flush); the others (cancel
// here) leave the server's setting alone. Run here inside an explicit
// transaction, where the local setting can be read back afterwards.
TEST_F(PgStorageTest, LeaseStatementsCommitWithoutWaitingForTheFlushWhenAsync) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  struct Case {
    const char* statement;
    const char* args;
  };
  const Case lease_statements[] = {
      {stmt::kClaim, "('q', 5, 100, 1, 2, 'host:1')"},
      {stmt::kClaimKinds, "('q', 5, 100, 1, 2, 'host:1', '{k}')"},
      {stmt::kComplete, "(1, '{1,2,3}', '{7,7,7}')"},
      {stmt::kFailRetry, "(1, 'x', 1, 7)"},
      {stmt::kFailFinal, "(1, 'x', 1, 7)"},
  };
  auto setting_after = [&](const char* statement, const char* args, const char* lease_commit) {
    pqxx::work tx(*admin_);
    tx.exec("SET LOCAL synchronous_commit = on");
    tx.exec(std::string("SET LOCAL conveyor.lease_commit = '") + lease_commit + "'");
    tx.exec("PREPARE probe AS " + statement_sql(statement, schema_));
    tx.exec(std::string("EXECUTE probe ") + args);
    const std::string value = tx.exec1("SHOW synchronous_commit")[0].c_str();
    tx.exec("DEALLOCATE probe");  // not undone by the rollback
    tx.abort();
    return value;
  };
  for (const Case& c : lease_statements) {
    EXPECT_EQ(setting_after(c.statement, c.args, "off"), "off") << c.statement;
    EXPECT_EQ(setting_after(c.statement, c.args, "on"), "on") << c.statement;
  }
  // Not a lease statement: the server's setting stays.
  EXPECT_EQ(setting_after(stmt::kCancel, "(1, 1)", "off"), "on");
}

TEST_F(PgStorageTest, StaleLeaseCannotTouchTheNewClaimant) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q");
  ASSERT_EQ(claim(h, "q", 1, /*token=*/111, 0, /*expires=*/100).size(), 1u);
  uint32_t rescued = 0;
  conveyor_error err{};
  ASSERT_EQ(api_->rescue_expired(h, 101, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  ASSERT_EQ(rescued, 1u);
  auto b = claim(h, "q", 1, /*token=*/222, 101, 1000);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].attempt, 2);

  const conveyor_lease stale{id, 111};
  EXPECT_EQ(complete(h, {stale}, 150), std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST});
  EXPECT_EQ(extend(h, {stale}, 99'999), std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST});
  EXPECT_EQ(release(h, {stale}, 150), std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST});
  std::string msg;
  EXPECT_EQ(fail(h, stale, "boom", -1, 150, &msg), CONVEYOR_E_LEASE_LOST);
  EXPECT_NE(msg.find(std::to_string(id)), std::string::npos) << msg;
  EXPECT_EQ(fail(h, {id + 1000, 222}, "boom", -1, 150), CONVEYOR_E_LEASE_LOST);

  JobCopy still = job(h, id, 160);
  EXPECT_EQ(still.state, CONVEYOR_JOB_RUNNING) << "stale calls changed nothing";
  EXPECT_EQ(still.lease_token, 222);
  EXPECT_EQ(still.lease_expires, 1000);

  // One batch with a stale lease, the current one and the current one twice.
  EXPECT_EQ(complete(h, {stale, {id, 222}, {id, 222}, {id + 7, 222}}, 170),
            (std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST, CONVEYOR_OK, CONVEYOR_OK,
                                          CONVEYOR_E_LEASE_LOST}));
  EXPECT_EQ(job(h, id, 180).finalized_at, 170);
}

TEST_F(PgStorageTest, BatchCompletionReportsEachLease) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  enqueue_many(h, "q", 300);
  auto got = claim(h, "q", 300, 5, 0, 10'000);
  ASSERT_EQ(got.size(), 300u);
  std::vector<conveyor_lease> leases = leases_of(got);
  for (size_t i = 0; i < leases.size(); i += 3) leases[i].lease_token = 6;  // every third stale
  auto res = complete(h, leases, 100);
  for (size_t i = 0; i < res.size(); ++i)
    EXPECT_EQ(res[i], i % 3 == 0 ? CONVEYOR_E_LEASE_LOST : CONVEYOR_OK) << i;
  auto st = stats(h, 100);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].completed, 200);
  EXPECT_EQ(st[0].running, 100);
}

TEST_F(PgStorageTest, FailWithRetryThenFinal) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q", 0, 0, /*max_attempts=*/3);
  ASSERT_EQ(claim(h, "q", 1, 1, 10, 100).size(), 1u);
  std::string msg;
  ASSERT_EQ(fail(h, {id, 1}, "first failure", /*retry_at=*/500, /*now=*/20, &msg), CONVEYOR_OK)
      << msg;
  JobCopy retry = job(h, id, 30);
  EXPECT_EQ(retry.state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(retry.run_at, 500);
  EXPECT_EQ(retry.last_error, "first failure");
  EXPECT_EQ(retry.attempt, 1);
  EXPECT_EQ(retry.lease_token, 0);
  EXPECT_TRUE(claim(h, "q", 1, 2, 499, 1000).empty());
  auto b = claim(h, "q", 1, 3, 500, 1000);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].attempt, 2);
  EXPECT_EQ(b[0].last_error, "first failure");
  // Error text PostgreSQL could not store as is is kept, repaired.
  ASSERT_EQ(fail(h, {id, 3}, std::string("fatal\0\xff!", 8), -1, 600, &msg), CONVEYOR_OK) << msg;
  JobCopy failed = job(h, id, 700);
  EXPECT_EQ(failed.state, CONVEYOR_JOB_FAILED);
  EXPECT_EQ(failed.finalized_at, 600);
  EXPECT_EQ(failed.last_error, "fatal\\0\xEF\xBF\xBD!");
  EXPECT_TRUE(claim(h, "q", 1, 4, 10'000, 20'000).empty()) << "FAILED is final";
  EXPECT_EQ(fail(h, {id, 3}, "again", -1, 800), CONVEYOR_E_LEASE_LOST);
}

TEST_F(PgStorageTest, ReleaseExtendAndRescue) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q", 0, 0, /*max_attempts=*/2);
  ASSERT_EQ(claim(h, "q", 1, 5, 10, 100).size(), 1u);
  EXPECT_EQ(release(h, {{id, 5}}, 40), std::vector<conveyor_status>{CONVEYOR_OK});
  JobCopy r = job(h, id, 40);
  EXPECT_EQ(r.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(r.attempt, 0) << "release does not spend the attempt";
  EXPECT_EQ(r.run_at, 40);
  EXPECT_EQ(release(h, {{id, 5}}, 50), std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST});

  ASSERT_EQ(claim(h, "q", 1, 9, 40, 100).size(), 1u);
  EXPECT_EQ(extend(h, {{id, 9}, {id, 8}}, 500),
            (std::vector<conveyor_status>{CONVEYOR_OK, CONVEYOR_E_LEASE_LOST}));
  EXPECT_EQ(job(h, id, 0).lease_expires, 500);
  uint32_t rescued = 99;
  conveyor_error err{};
  ASSERT_EQ(api_->rescue_expired(h, 500, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(rescued, 0u) << "lease_expires < now is strict";
  ASSERT_EQ(api_->rescue_expired(h, 501, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(rescued, 1u);
  JobCopy back = job(h, id, 501);
  EXPECT_EQ(back.state, CONVEYOR_JOB_AVAILABLE) << "attempt 1 < max_attempts 2";
  EXPECT_EQ(back.run_at, 40) << "a rescued job keeps its run_at (here the release's)";
  EXPECT_EQ(back.last_error, "lease expired: worker presumed dead");
  ASSERT_EQ(claim(h, "q", 1, 10, 501, 600).size(), 1u);
  ASSERT_EQ(api_->rescue_expired(h, 601, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(rescued, 1u);
  JobCopy dead = job(h, id, 601);
  EXPECT_EQ(dead.state, CONVEYOR_JOB_FAILED) << "attempts exhausted";
  EXPECT_EQ(dead.finalized_at, 601);

  enqueue_many(h, "r", 3);
  ASSERT_EQ(claim(h, "r", 3, 11, 0, 10).size(), 3u);
  ASSERT_EQ(api_->rescue_expired(h, 20, 2, &rescued, &err), CONVEYOR_OK);
  EXPECT_EQ(rescued, 2u) << "max_jobs bounds the work";
  ASSERT_EQ(api_->rescue_expired(h, 20, 2, &rescued, &err), CONVEYOR_OK);
  EXPECT_EQ(rescued, 1u);
}

// A rescued job keeps its place: it is claimed before jobs enqueued after it.
TEST_F(PgStorageTest, RescuedJobKeepsItsPlaceInTheQueue) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t first = enqueue(h, "q", 0, /*run_at=*/10);
  ASSERT_EQ(claim(h, "q", 1, 1, 50, 100).size(), 1u);
  const int64_t second = enqueue(h, "q", 0, /*run_at=*/60);
  conveyor_error err{};
  uint32_t rescued = 0;
  ASSERT_EQ(api_->rescue_expired(h, 200, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  ASSERT_EQ(rescued, 1u);
  EXPECT_EQ(job(h, first, 200).run_at, 10);
  auto next = claim(h, "q", 1, 2, 200, 300);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].id, first) << "the rescued job went behind job " << second;
}

TEST_F(PgStorageTest, CancelNonFinalJobsOnly) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t waiting = enqueue(h, "q", 0, 1'000'000);
  int64_t running = enqueue(h, "q");
  ASSERT_EQ(ids_of(claim(h, "q", 10, 4, 0, 100)), std::vector<int64_t>{running});
  conveyor_error err{};
  ASSERT_EQ(api_->cancel(h, waiting, 10, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(job(h, waiting, 10).state, CONVEYOR_JOB_CANCELLED);
  ASSERT_EQ(api_->cancel(h, running, 20, &err), CONVEYOR_OK) << err.message;
  JobCopy c = job(h, running, 20);
  EXPECT_EQ(c.state, CONVEYOR_JOB_CANCELLED);
  EXPECT_EQ(c.finalized_at, 20);
  EXPECT_EQ(complete(h, {{running, 4}}, 30), std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST})
      << "the cancelled job's worker loses its lease";
  EXPECT_EQ(api_->cancel(h, running, 40, &err), CONVEYOR_E_NOT_FOUND) << "already final";
  EXPECT_EQ(api_->cancel(h, 987654321, 40, &err), CONVEYOR_E_NOT_FOUND) << "no such job";
}

TEST_F(PgStorageTest, PauseResumeStatsAndQueues) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  using Q = std::vector<std::pair<std::string, int32_t>>;
  EXPECT_TRUE(queues(h).empty());
  EXPECT_TRUE(stats(h, 0).empty());
  const int64_t now = 1'000;
  int64_t c = enqueue(h, "b", 0, 0);
  int64_t f = enqueue(h, "b", 1, 0);
  int64_t r = enqueue(h, "b", 2, 0);
  ASSERT_EQ(ids_of(claim(h, "b", 3, 7, now, now + 100)), (std::vector<int64_t>{c, f, r}));
  ASSERT_EQ(complete(h, {{c, 7}}, now), std::vector<conveyor_status>{CONVEYOR_OK});
  ASSERT_EQ(fail(h, {f, 7}, "x", -1, now), CONVEYOR_OK);
  enqueue(h, "b", 0, now);      // pending: due exactly now
  enqueue(h, "b", 0, now + 1);  // scheduled
  int64_t x = enqueue(h, "b", 0, now + 1);
  conveyor_error err{};
  ASSERT_EQ(api_->cancel(h, x, now, &err), CONVEYOR_OK);
  enqueue(h, "B", 0, 0);  // byte order: "B" < "a" < "b"
  enqueue(h, "a", 0, 0);

  auto st = stats(h, now);
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].queue, "B") << "name order is byte order, whatever the collation";
  EXPECT_EQ(st[1].queue, "a");
  EXPECT_EQ(st[2].queue, "b");
  EXPECT_EQ(st[2].pending, 1);
  EXPECT_EQ(st[2].scheduled, 1);
  EXPECT_EQ(st[2].running, 1);
  EXPECT_EQ(st[2].completed, 1);
  EXPECT_EQ(st[2].failed, 1);
  EXPECT_EQ(st[2].cancelled, 1);
  EXPECT_EQ(stats(h, now + 1)[2].pending, 2) << "the scheduled job is due at now + 1";

  int64_t m0 = marker(h);
  pause(h, "a", true);
  pause(h, "empty", true);  // a queue with no jobs may be paused
  EXPECT_NE(marker(h), m0) << "pausing advances the change marker";
  EXPECT_TRUE(claim(h, "a", 10, 8, now, now + 100).empty()) << "a paused queue yields nothing";
  EXPECT_EQ(queues(h), (Q{{"B", 0}, {"a", 1}, {"b", 0}, {"empty", 1}}));
  st = stats(h, now);
  ASSERT_EQ(st.size(), 4u);
  EXPECT_EQ(st[1].paused, 1);
  EXPECT_EQ(st[1].pending, 1);
  EXPECT_EQ(st[3].queue, "empty");
  EXPECT_EQ(st[3].paused, 1);
  int64_t m1 = marker(h);
  pause(h, "a", false);
  pause(h, "empty", false);
  EXPECT_NE(marker(h), m1) << "resuming advances the change marker";
  EXPECT_EQ(claim(h, "a", 10, 9, now, now + 100).size(), 1u) << "resumed queue is claimable";
  EXPECT_EQ(stats(h, now).size(), 3u) << "a resumed queue without jobs is not reported";
  EXPECT_EQ(queues(h).size(), 4u) << "but stays known";
  EXPECT_EQ(api_->set_queue_paused(h, conveyor_str{nullptr, 0}, 1, 0, &err), CONVEYOR_E_INVALID);
}

TEST_F(PgStorageTest, PurgeFinishedDeletesOldFinalJobsOnly) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::vector<int64_t> done;
  for (int64_t t : {100, 200, 300}) {
    done.push_back(enqueue(h, "q"));
    auto g = claim(h, "q", 1, t, 0, 10'000);
    EXPECT_EQ(complete(h, leases_of(g), t), std::vector<conveyor_status>{CONVEYOR_OK});
  }
  int64_t cancelled = enqueue(h, "q", 0, 1'000'000);
  conveyor_error err{};
  ASSERT_EQ(api_->cancel(h, cancelled, 150, &err), CONVEYOR_OK);
  int64_t live = enqueue(h, "q", 0, 0);
  ASSERT_EQ(claim(h, "q", 1, 99, 0, 10'000).size(), 1u);
  uint64_t deleted = 99;
  ASSERT_EQ(api_->purge_finished(h, 250, 2, &deleted, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(deleted, 2u) << "max_jobs bounds the purge";
  ASSERT_EQ(api_->purge_finished(h, 250, 10, &deleted, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(deleted, 1u);
  EXPECT_EQ(get(h, done[0], 0, nullptr), CONVEYOR_E_NOT_FOUND);
  EXPECT_EQ(get(h, cancelled, 0, nullptr), CONVEYOR_E_NOT_FOUND);
  EXPECT_EQ(job(h, done[2], 0).state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(job(h, live, 0).state, CONVEYOR_JOB_RUNNING);
  ASSERT_EQ(api_->purge_finished(h, std::numeric_limits<int64_t>::max(), 100, &deleted, &err),
            CONVEYOR_OK);
  EXPECT_EQ(deleted, 1u);
  EXPECT_GT(enqueue(h, "q"), live) << "ids are never reused";
}

TEST_F(PgStorageTest, RateLimitCrudAndChangeMarker) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  conveyor_error err{};
  EXPECT_TRUE(limits(h).empty());
  int64_t m0 = marker(h);
  ASSERT_EQ(api_->set_rate_limit(h, str("zeta"), 2.5, 10, 100, &err), CONVEYOR_OK) << err.message;
  int64_t m1 = marker(h);
  EXPECT_NE(m1, m0);
  ASSERT_EQ(api_->set_rate_limit(h, str("alpha"), 1.0 / 3.0, 1, 200, &err), CONVEYOR_OK);
  auto l = limits(h);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].queue, "alpha");
  EXPECT_EQ(l[0].rate, 1.0 / 3.0) << "the rate round-trips exactly";
  EXPECT_EQ(l[0].burst, 1u);
  EXPECT_EQ(l[0].updated_at, 200);
  EXPECT_EQ(l[1].rate, 2.5);
  EXPECT_EQ(l[1].burst, 10u);
  ASSERT_EQ(api_->set_rate_limit(h, str("zeta"), 0.125, 7, 300, &err), CONVEYOR_OK);
  EXPECT_EQ(limits(h).size(), 2u) << "set replaces";
  EXPECT_EQ(limits(h)[1].burst, 7u);
  int64_t m3 = marker(h);
  ASSERT_EQ(api_->delete_rate_limit(h, str("zeta"), &err), CONVEYOR_OK) << err.message;
  int64_t m4 = marker(h);
  EXPECT_NE(m4, m3);
  EXPECT_EQ(api_->delete_rate_limit(h, str("zeta"), &err), CONVEYOR_E_NOT_FOUND);
  EXPECT_NE(std::string(err.message).find("zeta"), std::string::npos) << err.message;
  EXPECT_EQ(marker(h), m4) << "a failed delete changes nothing";
  EXPECT_EQ(api_->set_rate_limit(h, str("q"), 0.0, 1, 0, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->set_rate_limit(h, str("q"), std::nan(""), 1, 0, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->set_rate_limit(h, str("q"), 1.0, 0, 0, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(marker(h), m4) << "rejected sets change nothing";

  conveyor_storage* other = open_store();
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(api_->set_rate_limit(other, str("beta"), 1.0, 1, 400, &err), CONVEYOR_OK);
  EXPECT_NE(marker(h), m4) << "a change through another handle is visible";
  EXPECT_EQ(limits(h).size(), 2u);
}

TEST_F(PgStorageTest, EnqueueValidatesAndIsAllOrNothing) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  conveyor_error err{};
  std::vector<int64_t> ids(3, 0);
  auto attempt = [&](conveyor_new_job bad) {
    std::vector<conveyor_new_job> batch = {
        {str("q"), str("ok"), str("{}"), 0, 1, 0}, bad, {str("q"), str("ok"), str("{}"), 0, 1, 0}};
    return api_->enqueue(h, batch.data(), batch.size(), ids.data(), &err);
  };
  EXPECT_EQ(attempt({str("q"), conveyor_str{nullptr, 0}, str("{}"), 0, 1, 0}), CONVEYOR_E_INVALID);
  EXPECT_NE(std::string(err.message).find("kind"), std::string::npos) << err.message;
  EXPECT_EQ(attempt({str("q"), str("k"), str("{}"), 0, 0, 0}), CONVEYOR_E_INVALID);
  EXPECT_NE(std::string(err.message).find("max_attempts"), std::string::npos) << err.message;
  EXPECT_EQ(attempt({conveyor_str{nullptr, 0}, str("k"), str("{}"), 0, 1, 0}), CONVEYOR_E_INVALID);
  EXPECT_EQ(attempt({conveyor_str{"q\0x", 3}, str("k"), str("{}"), 0, 1, 0}), CONVEYOR_E_INVALID)
      << "PostgreSQL text cannot hold NUL";
  EXPECT_EQ(attempt({conveyor_str{"q\xff", 2}, str("k"), str("{}"), 0, 1, 0}), CONVEYOR_E_INVALID)
      << "nor invalid UTF-8";
  EXPECT_TRUE(stats(h, 0).empty()) << "a rejected batch enqueues nothing";
  EXPECT_TRUE(queues(h).empty()) << "nor registers a queue";
}

TEST_F(PgStorageTest, HostileNamesAreJustData) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  // The host rejects such names (validate_queue_name); bound parameters make
  // them harmless even if one got through.
  const std::string evil = "x'); DROP TABLE \"" + schema_ + "\".jobs; --";
  const std::string quotes = "a\"b\\c{d},e";
  int64_t id = enqueue(h, evil, 0, 0, 1, "payload'); DROP TABLE x; --", "k'); DROP TABLE y; --");
  int64_t id2 = enqueue(h, quotes);
  auto got = claim(h, evil, 10, 1, 0, 100);
  ASSERT_EQ(ids_of(got), std::vector<int64_t>{id});
  EXPECT_EQ(got[0].queue, evil);
  EXPECT_EQ(got[0].kind, "k'); DROP TABLE y; --");
  EXPECT_EQ(got[0].payload, "payload'); DROP TABLE x; --");
  EXPECT_EQ(ids_of(claim(h, quotes, 10, 2, 0, 100)), std::vector<int64_t>{id2});
  conveyor_error err{};
  ASSERT_EQ(api_->set_rate_limit(h, str(evil), 1.0, 1, 0, &err), CONVEYOR_OK) << err.message;
  pause(h, evil, true);
  auto q = queues(h);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_TRUE(std::count(q.begin(), q.end(), std::pair<std::string, int32_t>{evil, 1}) == 1);
  EXPECT_EQ(sql("SELECT count(*) FROM \"" + schema_ + "\".jobs")[0][0].as<int>(), 2)
      << "the table is still there";
}

TEST_F(PgStorageTest, MigrateIsIdempotentConcurrentAndRefusesNewerSchemas) {
  // Eight handles migrate a fresh schema at once: one applies each step.
  std::vector<conveyor_storage*> fresh;
  for (int i = 0; i < 8; ++i) fresh.push_back(open_store({}, /*migrate=*/false));
  std::atomic<int> ok{0};
  std::vector<std::string> errors(fresh.size());
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < fresh.size(); ++i)
      threads.emplace_back([&, i] {
        conveyor_error e{};
        if (api_->migrate(fresh[i], &e) == CONVEYOR_OK)
          ok++;
        else
          errors[i] = e.message;
      });
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(ok.load(), 8) << errors[0];
  EXPECT_EQ(sql("SELECT count(*) FROM \"" + schema_ + "\".schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  int64_t id = enqueue(fresh[0], "q");
  conveyor_error err{};
  ASSERT_EQ(api_->migrate(fresh[1], &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(job(fresh[1], id, 0).state, CONVEYOR_JOB_AVAILABLE) << "re-running keeps data";

  sql("INSERT INTO \"" + schema_ + "\".schema_migrations (version) VALUES (99)");
  EXPECT_EQ(api_->migrate(fresh[2], &err), CONVEYOR_E_INVALID);
  const std::string msg = err.message;
  EXPECT_NE(msg.find("99"), std::string::npos) << msg;
  EXPECT_NE(msg.find("version " + std::to_string(kSchemaVersion)), std::string::npos) << msg;
}

TEST_F(PgStorageTest, OperationsBeforeMigrateFailCleanly) {
  conveyor_storage* h = open_store({}, /*migrate=*/false);
  ASSERT_NE(h, nullptr);
  conveyor_error err{};
  int64_t m = 0;
  EXPECT_EQ(api_->change_marker(h, &m, &err), CONVEYOR_E_INTERNAL);
  EXPECT_NE(std::string(err.message).find("does not exist"), std::string::npos) << err.message;
  ASSERT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(marker(h), 0) << "after migrate the same handle works";
  EXPECT_GT(enqueue(h, "q"), 0);
}

TEST_F(PgStorageTest, SchemasAreIsolated) {
  conveyor_storage* mine = open_store();
  ASSERT_NE(mine, nullptr);
  const std::string other_schema = unique_name("t_");
  conveyor_storage* theirs = open_store({{"schema", other_schema}});
  ASSERT_NE(theirs, nullptr);
  enqueue(mine, "q");
  EXPECT_TRUE(claim(theirs, "q", 10, 1, 0, 10).empty()) << "another schema, other jobs";
  EXPECT_EQ(claim(mine, "q", 10, 2, 0, 10).size(), 1u);
  close_store(theirs);
  sql("DROP SCHEMA \"" + other_schema + "\" CASCADE");
}

TEST_F(PgStorageTest, ConcurrentClaimsFromManyHandlesNeverOverlap) {
  constexpr int kJobs = 4000, kWorkers = 6;
  conveyor_storage* setup = open_store();
  ASSERT_NE(setup, nullptr);
  for (int i = 0; i < kJobs; i += 1000) enqueue_many(setup, "q", 1000);
  std::vector<conveyor_storage*> handles;
  for (int i = 0; i < kWorkers; ++i) handles.push_back(open_store({}, false));
  std::vector<std::vector<int64_t>> seen(kWorkers);
  std::atomic<int> errors{0};
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < kWorkers; ++w)
      threads.emplace_back([&, w] {
        for (int64_t token = (w + 1) * 1'000'000;; ++token) {
          std::vector<JobCopy> got;
          uint32_t n = 0;
          conveyor_error err{};
          if (api_->claim(
                  handles[w], str("q"), 37, token, 0, 1'000'000,
                  [](void* ctx, const conveyor_job* j) {
                    JobCopy c;
                    c.id = j->id;
                    static_cast<std::vector<JobCopy>*>(ctx)->push_back(c);
                  },
                  &got, &n, &err) != CONVEYOR_OK) {
            errors++;
            return;
          }
          if (n == 0) return;
          std::vector<conveyor_lease> leases;
          for (const auto& j : got) {
            seen[w].push_back(j.id);
            leases.push_back({j.id, token});
          }
          std::vector<conveyor_status> res(leases.size());
          if (api_->complete(handles[w], leases.data(), leases.size(), 1, res.data(), &err) !=
                  CONVEYOR_OK ||
              std::count(res.begin(), res.end(), CONVEYOR_OK) != static_cast<long>(res.size()))
            errors++;
        }
      });
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(errors.load(), 0);
  std::set<int64_t> all;
  size_t total = 0;
  for (const auto& v : seen) {
    total += v.size();
    all.insert(v.begin(), v.end());
  }
  EXPECT_EQ(total, static_cast<size_t>(kJobs)) << "every job claimed once";
  EXPECT_EQ(all.size(), static_cast<size_t>(kJobs)) << "no job claimed twice";
  auto st = stats(setup, 10);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].completed, kJobs);
}

TEST_F(PgStorageTest, OneHandleServesConcurrentCallsFromItsPool) {
  conveyor_storage* h = open_store({{"pool_size", "3"}});
  ASSERT_NE(h, nullptr);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const std::string q = "q" + std::to_string(t);
        conveyor_new_job j{str(q), str("k"), str("{}"), 0, 1, 0};
        int64_t id = 0;
        conveyor_error err{};
        if (api_->enqueue(h, &j, 1, &id, &err) != CONVEYOR_OK) failures++;
        int64_t m = 0;
        if (api_->change_marker(h, &m, &err) != CONVEYOR_OK) failures++;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(queues(h).size(), 8u);
  EXPECT_LE(
      sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + schema_ + "'")[0][0]
          .as<int>(),
      3)
      << "pool_size bounds the connections";
}

TEST_F(PgStorageTest, DiagnosticsRecordWhenAndByWhomAJobWasClaimed) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q");
  ASSERT_EQ(claim(h, "q", 1, 3, 4242, 10'000).size(), 1u);
  pqxx::result r = sql("SELECT claimed_at, claimed_by FROM \"" + schema_ +
                       "\".jobs WHERE id = " + std::to_string(id));
  EXPECT_EQ(r[0][0].as<int64_t>(), 4242) << "the host's now at the claim";
  EXPECT_NE(r[0][1].as<std::string>().find(":" + std::to_string(getpid())), std::string::npos)
      << r[0][1].as<std::string>();
}

// Not a test: the plugin alone, one thread, claim 100 + complete 100 in a
// loop (run with --gtest_also_run_disabled_tests). Compare with the engine's
// drain (bench/drain.sh) to see where time goes.
TEST_F(PgStorageTest, DISABLED_ThroughputClaimComplete) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const size_t kJobs = 100'000;
  for (size_t i = 0; i < kJobs; i += 5'000) enqueue_many(h, "bench", 5'000);
  sql("VACUUM ANALYZE \"" + schema_ + "\".jobs");
  std::vector<conveyor_lease> leases;
  std::vector<conveyor_status> res(100);
  conveyor_error err{};
  size_t done = 0;
  double claim_secs = 0, complete_secs = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t token = 1;; ++token) {
    leases.clear();
    uint32_t n = 0;
    const auto c0 = std::chrono::steady_clock::now();
    ASSERT_EQ(
        api_->claim(
            h, str("bench"), 100, token, 0, 1'000'000,
            [](void* c, const conveyor_job* j) {
              static_cast<std::vector<conveyor_lease>*>(c)->push_back({j->id, j->lease_token});
            },
            &leases, &n, &err),
        CONVEYOR_OK)
        << err.message;
    const auto c1 = std::chrono::steady_clock::now();
    claim_secs += std::chrono::duration<double>(c1 - c0).count();
    if (n == 0) break;
    ASSERT_EQ(api_->complete(h, leases.data(), leases.size(), 1, res.data(), &err), CONVEYOR_OK);
    complete_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - c1).count();
    done += n;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(done, kJobs);
  std::printf(
      "claim(100)+complete(100), one thread: %.0f jobs/s; per batch: claim %.3f ms, "
      "complete %.3f ms\n",
      static_cast<double>(done) / secs, claim_secs * 1e5 / static_cast<double>(done),
      complete_secs * 1e5 / static_cast<double>(done));
}

}  // namespace
}  // namespace conveyor::postgres::test
