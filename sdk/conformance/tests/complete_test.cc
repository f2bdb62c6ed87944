// complete and fail: the end of an attempt, guarded by the lease.
#include "fixture.hpp"

namespace conveyor::conformance {
namespace {

class Complete : public ConformanceTest {};
class Fail : public ConformanceTest {};

TEST_F(Complete, MarksCompletedWithFinalizedAt) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  const int64_t done_at = kT0 + 3 * kSecond;
  h->complete_one(running.lease(), done_at);
  JobCopy j = h->job(id, done_at);
  EXPECT_STATE(j.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(j.finalized_at, done_at)
      << "finalized_at_us must be the now_us passed to complete (storage_plugin.h Time: use the "
         "host's now_us instead of a clock of its own)";
  EXPECT_EQ(j.attempt, 1);
  EXPECT_TRUE(h->claim_jobs("default", 10, done_at + kLease * 10).empty())
      << "a COMPLETED job was claimed again";
}

TEST_F(Complete, WrongTokenIsLeaseLostAndChangesNothing) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  std::vector<conveyor_status> r;
  Status s = h->complete({conveyor_lease{id, running.lease_token + 1}}, kT0 + 1, &r);
  ASSERT_TRUE(s.ok()) << s
                      << " (per-lease outcomes belong in results; storage_plugin.h: \"The "
                         "function's own status is an error only when nothing could be "
                         "applied\")";
  EXPECT_STATUS(r.at(0), CONVEYOR_E_LEASE_LOST);
  JobCopy j = h->job(id, kT0 + 1);
  EXPECT_STATE(j.state, CONVEYOR_JOB_RUNNING)
      << "a completion under the wrong token changed the job";
  EXPECT_EQ(j.lease_token, running.lease_token);
  EXPECT_EQ(j.lease_expires, running.lease_expires);
  EXPECT_EQ(j.attempt, 1);
}

TEST_F(Complete, BatchReportsEachLease) {
  auto h = open();
  std::vector<int64_t> ids = h->add_all(std::vector<JobSpec>(3));
  std::vector<JobCopy> running = h->claim_jobs("default", 3, kT0);
  ASSERT_EQ(running.size(), 3u);
  h->complete_one(running[2].lease(), kT0 + 1);  // already completed below
  std::vector<conveyor_lease> leases = {
      running[0].lease(),                                          // current: OK
      conveyor_lease{running[1].id, running[1].lease_token + 99},  // wrong token
      conveyor_lease{ids.back() + 1000, running[0].lease_token},   // no such job
      running[2].lease(),                                          // no longer RUNNING
  };
  std::vector<conveyor_status> r = h->complete_all(leases, kT0 + 2);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_STATUS(r[0], CONVEYOR_OK);
  EXPECT_STATUS(r[1], CONVEYOR_E_LEASE_LOST) << "the lease with a wrong token";
  EXPECT_STATUS(r[2], CONVEYOR_E_LEASE_LOST) << "the lease of a job that does not exist";
  EXPECT_STATUS(r[3], CONVEYOR_E_LEASE_LOST) << "the lease of a job already completed";
  EXPECT_STATE(h->job(running[0].id, kT0 + 2).state, CONVEYOR_JOB_COMPLETED);
  EXPECT_STATE(h->job(running[1].id, kT0 + 2).state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(h->job(running[2].id, kT0 + 2).finalized_at, kT0 + 1)
      << "completing a COMPLETED job again changed its finalized_at_us";
}

TEST_F(Complete, EmptyBatchIsANoOp) {
  auto h = open();
  conveyor_error err = poisoned_error();
  const conveyor_status code = table().complete(h->raw(), nullptr, 0, kT0, nullptr, &err);
  EXPECT_STATUS(code, CONVEYOR_OK) << ": " << err.message;
}

TEST_F(Fail, WithRetryAtSchedulesTheJobUntilThen) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.max_attempts = 5});
  JobCopy running = h->claim_one("default", kT0);
  const int64_t failed_at = kT0 + kSecond;
  const int64_t retry_at = kT0 + 60 * kSecond;
  Status s = h->fail(running.lease(), "boom: upstream said 503", retry_at, failed_at);
  ASSERT_TRUE(s.ok()) << s;
  JobCopy j = h->job(id, failed_at);
  EXPECT_STATE(j.state, CONVEYOR_JOB_SCHEDULED)
      << " (storage_plugin.h: \"fail(lease, retry_at >= 0) -> AVAILABLE "
      << "at retry_at (SCHEDULED until due)\")";
  EXPECT_EQ(j.run_at, retry_at);
  EXPECT_EQ(j.last_error, "boom: upstream said 503")
      << "storage_plugin.h fail: \"error_text is stored as last_error\"";
  EXPECT_EQ(j.attempt, 1) << "a failed attempt stays spent";
  EXPECT_EQ(j.finalized_at, 0);
  EXPECT_TRUE(h->claim_jobs("default", 10, retry_at - 1).empty())
      << "the job was claimable before its retry_at";
  JobCopy again = h->claim_one("default", retry_at);
  EXPECT_EQ(again.id, id);
  EXPECT_EQ(again.attempt, 2) << "the second claim is the second attempt";
  EXPECT_EQ(again.last_error, "boom: upstream said 503")
      << "last_error is kept while it runs again";
}

TEST_F(Fail, WithRetryAtInThePastIsAvailableAtOnce) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  ASSERT_TRUE(h->fail(running.lease(), "again", kT0, kT0 + kSecond).ok());
  EXPECT_STATE(h->job(id, kT0 + kSecond).state, CONVEYOR_JOB_AVAILABLE);
  EXPECT_EQ(h->claim_one("default", kT0 + kSecond).attempt, 2);
}

TEST_F(Fail, WithNegativeRetryAtIsFinal) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.max_attempts = 5});
  JobCopy running = h->claim_one("default", kT0);
  const int64_t failed_at = kT0 + 2 * kSecond;
  Status s = h->fail(running.lease(), "permanent: bad address", -1, failed_at);
  ASSERT_TRUE(s.ok()) << s;
  JobCopy j = h->job(id, failed_at);
  EXPECT_STATE(j.state, CONVEYOR_JOB_FAILED)
      << " (storage_plugin.h: \"fail(lease, retry_at < 0) -> FAILED\", "
      << "even with attempts left)";
  EXPECT_EQ(j.finalized_at, failed_at);
  EXPECT_EQ(j.last_error, "permanent: bad address");
  EXPECT_TRUE(h->claim_jobs("default", 10, failed_at + 1000 * kSecond).empty())
      << "a FAILED job was claimed again";
}

TEST_F(Fail, WrongTokenIsLeaseLostAndChangesNothing) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  Status s = h->fail(conveyor_lease{id, running.lease_token + 1}, "x", -1, kT0 + 1);
  EXPECT_STATUS(s.code, CONVEYOR_E_LEASE_LOST)
      << s << " (storage_plugin.h fail: \"CONVEYOR_E_LEASE_LOST when the lease is not current\")";
  JobCopy j = h->job(id, kT0 + 1);
  EXPECT_STATE(j.state, CONVEYOR_JOB_RUNNING);
  EXPECT_EQ(j.lease_token, running.lease_token);
  EXPECT_EQ(j.last_error, "") << "a rejected fail stored its error text";
}

TEST_F(Fail, ErrorTextRoundTripsExactly) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  const std::string text =
      "Fehler: Zeitüberschreitung — 超时 \"quoted\" 'single' \\ 100%\nline 2\t";
  ASSERT_TRUE(h->fail(running.lease(), text, kT0 + kSecond, kT0).ok());
  EXPECT_EQ(h->job(id, kT0).last_error, text);
}

TEST_F(Fail, EmptyErrorTextWithNullDataIsAccepted) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  JobCopy running = h->claim_one("default", kT0);
  conveyor_error err = poisoned_error();
  // conveyor_str: "data may be NULL only when len is 0".
  const conveyor_status code =
      table().fail(h->raw(), running.lease(), conveyor_str{nullptr, 0}, -1, kT0 + 1, &err);
  ASSERT_STATUS(code, CONVEYOR_OK) << ": " << err.message;
  JobCopy j = h->job(id, kT0 + 1);
  EXPECT_STATE(j.state, CONVEYOR_JOB_FAILED);
  EXPECT_EQ(j.last_error, "");
}

}  // namespace
}  // namespace conveyor::conformance
