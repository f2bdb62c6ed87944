// The postgres-queue plugin against a real PostgreSQL (CONVEYOR_TEST_PG_DSN),
// through its C ABI: dead tuples over a long drain, claimers racing on one
// queue, scheduled and retried jobs promoted when due, and the generic plans
// of the hot statements.
#include "job_keys_test_support.hpp"
#include "key_settings_test_support.hpp"
#include "queue_schema.hpp"
#include "queue_test_support.hpp"
#include "ring_rotator.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

namespace conveyor::pgqueue {
namespace {

using namespace test;  // NOLINT: the shared test names
using plugin_testing::LimitCopy;
using plugin_testing::str;

// Polls pred until it holds or the deadline passes.
bool eventually(const std::function<bool()>& pred,
                std::chrono::seconds deadline = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

class QueueStorageTest : public postgres::test::PgTest {
 protected:
  int64_t count(const std::string& from_where) {
    return sql("SELECT count(*) FROM \"" + schema_ + "\"." + from_where)[0][0].as<int64_t>();
  }
  int64_t ring_value(const char* column) {
    return sql(std::string("SELECT ") + column + " FROM \"" + schema_ + "\".ring")[0][0]
        .as<int64_t>();
  }
  // Cumulative statistics of the plugin's tables, as the server has them now.
  int64_t table_stat(const char* expr, const char* relname_like = "%") {
    pqxx::work tx(*admin_);
    tx.exec("SELECT pg_stat_clear_snapshot()");
    return tx
        .exec_params("SELECT coalesce(sum(" + std::string(expr) +
                         "), 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname LIKE $2",
                     schema_, relname_like)[0][0]
        .as<int64_t>();
  }
  // Takes the schema back to version 8: no add_shared_states.
  // Takes the schema back to version 9: no timeout_ms or started_at on
  // entries and `later` rows (the entries view as it was, its last two
  // columns cut).
  void undo_schema_10() {
    const std::string s = "\"" + schema_ + "\"";
    std::string view = sql("SELECT pg_get_viewdef('" + s + ".entries'::regclass)")[0][0].c_str();
    const std::string::size_type timeout = view.find("r.timeout_ms");
    ASSERT_NE(timeout, std::string::npos) << view;
    const std::string::size_type from = view.rfind(',', timeout);
    const std::string::size_type to = view.find("AS started_at");
    ASSERT_NE(from, std::string::npos) << view;
    ASSERT_NE(to, std::string::npos) << view;
    view.erase(from, to + std::string("AS started_at").size() - from);
    sql("DROP VIEW " + s + ".entries; ALTER TABLE " + s + ".ready DROP COLUMN timeout_ms;" +
        " ALTER TABLE " + s + ".ready DROP COLUMN started_at; ALTER TABLE " + s +
        ".later DROP COLUMN timeout_ms; ALTER TABLE " + s + ".later DROP COLUMN started_at;" +
        " CREATE VIEW " + s + ".entries AS " + view + "; DELETE FROM " + s +
        ".queue_schema_migrations WHERE version = 10");
  }
  void undo_schema_9() {
    undo_schema_10();
    const std::string s = "\"" + schema_ + "\"";
    sql("DROP PROCEDURE " + s + ".add_shared_states; DELETE FROM " + s +
        ".queue_schema_migrations WHERE version = 9");
  }
  // Takes the schema back to version 7: no key settings, no
  // delete_shared_states.
  void undo_schema_8() {
    undo_schema_9();
    const std::string s = "\"" + schema_ + "\"";
    sql("DROP FUNCTION " + s + ".delete_shared_states; DROP FUNCTION " + s +
        ".delete_key_setting; DROP TABLE " + s + ".key_settings; DELETE FROM " + s +
        ".queue_schema_migrations WHERE version = 8");
  }
  // Takes the schema back to version 6: no job keys (the entries view as
  // it was, its key column cut).
  void undo_schema_7() {
    undo_schema_8();
    const std::string s = "\"" + schema_ + "\"";
    std::string view = sql("SELECT pg_get_viewdef('" + s + ".entries'::regclass)")[0][0].c_str();
    const std::string::size_type key = view.find("r.key");
    ASSERT_NE(key, std::string::npos) << view;
    const std::string::size_type comma = view.rfind(',', key);
    ASSERT_NE(comma, std::string::npos) << view;
    view.erase(comma, key + std::string("r.key").size() - comma);
    sql("DROP VIEW " + s + ".entries; DROP INDEX " + s + ".ready_key; ALTER TABLE " + s +
        ".ready DROP COLUMN key; ALTER TABLE " + s + ".later DROP COLUMN key; CREATE VIEW " + s +
        ".entries AS " + view + "; DELETE FROM " + s +
        ".queue_schema_migrations WHERE version = 7");
  }
  // Takes the schema back to version 3: the entries view without cost (its
  // current definition, the cost column cut), no cost columns, no scope, no
  // shared_state, the step unrecorded.
  // Takes the schema back to version 4: shared records in shared_state rows.
  void undo_schema_6() {
    undo_schema_7();
    const std::string s = "\"" + schema_ + "\"";
    sql("DROP FUNCTION " + s + ".add_shared_state; DELETE FROM " + s +
        ".queue_schema_migrations WHERE version = 6");
  }
  void undo_schema_5() {
    undo_schema_6();
    const std::string s = "\"" + schema_ + "\"";
    sql("CREATE TABLE " + s + ".shared_state (key text COLLATE \"C\" PRIMARY KEY, version " +
        "bigint NOT NULL, value bigint NOT NULL); INSERT INTO " + s +
        ".shared_state SELECT key, pg_sequence_last_value(version_seq), " +
        "pg_sequence_last_value(value_seq) FROM " + s + ".shared_keys; DROP FUNCTION " + s +
        ".swap_shared_state; DROP FUNCTION " + s + ".shared_key_create; DROP TABLE " + s +
        ".shared_keys; DROP SEQUENCE " + s + ".shared_key_ids; DELETE FROM " + s +
        ".queue_schema_migrations WHERE version = 5");
  }
  void undo_schema_4() {
    undo_schema_5();
    const std::string s = "\"" + schema_ + "\"";
    std::string view = sql("SELECT pg_get_viewdef('" + s + ".entries'::regclass)")[0][0].c_str();
    const std::string::size_type cost = view.find("r.cost");
    ASSERT_NE(cost, std::string::npos) << view;
    const std::string::size_type comma = view.rfind(',', cost);
    ASSERT_NE(comma, std::string::npos) << view;
    view.erase(comma, cost + std::string("r.cost").size() - comma);
    sql("DROP VIEW " + s + ".entries; ALTER TABLE " + s + ".ready DROP COLUMN cost; ALTER TABLE " +
        s + ".later DROP COLUMN cost; ALTER TABLE " + s +
        ".rate_limits DROP COLUMN scope; DROP TABLE " + s + ".shared_state; CREATE VIEW " + s +
        ".entries AS " + view + "; DELETE FROM " + s +
        ".queue_schema_migrations WHERE version = 4");
  }
};

// 20,000 jobs through enqueue, claim and complete with the ring rotating:
// the tables keep only hundreds of dead tuples (canonical leaves at least
// one per state change), and old slots are emptied by TRUNCATE.
TEST_F(QueueStorageTest, DrainLeavesHundredsOfDeadTuplesAndTruncatesOldSlots) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store({{"slots", "4"}, {"rotation_interval_ms", "50"}});
  ASSERT_NE(h, nullptr);
  constexpr int kRounds = 20, kPerRound = 1000, kBatch = 100;
  int64_t token = 1, done = 0;
  for (int round = 0; round < kRounds; ++round) {
    enqueue_many(h, "drain", kPerRound);
    for (;;) {
      const int64_t now = wall_us();
      std::vector<JobCopy> jobs = claim(h, "drain", kBatch, token++, now, now + 60 * kSecond);
      if (jobs.empty()) break;
      for (conveyor_status st : complete(h, leases_of(jobs), now)) ASSERT_EQ(st, CONVEYOR_OK);
      done += static_cast<int64_t>(jobs.size());
    }
    // Let the maintenance thread rotate between rounds, as it would between
    // bursts of a steady producer.
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
  ASSERT_EQ(done, kRounds * kPerRound);
  const int64_t rotations = ring_value("rotations");
  EXPECT_GE(rotations, 8) << "the ring should have wrapped at least twice";
  EXPECT_LT(count("ready"), kRounds * kPerRound / 2) << "old slots were not truncated";
  EXPECT_LT(count("marks"), kRounds * kPerRound) << "old slots were not truncated";

  // Closing the handle ends its server sessions, which flush their statistics.
  close_store(h);
  ASSERT_TRUE(eventually([&] {
    return table_stat("n_tup_ins", "ready%") >= kRounds * kPerRound &&
           table_stat("n_tup_ins", "marks%") >= 2 * kRounds * kPerRound;
  })) << "the plugin's statistics never arrived";
  const int64_t dead = table_stat("n_dead_tup");
  const int64_t changed = table_stat("n_tup_upd + n_tup_del");
  RecordProperty("dead_tuples", std::to_string(dead));
  EXPECT_LT(dead, 1000) << "dead tuples over " << kRounds * kPerRound << " jobs";
  EXPECT_LT(changed, 1000) << "rows updated or deleted over " << kRounds * kPerRound << " jobs";
  std::printf("[ figures  ] %d jobs: %lld dead tuples, %lld updates+deletes, %lld rotations\n",
              kRounds * kPerRound, static_cast<long long>(dead), static_cast<long long>(changed),
              static_cast<long long>(rotations));
}

// Four claimers on two handles race for one queue while a producer keeps
// enqueueing and the ring rotates as fast as it can (copying unclaimed
// entries forward under the claimers' feet): every job is claimed exactly
// once.
TEST_F(QueueStorageTest, ConcurrentClaimersNeverClaimTheSameJob) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h1 = open_store({{"slots", "3"}, {"rotation_interval_ms", "50"}});
  conveyor_storage* h2 = open_store({{"slots", "3"}, {"rotation_interval_ms", "50"}}, false);
  ASSERT_NE(h1, nullptr);
  ASSERT_NE(h2, nullptr);
  // Produces at least kJobs, and until the ring has turned a few times.
  constexpr int kJobs = 2000, kProducerBatch = 20, kMinRotations = 3;
  std::atomic<bool> producing{true};
  std::atomic<int64_t> produced{0};
  std::thread producer([&] {
    pqxx::connection c(dsn_);
    const std::string rotations = "SELECT rotations FROM \"" + schema_ + "\".ring";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline &&
           (produced < kJobs ||
            pqxx::nontransaction(c).exec(rotations)[0][0].as<int64_t>() < kMinRotations)) {
      enqueue_many(h2, "race", kProducerBatch);
      produced += kProducerBatch;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    producing = false;
  });
  std::mutex mu;
  std::map<int64_t, int> times_claimed;
  std::atomic<bool> failed{false};
  std::atomic<int64_t> next_token{1};
  std::atomic<bool> claimers_done{false};
  auto claimer = [&](conveyor_storage* h) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int empty_in_a_row = 0;
    while ((producing || empty_in_a_row < 20) && std::chrono::steady_clock::now() < deadline) {
      const int64_t now = wall_us(), token = next_token++;
      std::vector<int64_t> ids;
      uint32_t n = 0;
      conveyor_error err{};
      const conveyor_status st = api_->claim(
          h, postgres::test::str("race"), 7, token, now, now + 60 * kSecond,
          [](void* ctx, const conveyor_job* j) {
            static_cast<std::vector<int64_t>*>(ctx)->push_back(j->id);
          },
          &ids, &n, &err);
      if (st == CONVEYOR_E_UNAVAILABLE) continue;  // a truncate held the lock too long
      if (st != CONVEYOR_OK) {
        ADD_FAILURE() << "claim: " << err.message;
        failed = true;
        return;
      }
      empty_in_a_row = ids.empty() ? empty_in_a_row + 1 : 0;
      {
        std::lock_guard lock(mu);
        for (int64_t id : ids) ++times_claimed[id];
      }
      // Completed, so that the oldest slot empties and the ring can turn.
      std::vector<conveyor_lease> leases;
      for (int64_t id : ids) leases.push_back({id, token});
      std::vector<conveyor_status> results(leases.size());
      if (!leases.empty() &&
          api_->complete(h, leases.data(), leases.size(), now, results.data(), &err) != CONVEYOR_OK)
        ADD_FAILURE() << "complete: " << err.message;
    }
  };
  // A rotator of its own, on its own connection, as often as it can.
  std::map<int, int> outcomes;
  std::thread rotator([&] {
    pqxx::connection c(dsn_);
    while (!claimers_done) {
      try {
        ++outcomes[static_cast<int>(rotate_ring(c, schema_, 0, wall_us()).outcome)];
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rotate_ring: " << e.what();
        return;
      }
    }
  });
  std::vector<std::thread> threads;
  for (conveyor_storage* h : {h1, h1, h2, h2}) threads.emplace_back(claimer, h);
  producer.join();
  for (std::thread& t : threads) t.join();
  claimers_done = true;
  rotator.join();
  ASSERT_FALSE(failed);
  EXPECT_EQ(static_cast<int64_t>(times_claimed.size()), produced.load())
      << "some jobs were never claimed";
  std::string seen;
  for (const auto& [outcome, n] : outcomes)
    seen +=
        std::string(to_string(static_cast<Rotation>(outcome))) + ": " + std::to_string(n) + "; ";
  EXPECT_GE(ring_value("rotations"), kMinRotations)
      << "the ring did not rotate during the race: " << seen;
  for (const auto& [id, n] : times_claimed)
    EXPECT_EQ(n, 1) << "job " << id << " claimed " << n << "x";
}

// A job enqueued for later and a failed attempt retried later wait in the
// side table, are not claimable before they are due and are promoted (same
// job id) when a claim finds them due.
TEST_F(QueueStorageTest, ScheduledAndRetriedJobsArePromotedWhenDue) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t t0 = wall_us();
  const int64_t id = enqueue(h, "sched", 0, t0 + kHour);
  EXPECT_EQ(count("later"), 1);
  EXPECT_EQ(count("ready"), 0) << "a job not due must not enter the ring";
  EXPECT_EQ(job(h, id, t0).state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_TRUE(claim(h, "sched", 10, 1, t0 + kHour - 1, t0 + 2 * kHour).empty());

  std::vector<JobCopy> got = claim(h, "sched", 10, 2, t0 + kHour, t0 + 2 * kHour);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, id);
  EXPECT_EQ(got[0].attempt, 1);
  EXPECT_EQ(count("later"), 0) << "promotion removes the side-table row";

  const int64_t t1 = t0 + kHour + kSecond;
  ASSERT_EQ(fail(h, conveyor_lease{got[0].id, got[0].lease_token}, "boom", t1 + 10 * kSecond, t1),
            CONVEYOR_OK);
  EXPECT_EQ(count("later"), 1) << "a retry in the future waits in the side table";
  JobCopy waiting = job(h, id, t1);
  EXPECT_EQ(waiting.state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(waiting.last_error, "boom");
  EXPECT_TRUE(claim(h, "sched", 10, 3, t1, t1 + kHour).empty());
  got = claim(h, "sched", 10, 4, t1 + 10 * kSecond, t1 + kHour);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, id) << "a job keeps its id across retries";
  EXPECT_EQ(got[0].attempt, 2);
  EXPECT_EQ(got[0].last_error, "boom");
  EXPECT_EQ(count("later"), 0);
}

// A handle looks its own leases up in the claim's slot (lease_slots.hpp) and
// any other lease in every slot; a `later` row another handle put there is
// promoted (promotion_schedule.hpp).
TEST_F(QueueStorageTest, LeasesAndScheduledJobsOfAnotherHandleAreFound) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* mine = open_store({{"slots", "3"}, {"rotation_interval_ms", "50"}});
  conveyor_storage* other = open_store({{"slots", "3"}, {"rotation_interval_ms", "50"}}, false);
  ASSERT_NE(mine, nullptr);
  ASSERT_NE(other, nullptr);
  const int64_t now = wall_us();
  enqueue_many(mine, "q", 6);
  const std::vector<JobCopy> got = claim(mine, "q", 6, 7, now, now + kHour);
  ASSERT_EQ(got.size(), 6u);
  const std::vector<conveyor_lease> l = leases_of(got);
  // Completed by the handle that claimed them, and by the other one.
  for (conveyor_status st : complete(mine, {l[0], l[1]}, now)) EXPECT_EQ(st, CONVEYOR_OK);
  for (conveyor_status st : complete(other, {l[2], l[3]}, now)) EXPECT_EQ(st, CONVEYOR_OK);
  for (conveyor_status st : extend(other, {l[4]}, now + 2 * kHour)) EXPECT_EQ(st, CONVEYOR_OK);
  for (conveyor_status st : release(other, {l[5]}, now)) EXPECT_EQ(st, CONVEYOR_OK);
  // A closed lease stays closed, whoever asks.
  for (conveyor_status st : complete(mine, {l[2], l[5]}, now)) EXPECT_EQ(st, CONVEYOR_E_LEASE_LOST);
  for (conveyor_status st : complete(other, {l[0]}, now)) EXPECT_EQ(st, CONVEYOR_E_LEASE_LOST);
  for (conveyor_status st : complete(mine, {l[4]}, now)) EXPECT_EQ(st, CONVEYOR_OK);
  EXPECT_EQ(job(mine, got[3].id, now).state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(job(mine, got[5].id, now).state, CONVEYOR_JOB_AVAILABLE);

  // `mine` has checked `later` for "s" (empty); `other` schedules a job there.
  EXPECT_TRUE(claim(mine, "s", 1, 8, now, now + kHour).empty());
  const int64_t id = enqueue(other, "s", 0, now + kHour);
  // The periodic check (each second) finds rows other processes put there.
  std::vector<JobCopy> due;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (due.empty() && std::chrono::steady_clock::now() < deadline) {
    due = claim(mine, "s", 1, 9, now + kHour, now + 2 * kHour);
    if (due.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].id, id);
}

// A rescued job keeps its run_at, so its place: it is claimed before a job
// enqueued after it (a fresh run_at would have put it behind).
TEST_F(QueueStorageTest, ARescuedJobKeepsItsPlaceInTheQueue) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t now = wall_us();
  const int64_t first = enqueue(h, "q", 0, now - 2000);
  ASSERT_EQ(claim(h, "q", 1, 1, now, now + 1).size(), 1u);
  const int64_t second = enqueue(h, "q", 0, now - 1000);
  conveyor_error err{};
  uint32_t rescued = 0;
  ASSERT_EQ(api_->rescue_expired(h, now + 10, 10, &rescued, &err), CONVEYOR_OK) << err.message;
  ASSERT_EQ(rescued, 1u);
  EXPECT_EQ(job(h, first, now + 10).run_at, now - 2000);
  const std::vector<JobCopy> next = claim(h, "q", 1, 2, now + 10, now + kHour);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].id, first) << "the rescued job went behind job " << second;
}

// An entry another process appends below this process's claim hint (here a
// more urgent priority) is skipped by claims that start at the hint, until
// the periodic probe (hint_prober.hpp, about once a second) takes the hint
// back: it is claimed within seconds, never lost.
TEST_F(QueueStorageTest, AnEntryAnotherProcessAppendsBelowTheHintIsFoundByTheProbe) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* mine = open_store();
  conveyor_storage* other = open_store({}, false);
  ASSERT_NE(mine, nullptr);
  ASSERT_NE(other, nullptr);
  const int64_t now = wall_us();
  enqueue_many(mine, "q", 3);
  ASSERT_EQ(claim(mine, "q", 3, 1, now, now + kHour).size(), 3u);  // the hint moves past them
  const int64_t urgent = enqueue(other, "q", /*priority=*/-5);
  std::vector<JobCopy> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  int64_t token = 2;
  while (got.empty() && std::chrono::steady_clock::now() < deadline) {
    got = claim(mine, "q", 10, token++, now, now + kHour);
    if (got.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(got.size(), 1u) << "never found the entry below the hint";
  EXPECT_EQ(got[0].id, urgent);
}

// A claim that loses its candidates to a faster claimer still reports how far
// its walk got (its last candidate): the claim hint moves there, so the slower
// claimer does not walk the same entries again next time (claim_hints.hpp).
// Here the faster claimer's mark is inserted on another connection and
// committed while the claim waits for it at ON CONFLICT.
TEST_F(QueueStorageTest, AClaimThatLostItsCandidatesReportsHowFarItWalked) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::vector<int64_t> ids = enqueue_many(h, "q", 2);
  const std::string s = "\"" + schema_ + "\"";
  const pqxx::result entry = sql("SELECT slot, entry_id, priority, run_at FROM " + s +
                                 ".ready WHERE job_id = " + std::to_string(ids[0]));
  ASSERT_EQ(entry.size(), 1u);
  pqxx::connection faster(dsn_);
  pqxx::work mark(faster);
  const int64_t now = wall_us();
  mark.exec_params("INSERT INTO " + s +
                       ".marks (slot, entry_id, stage, what, job_id, at, lease_token, "
                       "lease_expires, claimed_by, queue) VALUES ($1, $2, 1, 3, $3, $4, 1, $5, "
                       "'faster:1', 'q')",
                   entry[0][0].as<int32_t>(), entry[0][1].as<int64_t>(), ids[0], now, now + kHour);
  pqxx::connection slower(dsn_);
  const int slower_pid = slower.backendpid();
  slower.prepare("claim", statement_sql(stmt::kClaim, schema_));
  pqxx::result got;
  std::thread claim([&] {
    pqxx::nontransaction tx(slower);
    // One job wanted, from the beginning (generation -1 voids the hint).
    got = tx.exec_prepared("claim", "q", now, 1, 2, now + kHour, "slower:1",
                           std::numeric_limits<int32_t>::min(), std::numeric_limits<int64_t>::min(),
                           std::numeric_limits<int64_t>::min(), -1);
  });
  // The claim's snapshot missed the uncommitted mark: it waits at ON CONFLICT.
  const bool waiting = eventually([&] {
    return sql("SELECT count(*) FROM pg_stat_activity WHERE pid = " + std::to_string(slower_pid) +
               " AND wait_event = 'transactionid'")[0][0]
               .as<int64_t>() == 1;
  });
  mark.commit();
  claim.join();
  ASSERT_TRUE(waiting) << "the claim never waited for the other claimer's mark";
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0][0].is_null()) << "the claim took job " << got[0][0].c_str();
  // Columns: the job (13), moves, slot, candidates, the walked key (3).
  EXPECT_EQ(got[0][15].as<int64_t>(), 1) << "candidates";
  ASSERT_FALSE(got[0][16].is_null()) << "no walked key";
  EXPECT_EQ(got[0][16].as<int32_t>(), entry[0][2].as<int32_t>());
  EXPECT_EQ(got[0][17].as<int64_t>(), entry[0][3].as<int64_t>());
  EXPECT_EQ(got[0][18].as<int64_t>(), ids[0]);
}

// A schema made by the first release (version 1, no `retired` table) is
// upgraded in place by migrate, and the jobs in it are kept.
TEST_F(QueueStorageTest, MigrateUpgradesAVersion1SchemaAndKeepsItsJobs) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const std::vector<int64_t> ids = enqueue_many(h, "q", 3);
  close_store(h);
  undo_schema_4();
  const std::string s = "\"" + schema_ + "\"";
  sql("DROP TABLE " + s + ".tally; DROP INDEX " + s + ".ready_list; ALTER TABLE " + s +
      ".marks DROP COLUMN queue; DROP TABLE " + s + ".retired; DELETE FROM " + s +
      ".queue_schema_migrations WHERE version >= 2");
  ASSERT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(), 1);

  h = open_store();  // migrates
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  EXPECT_EQ(count("retired"), 0);
  const int64_t now = wall_us();
  ASSERT_EQ(stats(h, now).size(), 1u);
  EXPECT_EQ(stats(h, now)[0].pending, 3);
  EXPECT_EQ(postgres::test::ids_of(claim(h, "q", 10, 1, now, now + kHour)), ids);
}

// A schema of version 2 (no `tally`, no ready_list) holding jobs in every
// state is upgraded in place: job_counts starts from the counts the entries
// make, and list_jobs finds the jobs.
TEST_F(QueueStorageTest, MigrateFromVersion2KeepsEveryJobCounted) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  enqueue_many(h, "q", 4);
  enqueue(h, "q", /*priority=*/0, /*run_at=*/t + kHour);
  std::vector<JobCopy> got = claim(h, "q", 3, 1, t, t + kHour);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(complete(h, leases_of({got[0]}), t + 1), std::vector{CONVEYOR_OK});
  ASSERT_EQ(fail(h, leases_of({got[1]})[0], "boom", -1, t + 2), CONVEYOR_OK);
  close_store(h);
  undo_schema_4();
  const std::string s = "\"" + schema_ + "\"";
  sql("DROP TABLE " + s + ".tally; DROP INDEX " + s + ".ready_list; ALTER TABLE " + s +
      ".marks DROP COLUMN queue; DELETE FROM " + s + ".queue_schema_migrations WHERE version = 3");

  h = open_store();  // migrates
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  const int64_t now = t + 10;
  const Counts counts = job_counts(api_, h, now);
  EXPECT_EQ(counts, queue_stats(api_, h, now));
  EXPECT_EQ(counts.at("q"), (std::array<int64_t, 7>{0, 1, 1, 1, 1, 1, 0}));
  conveyor_status st = CONVEYOR_OK;
  conveyor_error err{};
  ASSERT_EQ(api_->retry_jobs(h, &got[1].id, 1, now, &st, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(st, CONVEYOR_OK);
  EXPECT_EQ(job_counts(api_, h, now), queue_stats(api_, h, now)) << "after a retry";
  // The job running across the upgrade is counted when it completes.
  ASSERT_EQ(complete(h, leases_of({got[2]}), now), std::vector{CONVEYOR_OK});
  EXPECT_EQ(job_counts(api_, h, now), queue_stats(api_, h, now)) << "after a completion";
  uint32_t listed = 0;
  ASSERT_EQ(api_->list_jobs(
                h, conveyor_str{"q", 1}, nullptr, 0, conveyor_str{"", 0}, 0, 100, now,
                [](void*, const conveyor_job*) {}, nullptr, &listed, &err),
            CONVEYOR_OK)
      << err.message;
  EXPECT_EQ(listed, 5u);
}

// A schema of version 3 (ABI 1.1) with jobs in the ring, in `later`,
// running and finished, and an override, is upgraded in place: every job
// costs 1 and keeps its state, the override is process-wide, and the 1.2
// calls work on it.
TEST_F(QueueStorageTest, MigrateFromVersion3KeepsJobsAndOverrides) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  const std::vector<int64_t> ready = enqueue_many(h, "q", 3);
  const int64_t scheduled = enqueue(h, "q", /*priority=*/0, /*run_at=*/t + kHour);
  std::vector<JobCopy> got = claim(h, "q", 2, 1, t, t + kHour);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(complete(h, leases_of({got[0]}), t + 1), std::vector{CONVEYOR_OK});
  conveyor_error err{};
  ASSERT_EQ(api_->set_rate_limit(h, str("q"), 2.5, 4, t, &err), CONVEYOR_OK) << err.message;
  close_store(h);
  undo_schema_4();
  const std::string s = "\"" + schema_ + "\"";
  ASSERT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(), 3);

  h = open_store();  // migrates
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  const int64_t now = t + 10;
  EXPECT_EQ(job_counts(api_, h, now), queue_stats(api_, h, now));
  JobCopy running;
  ASSERT_EQ(get(h, got[1].id, now, &running), CONVEYOR_OK);
  EXPECT_EQ(running.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(running.cost, 1);
  JobCopy later;
  ASSERT_EQ(get(h, scheduled, now, &later), CONVEYOR_OK);
  EXPECT_EQ(later.cost, 1) << "a `later` row from schema 3 costs 1";
  // The running job completes across the upgrade; the last ready one is claimed.
  ASSERT_EQ(complete(h, leases_of({got[1]}), now), std::vector{CONVEYOR_OK});
  std::vector<JobCopy> rest = claim(h, "q", 10, 2, now, now + kHour);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].id, ready[2]);
  EXPECT_EQ(rest[0].cost, 1);
  std::vector<LimitCopy> l = limits(h);
  ASSERT_EQ(l.size(), 1u) << "the override from schema 3 was lost";
  EXPECT_EQ(l[0].rate, 2.5);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_PROCESS);
  const host::PluginBinding::Shared swapped = swap_shared(h, "k", 0, 9);
  EXPECT_EQ(swapped.applied, 1);
  EXPECT_EQ(swapped.version, 1);
  conveyor_new_job_v2 costly{conveyor_new_job{str("q"), str("k"), str("{}"), 0, 3, now}, 6, 0};
  int64_t id = 0;
  ASSERT_EQ(api_->enqueue_v3(h, &costly, 1, now, &id, &err), CONVEYOR_OK) << err.message;
  std::vector<JobCopy> costed = claim(h, "q", 10, 3, now, now + kHour);
  ASSERT_EQ(costed.size(), 1u);
  EXPECT_EQ(costed[0].cost, 6);
}

// A schema of version 6 (ABI 1.3) with jobs in the ring (taken and not), in
// `later`, running and finished is upgraded in place: every job has the
// empty key and keeps its state, list_ready_keys and claim_keys find the
// ready ones under it (the `later` one once due), the running one completes
// across the upgrade, and the counts agree.
TEST_F(QueueStorageTest, MigrateFromVersion6GivesEveryJobTheEmptyKey) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  const std::vector<int64_t> ready = enqueue_many(h, "q", 4);
  const int64_t scheduled = enqueue(h, "q", /*priority=*/0, /*run_at=*/t + kHour);
  std::vector<JobCopy> got = claim(h, "q", 2, 1, t, t + kHour);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(complete(h, leases_of({got[0]}), t + 1), std::vector{CONVEYOR_OK});
  close_store(h);
  undo_schema_7();
  const std::string s = "\"" + schema_ + "\"";
  ASSERT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(), 6);

  h = open_store();  // migrates
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  const int64_t now = t + 10;
  EXPECT_EQ(job_counts(api_, h, now), queue_stats(api_, h, now));
  JobCopy running = job(h, got[1].id, now);
  EXPECT_EQ(running.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(running.key, "");
  EXPECT_EQ(job(h, scheduled, now).key, "");
  EXPECT_EQ(job(h, got[0].id, now).state, CONVEYOR_JOB_COMPLETED);
  postgres::test::ReadyKeysResult listed =
      postgres::test::ready_keys(api_, h, "q", std::nullopt, 10, 10, now);
  ASSERT_EQ(listed.status, CONVEYOR_OK) << listed.message;
  EXPECT_EQ(listed.keys, (postgres::test::ReadyKeys{{"", 2}}));
  postgres::test::KeyClaimResult keyed =
      postgres::test::claim_keys(api_, h, "q", {{"", 10}}, {}, 2, now, now + kHour);
  ASSERT_EQ(keyed.status, CONVEYOR_OK) << keyed.message;
  EXPECT_EQ(plugin_testing::ids_of(keyed.jobs), (std::vector<int64_t>{ready[2], ready[3]}));
  ASSERT_EQ(complete(h, leases_of({got[1]}), now), std::vector{CONVEYOR_OK});
  keyed = postgres::test::claim_keys(api_, h, "q", {{"", 10}}, {}, 3, t + 2 * kHour, t + 3 * kHour);
  ASSERT_EQ(keyed.jobs.size(), 1u);
  EXPECT_EQ(keyed.jobs[0].id, scheduled);
  EXPECT_EQ(keyed.jobs[0].key, "");
  const std::vector<int64_t> ids = postgres::test::enqueue_keyed(api_, h, {{"q", "k"}}, now);
  EXPECT_EQ(job(h, ids.at(0), now).key, "k");
  EXPECT_EQ(job_counts(api_, h, now), queue_stats(api_, h, now));
}

// A schema of version 7 (ABI 1.4) with jobs (ready, running, in `later`),
// an override, a paused queue and shared records is upgraded in place:
// every one of them is as it was (the change marker included), key
// settings start empty and work, and delete_shared_states deletes the
// records written before the upgrade.
TEST_F(QueueStorageTest, MigrateFromVersion7KeepsEverythingAndAddsKeySettings) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  const std::vector<int64_t> ready = enqueue_many(h, "q", 3);
  const int64_t scheduled = enqueue(h, "q", /*priority=*/0, /*run_at=*/t + kHour);
  std::vector<JobCopy> got = claim(h, "q", 1, 1, t, t + kHour);
  ASSERT_EQ(got.size(), 1u);
  conveyor_error err{};
  ASSERT_EQ(api_->set_rate_limit_v2(h, str("q"), 2.5, 3, CONVEYOR_SCOPE_FLEET, t, &err),
            CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(pause(h, "held", true), CONVEYOR_OK);
  ASSERT_EQ(swap_shared(h, "ratelimit.key:q/=a", 0, 5).applied, 1);
  ASSERT_EQ(swap_shared(h, "ratelimit.key:q/=b", 0, 500).applied, 1);
  const int64_t m = marker(h);
  close_store(h);
  undo_schema_8();
  const std::string s = "\"" + schema_ + "\"";
  ASSERT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(), 7);

  h = open_store();  // migrates
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  EXPECT_EQ(marker(h), m);
  const int64_t now = t + 10;
  EXPECT_EQ(job(h, got[0].id, now).state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(job(h, scheduled, now).state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(job_counts(api_, h, now), queue_stats(api_, h, now));
  std::vector<LimitCopy> l = limits(h);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].rate, 2.5);
  EXPECT_EQ(l[0].burst, 3u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(queues(h), (std::vector<std::pair<std::string, int32_t>>{{"held", 1}, {"q", 0}}));
  EXPECT_EQ(swap_shared(h, "ratelimit.key:q/=a", -1, 0).value, 5);
  EXPECT_TRUE(postgres::test::settings(api_, h).empty());

  postgres::test::set_setting(api_, h, postgres::test::weight_of("q", "a", 2), now);
  EXPECT_NE(marker(h), m);
  EXPECT_EQ(postgres::test::settings(api_, h).size(), 1u);
  EXPECT_EQ(postgres::test::delete_shared(api_, h, "ratelimit.key:", 100, 10), 1u)
      << "a record written before the upgrade";
  EXPECT_EQ(swap_shared(h, "ratelimit.key:q/=a", -1, 0).version, 0);
  EXPECT_EQ(swap_shared(h, "ratelimit.key:q/=b", -1, 0).value, 500);

  std::vector<JobCopy> rest = claim(h, "q", 10, 2, now, now + kHour);
  EXPECT_EQ(plugin_testing::ids_of(rest), (std::vector<int64_t>{ready[1], ready[2]}));
  ASSERT_EQ(complete(h, leases_of({got[0]}), now), std::vector{CONVEYOR_OK});
}

// A schema of version 8 (ABI 1.5 before add_shared_states) with jobs, an
// override, a paused queue, a key setting and shared records (one an add
// took from) is upgraded in place: every one of them is as it was (the
// change marker included), and add_shared_states adds to the records
// written before the upgrade as add_shared_state would.
TEST_F(QueueStorageTest, MigrateFromVersion8KeepsEverythingAndAddsAddSharedStates) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  const std::vector<int64_t> ready = enqueue_many(h, "q", 3);
  std::vector<JobCopy> got = claim(h, "q", 1, 1, t, t + kHour);
  ASSERT_EQ(got.size(), 1u);
  conveyor_error err{};
  ASSERT_EQ(api_->set_rate_limit_v2(h, str("q"), 2.5, 3, CONVEYOR_SCOPE_FLEET, t, &err),
            CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(pause(h, "held", true), CONVEYOR_OK);
  postgres::test::set_setting(api_, h, postgres::test::weight_of("q", "a", 2), t);
  ASSERT_EQ(add_shared(h, "ratelimit.key:q/=a", 0, 0, 100, 10, 1, 3).count, 3u);
  ASSERT_EQ(swap_shared(h, "ratelimit.bucket:q", 0, 7).applied, 1);
  const int64_t m = marker(h);
  close_store(h);
  undo_schema_9();
  const std::string s = "\"" + schema_ + "\"";
  ASSERT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(), 8);

  h = open_store();  // migrates
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  EXPECT_GE(kSchemaVersion, 9);
  EXPECT_EQ(marker(h), m);
  const int64_t now = t + 10;
  EXPECT_EQ(job(h, got[0].id, now).state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(job_counts(api_, h, now), queue_stats(api_, h, now));
  std::vector<LimitCopy> l = limits(h);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(queues(h), (std::vector<std::pair<std::string, int32_t>>{{"held", 1}, {"q", 0}}));
  EXPECT_EQ(postgres::test::settings(api_, h).size(), 1u);
  EXPECT_EQ(swap_shared(h, "ratelimit.key:q/=a", -1, 0).value, 30);

  const std::vector<postgres::test::KeyedAdd> adds = {
      {"ratelimit.key:q/=a", 0, 0, 100, 10, 1, 2},
      {"ratelimit.bucket:q", 0, 0, 100, 1, 1, 1},
      {"ratelimit.key:q/=new", 0, 0, 100, 50, 1, 5}};
  std::vector<postgres::test::SharedAdded> added = postgres::test::add_many(api_, h, adds);
  ASSERT_EQ(added.size(), 3u);
  EXPECT_EQ(added[0].version, 2);
  EXPECT_EQ(added[0].value, 50);
  EXPECT_EQ(added[0].count, 2u);
  EXPECT_EQ(added[1].version, 2);
  EXPECT_EQ(added[1].value, 8);
  EXPECT_EQ(added[2].version, 1);
  EXPECT_EQ(added[2].value, 100);
  EXPECT_EQ(added[2].count, 2u);

  std::vector<JobCopy> rest = claim(h, "q", 10, 2, now, now + kHour);
  EXPECT_EQ(plugin_testing::ids_of(rest), (std::vector<int64_t>{ready[1], ready[2]}));
  ASSERT_EQ(complete(h, leases_of({got[0]}), now), std::vector{CONVEYOR_OK});
}

// A schema of version 4 with shared records (a fleet bucket, the kill
// switch) is upgraded in place: the records move into sequences unchanged,
// and swaps from then on change no row, so they leave no dead tuple for a
// transaction held open elsewhere to keep.
// Version 6 adds add_shared_state over the records swaps wrote, and an add
// changes no row either (the sequences, in place).
TEST_F(QueueStorageTest, MigrateFromVersion5AddsToTheRecordsSwapsWrote) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(swap_shared(h, "ratelimit.bucket:q", 0, 100).applied, 1);
  close_store(h);
  undo_schema_6();
  h = open_store();
  ASSERT_NE(h, nullptr);
  const std::string s = "\"" + schema_ + "\"";
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  const std::string row_before =
      sql("SELECT ctid::text || '/' || xmin::text FROM " + s + ".shared_keys")[0][0].c_str();
  host::PluginBinding::SharedAdded added =
      add_shared(h, "ratelimit.bucket:q", 0, 0, 1000, 100, 1, 5);
  EXPECT_EQ(added.count, 5u) << "from 100, nine units of 100 fit under 1000; max_count 5";
  EXPECT_EQ(added.value, 600);
  EXPECT_EQ(added.version, 2);
  host::PluginBinding::SharedAdded none = add_shared(h, "ratelimit.bucket:q", 0, 0, 650, 100, 1, 5);
  EXPECT_EQ(none.count, 0u);
  EXPECT_EQ(none.version, 2);
  EXPECT_EQ(swap_shared(h, "ratelimit.bucket:q", -1, 0).value, 600);
  EXPECT_EQ(sql("SELECT ctid::text || '/' || xmin::text FROM " + s + ".shared_keys")[0][0].c_str(),
            row_before)
      << "an add must change the sequences in place, not the key's row";
  close_store(h);
}

TEST_F(QueueStorageTest, MigrateFromVersion4KeepsSharedRecordsAndSwapsUpdateNoRow) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(swap_shared(h, "ratelimit.bucket:q", 0, 11).applied, 1);
  ASSERT_EQ(swap_shared(h, "ratelimit.bucket:q", 1, -12).applied, 1);
  close_store(h);
  undo_schema_5();
  const std::string s = "\"" + schema_ + "\"";
  ASSERT_EQ(sql("SELECT version || '/' || value FROM " + s +
                ".shared_state WHERE key = 'ratelimit.bucket:q'")[0][0]
                .c_str(),
            std::string("2/-12"));

  h = open_store();  // migrates
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  host::PluginBinding::Shared r = swap_shared(h, "ratelimit.bucket:q", -1, 0);
  EXPECT_EQ(r.version, 2);
  EXPECT_EQ(r.value, -12);
  const std::string row = "SELECT ctid::text || '/' || xmin::text FROM " + s +
                          ".shared_keys WHERE key = 'ratelimit.bucket:q'";
  const std::string before = sql(row)[0][0].c_str();
  for (int64_t v = 2; v < 52; ++v) {
    r = swap_shared(h, "ratelimit.bucket:q", v, v);
    ASSERT_EQ(r.applied, 1) << "at version " << v;
  }
  EXPECT_EQ(r.version, 52);
  EXPECT_EQ(r.value, 51);
  EXPECT_EQ(sql(row)[0][0].c_str(), before) << "a swap updated the key's row";
}

// oldest_pending_run_at_us (ABI 1.1) from queue_stats and job_counts alike:
// the smallest run_at of the pending jobs, whether in the ring or due in
// `later`, across priorities; 0 when nothing is pending.
TEST_F(QueueStorageTest, OldestPendingIsTheSmallestRunAtOfThePendingJobs) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  const int64_t first = enqueue(h, "q", /*priority=*/0, t - 3 * kSecond);
  enqueue(h, "q", /*priority=*/0, t - 2 * kSecond);
  enqueue(h, "q", /*priority=*/5, t - 4 * kSecond);  // claimed last, oldest
  enqueue(h, "q", /*priority=*/0, t + kHour);        // scheduled: in `later`
  enqueue(h, "idle", 0, t + kHour);
  auto oldest = [&](bool counts, int64_t now) {
    std::map<std::string, int64_t> out;
    conveyor_error err{};
    auto fn = [](void* ctx, const conveyor_queue_stats* s) {
      (*static_cast<std::map<std::string, int64_t>*>(
          ctx))[std::string(s->queue.data, s->queue.len)] = s->oldest_pending_run_at_us;
    };
    const conveyor_status st = counts ? api_->job_counts(h, now, fn, &out, &err)
                                      : api_->queue_stats(h, now, fn, &out, &err);
    EXPECT_EQ(st, CONVEYOR_OK) << err.message;
    return out;
  };
  for (bool counts : {false, true}) {
    const char* which = counts ? "job_counts" : "queue_stats";
    EXPECT_EQ(oldest(counts, t)["q"], t - 4 * kSecond) << which;
    EXPECT_EQ(oldest(counts, t)["idle"], 0) << which << ": nothing pending";
    // At the scheduled jobs' run_at they are pending too (still in `later`).
    EXPECT_EQ(oldest(counts, t + 2 * kHour)["idle"], t + kHour) << which;
  }
  std::vector<JobCopy> got = claim(h, "q", 3, 1, t, t + kHour);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(got[0].id, first);
  for (bool counts : {false, true})
    EXPECT_EQ(oldest(counts, t)["q"], 0)
        << (counts ? "job_counts" : "queue_stats") << ": every due job is running";
}

// The generic plans of the hot statements follow the claim order and look
// leases up by key: their cost must not grow with the history in the ring.
TEST_F(QueueStorageTest, GenericPlansDoNotScanTheHistory) {
  CONVEYOR_REQUIRE_PG();
  // No rotation while the history is made: a slot left with a handful of
  // rows (a rotation mid-test, on a slow build) has the planner prefer a
  // bitmap of its primary key, which is cheap there and says nothing of the
  // plan on a real history.
  conveyor_storage* h = open_store({{"rotation_interval_ms", "3600000"}});
  ASSERT_NE(h, nullptr);
  for (int i = 0; i < 4; ++i) enqueue_many(h, "q", 5000);
  const int64_t now = wall_us();
  for (int i = 0; i < 10; ++i)
    complete(h, leases_of(claim(h, "q", 1000, 10 + i, now, now + kHour)), now);
  sql("ANALYZE \"" + schema_ + "\".ready");
  sql("ANALYZE \"" + schema_ + "\".marks");
  struct Case {
    const char* statement;
    const char* args;
    const char* must_use;
    // A bitmap scan is allowed only of an index whose name holds this (a
    // range bounded by the statement's parameters, not the history).
    const char* bitmap_of = nullptr;
  };
  const Case cases[] = {
      {stmt::kClaim, "('q', 5, 100, 1, 2, 'host:1', 0, 0, 0, 0)", "Merge Append"},
      // ...and probes each slot's claim marks by primary key, also in slots
      // that were empty when the plan was made.
      {stmt::kClaim, "('q', 5, 100, 1, 2, 'host:1', 0, 0, 0, 0)", "marks_7_pkey"},
      // Leases of known slot (0, 2) and of unknown slot (-1: every slot).
      {stmt::kComplete, "(1, '{1,2,3}', '{7,7,7}', '{0,-1,2}')", "marks_0_job_id_lease_token_idx"},
      {stmt::kExtend, "(1, '{1,2,3}', '{7,7,7}', '{0,-1,2}')", "marks_0_job_id_lease_token_idx"},
      {stmt::kRelease, "(1, '{1,2,3}', '{7,7,7}', '{0,-1,2}')", "marks_0_job_id_lease_token_idx"},
      {stmt::kFailRetry, "(1, 'x', 1, 7, 1)", "marks_0_job_id_lease_token_idx"},
      {stmt::kFailFinal, "(1, 'x', 1, 7)", "marks_0_job_id_lease_token_idx"},
      // Rescue walks claim marks by lease expiry from its window's floor on
      // (rescue_window.hpp), not every claim mark in the ring.
      {stmt::kRescue, "(1, 'x', 10, 1)", "Index Cond: ((lease_expires >= $4) AND",
       "_lease_expires_idx"},
      // ABI 1.1: claim_kinds walks the claim order as claim does.
      {stmt::kClaimKinds, "('q', 5, 100, 1, 2, 'host:1', 0, 0, 0, 0, '{noop}')", "Merge Append"},
      // ABI 1.4: claim_keys walks each key's range of ready_key in claim
      // order (the statistics saw only the empty key); list_ready_keys
      // probes ready_key per key.
      {stmt::kClaimKeys, "('q', 5, 100, 1, 2, 'host:1', 0, 0, 0, 0, '{a,b}', '{3,4}')",
       "_queue_key_priority_run_at_job_id_idx"},
      {stmt::kClaimKeysKinds,
       "('q', 5, 100, 1, 2, 'host:1', 0, 0, 0, 0, '{a,b}', '{3,4}', '{noop}')",
       "_queue_key_priority_run_at_job_id_idx"},
      {stmt::kListReadyKeys, "('q', 5, 100, 10, 0, 0, 0, 0)",
       "_queue_key_priority_run_at_job_id_idx"},
      {stmt::kListReadyKeysAfter, "('q', 5, 100, 10, 0, 0, 0, 0, 'a')",
       "_queue_key_priority_run_at_job_id_idx"},
  };
  for (const Case& c : cases) {
    const std::string plan = generic_plan(statement_sql(c.statement, schema_), c.args,
                                          {"SET LOCAL enable_seqscan = off",  // as the plugin's
                                           "SET LOCAL jit = off"});           // sessions
    EXPECT_NE(plan.find(c.must_use), std::string::npos) << c.statement << ":\n" << plan;
    // Hashing is fine for a batch-sized CTE, never over a table's history.
    EXPECT_EQ(plan.find("Hash Anti"), std::string::npos) << c.statement << ":\n" << plan;
    const std::string bitmap = "Bitmap Index Scan on ";
    for (size_t at = plan.find(bitmap); at != std::string::npos; at = plan.find(bitmap, at + 1)) {
      const std::string index =
          plan.substr(at + bitmap.size(), plan.find(' ', at + bitmap.size()) - at - bitmap.size());
      EXPECT_TRUE(c.bitmap_of && index.find(c.bitmap_of) != std::string::npos)
          << c.statement << ": a bitmap scan of " << index << ":\n"
          << plan;
    }
    EXPECT_EQ(plan.find("Seq Scan"), std::string::npos) << c.statement << ":\n" << plan;
    // Sorts are allowed of batch-sized rows only: a CTE of the statement
    // (the batch), or the batch's count changes grouped for `tally` (its
    // VALUES rows, two per job); never of a table.
    const std::string sort = "->  Sort", key = "Sort Key: ";
    for (size_t at = plan.find(sort); at != std::string::npos; at = plan.find(sort, at + 1)) {
      const size_t k = plan.find(key, at);
      const std::string sort_key = plan.substr(k, plan.find('\n', k) - k);
      const size_t child = plan.find("->  ", k);
      const bool of_cte =
          child != std::string::npos && plan.compare(child, 12, "->  CTE Scan") == 0;
      EXPECT_TRUE(of_cte || sort_key.find("\"*VALUES*\"") != std::string::npos)
          << c.statement << ": a sort (" << sort_key << "):\n"
          << plan;
    }
  }
}

// A schema of version 9 (ABI 1.5) with ready, running, completed and
// waiting-to-retry jobs is upgraded in place: every job keeps its state, the
// ones claimed before report the time of their claim (their claim marks)
// as started_at, and every timeout is 0. Afterwards enqueue_v5 stores a
// timeout that travels with the job's entries, and started_at follows each
// claim and stays through a retry.
TEST_F(QueueStorageTest, MigrateFromVersion9KeepsJobsAndReportsTheirStarts) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store();
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  const std::vector<int64_t> ready = enqueue_many(h, "q", 4);
  std::vector<JobCopy> got = claim(h, "q", 3, 1, t, t + kHour);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(complete(h, leases_of({got[1]}), t + 5), std::vector{CONVEYOR_OK});
  ASSERT_EQ(fail(h, leases_of({got[2]})[0], "boom", t + kHour, t + 6), CONVEYOR_OK);
  close_store(h);
  undo_schema_10();
  const std::string s = "\"" + schema_ + "\"";
  ASSERT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(), 9);

  h = open_store();  // migrates
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".queue_schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  const int64_t now = t + 10;
  const JobCopy running = job(h, got[0].id, now);
  EXPECT_EQ(running.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(running.started_at, t) << "its claim mark's time";
  EXPECT_EQ(running.timeout_ms, 0);
  const JobCopy done = job(h, got[1].id, now);
  EXPECT_EQ(done.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(done.started_at, t);
  EXPECT_EQ(job(h, got[2].id, now).state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(job(h, got[2].id, now).started_at, 0)
      << "a retry waiting in `later` from before the upgrade has no start stored";
  const JobCopy untouched = job(h, ready[3], now);
  EXPECT_EQ(untouched.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(untouched.started_at, 0);
  EXPECT_EQ(job_counts(api_, h, now), queue_stats(api_, h, now));

  // enqueue_v5 on the upgraded schema: the timeout is stored with the entry
  // and kept by a retry's new entry; started_at is each claim's now.
  conveyor_new_job_v4 timed{
      conveyor_new_job_v3{
          conveyor_new_job_v2{conveyor_new_job{str("t"), str("k"), str("{}"), 0, 3, now}, 1, 0},
          conveyor_str{}},
      90'000};
  int64_t id = 0;
  conveyor_error err{};
  ASSERT_EQ(api_->enqueue_v5(h, &timed, 1, now, &id, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(job(h, id, now).timeout_ms, 90'000);
  std::vector<JobCopy> first = claim(h, "t", 1, 5, now + 100, now + kHour);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].started_at, now + 100);
  EXPECT_EQ(first[0].timeout_ms, 90'000);
  ASSERT_EQ(fail(h, leases_of(first)[0], "again", now + 200, now + 200), CONVEYOR_OK);
  const JobCopy retried = job(h, id, now + 300);
  EXPECT_EQ(retried.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(retried.started_at, now + 100)
      << "the failed attempt's start, carried to the new entry";
  EXPECT_EQ(retried.timeout_ms, 90'000);
  std::vector<JobCopy> second = claim(h, "t", 1, 6, now + 400, now + kHour);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].started_at, now + 400);
  EXPECT_EQ(second[0].attempt, 2);
  EXPECT_EQ(job(h, id, now + 500).started_at, now + 400);
  EXPECT_EQ(job(h, id, now + 500).timeout_ms, 90'000);
}

}  // namespace
}  // namespace conveyor::pgqueue
