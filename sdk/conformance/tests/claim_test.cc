// claim: readiness, order, batch size, what a claim records.
#include "fixture.hpp"

#include <algorithm>
#include <set>

namespace conveyor::conformance {
namespace {

class Claim : public ConformanceTest {};

TEST_F(Claim, OrdersByPriorityThenRunAtThenId) {
  auto h = open();
  // Enqueued in an order that is none of the three keys, one per call.
  const std::vector<JobSpec> specs = {
      {.kind = "a", .priority = 5, .run_at_us = kT0 - 3 * kSecond},
      {.kind = "b", .priority = -1, .run_at_us = kT0 - 1 * kSecond},
      {.kind = "c", .priority = 0, .run_at_us = kT0 - 1 * kSecond},
      {.kind = "d", .priority = 0, .run_at_us = kT0 - 2 * kSecond},
      {.kind = "e", .priority = 0, .run_at_us = kT0 - 1 * kSecond},
      {.kind = "f", .priority = -1, .run_at_us = kT0 - 2 * kSecond},
  };
  struct Key {
    int32_t priority;
    int64_t run_at;
    int64_t id;
    std::string kind;
  };
  std::vector<Key> expected;
  for (const JobSpec& s : specs) expected.push_back({s.priority, s.run_at_us, h->add(s), s.kind});
  std::sort(expected.begin(), expected.end(), [](const Key& a, const Key& b) {
    return std::tie(a.priority, a.run_at, a.id) < std::tie(b.priority, b.run_at, b.id);
  });
  std::string want, got;
  for (const Key& k : expected) want += k.kind;
  for (size_t i = 0; i < expected.size(); ++i) {
    std::vector<JobCopy> one = h->claim_jobs("default", 1, kT0);
    ASSERT_EQ(one.size(), 1u) << "claim " << i + 1 << " of " << expected.size() << " found nothing";
    got += one[0].kind;
  }
  EXPECT_EQ(got, want) << "claims took kinds in order " << got << ", expected " << want
                       << " (storage_plugin.h claim: \"in order of priority, run_at, id\"; lower "
                          "priority first)";
}

TEST_F(Claim, BatchTakesTheFirstJobsInOrder) {
  auto h = open();
  std::vector<int64_t> ids;
  for (int32_t p : {3, 1, 4, 1, 5, 9, 2, 6}) ids.push_back(h->add(JobSpec{.priority = p}));
  // Expected: the three with the lowest (priority, id): priority 1, 1, 2.
  const std::set<int64_t> want = {ids[1], ids[3], ids[6]};
  std::vector<JobCopy> batch = h->claim_jobs("default", 3, kT0);
  std::set<int64_t> got;
  for (const JobCopy& j : batch) got.insert(j.id);
  EXPECT_EQ(got, want) << "a batch of 3 must be the first 3 jobs in claim order";
}

TEST_F(Claim, RespectsMaxJobs) {
  auto h = open();
  h->add_all(std::vector<JobSpec>(10));
  EXPECT_EQ(h->claim_jobs("default", 4, kT0).size(), 4u)
      << "storage_plugin.h claim: \"Claims up to max_jobs\"";
  EXPECT_EQ(h->claim_jobs("default", 4, kT0).size(), 4u);
  EXPECT_EQ(h->claim_jobs("default", 4, kT0).size(), 2u) << "only two jobs were left";
  EXPECT_EQ(h->claim_jobs("default", 4, kT0).size(), 0u);
}

TEST_F(Claim, MaxJobsZeroClaimsNothing) {
  auto h = open();
  const int64_t id = h->add(JobSpec{});
  std::vector<JobCopy> jobs;
  Status s = h->claim("default", 0, next_lease_token(), kT0, kT0 + kLease, &jobs);
  EXPECT_TRUE(s.ok() || s.code == CONVEYOR_E_INVALID) << s;
  EXPECT_TRUE(jobs.empty()) << "claim with max_jobs 0 claimed " << jobs.size() << " job(s)";
  EXPECT_STATE(h->job(id, kT0).state, CONVEYOR_JOB_AVAILABLE);
}

TEST_F(Claim, EmptyOrUnknownQueueClaimsNothing) {
  auto h = open();
  h->add(JobSpec{.queue = "other"});
  std::vector<JobCopy> jobs;
  Status s = h->claim("nobody", 10, next_lease_token(), kT0, kT0 + kLease, &jobs);
  EXPECT_TRUE(s.ok()) << s << " (storage_plugin.h claim: \"0 is success: nothing ready\")";
  EXPECT_TRUE(jobs.empty());
}

TEST_F(Claim, TakesOnlyTheNamedQueue) {
  auto h = open();
  const int64_t mine = h->add(JobSpec{.queue = "mine", .priority = 10});
  h->add(JobSpec{.queue = "theirs", .priority = -10});
  std::vector<JobCopy> got = h->claim_jobs("mine", 10, kT0);
  ASSERT_EQ(got.size(), 1u) << "claim of queue 'mine' returned jobs of other queues";
  EXPECT_EQ(got[0].id, mine);
  EXPECT_EQ(got[0].queue, "mine");
}

TEST_F(Claim, ScheduledJobIsNotClaimableBeforeRunAt) {
  auto h = open();
  const int64_t run_at = kT0 + 10 * kSecond;
  const int64_t id = h->add(JobSpec{.run_at_us = run_at});
  EXPECT_TRUE(h->claim_jobs("default", 10, kT0).empty());
  EXPECT_TRUE(h->claim_jobs("default", 10, run_at - 1).empty())
      << "a job was claimed 1 microsecond before its run_at (storage_plugin.h claim: \"run_at "
         "<= now_us\"; conveyor_new_job: \"not claimable before this time\")";
  EXPECT_STATE(h->job(id, run_at - 1).state, CONVEYOR_JOB_SCHEDULED);
}

TEST_F(Claim, ScheduledJobIsClaimableAtRunAt) {
  auto h = open();
  const int64_t run_at = kT0 + 10 * kSecond;
  const int64_t id = h->add(JobSpec{.run_at_us = run_at});
  std::vector<JobCopy> got = h->claim_jobs("default", 10, run_at);
  ASSERT_EQ(got.size(), 1u) << "a job was not claimable at exactly its run_at (storage_plugin.h "
                               "claim: \"run_at <= now_us\")";
  EXPECT_EQ(got[0].id, id);
}

TEST_F(Claim, UsesTheHostsNowNotAClock) {
  auto h = open();
  // The wall clock is decades before kT0: a plugin that compares run_at with
  // its own clock instead of now_us finds this job not yet due.
  const int64_t id = h->add(JobSpec{.run_at_us = kT0});
  EXPECT_TRUE(h->claim_jobs("default", 1, kT0 - kSecond).empty())
      << "storage_plugin.h Time: \"Every function that compares times takes the host's now_us "
         "and uses it instead of a clock of its own\"";
  EXPECT_EQ(h->claim_one("default", kT0).id, id);
}

TEST_F(Claim, MarksRunningWithAttemptAndLease) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.kind = "work",
                                    .payload = "{\"x\":1}",
                                    .priority = 7,
                                    .max_attempts = 4,
                                    .run_at_us = kT0 - 5});
  const int64_t token = next_lease_token();
  const int64_t expires = kT0 + 42 * kSecond;
  std::vector<JobCopy> got;
  Status s = h->claim("default", 1, token, kT0, expires, &got);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(got.size(), 1u);
  for (const JobCopy& j : {got[0], h->job(id, kT0)}) {
    EXPECT_EQ(j.id, id);
    EXPECT_STATE(j.state, CONVEYOR_JOB_RUNNING);
    EXPECT_EQ(j.attempt, 1) << "storage_plugin.h claim: \"attempt + 1\"";
    EXPECT_EQ(j.lease_token, token) << "the lease token must be the one the host passed";
    EXPECT_EQ(j.lease_expires, expires);
    EXPECT_EQ(j.queue, "default");
    EXPECT_EQ(j.kind, "work");
    EXPECT_EQ(j.payload, "{\"x\":1}");
    EXPECT_EQ(j.priority, 7);
    EXPECT_EQ(j.max_attempts, 4);
    EXPECT_EQ(j.run_at, kT0 - 5);
    EXPECT_EQ(j.finalized_at, 0);
  }
}

TEST_F(Claim, RunningJobIsNotClaimedAgain) {
  auto h = open();
  h->add(JobSpec{});
  ASSERT_EQ(h->claim_jobs("default", 10, kT0).size(), 1u);
  EXPECT_TRUE(h->claim_jobs("default", 10, kT0 + kSecond).empty())
      << "a RUNNING job with a live lease was claimed a second time";
}

}  // namespace
}  // namespace conveyor::conformance
