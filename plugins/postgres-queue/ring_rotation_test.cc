// Ring rotation against a real PostgreSQL: what a prune may never remove, and
// that one process at a time rotates. The plugin's own maintenance thread is
// kept out of the way (rotation_interval_ms one hour); the tests rotate with
// rotate_ring on a connection of their own.
#include "queue_schema.hpp"
#include "queue_test_support.hpp"
#include "ring_rotator.hpp"

#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include <array>
#include <atomic>
#include <thread>

namespace conveyor::pgqueue {
namespace {

using namespace test;  // NOLINT: the shared test names
const postgres::test::Opts kManualRotation = {{"slots", "3"}, {"rotation_interval_ms", "3600000"}};

class RingRotationTest : public postgres::test::PgTest {
 protected:
  RotationResult rotate() { return rotate_ring(*admin_, schema_, 0, wall_us()); }
  int64_t rows_in(const std::string& table) {
    return sql("SELECT count(*) FROM \"" + schema_ + "\"." + table)[0][0].as<int64_t>();
  }
  int64_t rotations() {
    return sql("SELECT rotations FROM \"" + schema_ + "\".ring")[0][0].as<int64_t>();
  }
};

// Slot 0 holds an unclaimed job, a running job whose lease was extended (a
// long job with heartbeats) and a completed one. Going round the ring, the
// unclaimed job is copied forward (same id, still claimable), the running
// job blocks the prune of its slot until it completes, and only then is the
// slot truncated.
TEST_F(RingRotationTest, NeverTruncatesALiveEntryOrAnOpenLease) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store(kManualRotation);
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  const int64_t waiting = enqueue(h, "q", /*priority=*/5);
  const int64_t long_job = enqueue(h, "q", /*priority=*/0);
  const int64_t finished = enqueue(h, "q", /*priority=*/1);
  std::vector<JobCopy> running = claim(h, "q", 1, 100, t, t + kSecond);
  ASSERT_EQ(running.size(), 1u);
  ASSERT_EQ(running[0].id, long_job);
  ASSERT_EQ(extend(h, leases_of(running), t + kHour), std::vector{CONVEYOR_OK});
  std::vector<JobCopy> done = claim(h, "q", 1, 101, t, t + kHour);
  ASSERT_EQ(done.size(), 1u);
  ASSERT_EQ(done[0].id, finished);
  ASSERT_EQ(complete(h, leases_of(done), t), std::vector{CONVEYOR_OK});

  // Round the ring: 0 -> 1 -> 2, each slot written to before it rotates.
  EXPECT_EQ(rotate().outcome, Rotation::kRotated);  // prunes the empty slot 1
  enqueue(h, "other");
  EXPECT_EQ(rotate().outcome, Rotation::kRotated);  // prunes the empty slot 2
  enqueue(h, "other");
  // Now slot 0 is the oldest: the waiting job moves on, the lease blocks.
  RotationResult r = rotate();
  EXPECT_EQ(r.outcome, Rotation::kBlocked) << to_string(r.outcome);
  EXPECT_EQ(r.moved, 1u) << "the unclaimed job is copied forward";
  EXPECT_EQ(rows_in("ready_0"), 3) << "slot 0 must keep the running job";
  EXPECT_EQ(job(h, long_job, t).state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(job(h, long_job, t).lease_expires, t + kHour) << "the extended lease survives";
  EXPECT_EQ(job(h, waiting, t).state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(job(h, finished, t).state, CONVEYOR_JOB_COMPLETED);
  // The lease is still current, and blocks every attempt.
  EXPECT_EQ(rotate().outcome, Rotation::kBlocked);

  // The long job finishes: slot 0 has nothing live and goes.
  ASSERT_EQ(complete(h, leases_of(running), t + 1), std::vector{CONVEYOR_OK});
  r = rotate();
  EXPECT_EQ(r.outcome, Rotation::kRotated) << to_string(r.outcome);
  EXPECT_EQ(r.write_slot, 0u);
  EXPECT_EQ(rows_in("ready_0"), 0);
  EXPECT_EQ(rows_in("marks_0"), 0);
  // The waiting job lives on under its id; the history of slot 0 is gone.
  JobCopy moved = job(h, waiting, t);
  EXPECT_EQ(moved.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(moved.priority, 5);
  JobCopy gone;
  EXPECT_EQ(get(h, finished, t, &gone), CONVEYOR_E_NOT_FOUND);
  std::vector<JobCopy> got = claim(h, "q", 10, 102, t, t + kHour);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, waiting);
  EXPECT_EQ(got[0].attempt, 1);
}

// TRUNCATE takes a slot's history but not its counts: completed, failed and
// cancelled jobs of a truncated slot are still counted by queue_stats, until
// purge_finished drops them past retention (as on the canonical plugins).
TEST_F(RingRotationTest, FinishedCountsOutliveTruncationUntilPurged) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store(kManualRotation);
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  enqueue_many(h, "q", 5);
  const int64_t doomed = enqueue(h, "q");
  const int64_t cancelled = enqueue(h, "q", /*priority=*/9);
  std::vector<JobCopy> got = claim(h, "q", 6, 100, t, t + kHour);
  ASSERT_EQ(got.size(), 6u);
  std::vector<JobCopy> to_complete;
  for (const JobCopy& j : got) {
    if (j.id == doomed)
      ASSERT_EQ(fail(h, leases_of({j})[0], "boom", /*retry_at=*/-1, t + 1), CONVEYOR_OK);
    else
      to_complete.push_back(j);
  }
  ASSERT_EQ(complete(h, leases_of(to_complete), t + 2),
            std::vector<conveyor_status>(5, CONVEYOR_OK));
  conveyor_error err{};
  ASSERT_EQ(api_->cancel(h, cancelled, t + 3, &err), CONVEYOR_OK) << err.message;
  auto counts = [&] {
    for (const postgres::test::StatsCopy& s : stats(h, t + 4))
      if (s.queue == "q") return std::array{s.completed, s.failed, s.cancelled, s.pending};
    return std::array<int64_t, 4>{};
  };
  const std::array<int64_t, 4> expected{5, 1, 1, 0};
  ASSERT_EQ(counts(), expected);

  // Round the ring until slot 0, which held them all, is truncated.
  for (int i = 0; i < 3; ++i) {
    enqueue(h, "other");
    ASSERT_EQ(rotate().outcome, Rotation::kRotated);
    EXPECT_EQ(counts(), expected) << "after rotation " << i + 1;
  }
  EXPECT_EQ(rows_in("ready_0"), 0) << "slot 0 was truncated";
  EXPECT_EQ(rows_in("retired"), 3) << "one row per outcome of queue q";

  // Purge drops a row once its newest job is past retention: here the
  // failed one (t + 1), not yet the completed (t + 2) and cancelled (t + 3).
  uint64_t purged = 0;
  ASSERT_EQ(api_->purge_finished(h, t + 2, 1000, &purged, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(counts(), (std::array<int64_t, 4>{5, 0, 1, 0}));
  ASSERT_EQ(api_->purge_finished(h, t + 4, 1000, &purged, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(counts(), (std::array<int64_t, 4>{0, 0, 0, 0}));
  EXPECT_EQ(rows_in("retired"), 0);
}

// job_counts (summed `tally` rows and `retired`) reports what queue_stats
// (counting entries) does through retries, deletes, rotations that fold the
// oldest slot's tally and truncate it, and purges.
TEST_F(RingRotationTest, JobCountsMatchQueueStatsAcrossRotationRetryAndDelete) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store(kManualRotation);
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  enqueue_many(h, "q", 6);
  const int64_t cancelled = enqueue(h, "q", /*priority=*/9);
  std::vector<JobCopy> got = claim(h, "q", 6, 100, t, t + kHour);
  ASSERT_EQ(got.size(), 6u);
  ASSERT_EQ(complete(h, leases_of({got[0], got[1], got[2], got[3]}), t + 1),
            std::vector<conveyor_status>(4, CONVEYOR_OK));
  for (int i : {4, 5})
    ASSERT_EQ(fail(h, leases_of({got[i]})[0], "boom", /*retry_at=*/-1, t + 2), CONVEYOR_OK);
  conveyor_error err{};
  ASSERT_EQ(api_->cancel(h, cancelled, t + 3, &err), CONVEYOR_OK) << err.message;
  const int64_t now = t + 10;
  auto same = [&](const char* when) {
    EXPECT_EQ(job_counts(api_, h, now), queue_stats(api_, h, now)) << when;
  };
  same("before any rotation");

  const int64_t retried[] = {got[4].id, got[4].id};
  conveyor_status results[2];
  ASSERT_EQ(api_->retry_jobs(h, retried, 2, now, results, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(results[0], CONVEYOR_OK);
  EXPECT_EQ(results[1], CONVEYOR_E_WRONG_STATE) << "a repeated id sees the retried job";
  const int64_t deleted[] = {got[0].id, got[0].id};
  ASSERT_EQ(api_->delete_jobs(h, deleted, 2, results, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(results[0], CONVEYOR_OK);
  EXPECT_EQ(results[1], CONVEYOR_E_NOT_FOUND) << "a repeated id finds the job gone";
  same("after retry and delete");
  const Counts before = job_counts(api_, h, now);
  EXPECT_EQ(before.at("q"), (std::array<int64_t, 7>{0, 1, 0, 0, 3, 1, 1}));

  // Round the ring until slot 0 is truncated: its tally rows are folded, its
  // finished jobs move to `retired`, the retried job is copied forward.
  for (int i = 0; i < 3; ++i) {
    enqueue(h, "other");
    ASSERT_EQ(rotate().outcome, Rotation::kRotated);
    same("after a rotation");
  }
  EXPECT_EQ(rows_in("ready_0"), 0) << "slot 0 was truncated";
  EXPECT_EQ(job_counts(api_, h, now).at("q"), before.at("q"));
  // Folding every partition leaves one row per queue and state in each.
  for (uint32_t k = 0; k < kTallySlots; ++k) fold_tally(*admin_, schema_, k);
  EXPECT_EQ(sql("SELECT count(*) FROM (SELECT slot, queue, state FROM \"" + schema_ +
                "\".tally GROUP BY 1, 2, 3 HAVING count(*) > 1) AS x")[0][0]
                .as<int64_t>(),
            0);
  same("after folding the tally");
  EXPECT_EQ(job_counts(api_, h, now).at("q"), before.at("q"));

  // The other failed job's entry went with slot 0: no retry, but still counted.
  ASSERT_EQ(api_->retry_jobs(h, &got[5].id, 1, now, results, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(results[0], CONVEYOR_E_NOT_FOUND);
  std::vector<JobCopy> again = claim(h, "q", 10, 101, now, now + kHour);
  ASSERT_EQ(postgres::test::ids_of(again), std::vector<int64_t>{got[4].id});
  ASSERT_EQ(complete(h, leases_of(again), now + 1), std::vector{CONVEYOR_OK});
  same("after the retried job completed");
  uint64_t purged = 0;
  ASSERT_EQ(api_->purge_finished(h, now + 2, 1000, &purged, &err), CONVEYOR_OK) << err.message;
  same("after purge");
  EXPECT_EQ(job_counts(api_, h, now).count("q"), 0u) << "everything in q was purged";
}

// A rotation that finds the oldest slot's lock busy gives up within the lock
// timeout instead of queueing every claim behind it, and rotates later.
TEST_F(RingRotationTest, BusyOldestSlotIsLeftForTheNextTick) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store(kManualRotation);
  ASSERT_NE(h, nullptr);
  enqueue(h, "q");
  pqxx::connection reader(dsn_);
  pqxx::work open_reader(reader);  // a long reader of slot 1
  open_reader.exec("SELECT count(*) FROM \"" + schema_ + "\".ready_1");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(rotate().outcome, Rotation::kLockTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  open_reader.abort();
  EXPECT_EQ(rotate().outcome, Rotation::kRotated);
}

// The advisory lock lets exactly one process rotate: while another holds it
// nobody rotates, and of several rotators racing for a due rotation exactly
// one rotates.
TEST_F(RingRotationTest, OnlyOneProcessRotates) {
  CONVEYOR_REQUIRE_PG();
  conveyor_storage* h = open_store(kManualRotation);
  ASSERT_NE(h, nullptr);
  enqueue(h, "q");
  {
    pqxx::connection other(dsn_);
    pqxx::work holder(other);
    holder.exec_params("SELECT pg_advisory_xact_lock($1, hashtext($2))", kRotationLockClass,
                       schema_);
    EXPECT_EQ(rotate().outcome, Rotation::kLockedElsewhere);
    EXPECT_EQ(rotations(), 0);
  }
  for (int round = 0; round < 3; ++round) {
    enqueue(h, "q");
    sql("UPDATE \"" + schema_ + "\".ring SET rotated_at = 0");  // due now
    const int64_t before = rotations();
    constexpr int kRotators = 4;
    std::atomic<int> rotated{0}, ready{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kRotators; ++i)
      threads.emplace_back([&] {
        pqxx::connection c(dsn_);
        ++ready;
        while (ready < kRotators) std::this_thread::yield();
        // Due after one hour: once one rotated, the others find it not due.
        if (rotate_ring(c, schema_, kHour, wall_us()).outcome == Rotation::kRotated) ++rotated;
      });
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(rotated, 1);
    EXPECT_EQ(rotations(), before + 1);
  }
}

}  // namespace
}  // namespace conveyor::pgqueue
