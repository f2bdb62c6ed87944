// Leases: heartbeat (extend_leases), give-back (release), rescue of expired
// leases, and the guard that keeps a stale worker from touching a job that
// was claimed again.
#include "fixture.hpp"

namespace conveyor::conformance {
namespace {

class ExtendLeases : public ConformanceTest {};
class Release : public ConformanceTest {};
class Rescue : public ConformanceTest {};
class LeaseGuard : public ConformanceTest {};

TEST_F(ExtendLeases, MovesTheExpiry) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);  // expires at kT0 + kLease
  const int64_t later = kT0 + 10 * kLease;
  std::vector<conveyor_status> r;
  Status s = h->extend_leases({running.lease()}, later, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_STATUS(r.at(0), CONVEYOR_OK);
  JobCopy j = h->job(id, kT0 + 1);
  EXPECT_EQ(j.lease_expires, later);
  EXPECT_EQ(j.lease_token, running.lease_token) << "extending must keep the token";
  EXPECT_STATE(j.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(h->rescue(kT0 + 2 * kLease, 100), 0u)
      << "a lease extended past now_us was rescued as expired";
}

TEST_F(ExtendLeases, ReportsEachLease) {
  auto h = open();
  h->add_all(std::vector<JobSpec>(2));
  std::vector<JobCopy> running = h->claim_jobs("default", 2, kT0);
  ASSERT_EQ(running.size(), 2u);
  std::vector<conveyor_status> r;
  Status s = h->extend_leases(
      {running[0].lease(), conveyor_lease{running[1].id, running[1].lease_token + 1}},
      kT0 + 5 * kLease, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_STATUS(r.at(0), CONVEYOR_OK);
  EXPECT_STATUS(r.at(1), CONVEYOR_E_LEASE_LOST);
  EXPECT_EQ(h->job(running[1].id, kT0).lease_expires, running[1].lease_expires)
      << "a heartbeat under the wrong token moved the expiry";
}

TEST_F(Release, ReturnsTheJobWithTheAttemptRestored) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.run_at_us = kT0 - kSecond});
  JobCopy running = h->claim_one("default", kT0);
  ASSERT_EQ(running.attempt, 1);
  const int64_t released_at = kT0 + 5 * kSecond;
  std::vector<conveyor_status> r;
  Status s = h->release({running.lease()}, released_at, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_STATUS(r.at(0), CONVEYOR_OK);
  JobCopy j = h->job(id, released_at);
  EXPECT_STATE(j.state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(j.attempt, 0) << "storage_plugin.h release: \"attempt - 1, so the attempt is not "
                             "spent\"";
  EXPECT_EQ(j.run_at, released_at) << "storage_plugin.h release: \"AVAILABLE at now_us\"";
  EXPECT_EQ(j.lease_token, 0);
  JobCopy again = h->claim_one("default", released_at);
  EXPECT_EQ(again.id, id);
  EXPECT_EQ(again.attempt, 1) << "the released attempt was counted";
}

TEST_F(Release, WrongTokenIsLeaseLost) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  std::vector<conveyor_status> r;
  Status s = h->release({conveyor_lease{id, running.lease_token + 1}}, kT0 + 1, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_STATUS(r.at(0), CONVEYOR_E_LEASE_LOST);
  JobCopy j = h->job(id, kT0 + 1);
  EXPECT_STATE(j.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(j.attempt, 1) << "a release under the wrong token gave the attempt back";
}

TEST_F(Rescue, RescuesOnlyExpiredLeases) {
  auto h = open();
  const int64_t early = h->add(JobSpec{.kind = "early"});
  const int64_t late = h->add(JobSpec{.kind = "late"});
  std::vector<JobCopy> a, b;
  ASSERT_TRUE(h->claim("default", 1, next_lease_token(), kT0, kT0 + 10 * kSecond, &a).ok());
  ASSERT_TRUE(h->claim("default", 1, next_lease_token(), kT0, kT0 + 20 * kSecond, &b).ok());
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(h->rescue(kT0 + 10 * kSecond, 100), 0u)
      << "a lease expiring exactly at now_us was rescued (storage_plugin.h rescue_expired: "
         "\"lease_expires_us < now_us\")";
  EXPECT_EQ(h->rescue(kT0 + 10 * kSecond + 1, 100), 1u);
  const int64_t rescued_at = kT0 + 10 * kSecond + 1;
  JobCopy e = h->job(early, rescued_at);
  EXPECT_STATE(e.state, CONVEYOR_JOB_AVAILABLE);
  // Due at once; a plugin may keep the job's run_at (its place in the queue).
  EXPECT_LE(e.run_at, rescued_at)
      << "storage_plugin.h rescue_expired: \"AVAILABLE at once, run_at kept or now_us\"";
  EXPECT_EQ(e.lease_token, 0);
  EXPECT_FALSE(e.last_error.empty())
      << "storage_plugin.h rescue_expired: \"last_error says the lease expired\"";
  EXPECT_STATE(h->job(late, rescued_at).state, CONVEYOR_JOB_RUNNING)
      << "a lease that had not expired was rescued";
}

TEST_F(Rescue, RescuedJobRunsAgainAsTheNextAttempt) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.max_attempts = 3});
  h->claim_one("default", kT0);
  ASSERT_EQ(h->rescue(kT0 + kLease + 1, 10), 1u);
  JobCopy again = h->claim_one("default", kT0 + kLease + 1);
  EXPECT_EQ(again.id, id);
  EXPECT_EQ(again.attempt, 2) << "the expired attempt counts as spent";
}

TEST_F(Rescue, RespectsMaxJobs) {
  auto h = open();
  h->add_all(std::vector<JobSpec>(5));
  ASSERT_EQ(h->claim_jobs("default", 5, kT0).size(), 5u);
  const int64_t after = kT0 + kLease + 1;
  EXPECT_EQ(h->rescue(after, 2), 2u)
      << "storage_plugin.h rescue_expired: \"Rescues up to max_jobs\"";
  EXPECT_EQ(h->rescue(after, 2), 2u);
  EXPECT_EQ(h->rescue(after, 2), 1u);
  EXPECT_EQ(h->rescue(after, 2), 0u);
  EXPECT_EQ(h->claim_jobs("default", 10, after).size(), 5u) << "every rescued job is claimable";
}

TEST_F(Rescue, ExhaustedAttemptsBecomeFailed) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.max_attempts = 1});
  h->claim_one("default", kT0);
  const int64_t after = kT0 + kLease + 1;
  ASSERT_EQ(h->rescue(after, 10), 1u);
  JobCopy j = h->job(id, after);
  EXPECT_STATE(j.state, CONVEYOR_JOB_FAILED)
      << " (storage_plugin.h rescue_expired: with no attempts left "
      << "(attempt == max_attempts) the job becomes FAILED)";
  EXPECT_EQ(j.finalized_at, after);
  EXPECT_FALSE(j.last_error.empty());
  EXPECT_TRUE(h->claim_jobs("default", 10, after).empty());
}

TEST_F(Rescue, LeavesOtherStatesAlone) {
  auto h = open();
  const int64_t available = h->add(JobSpec{});
  const int64_t scheduled = h->add(JobSpec{.run_at_us = kT0 + 1000 * kSecond});
  const int64_t done = h->add(JobSpec{.queue = "done"});
  h->complete_one(h->claim_one("done", kT0).lease(), kT0 + 1);
  EXPECT_EQ(h->rescue(kT0 + 100 * kLease, 100), 0u) << "only RUNNING jobs have leases to rescue";
  EXPECT_STATE(h->job(available, kT0).state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_STATE(h->job(scheduled, kT0).state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_STATE(h->job(done, kT0).state, CONVEYOR_JOB_COMPLETED);
}

// The stale-worker story of storage_plugin.h: worker A's lease expires, the
// job is rescued and claimed by worker B; A must not be able to touch it.
struct StaleStory {
  int64_t id;
  JobCopy stale;  // worker A's claim
  JobCopy fresh;  // worker B's claim
  int64_t now;
};

StaleStory stale_story(Handle& h) {
  StaleStory s;
  s.id = h.add(JobSpec{.max_attempts = 5});
  s.stale = h.claim_one("default", kT0);
  s.now = kT0 + kLease + 1;
  if (h.rescue(s.now, 10) != 1) throw CallFailed("rescue_expired did not rescue the expired lease");
  s.fresh = h.claim_one("default", s.now);
  if (s.fresh.id != s.id) throw CallFailed("the rescued job was not claimed again");
  return s;
}

// B's claim must be exactly as B left it.
void expect_fresh_intact(Handle& h, const StaleStory& s) {
  JobCopy j = h.job(s.id, s.now);
  EXPECT_STATE(j.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(j.lease_token, s.fresh.lease_token);
  EXPECT_EQ(j.lease_expires, s.fresh.lease_expires);
  EXPECT_EQ(j.attempt, 2);
  // And B still owns it.
  EXPECT_STATUS(h.complete_all({s.fresh.lease()}, s.now + 1).at(0), CONVEYOR_OK)
      << "the new claimant could not complete its own lease";
}

constexpr const char* kGuard =
    " (storage_plugin.h: \"a worker whose lease expired and whose job was claimed again cannot "
    "complete, fail, extend or release the new claimant's lease\")";

TEST_F(LeaseGuard, StaleWorkerCannotComplete) {
  auto h = open();
  StaleStory s = stale_story(*h);
  std::vector<conveyor_status> r;
  ASSERT_TRUE(h->complete({s.stale.lease()}, s.now, &r).ok());
  EXPECT_STATUS(r.at(0), CONVEYOR_E_LEASE_LOST) << kGuard;
  expect_fresh_intact(*h, s);
}

TEST_F(LeaseGuard, StaleWorkerCannotFail) {
  auto h = open();
  StaleStory s = stale_story(*h);
  Status st = h->fail(s.stale.lease(), "stale", -1, s.now);
  EXPECT_STATUS(st.code, CONVEYOR_E_LEASE_LOST) << st << kGuard;
  expect_fresh_intact(*h, s);
}

TEST_F(LeaseGuard, StaleWorkerCannotExtend) {
  auto h = open();
  StaleStory s = stale_story(*h);
  std::vector<conveyor_status> r;
  ASSERT_TRUE(h->extend_leases({s.stale.lease()}, s.now + 100 * kLease, &r).ok());
  EXPECT_STATUS(r.at(0), CONVEYOR_E_LEASE_LOST) << kGuard;
  expect_fresh_intact(*h, s);
}

TEST_F(LeaseGuard, StaleWorkerCannotRelease) {
  auto h = open();
  StaleStory s = stale_story(*h);
  std::vector<conveyor_status> r;
  ASSERT_TRUE(h->release({s.stale.lease()}, s.now, &r).ok());
  EXPECT_STATUS(r.at(0), CONVEYOR_E_LEASE_LOST) << kGuard;
  expect_fresh_intact(*h, s);
}

TEST_F(LeaseGuard, ExpiredButUnrescuedLeaseStillCompletes) {
  // Expiry alone does not void a lease: only a rescue (or cancel) does. The
  // host relies on this when a slow job finishes just after its expiry.
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  std::vector<conveyor_status> r = h->complete_all({running.lease()}, kT0 + 10 * kLease);
  EXPECT_STATUS(r.at(0), CONVEYOR_OK)
      << " (storage_plugin.h: a mutation applies \"only when the job is "
      << "RUNNING under that very token\", which it still is)";
  EXPECT_STATE(h->job(id, kT0 + 10 * kLease).state, CONVEYOR_JOB_COMPLETED);
}

}  // namespace
}  // namespace conveyor::conformance
