// enqueue: ids, atomic batches, validation.
#include "fixture.hpp"

#include <climits>
#include <cstddef>
#include <set>

namespace conveyor::conformance {
namespace {

class Enqueue : public ConformanceTest {};

// Nothing of the rejected batch may be stored: no job claimable, no count.
void expect_nothing_stored(Handle& h, const std::string& queue) {
  std::vector<JobCopy> claimed = h.claim_jobs(queue, 10, kT0 + 10 * kSecond);
  EXPECT_TRUE(claimed.empty()) << claimed.size() << " job(s) of the rejected batch were stored "
                               << "(storage_plugin.h enqueue: \"atomically: all or none\")";
  if (auto s = h.stats_of(queue, kT0)) {
    EXPECT_EQ(s->pending + s->scheduled + s->running + s->completed + s->failed + s->cancelled, 0)
        << "queue_stats counts jobs of the rejected batch";
  }
}

TEST_F(Enqueue, ReturnsPositiveDistinctIncreasingIds) {
  auto h = open();
  std::vector<int64_t> first = h->add_all({JobSpec{}, JobSpec{}, JobSpec{}});
  std::vector<int64_t> second = h->add_all({JobSpec{}, JobSpec{}});
  std::vector<int64_t> all = first;
  all.insert(all.end(), second.begin(), second.end());
  for (int64_t id : all) EXPECT_GT(id, 0) << "storage_plugin.h conveyor_job.id: \"> 0\"";
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size())
      << "ids are not distinct (storage_plugin.h: \"unique within the storage\")";
  for (size_t i = 1; i < all.size(); ++i)
    EXPECT_LT(all[i - 1], all[i])
        << "ids do not increase in enqueue order: the claim tie-break \"priority, run_at, id\" "
           "would not be first-in first-out";
}

TEST_F(Enqueue, IdsNameTheJobsInOrder) {
  auto h = open();
  std::vector<int64_t> ids =
      h->add_all({JobSpec{.kind = "first"}, JobSpec{.kind = "second"}, JobSpec{.kind = "third"}});
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(h->job(ids[0], kT0).kind, "first");
  EXPECT_EQ(h->job(ids[1], kT0).kind, "second");
  EXPECT_EQ(h->job(ids[2], kT0).kind, "third")
      << "storage_plugin.h enqueue: \"out_ids ... receives the new ids in order\"";
}

TEST_F(Enqueue, NewJobIsAvailableOrScheduledByRunAt) {
  auto h = open();
  const int64_t ready = h->add(JobSpec{.run_at_us = kT0});
  const int64_t later = h->add(JobSpec{.run_at_us = kT0 + kSecond});
  JobCopy r = h->job(ready, kT0);
  EXPECT_STATE(r.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(r.attempt, 0) << "no attempt has started";
  JobCopy l = h->job(later, kT0);
  EXPECT_STATE(l.state, CONVEYOR_JOB_SCHEDULED)
      << " (storage_plugin.h: \"run_at in the future: reported as "
      << "SCHEDULED\"; the future is judged by the now_us passed to get_job)";
  EXPECT_STATE(h->job(later, kT0 + kSecond).state, CONVEYOR_JOB_AVAILABLE)
      << "at now_us == run_at_us the job is ready";
}

TEST_F(Enqueue, EmptyKindRejectsTheWholeBatch) {
  auto h = open();
  std::vector<int64_t> ids;
  Status s = h->enqueue(
      {JobSpec{.queue = "batch"}, JobSpec{.queue = "batch", .kind = ""}, JobSpec{.queue = "batch"}},
      &ids);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
      << s << " (storage_plugin.h conveyor_new_job.kind: \"non-empty\")";
  expect_nothing_stored(*h, "batch");
}

TEST_F(Enqueue, ZeroMaxAttemptsRejectsTheWholeBatch) {
  auto h = open();
  std::vector<int64_t> ids;
  Status s = h->enqueue({JobSpec{.queue = "batch"}, JobSpec{.queue = "batch", .max_attempts = 0},
                         JobSpec{.queue = "batch"}},
                        &ids);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
      << s << " (storage_plugin.h conveyor_new_job.max_attempts: \">= 1\")";
  expect_nothing_stored(*h, "batch");
}

TEST_F(Enqueue, NegativeMaxAttemptsRejectsTheWholeBatch) {
  auto h = open();
  std::vector<int64_t> ids;
  Status s = h->enqueue({JobSpec{.queue = "batch"}, JobSpec{.queue = "batch"},
                         JobSpec{.queue = "batch", .max_attempts = -1}},
                        &ids);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
      << s << " (storage_plugin.h conveyor_new_job.max_attempts: \">= 1\")";
  expect_nothing_stored(*h, "batch");
}

TEST_F(Enqueue, StorageStaysUsableAfterARejectedBatch) {
  auto h = open();
  Status bad = h->enqueue({JobSpec{.queue = "batch", .kind = ""}}, nullptr);
  ASSERT_STATUS(bad.code, CONVEYOR_E_INVALID) << bad;
  const int64_t id = h->add(JobSpec{.queue = "batch"});
  EXPECT_EQ(h->claim_one("batch", kT0).id, id);
}

TEST_F(Enqueue, EmptyBatchIsANoOp) {
  auto h = open();
  conveyor_error err = poisoned_error();
  // storage_plugin.h enqueue: "n == 0 is a no-op" (so the arrays may be NULL).
  const conveyor_status code = table().enqueue(h->raw(), nullptr, 0, nullptr, &err);
  EXPECT_STATUS(code, CONVEYOR_OK) << ": " << err.message;
  EXPECT_TRUE(h->queues().empty()) << "an empty batch created a queue";
}

TEST_F(Enqueue, LongestQueueNameRoundTrips) {
  auto h = open();
  // Queue names are [A-Za-z0-9][A-Za-z0-9._:-]{0,127}: 128 characters at most.
  std::string name = "Q";
  while (name.size() < 128) name += "a0._:-"[name.size() % 6];
  const int64_t id = h->add(JobSpec{.queue = name});
  EXPECT_EQ(h->job(id, kT0).queue, name);
  EXPECT_EQ(h->claim_one(name, kT0).id, id);
}

// ---- ABI 1.2: enqueue_v3 and conveyor_job.cost ----

class JobCost : public ConformanceTest {};

TEST_F(JobCost, CostsRoundTripThroughClaimAndGetJob) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v3);
  std::vector<int64_t> ids =
      h->add_costed({JobSpec{.queue = "c", .kind = "one", .cost = 1},
                     JobSpec{.queue = "c", .kind = "seven", .cost = 7},
                     JobSpec{.queue = "c", .kind = "max", .cost = CONVEYOR_JOB_COST_MAX}});
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(h->job(ids[1], kT0).cost, 7) << "get_job must report conveyor_job.cost";
  EXPECT_GE(h->job(ids[1], kT0).struct_size, offsetof(conveyor_job, cost) + sizeof(int32_t))
      << "struct_size must cover conveyor_job.cost";
  std::vector<JobCopy> claimed = h->claim_jobs("c", 10, kT0);
  ASSERT_EQ(claimed.size(), 3u);
  for (const JobCopy& j : claimed) {
    const int32_t want = j.kind == "one" ? 1 : j.kind == "seven" ? 7 : CONVEYOR_JOB_COST_MAX;
    EXPECT_EQ(j.cost, want) << "claim reported job " << j.kind << " with the wrong cost";
  }
}

// The host throttles a queue by its jobs' costs whichever claim found them:
// a claim by kinds (a remote worker's, or a process serving some kinds
// only) must report each job's cost as claim does.
TEST_F(JobCost, ClaimKindsReportsTheStoredCost) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v3);
  CONFORMANCE_REQUIRE_SLOT(h, claim_kinds);
  h->add_costed({JobSpec{.queue = "k", .kind = "seven", .cost = 7},
                 JobSpec{.queue = "k", .kind = "one", .cost = 1}});
  std::vector<JobCopy> claimed = h->claim_kinds_jobs("k", {"one", "seven"}, 10, kT0);
  ASSERT_EQ(claimed.size(), 2u);
  for (const JobCopy& j : claimed)
    EXPECT_EQ(j.cost, j.kind == "seven" ? 7 : 1)
        << "claim_kinds reported job " << j.kind << " with the wrong cost";
}

TEST_F(JobCost, EnqueueV3IsEnqueueV2WithCosts) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v3);
  std::vector<int64_t> ids;
  ASSERT_TRUE(h->enqueue_v3({JobSpec{.queue = "v", .priority = 3, .max_attempts = 4, .cost = 2},
                             JobSpec{.queue = "v", .run_at_us = kT0 + 100 * kSecond, .cost = 3}},
                            kT0 + 5, &ids)
                  .ok());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_LT(ids[0], ids[1]);
  JobCopy a = h->job(ids[0], kT0 + 5);
  EXPECT_EQ(a.created_at, kT0 + 5) << "created_at is enqueue_v3's now_us, as for enqueue_v2";
  EXPECT_EQ(a.priority, 3);
  EXPECT_EQ(a.max_attempts, 4);
  EXPECT_EQ(a.cost, 2);
  JobCopy b = h->job(ids[1], kT0 + 5);
  EXPECT_STATE(b.state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(b.cost, 3) << "a scheduled job keeps its cost";
  // Due later: claimed with its cost.
  std::vector<JobCopy> later = h->claim_jobs("v", 10, kT0 + 200 * kSecond);
  ASSERT_EQ(later.size(), 2u);
  for (const JobCopy& j : later) EXPECT_EQ(j.cost, j.id == ids[0] ? 2 : 3);
}

TEST_F(JobCost, JobsEnqueuedWithoutACostCostOne) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v3);
  const int64_t id = h->add(JobSpec{.queue = "plain"});
  EXPECT_EQ(h->job(id, kT0).cost, 1)
      << "storage_plugin.h conveyor_job.cost: \"1 for a job enqueued without a cost\"";
  EXPECT_EQ(h->claim_one("plain", kT0).cost, 1);
}

TEST_F(JobCost, TheCostStaysThroughRetryReleaseAndRescue) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v3);
  const int64_t id = h->add_costed({JobSpec{.queue = "life", .max_attempts = 10, .cost = 5}}).at(0);
  // fail with a retry: a new turn (a copied entry in an append-only plugin)
  JobCopy first = h->claim_one("life", kT0);
  EXPECT_EQ(first.cost, 5);
  ASSERT_TRUE(h->fail(first.lease(), "again", kT0 + 1, kT0 + 1).ok());
  JobCopy second = h->claim_one("life", kT0 + 2);
  EXPECT_EQ(second.cost, 5) << "the cost must survive fail with a retry";
  // release
  std::vector<conveyor_status> r;
  ASSERT_TRUE(h->release({second.lease()}, kT0 + 3, &r).ok());
  JobCopy third = h->claim_one("life", kT0 + 4);
  EXPECT_EQ(third.cost, 5) << "the cost must survive release";
  // fail into the future (scheduled), then due
  ASSERT_TRUE(h->fail(third.lease(), "later", kT0 + 100 * kSecond, kT0 + 5).ok());
  EXPECT_EQ(h->job(id, kT0 + 6).cost, 5);
  JobCopy fourth = h->claim_one("life", kT0 + 101 * kSecond);
  EXPECT_EQ(fourth.cost, 5) << "the cost must survive a retry scheduled for later";
  // rescue of an expired lease
  const int64_t after_expiry = kT0 + 101 * kSecond + kLease + 1;
  EXPECT_EQ(h->rescue(after_expiry, 10), 1u);
  EXPECT_EQ(h->job(id, after_expiry).cost, 5);
  JobCopy fifth = h->claim_one("life", after_expiry);
  EXPECT_EQ(fifth.cost, 5) << "the cost must survive rescue";
  h->complete_one(fifth.lease(), after_expiry + 1);
  EXPECT_EQ(h->job(id, after_expiry + 2).cost, 5) << "a finished job keeps its cost";
}

TEST_F(JobCost, CostOutOfRangeRejectsTheWholeBatch) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v3);
  for (int32_t bad : {0, -1, CONVEYOR_JOB_COST_MAX + 1, INT32_MIN}) {
    std::vector<int64_t> ids;
    Status s = h->enqueue_v3(
        {JobSpec{.queue = "bad", .cost = 1}, JobSpec{.queue = "bad", .cost = bad}}, kT0, &ids);
    EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
        << "cost " << bad << " (storage_plugin.h enqueue_v3: \"A cost outside "
        << "1..CONVEYOR_JOB_COST_MAX is CONVEYOR_E_INVALID (nothing enqueued)\")";
  }
  expect_nothing_stored(*h, "bad");
}

}  // namespace
}  // namespace conveyor::conformance
