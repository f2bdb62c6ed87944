// Unit tests of the sqlite plugin's ABI 1.6 (a job's own timeout, when its
// latest attempt started; schema 7), driven through its C ABI table: a
// schema 6 database upgrades with every job kept, and the claim writes
// started_at in the UPDATE that leases the job.
#include <conveyor/testing/plugin_calls.hpp>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <string>
#include <vector>

#include "schema.hpp"
#include "sqlite_storage.hpp"

namespace {

namespace fs = std::filesystem;
using namespace conveyor::plugin_testing;  // NOLINT: the shared test names

class SqliteTimeoutsTest : public ::testing::Test, public PluginCalls {
 protected:
  void SetUp() override {
    api_ = conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
    ASSERT_NE(api_, nullptr);
    std::string tmpl =
        (fs::path(::testing::TempDir()) / "conveyor-sqlite-timeouts-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << "mkdtemp failed";
    dir_ = tmpl;
    db_path_ = (fs::path(dir_) / "jobs.db").string();
  }
  void TearDown() override {
    close_all();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  conveyor_storage* open_store() { return open_tracked({{"path", db_path_}}); }

  void exec(const std::string& sql) {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
    char* msg = nullptr;
    EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &msg), SQLITE_OK)
        << (msg ? msg : "");
    sqlite3_free(msg);
    sqlite3_close(raw);
  }
  std::vector<std::string> texts(const std::string& sql) {
    sqlite3* raw = nullptr;
    std::vector<std::string> out;
    EXPECT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(raw, sql.c_str(), -1, &st, nullptr), SQLITE_OK)
        << sqlite3_errmsg(raw);
    while (sqlite3_step(st) == SQLITE_ROW) {
      const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      out.emplace_back(p != nullptr ? p : "");
    }
    sqlite3_finalize(st);
    sqlite3_close(raw);
    return out;
  }

  std::string dir_;
  std::string db_path_;
};

TEST_F(SqliteTimeoutsTest, TheTableHasEnqueueV5) {
  EXPECT_GE(api_->struct_size, CONVEYOR_PLUGIN_V1_6_SIZE);
  EXPECT_EQ(api_->abi_minor, static_cast<uint32_t>(CONVEYOR_ABI_MINOR));
  EXPECT_NE(api_->enqueue_v5, nullptr);
}

// A database of schema 6 (ABI 1.5) upgrades on open: every job stays, in
// its state, with timeout 0 and started_at 0 (schema 6 stored no start; a
// job running through the upgrade gets its next start from its next claim),
// and the new columns work at once; migrate again is a no-op.
TEST_F(SqliteTimeoutsTest, UpgradeFromSchema6KeepsEveryJob) {
  {
    std::string sql;
    for (int v = 0; v < 6; ++v) sql += conveyor::sqlite::schema_steps()[v];
    sql +=
        "PRAGMA user_version = 6;"
        "INSERT INTO queues (name, paused, next_pos, end_pos) VALUES ('q', 0, 1048579, 2097152);"
        "INSERT INTO jobs (pos, id, queue, kind, payload, priority, state, attempt, max_attempts,"
        " run_at, created_at, finalized_at, lease_token, lease_expires, cost, key) VALUES"
        " (1048576, 1, 'q', 'k', 'one', 0, 1, 0, 3, 10, 10, 0, 0, 0, 2, 'tenant'),"
        " (1048577, 2, 'q', 'k', 'two', 0, 3, 1, 3, 10, 10, 0, 77, 5000, 1, ''),"
        " (1048578, 3, 'q', 'k', 'three', 0, 4, 1, 3, 10, 10, 20, 0, 0, 1, '');"
        "INSERT INTO job_counts (queue, state, n) VALUES ('q', 4, 1);"
        "UPDATE meta SET value = 3 WHERE key = 'last_job_id';"
        "UPDATE meta SET value = 2 WHERE key = 'next_block';";
    exec(sql);
  }
  conveyor_storage* h = open_store();  // migrates 6 -> 7
  ASSERT_NE(h, nullptr);
  conveyor_error err{};
  ASSERT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << "again: " << err.message;
  EXPECT_EQ(texts("PRAGMA user_version"),
            (std::vector<std::string>{std::to_string(conveyor::sqlite::kSchemaVersion)}));
  ASSERT_GE(conveyor::sqlite::kSchemaVersion, 7);
  const JobCopy one = job(h, 1, 100);
  EXPECT_EQ(one.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(one.payload, "one");
  EXPECT_EQ(one.cost, 2);
  EXPECT_EQ(one.key, "tenant");
  EXPECT_EQ(one.timeout_ms, 0);
  EXPECT_EQ(one.started_at, 0);
  const JobCopy two = job(h, 2, 100);
  EXPECT_EQ(two.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(two.lease_token, 77);
  EXPECT_EQ(two.started_at, 0);
  const JobCopy three = job(h, 3, 100);
  EXPECT_EQ(three.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(three.finalized_at, 20);
  // The running job completes under its lease; the ready one is claimed
  // and gets its start.
  EXPECT_EQ(complete(h, {{2, 77}}, 200), std::vector{CONVEYOR_OK});
  std::vector<JobCopy> got = claim(h, "q", 10, 5, 300, 9000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, 1);
  EXPECT_EQ(got[0].started_at, 300);
  EXPECT_EQ(texts("SELECT started_at FROM jobs WHERE id = 1"), (std::vector<std::string>{"300"}));

  // enqueue_v5 on the upgraded database: ids continue, the timeout is stored.
  conveyor_new_job_v4 timed{
      conveyor_new_job_v3{
          conveyor_new_job_v2{conveyor_new_job{str("q"), str("k"), str("{}"), 0, 3, 400}, 1, 0},
          conveyor_str{}},
      2500};
  int64_t id = 0;
  ASSERT_EQ(api_->enqueue_v5(h, &timed, 1, 400, &id, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(id, 4) << "ids continue";
  EXPECT_EQ(texts("SELECT timeout_ms FROM jobs WHERE id = 4"), (std::vector<std::string>{"2500"}));
  EXPECT_EQ(job(h, 4, 500).timeout_ms, 2500);
}

// A timeout out of range is refused whole by the adapter before the plugin
// stores anything.
TEST_F(SqliteTimeoutsTest, EnqueueV5RefusesATimeoutOutOfRange) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  conveyor_new_job_v4 jobs[2] = {
      {{{{str("q"), str("k"), str("{}"), 0, 3, 1}, 1, 0}, conveyor_str{}}, 10},
      {{{{str("q"), str("k"), str("{}"), 0, 3, 1}, 1, 0}, conveyor_str{}},
       CONVEYOR_JOB_TIMEOUT_MAX_MS + 1}};
  int64_t ids[2] = {};
  conveyor_error err{};
  EXPECT_EQ(api_->enqueue_v5(h, jobs, 2, 1, ids, &err), CONVEYOR_E_INVALID);
  EXPECT_NE(std::string(err.message).find("jobs[1].timeout_ms"), std::string::npos) << err.message;
  EXPECT_EQ(texts("SELECT count(*) FROM jobs"), (std::vector<std::string>{"0"}));
}

}  // namespace
