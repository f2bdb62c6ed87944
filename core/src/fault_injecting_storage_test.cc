// FaultInjectingStorage over the real in-memory plugin: each fault does what
// it says to the inner store, and nothing more.
#include "testing/fault_injecting_storage.hpp"

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>

namespace conveyor::testing {
namespace {

constexpr int64_t kNow = 1'700'000'000'000'000;

class FaultInjectingStorageTest : public ::testing::Test {
 protected:
  std::vector<int64_t> enqueue(int n) {
    std::vector<NewJob> jobs(n);
    for (auto& j : jobs) {
      j.queue = "q";
      j.kind = "noop";
    }
    return storage_.inner().enqueue(jobs, kNow);
  }
  std::vector<Job> claim(uint32_t n) {
    return storage_.inner().claim("q", n, 7, kNow, kNow + 30'000'000);
  }
  JobState state(int64_t id) { return storage_.inner().get_job(id, kNow).value().state; }

  FaultInjectingStorage storage_{open_memory_storage()};
};

TEST_F(FaultInjectingStorageTest, FailNextFailsThatManyCallsWithoutReachingTheInnerStorage) {
  storage_.fail_next(StorageOp::kEnqueue, 2);
  NewJob job{"q", "noop", "", 0, 25, 0};
  for (int i = 0; i < 2; ++i) {
    try {
      storage_.enqueue({&job, 1}, kNow);
      FAIL() << "call " << i << " was not failed";
    } catch (const StorageError& e) {
      EXPECT_TRUE(e.transient());
    }
  }
  EXPECT_TRUE(storage_.inner().queue_stats(kNow).empty());  // nothing reached it
  EXPECT_EQ(storage_.enqueue({&job, 1}, kNow).size(), 1u);
  EXPECT_EQ(storage_.inner().queue_stats(kNow).at(0).pending, 1);
  EXPECT_EQ(storage_.calls(StorageOp::kEnqueue), 3u);
  EXPECT_EQ(storage_.faults(StorageOp::kEnqueue), 2u);
  EXPECT_EQ(storage_.calls(StorageOp::kClaim), 0u);
}

// swap_shared_state (ABI 1.2) is counted and faulted like the others; the
// in-memory plugin has no such slot, so what reaches it is refused by name.
TEST_F(FaultInjectingStorageTest, SwapSharedStateIsFaultedThenForwarded) {
  EXPECT_STREQ(to_string(StorageOp::kSwapSharedState), "swap_shared_state");
  storage_.fail_next(StorageOp::kSwapSharedState, 1, CONVEYOR_E_UNAVAILABLE);
  try {
    storage_.swap_shared_state("ratelimit.enabled", -1, 0);
    FAIL() << "the swap was not failed";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), CONVEYOR_E_UNAVAILABLE) << e.what();
  }
  // Forwarded: a record never written reads as (0, 0).
  const Storage::SharedRecord r = storage_.swap_shared_state("ratelimit.enabled", -1, 0);
  EXPECT_EQ(r.version, 0);
  EXPECT_EQ(r.value, 0);
  EXPECT_FALSE(r.applied);
  EXPECT_EQ(storage_.calls(StorageOp::kSwapSharedState), 2u);
  EXPECT_EQ(storage_.faults(StorageOp::kSwapSharedState), 1u);
}

TEST_F(FaultInjectingStorageTest, FailNextCanUseANonTransientStatus) {
  storage_.fail_next(StorageOp::kClaim, 1, CONVEYOR_E_INTERNAL);
  try {
    storage_.claim("q", 1, 7, kNow, kNow + 1);
    FAIL() << "claim was not failed";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), CONVEYOR_E_INTERNAL);
    EXPECT_FALSE(e.transient());
  }
  EXPECT_TRUE(storage_.claim("q", 1, 7, kNow, kNow + 1).empty());
}

TEST_F(FaultInjectingStorageTest, DroppedReplyIsAppliedThenReportedUnavailable) {
  enqueue(1);
  auto jobs = claim(1);
  ASSERT_EQ(jobs.size(), 1u);
  storage_.drop_reply_next(StorageOp::kComplete);
  const conveyor_lease lease = lease_of(jobs[0]);
  try {
    storage_.complete({&lease, 1}, kNow);
    FAIL() << "the reply was not dropped";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), CONVEYOR_E_UNAVAILABLE);
  }
  EXPECT_EQ(state(jobs[0].id), JobState::kCompleted);  // committed
  // A retry finds the lease gone, as a real store would answer.
  EXPECT_EQ(storage_.complete({&lease, 1}, kNow),
            std::vector<conveyor_status>{CONVEYOR_E_LEASE_LOST});
}

TEST_F(FaultInjectingStorageTest, LostLeasesAreRefusedAndNeverReachTheInnerStorage) {
  enqueue(3);
  auto jobs = claim(3);
  ASSERT_EQ(jobs.size(), 3u);
  storage_.lose_lease(lease_of(jobs[1]));
  std::vector<conveyor_lease> leases{lease_of(jobs[0]), lease_of(jobs[1]), lease_of(jobs[2])};
  EXPECT_EQ(storage_.extend_leases(leases, kNow + 60'000'000),
            (std::vector<conveyor_status>{CONVEYOR_OK, CONVEYOR_E_LEASE_LOST, CONVEYOR_OK}));
  EXPECT_EQ(storage_.complete(leases, kNow),
            (std::vector<conveyor_status>{CONVEYOR_OK, CONVEYOR_E_LEASE_LOST, CONVEYOR_OK}));
  EXPECT_EQ(state(jobs[0].id), JobState::kCompleted);
  EXPECT_EQ(state(jobs[1].id), JobState::kRunning);  // untouched
  EXPECT_EQ(state(jobs[2].id), JobState::kCompleted);
  // The same job under another lease token is not lost.
  EXPECT_EQ(storage_.fail(lease_of(jobs[1]), "boom", -1, kNow), CONVEYOR_E_LEASE_LOST);
  storage_.lose_all_leases(true);
  EXPECT_EQ(storage_.release(leases, kNow), std::vector<conveyor_status>(3, CONVEYOR_E_LEASE_LOST));
  storage_.clear_faults();
  EXPECT_EQ(storage_.fail(lease_of(jobs[1]), "boom", -1, kNow), CONVEYOR_OK);
  EXPECT_EQ(state(jobs[1].id), JobState::kFailed);
}

TEST_F(FaultInjectingStorageTest, HookRunsBeforeTheCallAndCanHoldIt) {
  enqueue(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  storage_.set_hook(StorageOp::kClaim, [released] { released.wait(); });
  auto claimed = std::async(std::launch::async,
                            [&] { return storage_.claim("q", 1, 7, kNow, kNow + 30'000'000); });
  while (storage_.calls(StorageOp::kClaim) == 0) std::this_thread::yield();
  // Held in the hook: the claim has not reached the store.
  EXPECT_EQ(claimed.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  EXPECT_EQ(storage_.inner().queue_stats(kNow).at(0).running, 0);
  release.set_value();
  EXPECT_EQ(claimed.get().size(), 1u);
  EXPECT_EQ(storage_.inner().queue_stats(kNow).at(0).running, 1);
}

TEST_F(FaultInjectingStorageTest, ClaimHookSeesTheQueueOfEveryClaimAndClearFaultsRemovesIt) {
  enqueue(2);
  std::vector<std::string> seen;
  storage_.set_claim_hook([&](std::string_view queue) {
    seen.emplace_back(queue);
    // Before the call: nothing of this claim has reached the store yet.
    EXPECT_EQ(storage_.inner().queue_stats(kNow).at(0).running,
              static_cast<int64_t>(seen.size()) - 1);
  });
  EXPECT_EQ(storage_.claim("q", 1, 7, kNow, kNow + 30'000'000).size(), 1u);
  const std::vector<std::string> kinds = {"noop"};
  EXPECT_EQ(storage_.claim_kinds("q", kinds, 1, 8, kNow, kNow + 30'000'000).size(), 1u);
  EXPECT_EQ(storage_.claim("other", 1, 9, kNow, kNow + 30'000'000).size(), 0u);
  EXPECT_EQ(seen, (std::vector<std::string>{"q", "q", "other"}));
  storage_.clear_faults();
  storage_.claim("q", 1, 10, kNow, kNow + 30'000'000);
  EXPECT_EQ(seen.size(), 3u);
}

}  // namespace
}  // namespace conveyor::testing
