// ABI 1.6: a job's own timeout and when its latest attempt started
// (storage_plugin.h "version 1.6", conveyor_job.started_at_us and
// timeout_ms). enqueue_v5 stores a timeout with each job and every call that
// reports jobs reports it; every claiming call sets started_at to its now_us,
// and nothing else changes it. The timeout behaviours run on a plugin that
// fills enqueue_v5; the started_at ones on any plugin whose conveyor_job
// covers the 1.6 fields (struct_size), since the host reads them then.
#include "fixture.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace conveyor::conformance {
namespace {

class JobTimeouts : public ConformanceTest {};
class StartedAt : public ConformanceTest {};

constexpr size_t kJob16Size = offsetof(conveyor_job, timeout_ms) + sizeof(int64_t);

// Skips unless the plugin's conveyor_job covers started_at_us and timeout_ms.
#define REQUIRE_JOB_1_6(job)                                                            \
  do {                                                                                  \
    if ((job).struct_size < kJob16Size)                                                 \
      GTEST_SKIP() << "the plugin's conveyor_job is " << (job).struct_size              \
                   << " bytes: it does not cover the ABI 1.6 fields started_at_us and " \
                      "timeout_ms";                                                     \
  } while (0)

const char* const kTimeoutRule =
    " (storage_plugin.h enqueue_v5: the timeout is \"reported in conveyor_job.timeout_ms by "
    "every call that reports jobs\")";
const char* const kStartedRule =
    " (storage_plugin.h conveyor_job.started_at_us: \"the now_us of the claim that moved it to "
    "RUNNING\", \"0 before its first claim\", kept \"by every other call\")";

// ---- enqueue_v5 and the timeout in every report ----

TEST_F(JobTimeouts, TimeoutsRoundTripThroughEveryReportingCall) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v5);
  // One job per timeout, claimed in this order (priority), one kind and key each.
  const std::vector<int64_t> timeouts = {1, 0, 30'000, CONVEYOR_JOB_TIMEOUT_MAX_MS, 86'400'000};
  std::vector<JobSpec> specs;
  for (size_t i = 0; i < timeouts.size(); ++i)
    specs.push_back(JobSpec{.queue = "timeouts",
                            .kind = "kind" + std::to_string(i),
                            .priority = static_cast<int32_t>(i),
                            .key = "k" + std::to_string(i),
                            .timeout_ms = timeouts[i]});
  const std::vector<int64_t> ids = h->add_timed(specs);
  ASSERT_EQ(ids.size(), timeouts.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const JobCopy j = h->job(ids[i], kT0);
    EXPECT_EQ(j.timeout_ms, timeouts[i]) << "get_job" << kTimeoutRule;
    EXPECT_EQ(j.key, specs[i].key) << "enqueue_v5 keeps the key (\"everything else as "
                                      "enqueue_v4\")";
  }
  if (h->has_slot(host::StorageSlot::kListJobs)) {
    std::vector<JobCopy> listed = h->list("timeouts", {}, "", 0, 100, kT0);
    ASSERT_EQ(listed.size(), ids.size());
    for (size_t i = 0; i < listed.size(); ++i)
      EXPECT_EQ(listed[i].timeout_ms, timeouts[i]) << "list_jobs" << kTimeoutRule;
  }
  EXPECT_EQ(h->claim_one("timeouts", kT0).timeout_ms, timeouts[0]) << "claim" << kTimeoutRule;
  size_t claimed = 1;
  if (h->has_slot(host::StorageSlot::kClaimKinds)) {
    std::vector<JobCopy> got = h->claim_kinds_jobs("timeouts", {"kind1"}, 1, kT0);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].timeout_ms, timeouts[1]) << "claim_kinds" << kTimeoutRule;
    claimed = 2;
  }
  if (h->has_slot(host::StorageSlot::kClaimKeys)) {
    std::vector<JobCopy> got =
        h->claim_keys_jobs("timeouts", {}, {KeyClaim{specs[claimed].key, 1}}, kT0);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].timeout_ms, timeouts[claimed]) << "claim_keys" << kTimeoutRule;
    ++claimed;
  }
  const int64_t after_expiry = kT0 + kLease + 1;
  if (h->has_slot(host::StorageSlot::kRescueExpiredV2)) {
    std::vector<JobCopy> rescued;
    require_ok(h->rescue_expired_v2(after_expiry, 100, &rescued));
    EXPECT_EQ(rescued.size(), claimed);
    for (const JobCopy& j : rescued) {
      const auto at = std::find(ids.begin(), ids.end(), j.id) - ids.begin();
      ASSERT_LT(static_cast<size_t>(at), ids.size());
      EXPECT_EQ(j.timeout_ms, timeouts[at]) << "rescue_expired_v2" << kTimeoutRule;
    }
  } else {
    EXPECT_EQ(h->rescue(after_expiry, 100), claimed);
  }
  // A final job keeps its timeout.
  std::vector<JobCopy> rest = h->claim_jobs("timeouts", 100, after_expiry);
  ASSERT_EQ(rest.size(), ids.size());
  std::vector<conveyor_lease> leases;
  for (const JobCopy& j : rest) leases.push_back(j.lease());
  h->complete_all(leases, after_expiry + 1);
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(h->job(ids[i], after_expiry + 2).timeout_ms, timeouts[i])
        << "get_job of a COMPLETED job" << kTimeoutRule;
}

TEST_F(JobTimeouts, TimeoutOutOfRangeIsInvalidAndEnqueuesNothing) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v5);
  for (const int64_t bad : {int64_t{-1}, CONVEYOR_JOB_TIMEOUT_MAX_MS + 1, INT64_MIN}) {
    const Status s = h->enqueue_v5(
        {JobSpec{.queue = "tbad", .timeout_ms = 5}, JobSpec{.queue = "tbad", .timeout_ms = bad}},
        kT0, nullptr);
    EXPECT_EQ(s.code, CONVEYOR_E_INVALID)
        << "timeout_ms " << bad << ": " << s
        << " (storage_plugin.h enqueue_v5: \"a timeout_ms below 0 or above "
           "CONVEYOR_JOB_TIMEOUT_MAX_MS\" is CONVEYOR_E_INVALID)";
  }
  const std::optional<StatsCopy> stats = h->stats_of("tbad", kT0);
  if (stats) {
    EXPECT_EQ(stats->pending + stats->scheduled, 0)
        << "a refused batch enqueued part of itself (\"nothing enqueued\")";
  }
}

TEST_F(JobTimeouts, OtherEnqueueSlotsStoreTimeoutZero) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, enqueue_v5);
  const int64_t plain = h->add(JobSpec{.queue = "tzero"});
  const JobCopy j = h->job(plain, kT0);
  REQUIRE_JOB_1_6(j);
  EXPECT_EQ(j.timeout_ms, 0) << "storage_plugin.h enqueue_v5: \"Jobs enqueued by any other "
                                "enqueue slot have timeout_ms 0\"";
  if (h->has_slot(host::StorageSlot::kEnqueueV4)) {
    const std::vector<int64_t> keyed = h->add_keyed({JobSpec{.queue = "tzero", .key = "a"}});
    EXPECT_EQ(h->job(keyed.at(0), kT0).timeout_ms, 0) << "enqueue_v4";
  }
}

// ---- started_at ----

TEST_F(StartedAt, ZeroBeforeTheFirstClaim) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.queue = "started"});
  const JobCopy j = h->job(id, kT0);
  REQUIRE_JOB_1_6(j);
  EXPECT_EQ(j.started_at, 0) << "an AVAILABLE job never claimed" << kStartedRule;
  if (h->has_slot(host::StorageSlot::kListJobs)) {
    std::vector<JobCopy> listed = h->list("started", {}, "", 0, 10, kT0);
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0].started_at, 0) << "list_jobs" << kStartedRule;
  }
}

TEST_F(StartedAt, EveryClaimingCallSetsItToItsNow) {
  auto h = open();
  const std::vector<int64_t> ids = h->add_all({JobSpec{.queue = "started", .priority = 0},
                                               JobSpec{.queue = "started", .priority = 1},
                                               JobSpec{.queue = "started", .priority = 2}});
  REQUIRE_JOB_1_6(h->job(ids[0], kT0));
  const int64_t t1 = kT0 + 1'000, t2 = kT0 + 2'000, t3 = kT0 + 3'000;
  const JobCopy c = h->claim_one("started", t1);
  EXPECT_EQ(c.id, ids[0]);
  EXPECT_EQ(c.started_at, t1) << "claim's report" << kStartedRule;
  EXPECT_EQ(h->job(ids[0], t1 + 1).started_at, t1) << "get_job of the claimed job" << kStartedRule;
  if (h->has_slot(host::StorageSlot::kClaimKinds)) {
    std::vector<JobCopy> got = h->claim_kinds_jobs("started", {"conformance.job"}, 1, t2);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].started_at, t2) << "claim_kinds' report" << kStartedRule;
    EXPECT_EQ(h->job(got[0].id, t2 + 1).started_at, t2) << "get_job after claim_kinds";
  }
  if (h->has_slot(host::StorageSlot::kClaimKeys)) {
    std::vector<JobCopy> got = h->claim_keys_jobs("started", {}, {KeyClaim{"", 1}}, t3);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].started_at, t3) << "claim_keys' report" << kStartedRule;
    EXPECT_EQ(h->job(got[0].id, t3 + 1).started_at, t3) << "get_job after claim_keys";
  }
  if (h->has_slot(host::StorageSlot::kListJobs)) {
    for (const JobCopy& j : h->list("started", {}, "", 0, 10, t3 + 1)) {
      if (j.state == CONVEYOR_JOB_RUNNING) {
        EXPECT_GE(j.started_at, t1) << "list_jobs" << kStartedRule;
      }
    }
  }
}

TEST_F(StartedAt, KeptThroughCompleteFailAndRelease) {
  auto h = open();
  const std::vector<int64_t> ids = h->add_all(
      {JobSpec{.queue = "kept", .priority = 0}, JobSpec{.queue = "kept", .priority = 1},
       JobSpec{.queue = "kept", .priority = 2}, JobSpec{.queue = "kept", .priority = 3}});
  REQUIRE_JOB_1_6(h->job(ids[0], kT0));
  const int64_t t1 = kT0 + 5'000;
  std::vector<JobCopy> running = h->claim_jobs("kept", 4, t1);
  ASSERT_EQ(running.size(), 4u);
  std::sort(running.begin(), running.end(),
            [](const JobCopy& a, const JobCopy& b) { return a.priority < b.priority; });
  const int64_t t2 = t1 + 7'000;
  // Completed.
  h->complete_one(running[0].lease(), t2);
  const JobCopy done = h->job(ids[0], t2 + 1);
  EXPECT_EQ(done.state, CONVEYOR_JOB_COMPLETED);
  EXPECT_EQ(done.started_at, t1) << "a COMPLETED job shows when its last attempt started"
                                 << kStartedRule;
  EXPECT_EQ(done.finalized_at, t2);
  // Failed for good.
  require_ok(h->fail(running[1].lease(), "boom", -1, t2));
  const JobCopy failed = h->job(ids[1], t2 + 1);
  EXPECT_EQ(failed.state, CONVEYOR_JOB_FAILED);
  EXPECT_EQ(failed.started_at, t1) << "a FAILED job" << kStartedRule;
  // Failed with a retry later: waiting, it still shows the attempt that failed.
  const int64_t retry_at = t2 + 60 * kSecond;
  require_ok(h->fail(running[2].lease(), "again", retry_at, t2));
  const JobCopy waiting = h->job(ids[2], t2 + 1);
  EXPECT_EQ(waiting.state, CONVEYOR_JOB_SCHEDULED);
  EXPECT_EQ(waiting.started_at, t1) << "a job waiting for its retry" << kStartedRule;
  // Released: not spent, but the attempt did start.
  std::vector<conveyor_status> results;
  require_ok(h->release({running[3].lease()}, t2, &results));
  ASSERT_EQ(results, std::vector<conveyor_status>{CONVEYOR_OK});
  EXPECT_EQ(h->job(ids[3], t2 + 1).started_at, t1) << "a released job" << kStartedRule;
  // The next claim of the retried job moves it on.
  const JobCopy again = h->claim_one("kept", retry_at);
  const int64_t first_again = again.id;
  EXPECT_EQ(again.started_at, retry_at) << "a second claim" << kStartedRule;
  EXPECT_EQ(h->job(first_again, retry_at).started_at, retry_at);
}

TEST_F(StartedAt, KeptByRescueOfAnExpiredLease) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.queue = "rescued", .max_attempts = 1});
  REQUIRE_JOB_1_6(h->job(id, kT0));
  const int64_t t1 = kT0 + 9'000;
  const JobCopy c = h->claim_one("rescued", t1);
  ASSERT_EQ(c.id, id);
  const int64_t after_expiry = t1 + kLease + 1;
  EXPECT_EQ(h->rescue(after_expiry, 10), 1u);
  const JobCopy j = h->job(id, after_expiry + 1);
  EXPECT_EQ(j.state, CONVEYOR_JOB_FAILED) << "its only attempt expired";
  EXPECT_EQ(j.started_at, t1) << "a job failed by rescue_expired" << kStartedRule;
}

}  // namespace
}  // namespace conveyor::conformance
