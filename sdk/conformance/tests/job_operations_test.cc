// ABI 1.1 job operations: enqueue_v2, claim_kinds, list_jobs, retry_jobs,
// delete_jobs, job_counts. Each behaviour runs only on a plugin of ABI 1.1
// or later whose table fills the slot (CONFORMANCE_REQUIRE_SLOT): a 1.0
// plugin skips them all.
#include "fixture.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace conveyor::conformance {
namespace {

std::vector<int64_t> ids_of(const std::vector<JobCopy>& jobs) {
  std::vector<int64_t> ids;
  for (const JobCopy& j : jobs) ids.push_back(j.id);
  return ids;
}

// Leaves one job in each state of queue "default": pending, scheduled,
// running, completed, failed, cancelled (ids in that order).
struct EveryState {
  int64_t pending, scheduled, running, completed, failed, cancelled;
};
EveryState every_state(Handle& h) {
  EveryState e{};
  e.completed = h.add(JobSpec{.priority = 0});
  e.failed = h.add(JobSpec{.priority = 1, .max_attempts = 1});
  e.running = h.add(JobSpec{.priority = 2});
  e.cancelled = h.add(JobSpec{.priority = 3});
  e.pending = h.add(JobSpec{.priority = 4});
  e.scheduled = h.add(JobSpec{.run_at_us = kT0 + 3600 * kSecond});
  h.complete_one(h.claim_one("default", kT0).lease(), kT0 + 1);
  JobCopy f = h.claim_one("default", kT0 + 2);
  require_ok(h.fail(f.lease(), "boom", -1, kT0 + 3));
  h.claim_one("default", kT0 + 4);
  require_ok(h.cancel(e.cancelled, kT0 + 5));
  return e;
}

// ---- enqueue_v2 ----

class EnqueueV2 : public ConformanceTest {};

TEST_F(EnqueueV2, CreatedAtIsTheHostsNow) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v2);
  std::vector<int64_t> ids;
  ASSERT_TRUE(h->enqueue_v2({JobSpec{}, JobSpec{}}, kT0 + 7, &ids).ok());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_LT(ids[0], ids[1]) << "ids must increase in batch order";
  for (int64_t id : ids)
    EXPECT_EQ(h->job(id, kT0 + 7).created_at, kT0 + 7)
        << "storage_plugin.h enqueue_v2: \"each job's created_at_us is now_us\"";
}

TEST_F(EnqueueV2, RefusesABadBatchAsAWhole) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v2);
  Status s = h->enqueue_v2({JobSpec{}, JobSpec{.kind = ""}}, kT0, nullptr);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID) << s;
  EXPECT_TRUE(h->claim_jobs("default", 10, kT0).empty()) << "part of a refused batch was stored";
}

// ---- claim_kinds ----

class ClaimKinds : public ConformanceTest {};

TEST_F(ClaimKinds, TakesOnlyTheGivenKinds) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, claim_kinds);
  const int64_t a = h->add(JobSpec{.kind = "a"});
  const int64_t b = h->add(JobSpec{.kind = "b"});
  const int64_t c = h->add(JobSpec{.kind = "c"});
  std::vector<JobCopy> got = h->claim_kinds_jobs("default", {"a", "c"}, 10, kT0);
  EXPECT_EQ(ids_of(got), (std::vector<int64_t>{a, c}));
  JobCopy left = h->job(b, kT0);
  EXPECT_STATE(left.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(left.attempt, 0) << "a job of another kind was touched";
}

TEST_F(ClaimKinds, OtherKindsDoNotBlockTheQueue) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, claim_kinds);
  for (int i = 0; i < 5; ++i) h->add(JobSpec{.kind = "other", .priority = -10});
  const int64_t mine = h->add(JobSpec{.kind = "mine", .priority = 10});
  std::vector<JobCopy> got = h->claim_kinds_jobs("default", {"mine"}, 1, kT0);
  EXPECT_EQ(ids_of(got), std::vector<int64_t>{mine})
      << "storage_plugin.h claim_kinds: jobs of other kinds \"do not block the queue\"";
}

TEST_F(ClaimKinds, FollowsClaimOrderAcrossKinds) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, claim_kinds);
  const int64_t a2 = h->add(JobSpec{.kind = "a", .priority = 2});
  const int64_t b1 = h->add(JobSpec{.kind = "b", .priority = 1});
  const int64_t a0 = h->add(JobSpec{.kind = "a", .priority = 0});
  h->add(JobSpec{.kind = "b", .priority = 3});
  std::vector<JobCopy> got = h->claim_kinds_jobs("default", {"b", "a"}, 3, kT0);
  EXPECT_EQ(ids_of(got), (std::vector<int64_t>{a0, b1, a2}));
  for (const JobCopy& j : got) {
    EXPECT_STATE(j.state, CONVEYOR_JOB_RUNNING);
    EXPECT_EQ(j.attempt, 1);
  }
}

TEST_F(ClaimKinds, NoKindsIsAPlainClaim) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, claim_kinds);
  h->add(JobSpec{.kind = "a"});
  h->add(JobSpec{.kind = "b"});
  EXPECT_EQ(h->claim_kinds_jobs("default", {}, 10, kT0).size(), 2u)
      << "storage_plugin.h claim_kinds: \"n_kinds == 0 means no filter\"";
}

TEST_F(ClaimKinds, EmptyKindIsInvalid) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, claim_kinds);
  h->add(JobSpec{.kind = "a"});
  std::vector<JobCopy> got;
  Status s = h->claim_kinds("default", {"a", ""}, 10, next_lease_token(), kT0, kT0 + kLease, &got);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID) << s;
  EXPECT_EQ(h->claim_jobs("default", 10, kT0).size(), 1u) << "the refused claim took the job";
}

TEST_F(ClaimKinds, RespectsRunAtAndPause) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, claim_kinds);
  h->add(JobSpec{.kind = "a", .run_at_us = kT0 + kSecond});
  EXPECT_TRUE(h->claim_kinds_jobs("default", {"a"}, 10, kT0).empty()) << "claimed before run_at";
  h->pause("default", true, kT0);
  EXPECT_TRUE(h->claim_kinds_jobs("default", {"a"}, 10, kT0 + kSecond).empty())
      << "claimed from a paused queue";
  h->pause("default", false, kT0);
  EXPECT_EQ(h->claim_kinds_jobs("default", {"a"}, 10, kT0 + kSecond).size(), 1u);
}

// ---- list_jobs ----

class ListJobs : public ConformanceTest {};

TEST_F(ListJobs, PagesInIdOrderByKeyset) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, list_jobs);
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(h->add(JobSpec{.priority = 5 - i}));
  std::vector<int64_t> seen;
  std::vector<size_t> pages;
  int64_t after = 0;
  for (int page = 0; page < 10; ++page) {
    std::vector<JobCopy> got = h->list("default", {}, "", after, 2, kT0);
    pages.push_back(got.size());
    for (const JobCopy& j : got) seen.push_back(j.id);
    if (got.size() < 2) break;
    after = got.back().id;
  }
  EXPECT_EQ(seen, ids) << "pages must list every job once, in increasing id order";
  EXPECT_EQ(pages, (std::vector<size_t>{2, 2, 1}));
}

TEST_F(ListJobs, FiltersByStateWithScheduledSplitByNow) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, list_jobs);
  EveryState e = every_state(*h);
  const int64_t now = kT0 + 10;
  auto only = [&](int32_t state) { return ids_of(h->list("default", {state}, "", 0, 100, now)); };
  EXPECT_EQ(only(CONVEYOR_JOB_AVAILABLE), std::vector<int64_t>{e.pending});
  EXPECT_EQ(only(CONVEYOR_JOB_SCHEDULED), std::vector<int64_t>{e.scheduled});
  EXPECT_EQ(only(CONVEYOR_JOB_RUNNING), std::vector<int64_t>{e.running});
  EXPECT_EQ(only(CONVEYOR_JOB_COMPLETED), std::vector<int64_t>{e.completed});
  EXPECT_EQ(only(CONVEYOR_JOB_FAILED), std::vector<int64_t>{e.failed});
  EXPECT_EQ(only(CONVEYOR_JOB_CANCELLED), std::vector<int64_t>{e.cancelled});
  EXPECT_EQ(
      ids_of(h->list("default", {CONVEYOR_JOB_FAILED, CONVEYOR_JOB_CANCELLED}, "", 0, 100, now)),
      (std::vector<int64_t>{e.failed, e.cancelled}));
  // At the scheduled job's run_at it is AVAILABLE.
  EXPECT_EQ(ids_of(h->list("default", {CONVEYOR_JOB_AVAILABLE}, "", 0, 100, kT0 + 3600 * kSecond)),
            (std::vector<int64_t>{e.pending, e.scheduled}));
  EXPECT_EQ(h->list("default", {}, "", 0, 100, now).size(), 6u) << "no states: every state";
}

TEST_F(ListJobs, ReportsEachJobAsGetJobDoes) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, list_jobs);
  every_state(*h);
  for (const JobCopy& listed : h->list("default", {}, "", 0, 100, kT0 + 10)) {
    JobCopy got = h->job(listed.id, kT0 + 10);
    EXPECT_STATE(listed.state, got.state);
    EXPECT_EQ(listed.kind, got.kind);
    EXPECT_EQ(listed.queue, "default");
    EXPECT_EQ(listed.attempt, got.attempt);
    EXPECT_EQ(listed.lease_token, got.lease_token);
    EXPECT_EQ(listed.finalized_at, got.finalized_at);
    EXPECT_EQ(listed.last_error, got.last_error);
    EXPECT_EQ(listed.payload, got.payload);
  }
}

TEST_F(ListJobs, FiltersByKindAndQueue) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, list_jobs);
  const int64_t a1 = h->add(JobSpec{.kind = "a"});
  h->add(JobSpec{.kind = "b"});
  h->add(JobSpec{.queue = "other", .kind = "a"});
  const int64_t a2 = h->add(JobSpec{.kind = "a"});
  EXPECT_EQ(ids_of(h->list("default", {}, "a", 0, 100, kT0)), (std::vector<int64_t>{a1, a2}));
  EXPECT_EQ(ids_of(h->list("default", {CONVEYOR_JOB_AVAILABLE}, "a", a1, 100, kT0)),
            std::vector<int64_t>{a2});
  EXPECT_TRUE(h->list("default", {}, "zzz", 0, 100, kT0).empty());
  EXPECT_TRUE(h->list("nosuchqueue", {}, "", 0, 100, kT0).empty())
      << "an unknown queue lists nothing (CONVEYOR_OK)";
}

// Retained (completed) jobs of several kinds, interleaved by id: pages with
// and without a kind list each once, in id order.
TEST_F(ListJobs, PagesFinishedJobsOfSeveralKindsInIdOrder) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, list_jobs);
  const char* kinds[] = {"c", "a", "b"};
  std::vector<int64_t> all, of_b;
  for (int i = 0; i < 9; ++i) {
    all.push_back(h->add(JobSpec{.kind = kinds[i % 3]}));
    if (i % 3 == 2) of_b.push_back(all.back());
  }
  h->add(JobSpec{.queue = "other", .kind = "b"});
  std::vector<conveyor_lease> leases;
  for (const JobCopy& j : h->claim_jobs("default", 9, kT0)) leases.push_back(j.lease());
  ASSERT_EQ(leases.size(), 9u);
  for (conveyor_status st : h->complete_all(leases, kT0 + 1)) ASSERT_EQ(st, CONVEYOR_OK);
  auto pages = [&](std::string_view kind, uint32_t limit) {
    std::vector<int64_t> seen;
    int64_t after = 0;
    for (int page = 0; page < 20; ++page) {
      std::vector<JobCopy> got =
          h->list("default", {CONVEYOR_JOB_COMPLETED}, kind, after, limit, kT0 + 2);
      for (const JobCopy& j : got) seen.push_back(j.id);
      if (got.size() < limit) break;
      after = got.back().id;
    }
    return seen;
  };
  EXPECT_EQ(pages("", 2), all) << "every kind, pages of 2";
  EXPECT_EQ(pages("", 4), all) << "every kind, pages of 4";
  EXPECT_EQ(pages("b", 2), of_b) << "kind b only, pages of 2";
  EXPECT_EQ(ids_of(h->list("default", {}, "", all[3], 3, kT0 + 2)),
            (std::vector<int64_t>{all[4], all[5], all[6]}))
      << "every state, after an id";
}

TEST_F(ListJobs, LimitAboveTheMaximumIsInvalid) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, list_jobs);
  h->add(JobSpec{});
  std::vector<JobCopy> got;
  Status s = h->list_jobs("default", {}, "", 0, CONVEYOR_LIST_JOBS_MAX + 1, kT0, &got);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
      << s << " (storage_plugin.h list_jobs: limit above CONVEYOR_LIST_JOBS_MAX)";
  EXPECT_TRUE(got.empty()) << "a refused list reported jobs";
  EXPECT_EQ(h->list("default", {}, "", 0, CONVEYOR_LIST_JOBS_MAX, kT0).size(), 1u)
      << "limit = CONVEYOR_LIST_JOBS_MAX must be accepted";
}

TEST_F(ListJobs, BadArgumentsAreInvalid) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, list_jobs);
  h->add(JobSpec{});
  EXPECT_STATUS(h->list_jobs("default", {}, "", 0, 0, kT0, nullptr).code, CONVEYOR_E_INVALID)
      << "limit 0";
  EXPECT_STATUS(h->list_jobs("default", {}, "", -1, 10, kT0, nullptr).code, CONVEYOR_E_INVALID)
      << "after_id < 0";
  EXPECT_STATUS(h->list_jobs("default", {0}, "", 0, 10, kT0, nullptr).code, CONVEYOR_E_INVALID)
      << "state 0";
  EXPECT_STATUS(h->list_jobs("default", {7}, "", 0, 10, kT0, nullptr).code, CONVEYOR_E_INVALID)
      << "state 7";
  EXPECT_STATUS(h->list_jobs("", {}, "", 0, 10, kT0, nullptr).code, CONVEYOR_E_INVALID)
      << "empty queue";
}

// ---- retry_jobs ----

class RetryJobs : public ConformanceTest {};

TEST_F(RetryJobs, FailedJobIsAvailableNowWithAttemptsReset) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, retry_jobs);
  EveryState e = every_state(*h);
  const int64_t now = kT0 + 100;
  EXPECT_EQ(h->retry({e.failed}, now), std::vector<conveyor_status>{CONVEYOR_OK});
  JobCopy j = h->job(e.failed, now);
  EXPECT_STATE(j.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(j.attempt, 0) << "storage_plugin.h retry_jobs: \"attempt = 0\"";
  EXPECT_EQ(j.run_at, now) << "storage_plugin.h retry_jobs: \"run_at = now_us\"";
  EXPECT_EQ(j.finalized_at, 0);
  EXPECT_EQ(j.last_error, "boom") << "storage_plugin.h retry_jobs: last_error is kept";
  EXPECT_EQ(j.max_attempts, 1);
  std::vector<JobCopy> claimed = h->claim_jobs("default", 10, now);
  ASSERT_FALSE(claimed.empty());
  std::vector<int64_t> claimed_ids = ids_of(claimed);
  EXPECT_NE(std::find(claimed_ids.begin(), claimed_ids.end(), e.failed), claimed_ids.end())
      << "the retried job is not claimable at now_us";
  for (const JobCopy& c : claimed) {
    if (c.id == e.failed) {
      EXPECT_EQ(c.attempt, 1) << "a full max_attempts again";
    }
  }
}

TEST_F(RetryJobs, CancelledJobIsRetried) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, retry_jobs);
  const int64_t id = h->add(JobSpec{});
  require_ok(h->cancel(id, kT0));
  EXPECT_EQ(h->retry({id}, kT0 + 1), std::vector<conveyor_status>{CONVEYOR_OK});
  EXPECT_STATE(h->job(id, kT0 + 1).state, CONVEYOR_JOB_AVAILABLE);
}

TEST_F(RetryJobs, OtherStatesAndUnknownIdsAreReportedAndUnchanged) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, retry_jobs);
  EveryState e = every_state(*h);
  const int64_t now = kT0 + 100;
  std::vector<JobCopy> before;
  for (int64_t id : {e.pending, e.scheduled, e.running, e.completed})
    before.push_back(h->job(id, now));
  std::vector<conveyor_status> r =
      h->retry({e.pending, e.scheduled, e.running, e.completed, 999'999'999, e.failed}, now);
  EXPECT_EQ(r, (std::vector<conveyor_status>{CONVEYOR_E_WRONG_STATE, CONVEYOR_E_WRONG_STATE,
                                             CONVEYOR_E_WRONG_STATE, CONVEYOR_E_WRONG_STATE,
                                             CONVEYOR_E_NOT_FOUND, CONVEYOR_OK}))
      << "per id: WRONG_STATE unless FAILED or CANCELLED, NOT_FOUND for an unknown id";
  for (const JobCopy& b : before) {
    JobCopy a = h->job(b.id, now);
    EXPECT_STATE(a.state, b.state) << "job " << b.id << " was changed by a refused retry";
    EXPECT_EQ(a.attempt, b.attempt) << "job " << b.id;
    EXPECT_EQ(a.run_at, b.run_at) << "job " << b.id;
  }
}

// ---- delete_jobs ----

class DeleteJobs : public ConformanceTest {};

TEST_F(DeleteJobs, DeletesFinalJobs) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, delete_jobs);
  EveryState e = every_state(*h);
  EXPECT_EQ(h->remove({e.completed, e.failed, e.cancelled}),
            (std::vector<conveyor_status>{CONVEYOR_OK, CONVEYOR_OK, CONVEYOR_OK}));
  for (int64_t id : {e.completed, e.failed, e.cancelled}) {
    std::optional<JobCopy> j;
    EXPECT_STATUS(h->get_job(id, kT0 + 10, &j).code, CONVEYOR_E_NOT_FOUND)
        << "deleted job " << id << " is still there";
  }
  const int64_t fresh = h->add(JobSpec{});
  EXPECT_GT(fresh, e.scheduled) << "an id was reused after a delete";
}

TEST_F(DeleteJobs, RefusesJobsNotFinalPerId) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, delete_jobs);
  EveryState e = every_state(*h);
  std::vector<conveyor_status> r =
      h->remove({e.pending, e.scheduled, e.running, 999'999'999, e.completed});
  EXPECT_EQ(
      r, (std::vector<conveyor_status>{CONVEYOR_E_WRONG_STATE, CONVEYOR_E_WRONG_STATE,
                                       CONVEYOR_E_WRONG_STATE, CONVEYOR_E_NOT_FOUND, CONVEYOR_OK}));
  EXPECT_STATE(h->job(e.pending, kT0 + 10).state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_STATE(h->job(e.scheduled, kT0 + 10).state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_STATE(h->job(e.running, kT0 + 10).state, CONVEYOR_JOB_RUNNING);
}

// ---- job_counts ----

class JobCounts : public ConformanceTest {};

void expect_same_counts(const std::vector<StatsCopy>& counts, const std::vector<StatsCopy>& stats) {
  // Zero rows may be left out of job_counts ("may be reported with zeros or left out").
  std::vector<StatsCopy> nonzero;
  for (const StatsCopy& c : counts)
    if (c.paused || c.pending || c.scheduled || c.running || c.completed || c.failed || c.cancelled)
      nonzero.push_back(c);
  ASSERT_EQ(nonzero.size(), stats.size()) << "job_counts and queue_stats report other queues";
  for (size_t i = 0; i < stats.size(); ++i) {
    const StatsCopy &c = nonzero[i], &s = stats[i];
    EXPECT_EQ(c.queue, s.queue) << "queue " << i << " (name order)";
    EXPECT_EQ(c.paused, s.paused) << s.queue;
    EXPECT_EQ(c.pending, s.pending) << s.queue << " pending";
    EXPECT_EQ(c.scheduled, s.scheduled) << s.queue << " scheduled";
    EXPECT_EQ(c.running, s.running) << s.queue << " running";
    EXPECT_EQ(c.completed, s.completed) << s.queue << " completed";
    EXPECT_EQ(c.failed, s.failed) << s.queue << " failed";
    EXPECT_EQ(c.cancelled, s.cancelled) << s.queue << " cancelled";
  }
}

TEST_F(JobCounts, MatchQueueStats) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, job_counts);
  every_state(*h);
  h->add(JobSpec{.queue = "b"});
  h->pause("c_paused_empty", true, kT0);
  for (int64_t now : {kT0 + 10, kT0 + 3600 * kSecond}) {
    std::vector<StatsCopy> counts = h->counts(now);
    std::vector<StatsCopy> stats = h->stats(now);
    expect_same_counts(counts, stats);
  }
  std::vector<StatsCopy> at = h->counts(kT0 + 10);
  auto d =
      std::find_if(at.begin(), at.end(), [](const StatsCopy& s) { return s.queue == "default"; });
  ASSERT_NE(d, at.end());
  EXPECT_EQ(d->pending, 1);
  EXPECT_EQ(d->scheduled, 1);
  EXPECT_EQ(d->running, 1);
  EXPECT_EQ(d->completed, 1);
  EXPECT_EQ(d->failed, 1);
  EXPECT_EQ(d->cancelled, 1);
}

TEST_F(JobCounts, FollowRetryDeleteAndPurge) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, job_counts);
  CONFORMANCE_REQUIRE_SLOT(h, retry_jobs);
  CONFORMANCE_REQUIRE_SLOT(h, delete_jobs);
  EveryState e = every_state(*h);
  h->retry({e.failed}, kT0 + 20);
  h->remove({e.cancelled});
  expect_same_counts(h->counts(kT0 + 30), h->stats(kT0 + 30));
  h->purge(kT0 + 1000, 100);
  expect_same_counts(h->counts(kT0 + 30), h->stats(kT0 + 30));
}

// A rescue finalizes the jobs out of attempts (FAILED) and makes the others
// available again: the counts follow both, and a repeated rescue changes
// nothing.
TEST_F(JobCounts, FollowRescue) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, job_counts);
  h->add(JobSpec{.max_attempts = 1});
  h->add(JobSpec{.max_attempts = 3});
  h->claim_jobs("default", 2, kT0);
  EXPECT_EQ(h->rescue(kT0 + 10 * kLease, 10), 2u);
  expect_same_counts(h->counts(kT0 + 10 * kLease), h->stats(kT0 + 10 * kLease));
  EXPECT_EQ(h->rescue(kT0 + 20 * kLease, 10), 0u);
  std::vector<StatsCopy> at = h->counts(kT0 + 20 * kLease);
  ASSERT_EQ(at.size(), 1u);
  EXPECT_EQ(at[0].failed, 1) << "the job out of attempts";
  EXPECT_EQ(at[0].pending, 1) << "the job with attempts left";
  EXPECT_EQ(at[0].running, 0);
}

}  // namespace
}  // namespace conveyor::conformance
