// Unit tests of the sqlite storage plugin, driven through its C ABI table
// (conveyor_storage_plugin_entry called directly, no loader).
#include "sqlite_storage.hpp"

#include <conveyor/testing/plugin_calls.hpp>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace conveyor::plugin_testing;  // NOLINT: the shared test names

// The plugin's C table (PluginCalls) on a database file in a temporary
// directory of the test's own, removed afterwards.
class SqliteStorageTest : public ::testing::Test, public PluginCalls {
 protected:
  void SetUp() override {
    api_ = conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
    ASSERT_NE(api_, nullptr) << "entry point refused the host's ABI version";
    std::string tmpl = (fs::path(::testing::TempDir()) / "conveyor-sqlite-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << "mkdtemp failed";
    dir_ = tmpl;
    db_path_ = (fs::path(dir_) / "jobs.db").string();
  }

  void TearDown() override {
    close_all();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Opens (and by default migrates) a tracked handle on db_path_ plus extra options.
  conveyor_storage* open_store(const Opts& extra = {}, bool migrate = true) {
    return open_tracked(with_options({{"path", db_path_}}, extra), migrate);
  }

  // Makes db_path_ the database an older plugin (schema `version`) left:
  // the schema's first `version` steps, then `rows` (SQL) as that plugin
  // would have written them.
  void make_old_database(int version, const char* rows) {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
    std::string sql;
    for (int v = 0; v < version; ++v) sql += conveyor::sqlite::schema_steps()[v];
    sql += "PRAGMA user_version = " + std::to_string(version) + ";";
    sql += rows;
    char* msg = nullptr;
    EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &msg), SQLITE_OK)
        << (msg ? msg : "");
    sqlite3_free(msg);
    sqlite3_close(raw);
  }

  // The integers of the first column of `sql` on db_path_, read directly.
  std::vector<int64_t> column_of(const char* sql) {
    sqlite3* raw = nullptr;
    std::vector<int64_t> out;
    EXPECT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(raw, sql, -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(raw);
    while (sqlite3_step(st) == SQLITE_ROW) out.push_back(sqlite3_column_int64(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(raw);
    return out;
  }

  std::string dir_;
  std::string db_path_;
};

// ---------------------------------------------------------------------------

TEST_F(SqliteStorageTest, EntryPointDescribesThePlugin) {
  EXPECT_STREQ(api_->name, "sqlite");
  EXPECT_STREQ(api_->version, "0.1.0");
  EXPECT_EQ(api_->kind, static_cast<uint32_t>(CONVEYOR_KIND_CANONICAL));
  EXPECT_EQ(api_->capabilities,
            CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_PROCESS | CONVEYOR_CAP_NOTIFY);
  EXPECT_EQ(api_->struct_size, sizeof(conveyor_storage_plugin));
  EXPECT_GE(api_->struct_size, CONVEYOR_PLUGIN_V1_0_SIZE);
  EXPECT_EQ(api_->abi_major, static_cast<uint32_t>(CONVEYOR_ABI_MAJOR));
  EXPECT_EQ(api_->abi_minor, static_cast<uint32_t>(CONVEYOR_ABI_MINOR));
  EXPECT_NE(api_->wait_for_notification, nullptr);
  for (auto slot : {reinterpret_cast<const void*>(api_->open),
                    reinterpret_cast<const void*>(api_->close),
                    reinterpret_cast<const void*>(api_->migrate),
                    reinterpret_cast<const void*>(api_->enqueue),
                    reinterpret_cast<const void*>(api_->claim),
                    reinterpret_cast<const void*>(api_->complete),
                    reinterpret_cast<const void*>(api_->fail),
                    reinterpret_cast<const void*>(api_->extend_leases),
                    reinterpret_cast<const void*>(api_->release),
                    reinterpret_cast<const void*>(api_->rescue_expired),
                    reinterpret_cast<const void*>(api_->cancel),
                    reinterpret_cast<const void*>(api_->set_queue_paused),
                    reinterpret_cast<const void*>(api_->queue_stats),
                    reinterpret_cast<const void*>(api_->list_queues),
                    reinterpret_cast<const void*>(api_->get_job),
                    reinterpret_cast<const void*>(api_->purge_finished),
                    reinterpret_cast<const void*>(api_->set_rate_limit),
                    reinterpret_cast<const void*>(api_->delete_rate_limit),
                    reinterpret_cast<const void*>(api_->list_rate_limits),
                    reinterpret_cast<const void*>(api_->change_marker)})
    EXPECT_NE(slot, nullptr);
  EXPECT_EQ(conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR + 1, 0), nullptr)
      << "another major must be refused";
  api_->close(nullptr);  // a no-op
}

TEST_F(SqliteStorageTest, EnqueueClaimCompleteRoundTrip) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string binary("a\0b\xff\x01", 5);
  const int64_t before = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
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
  EXPECT_LT(ids[0], ids[1]) << "ids in order";
  EXPECT_LT(ids[1], ids[2]) << "ids in order";
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

  auto res = complete(h, leases_of(got), 200);
  EXPECT_EQ(res, std::vector<conveyor_status>(3, CONVEYOR_OK));
  JobCopy done = job(h, ids[0], 300);
  EXPECT_EQ(done.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(done.finalized_at, 200);
  EXPECT_EQ(done.lease_token, 0);
  EXPECT_EQ(done.lease_expires, 0);
  EXPECT_EQ(done.attempt, 1);

  EXPECT_EQ(complete(h, leases_of(got), 300),
            std::vector<conveyor_status>(3, CONVEYOR_E_LEASE_LOST))
      << "completing twice: the job is no longer running";
  EXPECT_EQ(get(h, 999999, 0, nullptr), CONVEYOR_E_NOT_FOUND);
}

TEST_F(SqliteStorageTest, ClaimOrdersByPriorityRunAtId) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t p5 = enqueue(h, "q", 5, 10);
  int64_t p1_30 = enqueue(h, "q", 1, 30);
  int64_t p1_20a = enqueue(h, "q", 1, 20);
  int64_t p1_20b = enqueue(h, "q", 1, 20);
  int64_t not_due = enqueue(h, "q", 0, 50);
  int64_t neg = enqueue(h, "q", -3, 40);
  enqueue(h, "other", -100, 0);  // other queues are never claimed

  auto first = claim(h, "q", 2, 1, 40, 1000);
  EXPECT_EQ(ids_of(first), (std::vector<int64_t>{neg, p1_20a}))
      << "LIMIT must pick the first jobs by priority, run_at, id";
  auto rest = claim(h, "q", 100, 2, 40, 1000);
  EXPECT_EQ(ids_of(rest), (std::vector<int64_t>{p1_20b, p1_30, p5}))
      << "callbacks in priority, run_at, id order; the job due at 50 is not claimable at 40";
  auto late = claim(h, "q", 100, 3, 50, 1000);
  EXPECT_EQ(ids_of(late), (std::vector<int64_t>{not_due}));
}

TEST_F(SqliteStorageTest, ScheduledJobClaimableExactlyAtRunAt) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q", 0, 1'000);
  EXPECT_EQ(job(h, id, 999).state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(job(h, id, 1'000).state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_TRUE(claim(h, "q", 10, 1, 999, 5'000).empty()) << "not claimable before run_at";
  auto got = claim(h, "q", 10, 2, 1'000, 5'000);
  ASSERT_EQ(got.size(), 1u) << "claimable at run_at";
  EXPECT_EQ(got[0].id, id);
  EXPECT_EQ(got[0].run_at, 1'000);
  EXPECT_TRUE(claim(h, "q", 0, 3, 1'000, 5'000).empty()) << "max_jobs == 0 claims nothing";
}

TEST_F(SqliteStorageTest, StaleLeaseCannotTouchTheNewClaimant) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q");
  auto a = claim(h, "q", 1, /*token=*/111, 0, /*expires=*/100);
  ASSERT_EQ(a.size(), 1u);
  uint32_t rescued = 0;
  conveyor_error err{};
  ASSERT_EQ(api_->rescue_expired(h, 101, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  ASSERT_EQ(rescued, 1u);
  auto b = claim(h, "q", 1, /*token=*/222, 101, 1000);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(b[0].id, id);
  EXPECT_EQ(b[0].attempt, 2);

  const conveyor_lease stale{id, 111};
  EXPECT_EQ(complete(h, {stale}, 150), std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST});
  EXPECT_EQ(extend(h, {stale}, 99'999), std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST});
  EXPECT_EQ(release(h, {stale}, 150), std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST});
  std::string msg;
  EXPECT_EQ(fail(h, stale, "boom", -1, 150, &msg), CONVEYOR_E_LEASE_LOST);
  EXPECT_NE(msg.find(std::to_string(id)), std::string::npos) << msg;
  EXPECT_EQ(fail(h, {id + 1000, 222}, "boom", -1, 150), CONVEYOR_E_LEASE_LOST) << "unknown job id";

  JobCopy still = job(h, id, 160);
  EXPECT_EQ(still.state, CONVEYOR_JOB_RUNNING) << "stale calls changed nothing";
  EXPECT_EQ(still.lease_token, 222);
  EXPECT_EQ(still.lease_expires, 1000);
  EXPECT_EQ(still.attempt, 2);

  // Mixed batch: one stale, one current.
  auto res = complete(h, {stale, {id, 222}}, 170);
  EXPECT_EQ(res, (std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST, CONVEYOR_OK}));
  JobCopy done = job(h, id, 180);
  EXPECT_EQ(done.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(done.finalized_at, 170);
}

TEST_F(SqliteStorageTest, FailWithRetryThenFinal) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q", 0, 0, /*max_attempts=*/3);
  auto a = claim(h, "q", 1, 1, 10, 100);
  ASSERT_EQ(a.size(), 1u);
  std::string msg;
  ASSERT_EQ(fail(h, {id, 1}, "first failure", /*retry_at=*/500, /*now=*/20, &msg), CONVEYOR_OK)
      << msg;
  JobCopy retry = job(h, id, 30);
  EXPECT_EQ(retry.state, CONVEYOR_JOB_SCHEDULED) << "waiting for retry_at";
  EXPECT_EQ(retry.run_at, 500);
  EXPECT_EQ(retry.last_error, "first failure");
  EXPECT_EQ(retry.attempt, 1) << "the failed attempt is spent";
  EXPECT_EQ(retry.lease_token, 0);
  EXPECT_EQ(retry.finalized_at, 0);
  EXPECT_TRUE(claim(h, "q", 1, 2, 499, 1000).empty());
  auto b = claim(h, "q", 1, 3, 500, 1000);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].attempt, 2);
  EXPECT_EQ(b[0].last_error, "first failure");
  ASSERT_EQ(fail(h, {id, 3}, "fatal", -1, 600, &msg), CONVEYOR_OK) << msg;
  JobCopy failed = job(h, id, 700);
  EXPECT_EQ(failed.state, CONVEYOR_JOB_FAILED);
  EXPECT_EQ(failed.finalized_at, 600);
  EXPECT_EQ(failed.last_error, "fatal");
  EXPECT_EQ(failed.lease_token, 0);
  EXPECT_EQ(failed.lease_expires, 0);
  EXPECT_TRUE(claim(h, "q", 1, 4, 10'000, 20'000).empty()) << "FAILED is final";
  EXPECT_EQ(fail(h, {id, 3}, "again", -1, 800), CONVEYOR_E_LEASE_LOST);
}

TEST_F(SqliteStorageTest, ReleaseGivesTheAttemptBack) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q", 0, 0, 1);
  auto a = claim(h, "q", 1, 5, 10, 100);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].attempt, 1);
  EXPECT_EQ(release(h, {{id, 5}}, 40), std::vector<conveyor_status>{CONVEYOR_OK});
  JobCopy r = job(h, id, 40);
  EXPECT_EQ(r.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(r.attempt, 0) << "release does not spend the attempt";
  EXPECT_EQ(r.run_at, 40) << "available at now";
  EXPECT_EQ(r.lease_token, 0);
  EXPECT_EQ(r.lease_expires, 0);
  auto b = claim(h, "q", 1, 6, 40, 100);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].attempt, 1) << "max_attempts 1 still allows the real attempt";
  EXPECT_EQ(release(h, {{id, 5}}, 50), std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST});
}

TEST_F(SqliteStorageTest, ExtendLeasesPostponesRescue) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q");
  auto a = claim(h, "q", 1, 9, 0, 100);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(extend(h, {{id, 9}}, 500), std::vector<conveyor_status>{CONVEYOR_OK});
  EXPECT_EQ(job(h, id, 0).lease_expires, 500);
  uint32_t rescued = 99;
  conveyor_error err{};
  ASSERT_EQ(api_->rescue_expired(h, 200, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(rescued, 0u) << "the extended lease has not expired at 200";
  EXPECT_EQ(job(h, id, 200).state, CONVEYOR_JOB_RUNNING);
}

TEST_F(SqliteStorageTest, RescueExpiredLeases) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q", 0, 0, /*max_attempts=*/2);
  conveyor_error err{};
  uint32_t rescued = 99;

  ASSERT_EQ(claim(h, "q", 1, 1, 0, 100).size(), 1u);
  ASSERT_EQ(api_->rescue_expired(h, 100, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(rescued, 0u) << "lease_expires < now is strict";
  ASSERT_EQ(api_->rescue_expired(h, 101, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(rescued, 1u);
  JobCopy back = job(h, id, 101);
  EXPECT_EQ(back.state, CONVEYOR_JOB_AVAILABLE) << "attempt 1 < max_attempts 2";
  EXPECT_EQ(back.run_at, 0) << "a rescued job keeps its run_at";
  EXPECT_EQ(back.attempt, 1);
  EXPECT_EQ(back.lease_token, 0);
  EXPECT_EQ(back.last_error, "lease expired: worker presumed dead");

  auto again = claim(h, "q", 1, 2, 101, 200);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2);
  ASSERT_EQ(api_->rescue_expired(h, 300, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(rescued, 1u);
  JobCopy dead = job(h, id, 300);
  EXPECT_EQ(dead.state, CONVEYOR_JOB_FAILED) << "attempts exhausted";
  EXPECT_EQ(dead.finalized_at, 300);
  EXPECT_EQ(dead.lease_token, 0);
  EXPECT_EQ(dead.lease_expires, 0);
  EXPECT_EQ(dead.last_error, "lease expired: worker presumed dead");

  // max_jobs bounds the work.
  enqueue_many(h, "r", 3);
  ASSERT_EQ(claim(h, "r", 3, 3, 0, 10).size(), 3u);
  ASSERT_EQ(api_->rescue_expired(h, 20, 2, &rescued, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(rescued, 2u);
  ASSERT_EQ(api_->rescue_expired(h, 20, 2, &rescued, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(rescued, 1u);
  ASSERT_EQ(api_->rescue_expired(h, 20, 2, &rescued, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(rescued, 0u);
}

TEST_F(SqliteStorageTest, CancelNonFinalJobsOnly) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t waiting = enqueue(h, "q", 0, 1'000'000);
  int64_t running = enqueue(h, "q");
  auto got = claim(h, "q", 10, 4, 0, 100);
  ASSERT_EQ(ids_of(got), std::vector<int64_t>{running});
  conveyor_error err{};

  ASSERT_EQ(api_->cancel(h, waiting, 10, &err), CONVEYOR_OK) << err.message;
  JobCopy c1 = job(h, waiting, 10);
  EXPECT_EQ(c1.state, CONVEYOR_JOB_CANCELLED);
  EXPECT_EQ(c1.finalized_at, 10);

  ASSERT_EQ(api_->cancel(h, running, 20, &err), CONVEYOR_OK) << err.message;
  JobCopy c2 = job(h, running, 20);
  EXPECT_EQ(c2.state, CONVEYOR_JOB_CANCELLED);
  EXPECT_EQ(c2.lease_token, 0) << "the lease is voided";
  EXPECT_EQ(complete(h, {{running, 4}}, 30), std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST})
      << "the cancelled job's worker loses its lease";

  EXPECT_EQ(api_->cancel(h, running, 40, &err), CONVEYOR_E_NOT_FOUND) << "already final";
  EXPECT_EQ(err.code, CONVEYOR_E_NOT_FOUND);
  EXPECT_EQ(api_->cancel(h, 424242, 40, &err), CONVEYOR_E_NOT_FOUND) << "no such job";
  int64_t finished = enqueue(h, "q");
  auto f = claim(h, "q", 1, 5, 0, 100);
  ASSERT_EQ(f.size(), 1u);
  ASSERT_EQ(complete(h, leases_of(f), 50), std::vector<conveyor_status>{CONVEYOR_OK});
  EXPECT_EQ(api_->cancel(h, finished, 60, &err), CONVEYOR_E_NOT_FOUND) << "completed is final";
  EXPECT_EQ(job(h, finished, 60).state, CONVEYOR_JOB_COMPLETED);
}

TEST_F(SqliteStorageTest, PauseAndResume) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q");
  int64_t m0 = marker(h);
  pause(h, "q", true);
  int64_t m1 = marker(h);
  EXPECT_NE(m1, m0) << "pausing advances the change marker";
  EXPECT_TRUE(claim(h, "q", 10, 1, 0, 100).empty()) << "a paused queue yields nothing";
  auto st = stats(h, 0);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].paused, 1);
  EXPECT_EQ(st[0].pending, 1);

  pause(h, "empty", true);  // pausing a queue without jobs is allowed
  st = stats(h, 0);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].queue, "empty");
  EXPECT_EQ(st[0].paused, 1);
  EXPECT_EQ(st[0].pending + st[0].scheduled + st[0].running, 0);

  pause(h, "q", false);
  EXPECT_NE(marker(h), m1) << "resuming advances the change marker";
  auto got = claim(h, "q", 10, 2, 0, 100);
  EXPECT_EQ(ids_of(got), std::vector<int64_t>{id}) << "resumed queue is claimable";
  pause(h, "empty", false);
  st = stats(h, 0);
  ASSERT_EQ(st.size(), 1u) << "a resumed queue without jobs is not reported";
  EXPECT_EQ(st[0].queue, "q");
  EXPECT_EQ(st[0].paused, 0);

  conveyor_error err{};
  EXPECT_EQ(api_->set_queue_paused(h, conveyor_str{nullptr, 0}, 1, 0, &err), CONVEYOR_E_INVALID);
}

// Notifications from the file: another handle's new jobs (JOBS per queue),
// its pause (QUEUE_STATE for that queue, RATE_LIMITS) and its override
// (RATE_LIMITS alone); writes that add no job notify nothing, and what was
// there before the first wait is not news.
TEST_F(SqliteStorageTest, NotificationsReportAnotherHandlesChangesAndNothingElse) {
  conveyor_storage* waiter = open_store();
  conveyor_storage* other = open_store();
  ASSERT_NE(waiter, nullptr);
  ASSERT_NE(other, nullptr);
  using Seen = std::set<std::pair<int32_t, std::string>>;
  // Waits until something arrives (bounded) and returns it.
  const auto next = [&](int64_t timeout_us = 10'000'000) {
    std::vector<Notice> notes;
    std::string msg;
    EXPECT_EQ(wait_notify(waiter, timeout_us, &notes, &msg), CONVEYOR_OK) << msg;
    Seen seen;
    for (const Notice& n : notes) seen.emplace(n.kind, n.queue);
    return seen;
  };
  enqueue(other, "before");
  EXPECT_EQ(next(20'000), Seen{}) << "the first look learns the state";

  enqueue(other, "q1");
  enqueue(other, "q1");
  enqueue(other, "q2");
  EXPECT_EQ(next(), (Seen{{CONVEYOR_NOTIFY_JOBS, "q1"}, {CONVEYOR_NOTIFY_JOBS, "q2"}}));

  pause(other, "q1", true);
  EXPECT_EQ(next(), (Seen{{CONVEYOR_NOTIFY_RATE_LIMITS, ""}, {CONVEYOR_NOTIFY_QUEUE_STATE, "q1"}}));

  conveyor_error err{};
  ASSERT_EQ(api_->set_rate_limit(other, conveyor_str{"q2", 2}, 5, 5, 0, &err), CONVEYOR_OK)
      << err.message;
  EXPECT_EQ(next(), (Seen{{CONVEYOR_NOTIFY_RATE_LIMITS, ""}}));

  // Claims and completions commit but add no job.
  const int64_t now = 1;
  std::vector<JobCopy> got = claim(other, "q2", 10, 7, now, now + 1'000'000);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(complete(other, leases_of(got), now), std::vector{CONVEYOR_OK});
  EXPECT_EQ(next(100'000), Seen{}) << "a claim and a completion are not new jobs";

  // The waiter's own handle's jobs are news too (another connection).
  enqueue(waiter, "mine");
  EXPECT_EQ(next(), (Seen{{CONVEYOR_NOTIFY_JOBS, "mine"}}));
}

TEST_F(SqliteStorageTest, QueueStatsCountsEveryState) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t now = 1'000;
  EXPECT_TRUE(stats(h, now).empty()) << "no queues yet";
  // queue "b": pending 2, scheduled 1, running 1, completed 1, failed 1, cancelled 1
  int64_t c = enqueue(h, "b", 0, 0);
  int64_t f = enqueue(h, "b", 1, 0);
  int64_t r = enqueue(h, "b", 2, 0);
  auto got = claim(h, "b", 3, 7, now, now + 100);
  ASSERT_EQ(ids_of(got), (std::vector<int64_t>{c, f, r}));
  ASSERT_EQ(complete(h, {{c, 7}}, now), std::vector<conveyor_status>{CONVEYOR_OK});
  ASSERT_EQ(fail(h, {f, 7}, "x", -1, now), CONVEYOR_OK);
  enqueue(h, "b", 0, now);      // due exactly now: pending
  enqueue(h, "b", 0, now - 5);  // pending
  enqueue(h, "b", 0, now + 1);  // scheduled
  int64_t x = enqueue(h, "b", 0, now + 1);
  conveyor_error err{};
  ASSERT_EQ(api_->cancel(h, x, now, &err), CONVEYOR_OK) << err.message;
  enqueue(h, "a", 0, 0);

  auto st = stats(h, now);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].queue, "a") << "ordered by name";
  EXPECT_EQ(st[0].pending, 1);
  EXPECT_EQ(st[0].paused, 0);
  EXPECT_EQ(st[1].queue, "b");
  EXPECT_EQ(st[1].pending, 2);
  EXPECT_EQ(st[1].scheduled, 1);
  EXPECT_EQ(st[1].running, 1);
  EXPECT_EQ(st[1].completed, 1);
  EXPECT_EQ(st[1].failed, 1);
  EXPECT_EQ(st[1].cancelled, 1);
  auto later = stats(h, now + 1);
  EXPECT_EQ(later[1].pending, 3) << "the scheduled job is due at now + 1";
  EXPECT_EQ(later[1].scheduled, 0);
}

TEST_F(SqliteStorageTest, ListQueuesReportsEveryKnownQueue) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  using Q = std::vector<std::pair<std::string, int32_t>>;
  EXPECT_TRUE(queues(h).empty());
  std::vector<conveyor_new_job> batch = {
      {str("beta"), str("k"), str(""), 0, 1, 0},
      {str("alpha"), str("k"), str(""), 0, 1, 0},
      {str("beta"), str("k"), str(""), 0, 1, 0},
      {str("alpha"), str("k"), str(""), 0, 1, 0},
  };
  std::vector<int64_t> ids(batch.size());
  conveyor_error err{};
  ASSERT_EQ(api_->enqueue(h, batch.data(), batch.size(), ids.data(), &err), CONVEYOR_OK)
      << err.message;
  EXPECT_EQ(queues(h), (Q{{"alpha", 0}, {"beta", 0}})) << "name order, each queue once";
  pause(h, "gamma", true);
  pause(h, "alpha", true);
  EXPECT_EQ(queues(h), (Q{{"alpha", 1}, {"beta", 0}, {"gamma", 1}}));
  pause(h, "alpha", false);
  pause(h, "gamma", false);
  EXPECT_EQ(queues(h), (Q{{"alpha", 0}, {"beta", 0}, {"gamma", 0}}))
      << "resumed queues keep being known";
  // A queue whose jobs are all gone may still be listed.
  for (int64_t id : ids) ASSERT_EQ(api_->cancel(h, id, 5, &err), CONVEYOR_OK) << err.message;
  uint64_t deleted = 0;
  ASSERT_EQ(api_->purge_finished(h, 10, 100, &deleted, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(deleted, ids.size());
  EXPECT_EQ(queues(h).size(), 3u);
  EXPECT_TRUE(stats(h, 0).empty()) << "stats only report queues with jobs or paused";
}

TEST_F(SqliteStorageTest, PurgeFinishedDeletesOldFinalJobsOnly) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::vector<int64_t> done;
  for (int64_t t : {100, 200, 300}) {
    int64_t id = enqueue(h, "q");
    auto g = claim(h, "q", 1, t, 0, 10'000);
    EXPECT_EQ(complete(h, leases_of(g), t), std::vector<conveyor_status>{CONVEYOR_OK});
    done.push_back(id);
  }
  int64_t cancelled = enqueue(h, "q", 0, 1'000'000);
  conveyor_error err{};
  ASSERT_EQ(api_->cancel(h, cancelled, 150, &err), CONVEYOR_OK);
  int64_t live = enqueue(h, "q", 0, 0);
  int64_t running = enqueue(h, "q", 0, 0);
  ASSERT_EQ(claim(h, "q", 1, 99, 0, 10'000).size(), 1u);  // claims `live` (lower id)

  uint64_t deleted = 99;
  ASSERT_EQ(api_->purge_finished(h, 250, 2, &deleted, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(deleted, 2u) << "max_jobs bounds the purge";
  ASSERT_EQ(api_->purge_finished(h, 250, 10, &deleted, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(deleted, 1u) << "three jobs finalized before 250 in all";
  EXPECT_EQ(get(h, done[0], 0, nullptr), CONVEYOR_E_NOT_FOUND);
  EXPECT_EQ(get(h, done[1], 0, nullptr), CONVEYOR_E_NOT_FOUND);
  EXPECT_EQ(get(h, cancelled, 0, nullptr), CONVEYOR_E_NOT_FOUND);
  EXPECT_EQ(job(h, done[2], 0).state, CONVEYOR_JOB_COMPLETED) << "finalized at 300";
  EXPECT_EQ(job(h, live, 0).state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(job(h, running, 0).state, CONVEYOR_JOB_AVAILABLE);

  ASSERT_EQ(api_->purge_finished(h, std::numeric_limits<int64_t>::max(), 100, &deleted, &err),
            CONVEYOR_OK);
  EXPECT_EQ(deleted, 1u);
  auto st = stats(h, 0);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].completed + st[0].failed + st[0].cancelled, 0);

  // Ids are never reused, even after the newest rows were purged.
  int64_t max_id = std::max({done[2], cancelled, live, running});
  ASSERT_EQ(api_->cancel(h, running, 1, &err), CONVEYOR_OK);
  ASSERT_EQ(api_->cancel(h, live, 1, &err), CONVEYOR_OK);
  ASSERT_EQ(api_->purge_finished(h, 10, 100, &deleted, &err), CONVEYOR_OK);
  EXPECT_EQ(deleted, 2u);
  EXPECT_GT(enqueue(h, "q"), max_id);
}

TEST_F(SqliteStorageTest, RateLimitCrudAndChangeMarker) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  conveyor_error err{};
  EXPECT_TRUE(limits(h).empty());
  int64_t m0 = marker(h);

  ASSERT_EQ(api_->set_rate_limit(h, str("zeta"), 2.5, 10, 100, &err), CONVEYOR_OK) << err.message;
  int64_t m1 = marker(h);
  EXPECT_NE(m1, m0) << "set advances the marker";
  ASSERT_EQ(api_->set_rate_limit(h, str("alpha"), 100.0, 1, 200, &err), CONVEYOR_OK);
  int64_t m2 = marker(h);
  EXPECT_NE(m2, m1);
  auto l = limits(h);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].queue, "alpha") << "ordered by queue";
  EXPECT_EQ(l[0].rate, 100.0);
  EXPECT_EQ(l[0].burst, 1u);
  EXPECT_EQ(l[0].updated_at, 200);
  EXPECT_EQ(l[1].queue, "zeta");
  EXPECT_EQ(l[1].rate, 2.5);
  EXPECT_EQ(l[1].burst, 10u);
  EXPECT_EQ(l[1].updated_at, 100);

  ASSERT_EQ(api_->set_rate_limit(h, str("zeta"), 0.125, 7, 300, &err), CONVEYOR_OK);
  int64_t m3 = marker(h);
  EXPECT_NE(m3, m2) << "replacing advances the marker";
  l = limits(h);
  ASSERT_EQ(l.size(), 2u) << "set replaces, it does not add";
  EXPECT_EQ(l[1].rate, 0.125);
  EXPECT_EQ(l[1].burst, 7u);
  EXPECT_EQ(l[1].updated_at, 300);

  ASSERT_EQ(api_->delete_rate_limit(h, str("zeta"), &err), CONVEYOR_OK) << err.message;
  int64_t m4 = marker(h);
  EXPECT_NE(m4, m3) << "delete advances the marker";
  EXPECT_EQ(api_->delete_rate_limit(h, str("zeta"), &err), CONVEYOR_E_NOT_FOUND);
  EXPECT_NE(std::string(err.message).find("zeta"), std::string::npos) << err.message;
  EXPECT_EQ(marker(h), m4) << "a failed delete changes nothing";
  l = limits(h);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].queue, "alpha");

  EXPECT_EQ(api_->set_rate_limit(h, str("q"), 0.0, 1, 0, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->set_rate_limit(h, str("q"), -1.0, 1, 0, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->set_rate_limit(h, str("q"), std::nan(""), 1, 0, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->set_rate_limit(h, str("q"), INFINITY, 1, 0, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(api_->set_rate_limit(h, str("q"), 1.0, 0, 0, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(marker(h), m4) << "rejected sets change nothing";

  // The marker is shared by every handle (and process) on the file.
  conveyor_storage* other = open_store();
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(marker(other), m4);
  ASSERT_EQ(api_->set_rate_limit(other, str("beta"), 1.0, 1, 400, &err), CONVEYOR_OK);
  EXPECT_NE(marker(h), m4) << "a change through another handle is visible";
  EXPECT_EQ(limits(h).size(), 2u);
}

TEST_F(SqliteStorageTest, EnqueueValidatesAndIsAllOrNothing) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  conveyor_error err{};
  std::vector<int64_t> ids(3, 0);
  auto attempt = [&](conveyor_new_job bad) {
    std::vector<conveyor_new_job> batch = {
        {str("q"), str("ok"), str("{}"), 0, 1, 0},
        bad,
        {str("q"), str("ok"), str("{}"), 0, 1, 0},
    };
    return api_->enqueue(h, batch.data(), batch.size(), ids.data(), &err);
  };
  EXPECT_EQ(attempt({str("q"), conveyor_str{nullptr, 0}, str("{}"), 0, 1, 0}), CONVEYOR_E_INVALID)
      << "empty kind";
  EXPECT_NE(std::string(err.message).find("kind"), std::string::npos) << err.message;
  EXPECT_EQ(attempt({str("q"), str("k"), str("{}"), 0, 0, 0}), CONVEYOR_E_INVALID)
      << "max_attempts 0";
  EXPECT_NE(std::string(err.message).find("max_attempts"), std::string::npos) << err.message;
  EXPECT_EQ(attempt({conveyor_str{nullptr, 0}, str("k"), str("{}"), 0, 1, 0}), CONVEYOR_E_INVALID)
      << "empty queue";
  EXPECT_TRUE(stats(h, 0).empty()) << "a rejected batch enqueues nothing";
  EXPECT_TRUE(claim(h, "q", 10, 1, 0, 10).empty());
}

TEST_F(SqliteStorageTest, OptionsAreValidated) {
  conveyor_storage* h = nullptr;
  std::string msg;
  EXPECT_EQ(try_open({{"path", db_path_}, {"colour", "blue"}}, &h, &msg), CONVEYOR_E_INVALID);
  EXPECT_NE(msg.find("colour"), std::string::npos) << "the message names the key: " << msg;
  EXPECT_EQ(h, nullptr) << "out untouched on failure";
  EXPECT_EQ(try_open({}, &h, &msg), CONVEYOR_E_INVALID);
  EXPECT_NE(msg.find("path"), std::string::npos) << msg;
  EXPECT_EQ(try_open({{"path", ":memory:"}}, &h, &msg), CONVEYOR_E_INVALID) << msg;
  EXPECT_EQ(try_open({{"path", db_path_}, {"synchronous", "sometimes"}}, &h, &msg),
            CONVEYOR_E_INVALID);
  EXPECT_NE(msg.find("synchronous"), std::string::npos) << msg;
  EXPECT_EQ(try_open({{"path", db_path_}, {"busy_timeout_ms", "soon"}}, &h, &msg),
            CONVEYOR_E_INVALID);
  EXPECT_NE(msg.find("busy_timeout_ms"), std::string::npos) << msg;
  EXPECT_EQ(try_open({{"path", db_path_}, {"busy_timeout_ms", "-5"}}, &h, &msg),
            CONVEYOR_E_INVALID);
  EXPECT_EQ(h, nullptr);
  for (const char* sync : {"full", "OFF", "Normal"}) {
    ASSERT_EQ(
        try_open({{"path", db_path_}, {"synchronous", sync}, {"busy_timeout_ms", "250"}}, &h, &msg),
        CONVEYOR_OK)
        << sync << ": " << msg;
    api_->close(h);
    h = nullptr;
  }
}

// A rescued job keeps its place: it is claimed before jobs enqueued after it.
TEST_F(SqliteStorageTest, RescuedJobKeepsItsPlaceInTheQueue) {
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

// A typo in path must not start an empty database somewhere new.
TEST_F(SqliteStorageTest, AMissingDirectoryIsAnErrorNamingIt) {
  const std::string missing = (fs::path(dir_) / "a" / "b").string();
  conveyor_storage* h = nullptr;
  std::string msg;
  EXPECT_EQ(try_open({{"path", missing + "/jobs.db"}}, &h, &msg), CONVEYOR_E_INVALID) << msg;
  EXPECT_EQ(msg, "sqlite: directory '" + missing + "' of storage option 'path' ('" + missing +
                     "/jobs.db') does not exist: create it (mkdir -p " + missing +
                     ") or fix the path");
  EXPECT_EQ(h, nullptr);
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "a")) << "nothing was created";
}

// create = false (read-only commands): a missing file is an error naming it.
TEST_F(SqliteStorageTest, CreateFalseRefusesAMissingFileAndCreatesNothing) {
  conveyor_storage* h = nullptr;
  std::string msg;
  EXPECT_EQ(try_open({{"path", db_path_}, {"create", "false"}}, &h, &msg), CONVEYOR_E_NOT_FOUND);
  EXPECT_EQ(msg, "sqlite database '" + db_path_ +
                     "' does not exist (storage option 'path'); `conveyor serve` or `conveyor "
                     "enqueue` creates it, or fix the path");
  EXPECT_FALSE(fs::exists(db_path_));
  EXPECT_EQ(try_open({{"path", db_path_}, {"create", "no"}}, &h, &msg), CONVEYOR_E_INVALID);
  EXPECT_EQ(msg, "storage option 'create' must be true or false, got 'no'");
  // Once it exists, create = false opens it.
  conveyor_storage* w = open_store();
  ASSERT_NE(w, nullptr);
  const int64_t id = enqueue(w, "q");
  conveyor_storage* r = open_store({{"create", "false"}});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(job(r, id, 0).state, CONVEYOR_JOB_AVAILABLE);
}

// Another application's SQLite file is refused, not given Conveyor's tables.
TEST_F(SqliteStorageTest, AnotherApplicationsDatabaseIsRefused) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw,
                         "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);"
                         "CREATE TABLE orders (id INTEGER);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  conveyor_storage* h = open_store({}, /*migrate=*/false);
  ASSERT_NE(h, nullptr);
  conveyor_error err{};
  EXPECT_EQ(api_->migrate(h, &err), CONVEYOR_E_INVALID);
  EXPECT_EQ(std::string(err.message),
            "sqlite database '" + db_path_ +
                "' is not a Conveyor database (it has tables orders, users and schema version 0): "
                "point storage option 'path' at a new file or at a Conveyor database")
      << err.message;
  // Its tables are untouched and none of Conveyor's were added.
  ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT count(*) FROM sqlite_master WHERE type = 'table'", -1,
                               &st, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 2);
  sqlite3_finalize(st);
  // One that claims a schema version but lacks Conveyor's tables is refused too.
  ASSERT_EQ(sqlite3_exec(raw, "PRAGMA user_version = 1", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  EXPECT_EQ(api_->migrate(h, &err), CONVEYOR_E_INVALID);
  EXPECT_NE(std::string(err.message).find("is not a Conveyor database"), std::string::npos)
      << err.message;
}

// The file removed or replaced under a running process: writes must not be
// acknowledged into the unlinked database; the error is not transient.
TEST_F(SqliteStorageTest, ARemovedOrReplacedFileFailsEveryCallNonTransiently) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  ASSERT_GT(enqueue(h, "q"), 0);
  fs::remove(db_path_);
  std::vector<conveyor_new_job> one = {{str("q"), str("noop"), str("{}"), 0, 1, 0}};
  int64_t id = 0;
  conveyor_error err{};
  EXPECT_EQ(api_->enqueue(h, one.data(), one.size(), &id, &err), CONVEYOR_E_INTERNAL);
  EXPECT_EQ(std::string(err.message),
            "sqlite enqueue: database '" + db_path_ +
                "' was removed while this process had it open; nothing more is written to the "
                "old file. Restore the file and restart Conveyor");
  int64_t m = 0;
  EXPECT_EQ(api_->change_marker(h, &m, &err), CONVEYOR_E_INTERNAL) << "reads too";
  // Another database now at the same path (a restore, a mistaken copy).
  conveyor_storage* other = open_store();
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(api_->enqueue(h, one.data(), one.size(), &id, &err), CONVEYOR_E_INTERNAL);
  EXPECT_NE(std::string(err.message).find("was replaced by another file"), std::string::npos)
      << err.message;
  EXPECT_TRUE(stats(other, 0).empty()) << "nothing reached the new file through the old handle";
}

// Garbage written over the file in place (same inode) while it is open: the
// open connections' caches would keep acknowledging writes into a file that
// is no longer a database. Every call fails non-transiently instead.
TEST_F(SqliteStorageTest, AFileOverwrittenInPlaceWhileOpenFailsEveryCallNonTransiently) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  ASSERT_GT(enqueue(h, "q"), 0);
  {
    std::fstream f(db_path_, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.is_open());
    f.seekp(0);
    f << std::string(8192, 'g');  // no truncation: the same file, rewritten
  }
  std::vector<conveyor_new_job> one = {{str("q"), str("noop"), str("{}"), 0, 1, 0}};
  int64_t id = 0;
  conveyor_error err{};
  EXPECT_EQ(api_->enqueue(h, one.data(), one.size(), &id, &err), CONVEYOR_E_INTERNAL)
      << err.message;
  EXPECT_EQ(std::string(err.message),
            "sqlite enqueue: database '" + db_path_ +
                "' was overwritten (its header is no longer a SQLite database header) while "
                "this process had it open; nothing more is written to it. Restore the file "
                "from a backup and restart Conveyor");
  int64_t m = 0;
  EXPECT_EQ(api_->change_marker(h, &m, &err), CONVEYOR_E_INTERNAL) << "reads too";
  EXPECT_TRUE(claim(h, "q", 10, 7, 0, 1'000'000, CONVEYOR_E_INTERNAL).empty());
}

// A database overwritten with garbage: a clear error that is not UNAVAILABLE
// (which the host would retry forever).
TEST_F(SqliteStorageTest, ADatabaseOverwrittenWithGarbageIsNotTransient) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  ASSERT_GT(enqueue(h, "q"), 0);
  close_all();
  {
    std::fstream f(db_path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f << std::string(8192, 'g');
  }
  fs::remove(db_path_ + "-wal");
  fs::remove(db_path_ + "-shm");
  conveyor_storage* g = nullptr;
  std::string msg;
  conveyor_status st = try_open({{"path", db_path_}}, &g, &msg);
  if (st == CONVEYOR_OK) {
    conveyor_error err{};
    st = api_->migrate(g, &err);
    msg = err.message;
    api_->close(g);
  }
  EXPECT_NE(st, CONVEYOR_OK);
  EXPECT_NE(st, CONVEYOR_E_UNAVAILABLE) << msg;
  EXPECT_NE(msg.find(db_path_), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a database"), std::string::npos) << msg;
}

TEST_F(SqliteStorageTest, MigrateIsIdempotentAndRefusesNewerSchemas) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q");
  conveyor_error err{};
  ASSERT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << err.message;
  ASSERT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(job(h, id, 0).state, CONVEYOR_JOB_AVAILABLE) << "re-running migrate keeps data";

  // Concurrent migrations on a fresh file: exactly one applies the step.
  db_path_ = (fs::path(dir_) / "fresh.db").string();
  std::vector<conveyor_storage*> fresh;
  for (int i = 0; i < 4; ++i) fresh.push_back(open_store({}, /*migrate=*/false));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (conveyor_storage* f : fresh)
    threads.emplace_back([&, f] {
      conveyor_error e{};
      if (api_->migrate(f, &e) == CONVEYOR_OK) ok++;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4) << "every concurrent migrate succeeds";
  EXPECT_GT(enqueue(fresh[0], "q"), 0);

  // A schema from the future.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  EXPECT_EQ(api_->migrate(fresh[1], &err), CONVEYOR_E_INVALID);
  const std::string msg = err.message;
  EXPECT_NE(msg.find("99"), std::string::npos) << "names the database's version: " << msg;
  EXPECT_NE(msg.find(std::to_string(conveyor::sqlite::kSchemaVersion)), std::string::npos)
      << "names the plugin's version: " << msg;
}

// A database made by schema 1 (before ABI 1.1) upgrades in place: its jobs
// stay, and job_counts starts from counts of the jobs already there, then
// follows every change.
TEST_F(SqliteStorageTest, UpgradeFromSchema1FillsTheMaintainedCounts) {
  // Jobs written by a schema-1 plugin (job_counts never saw them).
  make_old_database(
      1,
      "INSERT INTO queues (name, paused) VALUES ('q', 0);"
      "INSERT INTO jobs (queue, kind, payload, priority, state, max_attempts, run_at, created_at)"
      " VALUES ('q', 'k', '', 0, 1, 1, 10, 10), ('q', 'k', '', 0, 4, 1, 10, 10),"
      " ('q', 'k', '', 0, 4, 1, 10, 10), ('q', 'k', '', 0, 5, 1, 10, 10);");
  conveyor_storage* h = open_store();  // migrates 1 -> 6
  ASSERT_NE(h, nullptr);
  struct Counts {
    std::vector<conveyor::sdk::OwnedQueueStats> rows;
  } got;
  auto counts = [&] {
    got.rows.clear();
    conveyor_error err{};
    EXPECT_EQ(api_->job_counts(
                  h, 100,
                  [](void* ctx, const conveyor_queue_stats* s) {
                    auto& r = static_cast<Counts*>(ctx)->rows.emplace_back();
                    r.queue.assign(s->queue.data, s->queue.len);
                    r.counts[0] = s->pending;
                    r.counts[3] = s->completed;
                    r.counts[4] = s->failed;
                  },
                  &got, &err),
              CONVEYOR_OK)
        << err.message;
  };
  counts();
  ASSERT_EQ(got.rows.size(), 1u);
  EXPECT_EQ(got.rows[0].counts[0], 1) << "pending";
  EXPECT_EQ(got.rows[0].counts[3], 2) << "completed";
  EXPECT_EQ(got.rows[0].counts[4], 1) << "failed";
  // The counts follow a new job and a purge.
  enqueue(h, "q");
  uint64_t deleted = 0;
  conveyor_error err{};
  ASSERT_EQ(api_->purge_finished(h, 1000, 10, &deleted, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(deleted, 3u) << "the three final rows (finalized_at 0) are purged";
  counts();
  ASSERT_EQ(got.rows.size(), 1u);
  EXPECT_EQ(got.rows[0].counts[0], 2) << "pending after an enqueue";
  EXPECT_EQ(got.rows[0].counts[3], 0) << "completed after the purge";
  EXPECT_EQ(got.rows[0].counts[4], 0) << "failed after the purge";
}

// A database of schema 2 (ABI 1.1) upgrades on open: its jobs cost 1,
// its overrides are process-wide, and the 1.2 calls work on it.
TEST_F(SqliteStorageTest, UpgradeFromSchema2KeepsJobsAndOverrides) {
  make_old_database(
      2,
      "INSERT INTO queues (name, paused) VALUES ('q', 0);"
      "INSERT INTO jobs (queue, kind, payload, priority, state, max_attempts, run_at, created_at)"
      " VALUES ('q', 'old', 'x', 0, 1, 3, 10, 10);"
      "INSERT INTO rate_limits (queue, rate, burst, updated_at) VALUES ('q', 2.5, 4, 7);");
  conveyor_storage* h = open_store();  // migrates 2 -> 6
  ASSERT_NE(h, nullptr);
  {
    sqlite3* check = nullptr;
    ASSERT_EQ(sqlite3_open(db_path_.c_str(), &check), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(check, "PRAGMA user_version", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(st, 0), conveyor::sqlite::kSchemaVersion);
    sqlite3_finalize(st);
    sqlite3_close(check);
  }
  std::vector<JobCopy> jobs = claim(h, "q", 10, /*token=*/5, /*now=*/100, /*expires=*/1100);
  ASSERT_EQ(jobs.size(), 1u) << "the job from schema 2 was lost";
  EXPECT_EQ(jobs[0].kind, "old");
  EXPECT_EQ(jobs[0].payload, "x");
  EXPECT_EQ(jobs[0].cost, 1) << "a job from before job costs costs 1";
  std::vector<LimitCopy> l = limits(h);
  ASSERT_EQ(l.size(), 1u) << "the override from schema 2 was lost";
  EXPECT_EQ(l[0].rate, 2.5);
  EXPECT_EQ(l[0].burst, 4u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_PROCESS);
  conveyor_error err{};
  int64_t version = -1, value = -1;
  int32_t applied = -1;
  ASSERT_EQ(
      api_->swap_shared_state(h, conveyor_str{"k", 1}, 0, 9, &version, &value, &applied, &err),
      CONVEYOR_OK)
      << err.message;
  EXPECT_EQ(applied, 1);
  EXPECT_EQ(version, 1);
  EXPECT_EQ(value, 9);
  conveyor_new_job_v2 costly{conveyor_new_job{conveyor_str{"q", 1}, conveyor_str{"k", 1},
                                              conveyor_str{"{}", 2}, 0, 3, 100},
                             6, 0};
  int64_t id = 0;
  ASSERT_EQ(api_->enqueue_v3(h, &costly, 1, 100, &id, &err), CONVEYOR_OK) << err.message;
  JobCopy got;
  ASSERT_EQ(get(h, id, 100, &got), CONVEYOR_OK);
  EXPECT_EQ(got.cost, 6);
}

// A database of schema 3 upgrades to rows stored by queue: every job keeps
// its id, state and place in its queue, and new ids continue above the old
// high-water mark even when the newest job was deleted (ids are never reused).
TEST_F(SqliteStorageTest, UpgradeFromSchema3KeepsIdsAndNeverReusesThem) {
  make_old_database(
      3,
      "INSERT INTO queues (name, paused) VALUES ('a', 0), ('b', 0);"
      "INSERT INTO jobs (queue, kind, payload, priority, state, max_attempts, run_at, created_at,"
      " finalized_at) VALUES ('a', 'k', 'one', 0, 1, 3, 0, 10, 0),"
      " ('b', 'k', 'two', 0, 1, 3, 0, 10, 0), ('a', 'k', 'three', 0, 4, 3, 0, 10, 5),"
      " ('a', 'k', 'four', 0, 1, 3, 0, 10, 0);"
      "INSERT INTO job_counts (queue, state, n) VALUES ('a', 4, 1);"
      "DELETE FROM jobs WHERE id = 4;");
  conveyor_storage* h = open_store();  // migrates 3 -> 6
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(column_of("SELECT id FROM jobs ORDER BY id"), (std::vector<int64_t>{1, 2, 3}));
  JobCopy done;
  ASSERT_EQ(get(h, 3, 100, &done), CONVEYOR_OK) << "the completed job from schema 3 was lost";
  EXPECT_EQ(done.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(done.payload, "three");
  const int64_t fresh = enqueue(h, "a");
  EXPECT_EQ(fresh, 5) << "id 4 was used (and deleted) under schema 3: it must not come back";
  std::vector<JobCopy> a = claim(h, "a", 10, /*token=*/7, /*now=*/100, /*expires=*/1100);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].id, 1) << "the old job keeps its place ahead of the new one";
  EXPECT_EQ(a[0].payload, "one");
  EXPECT_EQ(a[1].id, 5);
  std::vector<JobCopy> b = claim(h, "b", 10, 8, 100, 1100);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].id, 2);
  std::vector<conveyor_status> r = complete(h, {{1, 7}, {5, 7}, {2, 8}}, 200);
  EXPECT_EQ(r, (std::vector<conveyor_status>{CONVEYOR_OK, CONVEYOR_OK, CONVEYOR_OK}));
  uint64_t deleted = 0;
  conveyor_error err{};
  ASSERT_EQ(api_->purge_finished(h, 150, 10, &deleted, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(deleted, 1u) << "only job 3 (finalized at 5) is older than 150";
  EXPECT_EQ(get(h, 3, 300, &done), CONVEYOR_E_NOT_FOUND);
}

// Jobs enqueued into several queues at once are stored by queue (a queue's
// rows side by side, so a claim of 100 rewrites a few pages, not 100), while
// their ids still increase in enqueue order across queues. A queue whose
// block of places is full continues in a fresh block, first in, first out.
TEST_F(SqliteStorageTest, RowsOfAQueueAreStoredTogether) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::vector<conveyor_new_job> mixed;
  for (int i = 0; i < 6; ++i)
    for (const char* q : {"a", "b", "c"})
      mixed.push_back({str(q), str("noop"), str("{}"), 0, 3, 0});
  std::vector<int64_t> ids(mixed.size());
  conveyor_error err{};
  ASSERT_EQ(api_->enqueue(h, mixed.data(), mixed.size(), ids.data(), &err), CONVEYOR_OK)
      << err.message;
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_EQ(ids[i], ids[i - 1] + 1) << i;
  for (const char* q : {"a", "b", "c"}) {
    const std::vector<int64_t> pos = column_of(
        ("SELECT pos FROM jobs WHERE queue = '" + std::string(q) + "' ORDER BY id").c_str());
    ASSERT_EQ(pos.size(), 6u) << q;
    for (size_t i = 1; i < pos.size(); ++i)
      EXPECT_EQ(pos[i], pos[i - 1] + 1) << "queue " << q << ": its rows are not side by side";
  }
  // Queue a's block with one place left: its next three jobs straddle two blocks.
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, "UPDATE queues SET next_pos = end_pos - 1 WHERE name = 'a'",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  const std::vector<int64_t> more = enqueue_many(h, "a", 3);
  const std::vector<int64_t> b_pos = column_of("SELECT pos FROM jobs WHERE queue = 'b'");
  const std::vector<int64_t> more_pos =
      column_of("SELECT pos FROM jobs WHERE queue = 'a' ORDER BY id DESC LIMIT 3");  // newest first
  ASSERT_EQ(more_pos.size(), 3u);
  EXPECT_EQ(more_pos[0], more_pos[1] + 1) << "the fresh block is filled in order";
  EXPECT_GT(more_pos[1], b_pos.back()) << "the fresh block comes after every block taken";
  std::vector<JobCopy> a = claim(h, "a", 100, 1, 0, 1'000'000);
  ASSERT_EQ(a.size(), 9u);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_GT(a[i].id, a[i - 1].id) << "FIFO across blocks";
  EXPECT_EQ(a.back().id, more.back());
}

// complete counts the jobs this handle claimed from the queue it claimed
// them in and the others (claimed through another handle) by reading their
// rows: job_counts must agree either way, and a lost lease counts nothing.
TEST_F(SqliteStorageTest, JobCountsFollowCompletionsOfJobsClaimedElsewhere) {
  conveyor_storage* h1 = open_store();
  conveyor_storage* h2 = open_store();
  ASSERT_NE(h1, nullptr);
  ASSERT_NE(h2, nullptr);
  enqueue_many(h1, "a", 6);
  enqueue_many(h1, "b", 4);
  std::vector<conveyor_lease> leases;
  auto take = [&](conveyor_storage* h, const std::string& q, uint32_t n, int64_t token) {
    for (const JobCopy& j : claim(h, q, n, token, 0, 1'000'000)) leases.push_back({j.id, token});
  };
  take(h1, "a", 3, 1);
  take(h2, "a", 3, 2);
  take(h1, "b", 2, 3);
  ASSERT_EQ(leases.size(), 8u);
  leases.push_back({leases[0].job_id, 99});  // a lost lease: not counted
  leases.push_back(leases[1]);               // listed twice: completes once
  std::vector<conveyor_status> r = complete(h1, leases, 10);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(r[i], CONVEYOR_OK) << i;
  EXPECT_EQ(r[8], CONVEYOR_E_LEASE_LOST);
  EXPECT_EQ(r[9], CONVEYOR_E_LEASE_LOST) << "a lease listed twice completed twice";
  std::map<std::string, std::pair<int64_t, int64_t>> got;  // queue -> (pending, completed)
  conveyor_error err{};
  ASSERT_EQ(api_->job_counts(
                h2, 100,
                [](void* ctx, const conveyor_queue_stats* s) {
                  (*static_cast<std::map<std::string, std::pair<int64_t, int64_t>>*>(
                      ctx))[std::string(s->queue.data, s->queue.len)] = {s->pending, s->completed};
                },
                &got, &err),
            CONVEYOR_OK)
      << err.message;
  EXPECT_EQ(got["a"], std::make_pair(int64_t{0}, int64_t{6}));
  EXPECT_EQ(got["b"], std::make_pair(int64_t{2}, int64_t{2}));
}

// One completion call lists a job first with a wrong token, then with the
// token its claim holds: the second lease completes it (the place statement
// takes one lease per job; the other is tried by id), and it is counted once.
TEST_F(SqliteStorageTest, CompletionFindsTheHoldingLeaseAfterAWrongOneForTheSameJob) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  enqueue_many(h, "a", 2);
  const std::vector<JobCopy> jobs = claim(h, "a", 2, 5, 0, 1'000'000);
  ASSERT_EQ(jobs.size(), 2u);
  std::vector<conveyor_status> r =
      complete(h, {{jobs[0].id, 7}, {jobs[0].id, 5}, {jobs[1].id, 5}}, 10);
  EXPECT_EQ(r[0], CONVEYOR_E_LEASE_LOST);
  EXPECT_EQ(r[1], CONVEYOR_OK) << "the holding lease, listed second, did not complete";
  EXPECT_EQ(r[2], CONVEYOR_OK);
  EXPECT_EQ(complete(h, {{jobs[0].id, 5}}, 11)[0], CONVEYOR_E_LEASE_LOST) << "completed twice";
  int64_t completed = -1;
  conveyor_error err{};
  ASSERT_EQ(api_->job_counts(
                h, 100,
                [](void* ctx, const conveyor_queue_stats* s) {
                  if (std::string(s->queue.data, s->queue.len) == "a")
                    *static_cast<int64_t*>(ctx) = s->completed;
                },
                &completed, &err),
            CONVEYOR_OK)
      << err.message;
  EXPECT_EQ(completed, 2);
}

TEST_F(SqliteStorageTest, OperationsBeforeMigrateFailCleanly) {
  conveyor_storage* h = open_store({}, /*migrate=*/false);
  ASSERT_NE(h, nullptr);
  conveyor_error err{};
  uint32_t n = 0;
  conveyor_status st = api_->claim(
      h, str("q"), 1, 1, 0, 1, [](void*, const conveyor_job*) {}, nullptr, &n, &err);
  EXPECT_NE(st, CONVEYOR_OK);
  EXPECT_NE(std::string(err.message).find("no such table"), std::string::npos) << err.message;
  int64_t m = 0;
  EXPECT_NE(api_->change_marker(h, &m, &err), CONVEYOR_OK);
  ASSERT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(marker(h), 0) << "after migrate the same handle works";
  EXPECT_GT(enqueue(h, "q"), 0);
}

TEST_F(SqliteStorageTest, BusyDatabaseIsUnavailableNotCorrupt) {
  conveyor_storage* h = open_store({{"busy_timeout_ms", "50"}});
  ASSERT_NE(h, nullptr);
  int64_t id = enqueue(h, "q");
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);

  conveyor_new_job j{str("q"), str("k"), str(""), 0, 1, 0};
  int64_t new_id = 0;
  conveyor_error err{};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(api_->enqueue(h, &j, 1, &new_id, &err), CONVEYOR_E_UNAVAILABLE)
      << "another process holds the write lock";
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_NE(std::string(err.message).find("busy"), std::string::npos) << err.message;
  EXPECT_LT(waited, std::chrono::seconds(5)) << "the retry is bounded";
  EXPECT_EQ(job(h, id, 0).state, CONVEYOR_JOB_AVAILABLE) << "reads still work (WAL)";
  EXPECT_TRUE(claim(h, "empty", 10, 1, 0, 10).empty())
      << "polling an empty queue does not need the write lock";
  EXPECT_TRUE(claim(h, "q", 10, 1, -1, 10).empty())
      << "nothing due yet: no write lock needed either";
  claim(h, "q", 10, 1, 0, 10, CONVEYOR_E_UNAVAILABLE);  // a ready job needs the lock

  ASSERT_EQ(sqlite3_exec(raw, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  auto got = claim(h, "q", 10, 1, 0, 10);
  EXPECT_EQ(ids_of(got), std::vector<int64_t>{id}) << "the failed enqueue left nothing behind";
}

TEST_F(SqliteStorageTest, DataSurvivesCloseAndReopen) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  int64_t waiting = enqueue(h, "q", 3, 500, 4, "payload-1", "kind-1");
  int64_t running = enqueue(h, "q", 0, 0);
  ASSERT_EQ(claim(h, "q", 1, 31, 0, 9'000).size(), 1u);
  conveyor_error err{};
  ASSERT_EQ(api_->set_rate_limit(h, str("q"), 3.0, 2, 77, &err), CONVEYOR_OK);
  pause(h, "paused", true);
  int64_t m = marker(h);
  close_store(h);

  conveyor_storage* again = open_store();
  ASSERT_NE(again, nullptr);
  JobCopy w = job(again, waiting, 0);
  EXPECT_EQ(w.state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(w.payload, "payload-1");
  EXPECT_EQ(w.kind, "kind-1");
  EXPECT_EQ(w.priority, 3);
  EXPECT_EQ(w.max_attempts, 4);
  JobCopy r = job(again, running, 0);
  EXPECT_EQ(r.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(r.lease_token, 31);
  EXPECT_EQ(r.lease_expires, 9'000);
  auto l = limits(again);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].rate, 3.0);
  EXPECT_EQ(marker(again), m);
  auto st = stats(again, 0);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].queue, "paused");
  EXPECT_EQ(st[0].paused, 1);
  EXPECT_EQ(complete(again, {{running, 31}}, 10), std::vector<conveyor_status>{CONVEYOR_OK})
      << "the lease survives a restart";
}

// Two handles (two writer connections) on one file, 4 threads each, racing
// over 2000 jobs: every job is claimed exactly once.
TEST_F(SqliteStorageTest, ConcurrentClaimsFromTwoHandlesNeverOverlap) {
  conveyor_storage* h1 = open_store();
  conveyor_storage* h2 = open_store();
  ASSERT_NE(h1, nullptr);
  ASSERT_NE(h2, nullptr);
  const size_t kJobs = 2000;
  auto ids = enqueue_many(h1, "race", kJobs);
  ASSERT_EQ(ids.size(), kJobs);

  std::atomic<int64_t> next_token{1};
  std::atomic<int> errors{0};
  std::vector<std::vector<int64_t>> per_thread(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      conveyor_storage* h = t % 2 == 0 ? h1 : h2;
      for (;;) {
        std::vector<JobCopy> got;
        uint32_t n = 0;
        conveyor_error err{};
        const int64_t token = next_token++;
        conveyor_status st = api_->claim(
            h, str("race"), 1 + t % 7, token, 0, 1'000'000,
            [](void* ctx, const conveyor_job* j) {
              static_cast<std::vector<JobCopy>*>(ctx)->push_back(copy_job(j));
            },
            &got, &n, &err);
        if (st != CONVEYOR_OK) {
          ADD_FAILURE() << "claim: " << err.message;
          errors++;
          return;
        }
        if (n == 0) return;  // everything enqueued up front: empty means done
        std::vector<conveyor_lease> leases;
        for (const auto& j : got) {
          per_thread[t].push_back(j.id);
          leases.push_back({j.id, token});
        }
        std::vector<conveyor_status> res(leases.size(), -1);
        st = api_->complete(h, leases.data(), leases.size(), 1, res.data(), &err);
        if (st != CONVEYOR_OK ||
            std::any_of(res.begin(), res.end(), [](conveyor_status r) { return r != 0; })) {
          ADD_FAILURE() << "complete failed: " << err.message;
          errors++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(errors.load(), 0);

  std::multiset<int64_t> all;
  for (const auto& v : per_thread) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), kJobs) << "every job claimed exactly once in total";
  std::set<int64_t> unique(all.begin(), all.end());
  EXPECT_EQ(unique.size(), all.size()) << "no job was handed to two claimers";
  EXPECT_EQ(unique, std::set<int64_t>(ids.begin(), ids.end()));
  auto st = stats(h2, 0);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].completed, static_cast<int64_t>(kJobs));
  EXPECT_EQ(st[0].running + st[0].pending, 0);
}

// Many threads mixing every kind of call on one handle.
TEST_F(SqliteStorageTest, OneHandleIsThreadSafe) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> completed{0};
  std::atomic<int64_t> next_token{1};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) enqueue_many(h, "mix", 10);
    });
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      while (completed.load() < 1500) {
        const int64_t token = next_token++;
        auto got = claim(h, "mix", 8, token, 0, 1'000'000);
        auto res = complete(h, leases_of(got), 1);
        for (auto r : res) EXPECT_EQ(r, CONVEYOR_OK);
        completed += static_cast<int64_t>(got.size());
      }
    });
  threads.emplace_back([&] {
    while (!stop.load()) {
      stats(h, 0);
      marker(h);
      limits(h);
      JobCopy j;
      get(h, 1, 0, &j);
    }
  });
  for (size_t i = 0; i + 1 < threads.size(); ++i) threads[i].join();
  stop = true;
  threads.back().join();
  EXPECT_EQ(completed.load(), 1500);
  auto st = stats(h, 0);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].completed, 1500);
}

// Two processes on one file: fork a child that claims alongside the parent.
TEST_F(SqliteStorageTest, TwoProcessesNeverClaimTheSameJob) {
  {
    conveyor_storage* h = open_store();
    ASSERT_NE(h, nullptr);
    enqueue_many(h, "proc", 1000);
    close_store(h);  // no connection may be open across fork()
  }
  const std::string child_out = (fs::path(dir_) / "child-ids.txt").string();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0) << "fork failed";
  if (pid == 0) {
    // Child: plain C ABI calls only, no gtest assertions.
    conveyor_option opt{str("path"), str(db_path_)};
    conveyor_storage* h = nullptr;
    conveyor_error err{};
    if (api_->open(&opt, 1, &h, &err) != CONVEYOR_OK) ::_exit(2);
    std::vector<JobCopy> mine;
    int64_t token = 1'000'000;
    for (;;) {
      std::vector<JobCopy> got;
      uint32_t n = 0;
      ++token;
      if (api_->claim(
              h, str("proc"), 5, token, 0, 1'000'000,
              [](void* ctx, const conveyor_job* j) {
                auto* v = static_cast<std::vector<JobCopy>*>(ctx);
                JobCopy c;
                c.id = j->id;
                c.lease_token = j->lease_token;
                v->push_back(c);
              },
              &got, &n, &err) != CONVEYOR_OK)
        ::_exit(3);
      if (n == 0) break;
      std::vector<conveyor_lease> leases;
      for (auto& j : got) leases.push_back({j.id, j.lease_token});
      std::vector<conveyor_status> res(leases.size());
      if (api_->complete(h, leases.data(), leases.size(), 1, res.data(), &err) != CONVEYOR_OK)
        ::_exit(4);
      for (auto r : res)
        if (r != CONVEYOR_OK) ::_exit(5);
      mine.insert(mine.end(), got.begin(), got.end());
    }
    api_->close(h);
    std::ofstream out(child_out);
    for (auto& j : mine) out << j.id << "\n";
    out.close();
    ::_exit(out ? 0 : 6);
  }
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::vector<int64_t> parent_ids;
  for (int64_t token = 1;; ++token) {
    auto got = claim(h, "proc", 5, token, 0, 1'000'000);
    if (got.empty()) break;
    auto res = complete(h, leases_of(got), 1);
    for (auto r : res) EXPECT_EQ(r, CONVEYOR_OK);
    for (auto& j : got) parent_ids.push_back(j.id);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child crashed";
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child failed with code " << WEXITSTATUS(status);
  std::multiset<int64_t> all(parent_ids.begin(), parent_ids.end());
  std::ifstream in(child_out);
  for (int64_t id; in >> id;) all.insert(id);
  EXPECT_EQ(all.size(), 1000u) << "every job claimed once in total";
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size())
      << "no job claimed by both processes";
  auto st = stats(h, 0);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].completed, 1000);
}

// Throughput probe, not a test: run with
//   sqlite_storage_tests --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'
TEST_F(SqliteStorageTest, DISABLED_ThroughputClaimComplete) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const size_t kJobs = 200'000;
  for (size_t i = 0; i < kJobs; i += 10'000) enqueue_many(h, "bench", 10'000);
  std::vector<int64_t> ids;
  std::vector<conveyor_lease> leases;
  leases.reserve(100);
  std::vector<conveyor_status> res(100);
  conveyor_error err{};
  size_t done = 0;
  double claim_secs = 0;
  auto thread_cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  };
  const double cpu0 = thread_cpu();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t token = 1;; ++token) {
    leases.clear();
    struct Ctx {
      std::vector<conveyor_lease>* leases;
    } ctx{&leases};
    uint32_t n = 0;
    const auto c0 = std::chrono::steady_clock::now();
    ASSERT_EQ(api_->claim(
                  h, str("bench"), 100, token, 0, 1'000'000,
                  [](void* c, const conveyor_job* j) {
                    static_cast<Ctx*>(c)->leases->push_back({j->id, j->lease_token});
                  },
                  &ctx, &n, &err),
              CONVEYOR_OK)
        << err.message;
    claim_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    if (n == 0) break;
    ASSERT_EQ(api_->complete(h, leases.data(), leases.size(), 1, res.data(), &err), CONVEYOR_OK);
    done += n;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = thread_cpu() - cpu0;
  EXPECT_EQ(done, kJobs);
  std::printf(
      "claim(100)+complete(100): %zu jobs in %.3f s = %.0f jobs/s wall (claim %.3f s); "
      "thread CPU %.3f s = %.0f jobs/s per CPU second\n",
      done, secs, static_cast<double>(done) / secs, claim_secs, cpu,
      static_cast<double>(done) / cpu);
}

}  // namespace
