// ABI 1.4 (job keys) in the canonical postgres plugin (schema 6): what the
// shared tests (postgres-common/job_keys_test.cc) cannot see from the ABI:
// the migration of a schema 5 database, and plans that read only the keys a
// call names, even when made from statistics that saw one key only.
#include "job_keys_test_support.hpp"
#include "pg_schema.hpp"

#include <pqxx/pqxx>

namespace conveyor::postgres::test {
namespace {

class PgJobKeysSchemaTest : public PgTest {
 protected:
  // n rows of queue with key straight into the jobs table, AVAILABLE at
  // run_at 1 (key omitted: the column's default).
  void insert_ready(const std::string& queue, const std::optional<std::string>& key, int n) {
    sql("INSERT INTO \"" + schema_ + "\".jobs (queue, kind, payload, priority, state," +
        " max_attempts, run_at, created_at" + (key ? ", key" : "") + ") SELECT '" + queue +
        "', 'x', '\\x'::bytea, 0, 1, 3, 1, 1" + (key ? ", '" + *key + "'" : "") +
        " FROM generate_series(1, " + std::to_string(n) + ")");
  }
  std::string plan(const char* statement, const std::string& args) {
    return generic_plan(statement_sql(statement, schema_), args);
  }
};

// A schema 5 database (ABI 1.3) migrates to schema 6: every job, ready,
// running or finished, has the empty key and keeps its state; the ready
// ones are listed and claimed under it.
TEST_F(PgJobKeysSchemaTest, MigrationFromSchema5GivesEveryJobTheEmptyKey) {
  {
    pqxx::connection c(dsn_);
    migrate_schema(c, schema_, 5);
  }
  const std::string s = "\"" + schema_ + "\"";
  insert_ready("a", std::nullopt, 3);
  sql("INSERT INTO " + s +
      ".jobs (queue, kind, payload, priority, state, attempt, max_attempts,"
      " run_at, created_at, lease_token, lease_expires) VALUES ('a', 'x', '\\x'::bytea, 0, 3, 1, 3,"
      " 1, 1, 7, 1000)");
  sql("INSERT INTO " + s + ".queues (name) VALUES ('a')");

  conveyor_storage* h = open_store();  // migrates to the current version
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  ReadyKeysResult listed = ready_keys(api_, h, "a", std::nullopt, 10, 10, 10);
  ASSERT_EQ(listed.status, CONVEYOR_OK) << listed.message;
  EXPECT_EQ(listed.keys, (ReadyKeys{{"", 3}}));
  KeyClaimResult got = claim_keys(api_, h, "a", {{"", 2}}, {}, 77, 10, 1000);
  ASSERT_EQ(got.status, CONVEYOR_OK) << got.message;
  ASSERT_EQ(got.jobs.size(), 2u);
  for (const JobCopy& j : got.jobs) EXPECT_EQ(j.key, "");
  const int64_t running =
      sql("SELECT id FROM " + s + ".jobs WHERE lease_token = 7")[0][0].as<int64_t>();
  JobCopy r = job(h, running, 10);
  EXPECT_EQ(r.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(r.key, "");
  EXPECT_EQ(complete(h, {{running, 7}}, 20), std::vector{CONVEYOR_OK});
  EXPECT_EQ(ids_of(claim(h, "a", 10, 78, 10, 1000)).size(), 1u) << "the third ready job";
  // Keyed jobs from now on.
  const std::vector<int64_t> ids = enqueue_keyed(api_, h, {{"a", "k"}}, 10);
  EXPECT_EQ(job(h, ids.at(0), 10).key, "k");
}

// Statistics gathered when every job had the empty key make a key look
// unselective; the generic plans still read one jobs_ready_key range per key
// (never jobs_ready past other keys' jobs, never a scan of the table), and
// the loose index scan of list_ready_keys still probes the index per key.
TEST_F(PgJobKeysSchemaTest, KeyedPlansReadOnlyTheKeysTheyName) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  insert_ready("q", std::nullopt, 20'000);
  sql("INSERT INTO \"" + schema_ + "\".queues (name) VALUES ('q')");
  sql("VACUUM ANALYZE \"" + schema_ + "\".jobs");
  const std::vector<int64_t> mine = enqueue_keyed(api_, h, {{"q", "rare", "x", 50}}, 10);
  KeyClaimResult got = claim_keys(api_, h, "q", {{"rare", 5}}, {}, 77, 10, 1000);
  ASSERT_EQ(got.status, CONVEYOR_OK) << got.message;
  EXPECT_EQ(ids_of(got.jobs), mine) << "the rare key's job, not the backlog's ahead of it";

  struct Case {
    const char* statement;
    const char* args;
  };
  const Case cases[] = {
      {stmt::kClaimKeys, "('q', 10, 10, 1, 2, 'h:1', '{rare,other}', '{5,5}')"},
      {stmt::kClaimKeysKinds, "('q', 10, 10, 1, 2, 'h:1', '{rare,other}', '{5,5}', '{x}')"},
      {stmt::kListReadyKeys, "('q', 10, 100, 10)"},
      {stmt::kListReadyKeysAfter, "('q', 10, 100, 10, 'a')"},
  };
  for (const Case& c : cases) {
    const std::string p = plan(c.statement, c.args);
    EXPECT_NE(p.find("jobs_ready_key"), std::string::npos) << c.statement << ":\n" << p;
    EXPECT_EQ(p.find("using jobs_ready on"), std::string::npos) << c.statement << ":\n" << p;
    EXPECT_EQ(p.find("jobs_ready_kind"), std::string::npos) << c.statement << ":\n" << p;
    EXPECT_EQ(p.find("Seq Scan on jobs"), std::string::npos) << c.statement << ":\n" << p;
    EXPECT_EQ(p.find("Bitmap"), std::string::npos) << c.statement << ":\n" << p;
    EXPECT_EQ(p.find("Sort"), std::string::npos) << c.statement << ":\n" << p;
  }
  // The claim's UPDATE looks the picked jobs up by primary key.
  EXPECT_NE(plan(stmt::kClaimKeys, cases[0].args).find("jobs_pkey"), std::string::npos);
}

}  // namespace
}  // namespace conveyor::postgres::test
