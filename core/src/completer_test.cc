// The completer against the real in-memory plugin behind a
// FaultInjectingStorage: what reaches storage, what is counted, and that
// every outcome is settled exactly once whatever the storage does.
#include "completer.hpp"

#include "testing/fault_injecting_storage.hpp"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using testing::FaultInjectingStorage;
using testing::StorageOp;
using Clock = std::chrono::steady_clock;

class CompleterTest : public ::testing::Test {
 protected:
  // n jobs enqueued and claimed: their leases are live.
  std::vector<Job> claim(int n) {
    std::vector<NewJob> jobs(n);
    for (auto& j : jobs) {
      j.queue = queue_;
      j.kind = "noop";
    }
    const int64_t now = clock_.wall_now_us();
    storage_.inner().enqueue(jobs, now);
    return storage_.inner().claim(queue_, n, ++token_, now, now + 30'000'000);
  }
  Outcome success(const Job& job) {
    Outcome o;
    o.lease = lease_of(job);
    o.counters = &counters_;
    o.queue = &queue_;
    o.succeeded = true;
    return o;
  }
  Outcome failure(const Job& job, int64_t retry_at_us) {
    Outcome o = success(job);
    o.succeeded = false;
    o.retry_at_us = retry_at_us;
    o.error = "boom";
    return o;
  }
  JobState state(const Job& job) {
    return storage_.inner().get_job(job.id, clock_.wall_now_us()).value().state;
  }
  // Drains everything pushed so far on this thread, with storage's time.
  void drain(std::chrono::milliseconds within = 10s) {
    completer_.finish(Clock::now() + within);
    completer_.run(std::stop_token{});
  }
  // Each lease settled exactly once, and nothing else.
  void expect_settled_once(const std::vector<Job>& jobs) {
    std::lock_guard lock(mu_);
    EXPECT_EQ(settled_.size(), jobs.size());
    for (const Job& j : jobs)
      EXPECT_EQ(settled_[std::make_pair(j.id, j.lease_token)], 1) << "job " << j.id;
  }

  const std::string queue_ = "q";
  int64_t token_ = 0;
  ManualClock clock_;
  FaultInjectingStorage storage_{testing::open_memory_storage()};
  QueueCounters counters_;
  std::mutex mu_;
  std::map<std::pair<int64_t, int64_t>, int> settled_;  // mu_
  Completer completer_{storage_, clock_, [this](const conveyor_lease& l) {
                         std::lock_guard lock(mu_);
                         ++settled_[{l.job_id, l.lease_token}];
                       }};
};

TEST_F(CompleterTest, SuccessesAreRecordedInOneBatch) {
  auto jobs = claim(100);
  ASSERT_EQ(jobs.size(), 100u);
  for (const Job& j : jobs) completer_.push(success(j));
  drain();
  EXPECT_EQ(storage_.calls(StorageOp::kComplete), 1u);
  EXPECT_EQ(counters_.completed.load(), 100u);
  EXPECT_EQ(completer_.stats().recorded, 100u);
  for (const Job& j : jobs) EXPECT_EQ(state(j), JobState::kCompleted);
  expect_settled_once(jobs);
}

TEST_F(CompleterTest, TransientFailuresAreRetriedWithGrowingBackoffAndNothingIsLost) {
  auto jobs = claim(6);
  storage_.fail_next(StorageOp::kComplete, 3);  // UNAVAILABLE
  std::vector<Clock::time_point> attempts;
  storage_.set_hook(StorageOp::kComplete, [&] { attempts.push_back(Clock::now()); });
  for (size_t i = 0; i < jobs.size(); ++i)
    completer_.push(i < 4 ? success(jobs[i]) : failure(jobs[i], clock_.wall_now_us() + 1000));
  drain();
  // Batches of 6 (4 successes and 2 failures), 3 and 1 fail; then they go
  // through one by one (under the size that failed): 4 more completions.
  ASSERT_EQ(attempts.size(), 7u);
  // 20, 40, 80 ms between attempts: backoff, not a busy loop.
  EXPECT_GE(attempts[1] - attempts[0], 20ms);
  EXPECT_GE(attempts[2] - attempts[1], 40ms);
  EXPECT_GE(attempts[3] - attempts[2], 80ms);
  EXPECT_EQ(counters_.completed.load(), 4u);
  EXPECT_EQ(counters_.retried.load(), 2u);
  EXPECT_EQ(completer_.stats().recorded, 6u);
  for (size_t i = 0; i < jobs.size(); ++i)
    EXPECT_EQ(state(jobs[i]), i < 4 ? JobState::kCompleted : JobState::kScheduled);
  expect_settled_once(jobs);
}

// A database whose statement_timeout cuts off completions of more than 100
// jobs: the batch is split until it passes, and every outcome is recorded
// once. Before, the whole batch was retried for ever, growing each time.
TEST_F(CompleterTest, ABatchTooLargeForTheDatabaseIsSplitUntilItPasses) {
  auto jobs = claim(1000);
  ASSERT_EQ(jobs.size(), 1000u);
  storage_.fail_batches_over(StorageOp::kComplete, 100);
  for (const Job& j : jobs) completer_.push(success(j));
  drain(30s);
  EXPECT_EQ(counters_.completed.load(), 1000u);
  EXPECT_EQ(completer_.stats().recorded, 1000u);
  for (const Job& j : jobs) EXPECT_EQ(state(j), JobState::kCompleted);
  expect_settled_once(jobs);
  EXPECT_EQ(completer_.unsaved_jobs(), 0u);
}

// While too many outcomes wait to be recorded, backlogged() says so (the
// dispatcher then claims nothing), until they are recorded.
TEST_F(CompleterTest, TooManyUnrecordedOutcomesAreABacklogUntilRecorded) {
  auto jobs = claim(static_cast<int>(Completer::kMaxUnsavedJobs));
  storage_.fail_next(StorageOp::kComplete, 1'000'000);  // storage cannot record
  for (size_t i = 0; i + 1 < jobs.size(); ++i) completer_.push(success(jobs[i]));
  EXPECT_FALSE(completer_.backlogged());
  completer_.push(success(jobs.back()));
  EXPECT_TRUE(completer_.backlogged());
  EXPECT_EQ(completer_.unsaved_jobs(), Completer::kMaxUnsavedJobs);
  storage_.clear_faults();
  drain(30s);
  EXPECT_FALSE(completer_.backlogged());
  EXPECT_EQ(completer_.stats().recorded, Completer::kMaxUnsavedJobs);
  expect_settled_once(jobs);
}

TEST_F(CompleterTest, LostReplyAfterCommitIsNotRecordedTwiceAndSettlesOnce) {
  auto jobs = claim(3);
  storage_.drop_reply_next(StorageOp::kComplete);  // applied, then UNAVAILABLE
  storage_.drop_reply_next(StorageOp::kFail);
  completer_.push(success(jobs[0]));
  completer_.push(success(jobs[1]));
  completer_.push(failure(jobs[2], clock_.wall_now_us() + 1000));
  drain();
  // The retry of each call was refused: the first had committed. (The
  // retries go in halved batches: the two completions one by one.)
  EXPECT_EQ(storage_.calls(StorageOp::kComplete), 3u);
  EXPECT_EQ(storage_.calls(StorageOp::kFail), 2u);
  EXPECT_EQ(state(jobs[0]), JobState::kCompleted);
  EXPECT_EQ(state(jobs[1]), JobState::kCompleted);
  const Job retried = storage_.inner().get_job(jobs[2].id, clock_.wall_now_us()).value();
  EXPECT_EQ(retried.state, JobState::kScheduled);
  EXPECT_EQ(retried.last_error, "boom");
  // Not counted as recorded by us (it cannot be told from a lost lease), and
  // certainly not twice.
  EXPECT_EQ(completer_.stats().refused, 3u);
  EXPECT_EQ(completer_.stats().recorded, 0u);
  EXPECT_EQ(counters_.completed.load(), 0u);
  EXPECT_EQ(counters_.retried.load(), 0u);
  expect_settled_once(jobs);
}

TEST_F(CompleterTest, NonTransientErrorAbandonsOnlyWhatItHitAndSettlesEveryLease) {
  auto jobs = claim(5);
  storage_.fail_next(StorageOp::kComplete, 1, CONVEYOR_E_INTERNAL);
  storage_.fail_next(StorageOp::kFail, 1, CONVEYOR_E_INVALID);
  for (int i = 0; i < 3; ++i) completer_.push(success(jobs[i]));
  completer_.push(failure(jobs[3], -1));
  completer_.push(failure(jobs[4], -1));
  drain();
  // Not retried: a non-transient error would only repeat.
  EXPECT_EQ(storage_.calls(StorageOp::kComplete), 1u);
  EXPECT_EQ(storage_.calls(StorageOp::kFail), 2u);
  EXPECT_EQ(completer_.stats().abandoned, 4u);
  EXPECT_EQ(completer_.stats().recorded, 1u);
  EXPECT_EQ(counters_.failed.load(), 1u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(state(jobs[i]), JobState::kRunning);  // lease expires
  EXPECT_EQ(state(jobs[4]), JobState::kFailed);
  expect_settled_once(jobs);
  EXPECT_EQ(completer_.pending(), 0u);
}

TEST_F(CompleterTest, FinishWithStorageDownReturnsByTheDeadlineAndSettlesWhatIsUnrecorded) {
  auto jobs = claim(3);
  storage_.fail_next(StorageOp::kComplete, 1'000'000);
  for (const Job& j : jobs) completer_.push(success(j));
  const auto start = Clock::now();
  drain(300ms);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 300ms);  // it kept trying until the deadline
  EXPECT_LT(took, 800ms);
  // Backoff 20, 40, 80, 160 ms fits 5 attempts in 300 ms; a busy retry loop
  // would make thousands.
  EXPECT_LE(storage_.calls(StorageOp::kComplete), 6u);
  EXPECT_EQ(completer_.stats().abandoned, 3u);
  for (const Job& j : jobs) EXPECT_EQ(state(j), JobState::kRunning);
  expect_settled_once(jobs);
  // An outcome arriving after the completer stopped is settled too.
  auto late = claim(1);
  completer_.push(success(late[0]));
  EXPECT_EQ(completer_.stats().abandoned, 4u);
  EXPECT_EQ(completer_.pending(), 0u);
}

TEST_F(CompleterTest, LeaseLostOutcomesAreCountedAsRefused) {
  auto jobs = claim(4);
  storage_.lose_lease(lease_of(jobs[1]));
  storage_.lose_lease(lease_of(jobs[3]));
  completer_.push(success(jobs[0]));
  completer_.push(success(jobs[1]));
  completer_.push(failure(jobs[2], -1));
  completer_.push(failure(jobs[3], -1));
  drain();
  EXPECT_EQ(completer_.stats().recorded, 2u);
  EXPECT_EQ(completer_.stats().refused, 2u);
  EXPECT_EQ(counters_.completed.load(), 1u);
  EXPECT_EQ(counters_.failed.load(), 1u);
  EXPECT_EQ(state(jobs[1]), JobState::kRunning);
  EXPECT_EQ(state(jobs[3]), JobState::kRunning);
  expect_settled_once(jobs);
}

// On its own thread, as the engine runs it: pushes from many threads are
// all recorded while storage flaps, and stop returns promptly.
TEST_F(CompleterTest, ConcurrentPushesThroughFlappingStorageAreAllRecorded) {
  auto jobs = claim(400);
  ASSERT_EQ(jobs.size(), 400u);
  std::jthread runner([this](std::stop_token st) { completer_.run(st); });
  storage_.fail_next(StorageOp::kComplete, 2);
  std::vector<std::jthread> pushers;
  for (int t = 0; t < 4; ++t)
    pushers.emplace_back([&, t] {
      for (size_t i = t; i < jobs.size(); i += 4) completer_.push(success(jobs[i]));
    });
  pushers.clear();
  completer_.finish(Clock::now() + 10s);
  runner.join();
  EXPECT_EQ(counters_.completed.load(), 400u);
  expect_settled_once(jobs);
}

}  // namespace
}  // namespace conveyor
