// ABI 1.6 (a job's own timeout, when its latest attempt started) in the
// canonical postgres plugin (schema 9): what the conformance suite cannot
// see from the ABI. A schema 8 database migrates with every job kept: ready
// jobs have timeout 0 and no start, and a job running (or finished) before
// the migration reports the start its claim wrote (claimed_at). enqueue_v5
// stores timeouts, and started_at comes from the claim's own UPDATE.
#include "job_keys_test_support.hpp"
#include "pg_schema.hpp"

#include <pqxx/pqxx>

namespace conveyor::postgres::test {
namespace {

class PgTimeoutsSchemaTest : public PgTest {};

TEST_F(PgTimeoutsSchemaTest, MigrationFromSchema8KeepsJobsAndTheirStarts) {
  {
    pqxx::connection c(dsn_);
    migrate_schema(c, schema_, 8);
  }
  const std::string s = "\"" + schema_ + "\"";
  ASSERT_TRUE(sql("SELECT count(*) = 0 FROM information_schema.columns WHERE table_schema = '" +
                  schema_ + "' AND table_name = 'jobs' AND column_name = 'timeout_ms'")[0][0]
                  .as<bool>());
  // Ready, running (claimed at 500) and completed (claimed at 400) jobs, as
  // schema 8 holds them.
  sql("INSERT INTO " + s + ".queues (name) VALUES ('q')");
  const auto insert = [&](const std::string& values) {
    return sql("INSERT INTO " + s +
               ".jobs (queue, kind, payload, priority, state, attempt, max_attempts, run_at,"
               " created_at, finalized_at, lease_token, lease_expires, claimed_at) VALUES " +
               values + " RETURNING id")[0][0]
        .as<int64_t>();
  };
  const int64_t ready = insert("('q', 'k', '\\x7b7d'::bytea, 0, 1, 0, 3, 10, 10, 0, 0, 0, 0)");
  const int64_t running =
      insert("('q', 'k', '\\x7b7d'::bytea, 0, 3, 1, 3, 10, 10, 0, 7, 100000, 500)");
  const int64_t done = insert("('q', 'k', '\\x7b7d'::bytea, 0, 4, 1, 3, 10, 10, 450, 0, 0, 400)");

  conveyor_storage* h = open_store();  // migrates to the current version
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  ASSERT_GE(kSchemaVersion, 9);
  const JobCopy r = job(h, ready, 600);
  EXPECT_EQ(r.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(r.started_at, 0);
  EXPECT_EQ(r.timeout_ms, 0);
  const JobCopy run = job(h, running, 600);
  EXPECT_EQ(run.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(run.started_at, 500) << "the claim before the migration wrote claimed_at";
  EXPECT_EQ(run.timeout_ms, 0);
  const JobCopy d = job(h, done, 600);
  EXPECT_EQ(d.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(d.started_at, 400);
  EXPECT_EQ(d.finalized_at, 450);
  EXPECT_EQ(complete(h, {{running, 7}}, 700), std::vector{CONVEYOR_OK});
  EXPECT_EQ(job(h, running, 800).started_at, 500) << "kept when it completes";

  // enqueue_v5 on the migrated schema; the claim writes its now.
  conveyor_new_job_v4 timed{
      conveyor_new_job_v3{
          conveyor_new_job_v2{conveyor_new_job{str("q"), str("k"), str("{}"), -1, 3, 900}, 1, 0},
          conveyor_str{}},
      45'000};
  int64_t id = 0;
  conveyor_error err{};
  ASSERT_EQ(api_->enqueue_v5(h, &timed, 1, 900, &id, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(sql("SELECT timeout_ms FROM " + s + ".jobs WHERE id = " + std::to_string(id))[0][0]
                .as<int64_t>(),
            45'000);
  std::vector<JobCopy> got = claim(h, "q", 1, 99, 1'000, 50'000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, id) << "priority -1 first";
  EXPECT_EQ(got[0].started_at, 1'000);
  EXPECT_EQ(got[0].timeout_ms, 45'000);
  EXPECT_EQ(sql("SELECT claimed_at FROM " + s + ".jobs WHERE id = " + std::to_string(id))[0][0]
                .as<int64_t>(),
            1'000)
      << "started_at is claimed_at, written by the claim";
}

}  // namespace
}  // namespace conveyor::postgres::test
