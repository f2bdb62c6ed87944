// purge_finished: retention of final jobs.
#include "fixture.hpp"

namespace conveyor::conformance {
namespace {

class Purge : public ConformanceTest {};

TEST_F(Purge, DeletesOnlyFinalJobsFinalizedBeforeTheCutoff) {
  auto h = open();
  const int64_t cutoff = kT0 + 10 * kSecond;
  const int64_t completed = h->add(JobSpec{.queue = "c"});
  h->complete_one(h->claim_one("c", kT0).lease(), kT0 + 1 * kSecond);
  const int64_t failed = h->add(JobSpec{.queue = "f"});
  ASSERT_TRUE(h->fail(h->claim_one("f", kT0).lease(), "x", -1, kT0 + 2 * kSecond).ok());
  const int64_t cancelled = h->add(JobSpec{.queue = "x"});
  ASSERT_TRUE(h->cancel(cancelled, kT0 + 3 * kSecond).ok());
  const int64_t at_cutoff = h->add(JobSpec{.queue = "k"});
  h->complete_one(h->claim_one("k", kT0).lease(), cutoff);  // not "before" the cutoff
  const int64_t after_cutoff = h->add(JobSpec{.queue = "l"});
  h->complete_one(h->claim_one("l", kT0).lease(), cutoff + 1);
  const int64_t available = h->add(JobSpec{.queue = "a"});
  const int64_t scheduled = h->add(JobSpec{.queue = "s", .run_at_us = kT0 + 1000 * kSecond});
  const int64_t running = h->add(JobSpec{.queue = "r"});
  h->claim_one("r", kT0);

  EXPECT_EQ(h->purge(cutoff, 100), 3u)
      << "storage_plugin.h purge_finished: deletes COMPLETED, FAILED or CANCELLED jobs "
         "\"finalized before finalized_before_us\"";
  for (int64_t id : {completed, failed, cancelled}) {
    std::optional<JobCopy> j;
    Status s = h->get_job(id, cutoff, &j);
    EXPECT_STATUS(s.code, CONVEYOR_E_NOT_FOUND) << "purged job " << id << ": " << s;
  }
  EXPECT_STATE(h->job(at_cutoff, cutoff).state, CONVEYOR_JOB_COMPLETED)
      << "a job finalized exactly at the cutoff was purged (\"before\" is strict)";
  EXPECT_STATE(h->job(after_cutoff, cutoff).state, CONVEYOR_JOB_COMPLETED);
  EXPECT_STATE(h->job(available, cutoff).state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_STATE(h->job(scheduled, cutoff).state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_STATE(h->job(running, cutoff).state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(h->purge(cutoff, 100), 0u) << "nothing else is old enough";
  // The counts follow.
  EXPECT_EQ(h->stats_of("c", cutoff).value_or(StatsCopy{}).completed, 0);
}

TEST_F(Purge, RespectsMaxJobs) {
  auto h = open();
  h->add_all(std::vector<JobSpec>(5));
  for (const JobCopy& j : h->claim_jobs("default", 5, kT0)) h->complete_one(j.lease(), kT0 + 1);
  EXPECT_EQ(h->purge(kT0 + kSecond, 2), 2u)
      << "storage_plugin.h purge_finished: \"Deletes up to max_jobs\"";
  EXPECT_EQ(h->stats_of("default", kT0 + kSecond).value_or(StatsCopy{}).completed, 3);
  EXPECT_EQ(h->purge(kT0 + kSecond, 100), 3u);
  EXPECT_EQ(h->purge(kT0 + kSecond, 100), 0u);
}

TEST_F(Purge, NewIdsAfterAPurgeAreStillNew) {
  auto h = open();
  std::vector<int64_t> old_ids = h->add_all(std::vector<JobSpec>(3));
  for (const JobCopy& j : h->claim_jobs("default", 3, kT0)) h->complete_one(j.lease(), kT0 + 1);
  ASSERT_EQ(h->purge(kT0 + kSecond, 100), 3u);
  const int64_t fresh = h->add(JobSpec{});
  for (int64_t old : old_ids)
    EXPECT_GT(fresh, old) << "a purged job's id was handed out again (ids increase with every "
                             "enqueue; a user holding the old id would reach the new job)";
}

}  // namespace
}  // namespace conveyor::conformance
