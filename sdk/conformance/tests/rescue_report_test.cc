// ABI 1.1 reports: rescue_expired_v2 (each rescued job, after the change) and
// conveyor_queue_stats.oldest_pending_run_at_us (queue_stats and job_counts).
// A 1.0 plugin skips them all.
#include "fixture.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace conveyor::conformance {
namespace {

// ---- rescue_expired_v2 ----

class RescueExpiredV2 : public ConformanceTest {};

TEST_F(RescueExpiredV2, ReportsEachRescuedJobAfterTheChange) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, rescue_expired_v2);
  const int64_t last = h->add(JobSpec{.queue = "a", .kind = "k.last", .max_attempts = 1});
  const int64_t more = h->add(JobSpec{.queue = "b", .kind = "k.more", .max_attempts = 3});
  const int64_t live = h->add(JobSpec{.queue = "b"});
  h->claim_one("a", kT0);
  h->claim_one("b", kT0);
  // The third job's lease is taken later, so it has not expired at the rescue.
  h->claim_one("b", kT0 + kLease);
  std::vector<JobCopy> rescued;
  require_ok(h->rescue_expired_v2(kT0 + kLease + 1, 10, &rescued));
  ASSERT_EQ(rescued.size(), 2u) << "the two expired leases, not the live one";
  std::sort(rescued.begin(), rescued.end(),
            [](const JobCopy& x, const JobCopy& y) { return x.id < y.id; });
  EXPECT_EQ(rescued[0].id, last);
  EXPECT_EQ(rescued[0].queue, "a");
  EXPECT_EQ(rescued[0].kind, "k.last");
  EXPECT_STATE(rescued[0].state, CONVEYOR_JOB_FAILED)
      << "reported after the change: out of attempts";
  EXPECT_EQ(rescued[1].id, more);
  EXPECT_EQ(rescued[1].queue, "b");
  EXPECT_STATE(rescued[1].state, CONVEYOR_JOB_AVAILABLE) << "reported after the change";
  for (const JobCopy& j : rescued) {
    EXPECT_EQ(j.lease_token, 0) << "job " << j.id << ": reported with its old lease";
    EXPECT_STATE(h->job(j.id, kT0 + kLease + 1).state, j.state)
        << "job " << j.id << ": get_job disagrees with what the rescue reported";
  }
  EXPECT_STATE(h->job(live, kT0 + kLease + 1).state, CONVEYOR_JOB_RUNNING);
}

TEST_F(RescueExpiredV2, HonoursMaxJobsAndChangesWhatRescueExpiredWould) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, rescue_expired_v2);
  h->add_all({JobSpec{}, JobSpec{}, JobSpec{}});
  h->claim_jobs("default", 3, kT0);
  const int64_t after = kT0 + 2 * kLease;
  std::vector<JobCopy> first, second, third;
  require_ok(h->rescue_expired_v2(after, 2, &first));
  EXPECT_EQ(first.size(), 2u) << "max_jobs = 2";
  require_ok(h->rescue_expired_v2(after, 2, &second));
  EXPECT_EQ(second.size(), 1u) << "the one left";
  require_ok(h->rescue_expired_v2(after, 2, &third));
  EXPECT_TRUE(third.empty()) << "nothing expired is left: nothing reported";
  EXPECT_EQ(h->rescue(after, 10), 0u) << "nothing is left for rescue_expired either";
  std::optional<StatsCopy> s = h->stats_of("default", after);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->pending, 3);
  EXPECT_EQ(s->running, 0);
}

// ---- oldest_pending_run_at_us ----

class OldestPending : public ConformanceTest {
 protected:
  // The queue's report from queue_stats, and from job_counts when the plugin
  // has it: both must fill the field the same way.
  std::vector<StatsCopy> reports_of(Handle& h, const std::string& queue, int64_t now_us) {
    std::vector<StatsCopy> out;
    if (std::optional<StatsCopy> s = h.stats_of(queue, now_us)) out.push_back(*s);
    if (h.has_slot(host::StorageSlot::kJobCounts))
      for (const StatsCopy& c : h.counts(now_us))
        if (c.queue == queue) out.push_back(c);
    return out;
  }
};

TEST_F(OldestPending, IsTheLeastRunAtOfTheReadyJobs) {
  auto h = open();
  if (info().abi_minor < 1) GTEST_SKIP() << "needs ABI 1.1 (conveyor_queue_stats grew)";
  // The older job has the lower priority, so the claim takes the younger one
  // first: the oldest pending is by run_at, not claim order.
  const int64_t older = h->add(JobSpec{.priority = 5, .run_at_us = kT0 + 2});
  h->add(JobSpec{.priority = 0, .run_at_us = kT0 + 5});
  h->add(JobSpec{.run_at_us = kT0 + 3600 * kSecond});  // scheduled: not ready
  h->add(JobSpec{.queue = "later", .run_at_us = kT0 + 3600 * kSecond});
  const int64_t now = kT0 + 10;
  std::vector<StatsCopy> at = reports_of(*h, "default", now);
  ASSERT_FALSE(at.empty());
  for (const StatsCopy& s : at) {
    EXPECT_TRUE(s.reports_oldest_pending)
        << "an ABI 1.1 plugin's struct_size (" << s.struct_size
        << ") must cover oldest_pending_run_at_us (struct_size = sizeof as built)";
    EXPECT_EQ(s.oldest_pending_run_at, kT0 + 2) << "the ready job that became ready first";
  }
  for (const StatsCopy& s : reports_of(*h, "later", now))
    EXPECT_EQ(s.oldest_pending_run_at, 0) << "only a scheduled job: nothing pending";

  EXPECT_NE(h->claim_one("default", now).id, older) << "priority first";
  for (const StatsCopy& s : reports_of(*h, "default", now))
    EXPECT_EQ(s.oldest_pending_run_at, kT0 + 2) << "the older job is still pending";
  EXPECT_EQ(h->claim_one("default", now).id, older);
  for (const StatsCopy& s : reports_of(*h, "default", now))
    EXPECT_EQ(s.oldest_pending_run_at, 0) << "running jobs are not pending";
  // Time passes: the scheduled job becomes ready and is now the oldest pending.
  for (const StatsCopy& s : reports_of(*h, "default", kT0 + 7200 * kSecond))
    EXPECT_EQ(s.oldest_pending_run_at, kT0 + 3600 * kSecond) << "ready as of now_us";
}

TEST_F(OldestPending, PausedQueuesStillReportTheirWaitingJobs) {
  auto h = open();
  if (info().abi_minor < 1) GTEST_SKIP() << "needs ABI 1.1 (conveyor_queue_stats grew)";
  h->add(JobSpec{.run_at_us = kT0 + 4});
  h->pause("default", true, kT0);
  for (const StatsCopy& s : reports_of(*h, "default", kT0 + 10))
    EXPECT_EQ(s.oldest_pending_run_at, kT0 + 4) << "a paused queue's jobs still wait";
}

}  // namespace
}  // namespace conveyor::conformance
