// The postgres plugin's ABI 1.1 calls against a real PostgreSQL
// (CONVEYOR_TEST_PG_DSN), beyond the conformance suite: what each statement
// reads (its generic plan), job_counts kept by count deltas (concurrent
// writers, folding, the migration from schema 1), rescue_expired_v2 and
// oldest_pending_run_at_us.
#include "pg_schema.hpp"
#include "pg_test_support.hpp"

#include <pqxx/nontransaction>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace conveyor::postgres::test {
namespace {

// One conveyor_queue_stats, every field copied (oldest_pending_run_at_us too).
struct Counts {
  std::string queue;
  int32_t paused = 0;
  int64_t pending = 0, scheduled = 0, running = 0, completed = 0, failed = 0, cancelled = 0;
  int64_t oldest = 0;
  bool operator==(const Counts&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Counts& c) {
  return os << c.queue << "{paused " << c.paused << " pending " << c.pending << " scheduled "
            << c.scheduled << " running " << c.running << " completed " << c.completed << " failed "
            << c.failed << " cancelled " << c.cancelled << " oldest " << c.oldest << "}";
}

void on_stats(void* ctx, const conveyor_queue_stats* s) {
  EXPECT_EQ(s->struct_size, sizeof(conveyor_queue_stats));
  static_cast<std::vector<Counts>*>(ctx)->push_back(
      Counts{std::string(s->queue.data, s->queue.len), s->paused, s->pending, s->scheduled,
             s->running, s->completed, s->failed, s->cancelled, s->oldest_pending_run_at_us});
}

void on_job(void* ctx, const conveyor_job* j) {
  static_cast<std::vector<JobCopy>*>(ctx)->push_back(plugin_testing::copy_job(j));
}

class PgJobOperationsTest : public PgTest {
 protected:
  std::vector<Counts> counts(conveyor_storage* h, int64_t now) {
    std::vector<Counts> out;
    conveyor_error err{};
    EXPECT_EQ(api_->job_counts(h, now, &on_stats, &out, &err), CONVEYOR_OK) << err.message;
    return out;
  }
  std::vector<Counts> full_stats(conveyor_storage* h, int64_t now) {
    std::vector<Counts> out;
    conveyor_error err{};
    EXPECT_EQ(api_->queue_stats(h, now, &on_stats, &out, &err), CONVEYOR_OK) << err.message;
    return out;
  }
  std::vector<JobCopy> claim_kinds(conveyor_storage* h, const std::string& queue,
                                   const std::vector<std::string>& kinds, uint32_t max,
                                   int64_t now) {
    std::vector<conveyor_str> k;
    for (const std::string& kind : kinds) k.push_back(str(kind));
    std::vector<JobCopy> got;
    uint32_t n = 0;
    conveyor_error err{};
    EXPECT_EQ(api_->claim_kinds(h, str(queue), k.data(), k.size(), max, ++token_, now,
                                now + 60'000'000, &on_job, &got, &n, &err),
              CONVEYOR_OK)
        << err.message;
    EXPECT_EQ(n, got.size());
    return got;
  }
  std::vector<JobCopy> rescue(conveyor_storage* h, int64_t now, uint32_t max) {
    std::vector<JobCopy> got;
    uint32_t n = 0;
    conveyor_error err{};
    EXPECT_EQ(api_->rescue_expired_v2(h, now, max, &on_job, &got, &n, &err), CONVEYOR_OK)
        << err.message;
    EXPECT_EQ(n, got.size());
    return got;
  }
  int64_t delta_rows() {
    return sql("SELECT count(*) FROM \"" + schema_ + "\".job_count_deltas")[0][0].as<int64_t>();
  }
  // Inserts rows straight into the jobs table (fast setup of big tables):
  // n jobs of queue and kind in state, finalized at 1 when final.
  void insert_rows(const std::string& queue, const std::string& kind, int state, int n) {
    sql("INSERT INTO \"" + schema_ +
        "\".jobs (queue, kind, payload, priority, state, max_attempts, run_at, created_at,"
        " finalized_at, lease_token, lease_expires) SELECT '" +
        queue + "', '" + kind + "', '\\x'::bytea, 0, " + std::to_string(state) + ", 3, 1, 1, " +
        (state >= 4 ? "1" : "0") + ", " + (state == 3 ? "7, 9" : "0, 0") +
        " FROM generate_series(1, " + std::to_string(n) + ")");
  }
  std::string plan(const char* statement, const std::string& args,
                   const std::vector<std::string>& settings = {}) {
    return generic_plan(statement_sql(statement, schema_), args, settings);
  }

  int64_t token_ = 100;
};

TEST_F(PgJobOperationsTest, EveryV11SlotIsFilled) {
  const conveyor_storage_plugin* api =
      conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
  ASSERT_NE(api, nullptr);
  EXPECT_GE(api->struct_size, CONVEYOR_PLUGIN_V1_1_SIZE);
  EXPECT_NE(api->enqueue_v2, nullptr);
  EXPECT_NE(api->claim_kinds, nullptr);
  EXPECT_NE(api->list_jobs, nullptr);
  EXPECT_NE(api->retry_jobs, nullptr);
  EXPECT_NE(api->delete_jobs, nullptr);
  EXPECT_NE(api->job_counts, nullptr);
  EXPECT_NE(api->rescue_expired_v2, nullptr);
}

// The counts of retained jobs are kept by the statements that finalize,
// retry, delete and purge jobs; compared with queue_stats, which counts rows.
TEST_F(PgJobOperationsTest, JobCountsFollowEveryStateChange) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  std::vector<int64_t> ids = enqueue_many(h, "a", 10, /*run_at=*/5);
  enqueue_many(h, "b", 3, /*run_at=*/7);
  std::vector<JobCopy> got = claim(h, "a", 8, 1, 10, 1'000);
  ASSERT_EQ(got.size(), 8u);
  complete(h, {got[0].lease(), got[1].lease(), got[2].lease()}, 20);
  ASSERT_EQ(fail(h, got[3].lease(), "boom", -1, 21), CONVEYOR_OK);
  ASSERT_EQ(fail(h, got[4].lease(), "again", 5'000, 21), CONVEYOR_OK) << "retried: not final";
  conveyor_error err{};
  ASSERT_EQ(api_->cancel(h, got[5].id, 22, &err), CONVEYOR_OK) << err.message;
  ASSERT_EQ(api_->cancel(h, ids[9], 22, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(counts(h, 30), full_stats(h, 30));

  std::vector<conveyor_status> r(2);
  const int64_t retry[] = {got[3].id, got[5].id};
  ASSERT_EQ(api_->retry_jobs(h, retry, 2, 40, r.data(), &err), CONVEYOR_OK) << err.message;
  const int64_t gone[] = {got[0].id, ids[9]};
  ASSERT_EQ(api_->delete_jobs(h, gone, 2, r.data(), &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(counts(h, 50), full_stats(h, 50));
  // Leases of 6 and 7 expire; 8 and 9 were never claimed.
  EXPECT_EQ(rescue(h, 2'000, 100).size(), 2u);
  uint64_t purged = 0;
  ASSERT_EQ(api_->purge_finished(h, 100, 100, &purged, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(purged, 2u) << "completed 1 and 2 (0 was deleted, 3 and 5 retried)";
  EXPECT_EQ(counts(h, 2'000), full_stats(h, 2'000));
  const std::vector<Counts> c = counts(h, 2'000);
  ASSERT_EQ(c.size(), 2u);
  // a: 8 (never claimed) and the rescued 6, 7 at run_at 5; the retried 3, 5
  // at 40; 4 retried by fail at 5,000.
  EXPECT_EQ(c[0], (Counts{"a", 0, 5, 1, 0, 0, 0, 0, 5}));
  EXPECT_EQ(c[1], (Counts{"b", 0, 3, 0, 0, 0, 0, 0, 7}));
}

// Completions from many handles at once each append their own delta rows:
// nothing is lost or counted twice, and folding meanwhile keeps the sums.
TEST_F(PgJobOperationsTest, ConcurrentCompletionsAreCountedExactly) {
  conveyor_storage* seed = open_store();
  ASSERT_NE(seed, nullptr);
  constexpr int kThreads = 6, kJobs = 3000;
  for (int i = 0; i < kJobs / 500; ++i) enqueue_many(seed, "q", 500);
  std::vector<conveyor_storage*> handles;
  for (int i = 0; i < kThreads; ++i) handles.push_back(open_store());
  std::atomic<int> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t)
    workers.emplace_back([&, t] {
      for (;;) {
        std::vector<JobCopy> got;
        uint32_t n = 0;
        conveyor_error err{};
        if (api_->claim(handles[t], str("q"), 7, 1000 + t, 10, 1'000'000, &on_job, &got, &n,
                        &err) != CONVEYOR_OK ||
            got.empty())
          return;
        std::vector<conveyor_lease> leases = leases_of(got);
        std::vector<conveyor_status> r(leases.size());
        if (api_->complete(handles[t], leases.data(), leases.size(), 20, r.data(), &err) ==
            CONVEYOR_OK)
          for (conveyor_status s : r) done += s == CONVEYOR_OK;
      }
    });
  std::thread folder([&] {
    while (!stop) {
      uint64_t purged = 0;
      conveyor_error err{};
      // purge_finished folds the deltas; nothing is old enough to purge.
      EXPECT_EQ(api_->purge_finished(seed, 0, 10, &purged, &err), CONVEYOR_OK) << err.message;
    }
  });
  for (auto& w : workers) w.join();
  stop = true;
  folder.join();
  EXPECT_EQ(done.load(), kJobs);
  const std::vector<Counts> c = counts(seed, 30);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].completed, kJobs);
  EXPECT_EQ(c[0].pending + c[0].running, 0);
}

TEST_F(PgJobOperationsTest, DeltaRowsAreFoldedByPurgeAndByJobCounts) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  enqueue_many(h, "q", 1001);
  for (int i = 0; i < 1001; ++i) {
    std::vector<JobCopy> got = claim(h, "q", 1, 5 + i, 10, 1'000);
    ASSERT_EQ(got.size(), 1u);
    complete(h, leases_of(got), 20);
  }
  EXPECT_EQ(delta_rows(), 1001) << "one row per completing statement";
  EXPECT_EQ(counts(h, 30)[0].completed, 1001);
  EXPECT_EQ(delta_rows(), 1) << "job_counts folds more than 1000 rows";
  EXPECT_EQ(counts(h, 30)[0].completed, 1001);

  enqueue_many(h, "q", 3);
  for (int i = 0; i < 3; ++i) complete(h, leases_of(claim(h, "q", 1, 9000 + i, 10, 1'000)), 20);
  EXPECT_EQ(delta_rows(), 4);
  uint64_t purged = 0;
  conveyor_error err{};
  ASSERT_EQ(api_->purge_finished(h, 0, 10, &purged, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(delta_rows(), 1) << "purge_finished folds";
  ASSERT_EQ(api_->purge_finished(h, 21, 100'000, &purged, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(purged, 1004u);
  ASSERT_EQ(api_->purge_finished(h, 21, 10, &purged, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(delta_rows(), 0) << "sums of zero are dropped";
  EXPECT_TRUE(counts(h, 30).empty());
}

// A schema 1 database with jobs in every state migrates to schema 2 with its
// counts: job_counts agrees with queue_stats, and keeps agreeing afterwards.
TEST_F(PgJobOperationsTest, MigrationFromSchema1KeepsTheCounts) {
  {
    pqxx::connection c(dsn_);
    migrate_schema(c, schema_, 1);
  }
  EXPECT_EQ(sql("SELECT max(version) FROM \"" + schema_ + "\".schema_migrations")[0][0].as<int>(),
            1);
  EXPECT_TRUE(
      sql("SELECT to_regclass('\"" + schema_ + "\".job_count_deltas') IS NULL")[0][0].as<bool>());
  insert_rows("a", "x", 1, 5);
  insert_rows("a", "x", 3, 2);
  insert_rows("a", "x", 4, 40);
  insert_rows("a", "y", 4, 7);
  insert_rows("a", "y", 5, 3);
  insert_rows("b", "x", 6, 4);
  sql("INSERT INTO \"" + schema_ + "\".queues (name) VALUES ('a'), ('b')");

  conveyor_storage* h = open_store();  // migrates to the current version
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM \"" + schema_ + "\".schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  EXPECT_EQ(counts(h, 10), full_stats(h, 10));
  std::vector<Counts> c = counts(h, 10);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0], (Counts{"a", 0, 5, 0, 2, 47, 3, 0, 1}));
  EXPECT_EQ(c[1], (Counts{"b", 0, 0, 0, 0, 0, 0, 4, 0}));

  complete(h, leases_of(claim(h, "a", 5, 77, 10, 1'000)), 20);
  uint64_t purged = 0;
  conveyor_error err{};
  ASSERT_EQ(api_->purge_finished(h, 5, 10, &purged, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(purged, 10u) << "migrated rows finalized at 1";
  EXPECT_EQ(counts(h, 30), full_stats(h, 30));
  std::vector<JobCopy> listed;
  uint32_t n = 0;
  const int32_t completed[] = {CONVEYOR_JOB_COMPLETED};
  ASSERT_EQ(
      api_->list_jobs(h, str("a"), completed, 1, str(""), 0, 1000, 30, &on_job, &listed, &n, &err),
      CONVEYOR_OK)
      << err.message;
  EXPECT_EQ(n, 47u - 10u + 5u) << "the new index holds the migrated rows";
}

// A schema 2 database (ABI 1.1) with jobs and an override migrates to
// schema 3: its jobs cost 1, its override is process-wide, and the 1.2
// calls work on it.
TEST_F(PgJobOperationsTest, MigrationFromSchema2KeepsJobsAndOverrides) {
  {
    pqxx::connection c(dsn_);
    migrate_schema(c, schema_, 2);
  }
  const std::string s = "\"" + schema_ + "\"";
  EXPECT_TRUE(sql("SELECT to_regclass('" + s + ".shared_state') IS NULL")[0][0].as<bool>());
  insert_rows("a", "x", 1, 3);
  insert_rows("a", "x", 4, 2);
  // As a schema-2 plugin counts finished jobs (the rows above bypassed it).
  sql("INSERT INTO " + s + ".job_count_deltas (queue, state, delta) VALUES ('a', 4, 2)");
  sql("INSERT INTO " + s + ".queues (name) VALUES ('a')");
  sql("INSERT INTO " + s + ".rate_limits (queue, rate, burst, updated_at) VALUES ('a', 2.5, 4, 7)");

  conveyor_storage* h = open_store();  // migrates to the current version
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  EXPECT_EQ(counts(h, 10), full_stats(h, 10));
  std::vector<JobCopy> got = claim(h, "a", 10, 77, 10, 1'000);
  ASSERT_EQ(got.size(), 3u) << "the schema-2 jobs were lost";
  for (const JobCopy& j : got) EXPECT_EQ(j.cost, 1) << "a job from before job costs costs 1";
  std::vector<LimitCopy> l = limits(h);
  ASSERT_EQ(l.size(), 1u) << "the schema-2 override was lost";
  EXPECT_EQ(l[0].rate, 2.5);
  EXPECT_EQ(l[0].burst, 4u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_PROCESS);
  const host::PluginBinding::Shared swapped = swap_shared(h, "k", 0, 9);
  EXPECT_EQ(swapped.applied, 1);
  EXPECT_EQ(swapped.version, 1);
  EXPECT_EQ(swapped.value, 9);
  conveyor_error err{};
  ASSERT_EQ(api_->set_rate_limit_v2(h, str("a"), 3, 3, CONVEYOR_SCOPE_FLEET, 8, &err), CONVEYOR_OK)
      << err.message;
  EXPECT_EQ(limits(h).at(0).scope, CONVEYOR_SCOPE_FLEET);
  conveyor_new_job_v2 costly{conveyor_new_job{str("a"), str("k"), str("{}"), 0, 3, 10}, 6, 0};
  int64_t id = 0;
  ASSERT_EQ(api_->enqueue_v3(h, &costly, 1, 10, &id, &err), CONVEYOR_OK) << err.message;
  JobCopy j;
  ASSERT_EQ(get(h, id, 10, &j), CONVEYOR_OK);
  EXPECT_EQ(j.cost, 6);
}

// A schema 3 database with shared records (fleet buckets, the kill switch)
// migrates to schema 4: the records move into sequences unchanged, and a
// swap from then on changes no row (so leaves no dead tuple).
TEST_F(PgJobOperationsTest, MigrationFromSchema3KeepsSharedRecordsAndSwapsUpdateNoRow) {
  {
    pqxx::connection c(dsn_);
    migrate_schema(c, schema_, 3);
  }
  const std::string s = "\"" + schema_ + "\"";
  sql("INSERT INTO " + s + ".shared_state (key, version, value) VALUES ('ratelimit.bucket:q', 7, " +
      "-5), ('ratelimit.enabled', 2, 1)");

  conveyor_storage* h = open_store();  // migrates to the current version
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  EXPECT_TRUE(sql("SELECT to_regclass('" + s + ".shared_state') IS NULL")[0][0].as<bool>());
  host::PluginBinding::Shared r = swap_shared(h, "ratelimit.enabled", -1, 0);
  EXPECT_EQ(r.version, 2);
  EXPECT_EQ(r.value, 1);
  r = swap_shared(h, "ratelimit.bucket:q", 6,
                  0);  // a stale version: not applied, the record reported
  EXPECT_EQ(r.applied, 0);
  EXPECT_EQ(r.version, 7);
  EXPECT_EQ(r.value, -5);

  const std::string row = "SELECT ctid::text || '/' || xmin::text FROM " + s +
                          ".shared_keys WHERE key = 'ratelimit.bucket:q'";
  const std::string before = sql(row)[0][0].c_str();
  for (int64_t v = 7; v < 57; ++v) {
    r = swap_shared(h, "ratelimit.bucket:q", v, v * 1000);
    ASSERT_EQ(r.applied, 1) << "at version " << v;
  }
  EXPECT_EQ(r.version, 57);
  EXPECT_EQ(r.value, 56'000);
  EXPECT_EQ(sql(row)[0][0].c_str(), before) << "a swap updated the key's row";
  r = swap_shared(h, "a new key", 0, 3);
  EXPECT_EQ(r.applied, 1);
  EXPECT_EQ(r.version, 1);
  EXPECT_EQ(sql("SELECT count(*) FROM " + s + ".shared_keys")[0][0].as<int>(), 3);
}

TEST_F(PgJobOperationsTest, OldestPendingRunAtInQueueStatsAndJobCounts) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  enqueue(h, "q", 5, 300);
  enqueue(h, "q", 0, 200);
  enqueue(h, "q", 9, 400);
  enqueue(h, "q", 0, 5'000);  // scheduled at 1,000
  enqueue(h, "idle", 0, 9'000);
  for (bool full : {false, true}) {
    auto read = [&](int64_t now) { return full ? full_stats(h, now) : counts(h, now); };
    std::vector<Counts> c = read(1'000);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].queue, "idle");
    EXPECT_EQ(c[0].oldest, 0) << "nothing pending";
    EXPECT_EQ(c[1].oldest, 200) << "the smallest run_at among pending jobs, not claim order";
    EXPECT_EQ(read(250)[1].oldest, 200);
    EXPECT_EQ(read(150)[1].oldest, 0) << "before any run_at nothing is pending";
  }
  std::vector<JobCopy> got = claim(h, "q", 1, 3, 1'000, 2'000);  // priority 0, run_at 200
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(counts(h, 1'000)[1].oldest, 300) << "claimed jobs are not pending";
  EXPECT_EQ(full_stats(h, 1'000)[1].oldest, 300);
}

TEST_F(PgJobOperationsTest, RescueExpiredV2ReportsEachRescuedJob) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t once = enqueue(h, "q", 0, 0, /*max_attempts=*/1, "p1", "k1");
  const int64_t thrice = enqueue(h, "q", 1, 0, /*max_attempts=*/3, "p3", "k3");
  enqueue(h, "q", 2);  // stays available
  std::vector<JobCopy> got = claim(h, "q", 2, 42, 10, 1'000);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(rescue(h, 999, 10).empty()) << "leases not yet expired";
  std::vector<JobCopy> rescued = rescue(h, 5'000, 10);
  ASSERT_EQ(rescued.size(), 2u);
  std::sort(rescued.begin(), rescued.end(),
            [](const JobCopy& a, const JobCopy& b) { return a.id < b.id; });
  EXPECT_EQ(rescued[0].id, once);
  EXPECT_EQ(rescued[0].state, CONVEYOR_JOB_FAILED) << "out of attempts";
  EXPECT_EQ(rescued[0].finalized_at, 5'000);
  EXPECT_EQ(rescued[0].payload, "p1");
  EXPECT_EQ(rescued[0].kind, "k1");
  EXPECT_EQ(rescued[1].id, thrice);
  EXPECT_EQ(rescued[1].state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(rescued[1].attempt, 1);
  for (const JobCopy& j : rescued) {
    EXPECT_EQ(j.queue, "q");
    EXPECT_EQ(j.lease_token, 0);
    EXPECT_EQ(j.lease_expires, 0);
    EXPECT_FALSE(j.last_error.empty());
    EXPECT_EQ(j.last_error, job(h, j.id, 5'000).last_error) << "reported as stored";
  }
  EXPECT_TRUE(rescue(h, 9'000, 10).empty()) << "a repeated rescue finds nothing";
  std::vector<Counts> c = counts(h, 9'000);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].failed, 1);
  EXPECT_EQ(c[0].pending, 2);
  uint32_t n = 7;
  conveyor_error err{};
  EXPECT_EQ(api_->rescue_expired_v2(h, 9'000, 10, nullptr, nullptr, &n, &err), CONVEYOR_E_INVALID);
}

TEST_F(PgJobOperationsTest, ClaimKindsSkipsABacklogOfOtherKinds) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  insert_rows("q", "bulk", 1, 20'000);
  sql("INSERT INTO \"" + schema_ + "\".queues (name) VALUES ('q')");
  const int64_t mine = enqueue(h, "q", 50, 0, 3, "{}", "rare");
  sql("VACUUM ANALYZE \"" + schema_ + "\".jobs");
  std::vector<JobCopy> got = claim_kinds(h, "q", {"rare", "absent"}, 10, 10);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, mine);
  const std::string p = plan(stmt::kClaimKinds, "('q', 10, 10, 1, 2, 'h:1', '{rare}')");
  EXPECT_NE(p.find("jobs_ready_kind"), std::string::npos) << p;
  EXPECT_EQ(p.find("using jobs_ready on"), std::string::npos) << p;
  EXPECT_EQ(p.find("Seq Scan on jobs"), std::string::npos) << p;
}

// list_jobs and job_counts read index ranges and partial indexes only, even
// on plans made when the table held mostly retained jobs.
TEST_F(PgJobOperationsTest, ListAndCountPlansNeverScanRetainedJobs) {
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  insert_rows("q", "x", 4, 20'000);
  insert_rows("q", "y", 5, 2'000);
  insert_rows("q", "x", 1, 20);
  insert_rows("q", "x", 3, 5);
  sql("VACUUM ANALYZE \"" + schema_ + "\".jobs");
  struct Case {
    const char* statement;
    const char* args;
    const char* index;
  };
  const Case cases[] = {
      {stmt::kListFinal, "('q', 4, 'x', 0, 100)", "jobs_list"},
      {stmt::kListFinalAnyKind, "('q', 4, 0, 100)", "jobs_list"},
      {stmt::kListAvailable, "('q', 0, 0, 100, 100, '')", "jobs_ready"},
      {stmt::kListRunning, "('q', 0, 100, '')", "jobs_lease"},
  };
  for (const Case& c : cases) {
    const std::string p =
        plan(c.statement, c.args, {"SET LOCAL enable_seqscan = off", "SET LOCAL jit = off"});
    EXPECT_NE(p.find(c.index), std::string::npos) << c.statement << ":\n" << p;
    EXPECT_EQ(p.find("Seq Scan"), std::string::npos) << c.statement << ":\n" << p;
    EXPECT_EQ(p.find("jobs_final"), std::string::npos) << c.statement << ":\n" << p;
    // The primary key only looks the listed ids up, never walks a range.
    EXPECT_EQ(p.find("Index Cond: (id >"), std::string::npos) << c.statement << ":\n" << p;
    EXPECT_EQ(p.find("Index Cond: (j.id >"), std::string::npos) << c.statement << ":\n" << p;
  }
  const std::string p =
      plan(stmt::kJobCounts, "(10)", {"SET LOCAL enable_seqscan = off", "SET LOCAL jit = off"});
  EXPECT_EQ(p.find("Seq Scan on jobs"), std::string::npos) << p;
  EXPECT_EQ(p.find("jobs_pkey"), std::string::npos) << p;
  EXPECT_EQ(p.find("jobs_list"), std::string::npos) << p;
  EXPECT_EQ(p.find("jobs_final"), std::string::npos) << p;
  EXPECT_NE(p.find("jobs_lease"), std::string::npos) << p;
  EXPECT_NE(p.find("jobs_ready"), std::string::npos) << p;

  // The same through the plugin: a page of each state, in id order.
  std::vector<JobCopy> listed;
  uint32_t n = 0;
  conveyor_error err{};
  ASSERT_EQ(
      api_->list_jobs(h, str("q"), nullptr, 0, str(""), 0, 50, 10, &on_job, &listed, &n, &err),
      CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(n, 50u);
  EXPECT_TRUE(std::is_sorted(listed.begin(), listed.end(),
                             [](const JobCopy& a, const JobCopy& b) { return a.id < b.id; }));
  EXPECT_EQ(listed.back().id - listed.front().id, 49) << "the first 50 ids";
}

}  // namespace
}  // namespace conveyor::postgres::test
