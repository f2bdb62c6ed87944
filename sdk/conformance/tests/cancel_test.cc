// cancel: any non-final job; a running job's lease is voided.
#include "fixture.hpp"

namespace conveyor::conformance {
namespace {

class Cancel : public ConformanceTest {};

TEST_F(Cancel, AvailableJob) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  Status s = h->cancel(id, kT0 + kSecond);
  ASSERT_TRUE(s.ok()) << s;
  JobCopy j = h->job(id, kT0 + kSecond);
  EXPECT_STATE(j.state, CONVEYOR_JOB_CANCELLED);
  EXPECT_EQ(j.finalized_at, kT0 + kSecond) << "finalized_at_us must be cancel's now_us";
  EXPECT_TRUE(h->claim_jobs("default", 10, kT0 + kSecond).empty()) << "a CANCELLED job was claimed";
}

TEST_F(Cancel, ScheduledJob) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.run_at_us = kT0 + 60 * kSecond});
  ASSERT_TRUE(h->cancel(id, kT0).ok());
  EXPECT_STATE(h->job(id, kT0).state, CONVEYOR_JOB_CANCELLED);
  EXPECT_TRUE(h->claim_jobs("default", 10, kT0 + 120 * kSecond).empty())
      << "a cancelled scheduled job became claimable at its run_at";
}

TEST_F(Cancel, RunningJobVoidsItsLease) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  ASSERT_TRUE(h->cancel(id, kT0 + 1).ok());
  JobCopy j = h->job(id, kT0 + 1);
  EXPECT_STATE(j.state, CONVEYOR_JOB_CANCELLED);
  std::vector<conveyor_status> r = h->complete_all({running.lease()}, kT0 + 2);
  EXPECT_STATUS(r.at(0), CONVEYOR_E_LEASE_LOST)
      << " (storage_plugin.h cancel: \"a RUNNING job's lease is voided, "
      << "so its worker's completion returns LEASE_LOST\")";
  EXPECT_STATE(h->job(id, kT0 + 2).state, CONVEYOR_JOB_CANCELLED)
      << "the worker's completion overwrote the cancellation";
}

TEST_F(Cancel, RunningJobsWorkerCannotFailExtendOrReleaseIt) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  ASSERT_TRUE(h->cancel(id, kT0 + 1).ok());
  Status f = h->fail(running.lease(), "late", kT0 + 5, kT0 + 2);
  EXPECT_STATUS(f.code, CONVEYOR_E_LEASE_LOST) << f;
  std::vector<conveyor_status> r;
  ASSERT_TRUE(h->extend_leases({running.lease()}, kT0 + 10 * kLease, &r).ok());
  EXPECT_STATUS(r.at(0), CONVEYOR_E_LEASE_LOST) << "extend_leases of the cancelled job's lease";
  ASSERT_TRUE(h->release({running.lease()}, kT0 + 3, &r).ok());
  EXPECT_STATUS(r.at(0), CONVEYOR_E_LEASE_LOST) << "release of the cancelled job's lease";
  JobCopy j = h->job(id, kT0 + 3);
  EXPECT_STATE(j.state, CONVEYOR_JOB_CANCELLED);
  EXPECT_EQ(h->rescue(kT0 + 100 * kLease, 10), 0u) << "a cancelled job's lease was rescued";
}

TEST_F(Cancel, FinalJobIsNotFound) {
  auto h = open();
  const int64_t completed = h->add(JobSpec{});
  h->complete_one(h->claim_one("default", kT0).lease(), kT0 + 1);
  const int64_t failed = h->add(JobSpec{});
  ASSERT_TRUE(h->fail(h->claim_one("default", kT0).lease(), "x", -1, kT0 + 1).ok());
  const int64_t cancelled = h->add(JobSpec{});
  ASSERT_TRUE(h->cancel(cancelled, kT0 + 1).ok());
  for (int64_t id : {completed, failed, cancelled}) {
    JobCopy before = h->job(id, kT0 + 2);
    Status s = h->cancel(id, kT0 + 2);
    EXPECT_STATUS(s.code, CONVEYOR_E_NOT_FOUND)
        << "job in " << state_name(before.state) << ": " << s
        << " (storage_plugin.h cancel: \"CONVEYOR_E_NOT_FOUND when ... it is already COMPLETED, "
        << "FAILED or CANCELLED\")";
    JobCopy after = h->job(id, kT0 + 2);
    EXPECT_EQ(after.state, before.state) << "cancel changed a final job";
    EXPECT_EQ(after.finalized_at, before.finalized_at);
  }
}

TEST_F(Cancel, UnknownIdIsNotFound) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  Status s = h->cancel(id + 1000, kT0);
  EXPECT_STATUS(s.code, CONVEYOR_E_NOT_FOUND) << s;
  EXPECT_STATE(h->job(id, kT0).state, CONVEYOR_JOB_AVAILABLE);
}

}  // namespace
}  // namespace conveyor::conformance
