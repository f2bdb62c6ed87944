// FleetBucket against the real SQLite plugin loaded through the real loader:
// storage handles on one database file stand for processes (the plugin
// advertises CONVEYOR_CAP_MULTI_PROCESS), each with a bucket of its own over
// the one shared record. A ManualClock drives time. Every test runs twice:
// with add_shared_state (ABI 1.3), and with that slot hidden, as on a 1.2
// plugin, so the bucket takes by compare-and-set (swap_shared_state).
#include "fleet_bucket.hpp"

#include "testing/fault_injecting_storage.hpp"

#include <conveyor/host/plugin_loader.hpp>
#include <conveyor/internal/metrics.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <random>
#include <vector>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class FleetBucketTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("conveyor-fleet-bucket-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    stores_.clear();
    fs::remove_all(dir_);
  }
  // Whether the bucket takes with add_shared_state (else swap_shared_state).
  static bool adds() { return GetParam(); }
  // The operation a take calls.
  static testing::StorageOp take_op() {
    return adds() ? testing::StorageOp::kAddSharedState : testing::StorageOp::kSwapSharedState;
  }
  // A new handle on the shared file: one more "process".
  testing::FaultInjectingStorage& process() {
    static const auto plugin =
        load_plugin(fs::path(CONVEYOR_TEST_PLUGIN_DIR) / "libconveyor-sqlite.so");
    auto store = std::make_shared<testing::FaultInjectingStorage>(
        Storage::open(plugin, {{"path", (dir_ / "fleet.db").string()}}));
    if (!adds()) store->hide_slot("add_shared_state");
    stores_.push_back(store);
    return *store;
  }

  fs::path dir_;
  std::vector<std::shared_ptr<testing::FaultInjectingStorage>> stores_;
  ManualClock clock_;
  Metrics metrics_;
  QueueCounters& counters_ = metrics_.queue("email");
  const RateLimit limit_{50, 10, LimitScope::kFleet};  // a token per 20 ms
};

TEST_P(FleetBucketTest, TwoProcessesDrawFromOneBucket) {
  FleetBucket a(process(), "email", limit_, clock_, counters_);
  FleetBucket b(process(), "email", limit_, clock_, counters_);
  EXPECT_EQ(a.take(100), 10u) << "a full bucket: the burst";
  EXPECT_EQ(b.take(100), 0u) << "the other process finds it empty";
  EXPECT_EQ(b.time_until(1), 20ms);
  clock_.advance(20ms);
  EXPECT_EQ(b.take(100), 1u);
  // a's record is stale (b took since): its take finds nothing (a swap
  // loses), and the record in the reply says nothing is left.
  const uint64_t conflicts = counters_.fleet_conflicts.load();
  EXPECT_EQ(a.take(100), 0u);
  EXPECT_EQ(counters_.fleet_conflicts.load(), conflicts + 1);
  clock_.advance(40ms);
  EXPECT_EQ(a.take(100), 2u);
}

TEST_P(FleetBucketTest, AFreshBucketOnAQueueNeverLimitedStartsFull) {
  FleetBucket a(process(), "new-queue", limit_, clock_, counters_);
  EXPECT_EQ(a.take(3), 3u);
  EXPECT_EQ(a.available(), 7u);
}

// A claim that found fewer jobs than tokens keeps the rest for the next
// claim, with no call; past kSpareHold the next take returns them to the
// fleet in its own swap, and they are never used late.
TEST_P(FleetBucketTest, ARefundIsASpareForTheNextClaimThenGoesBackToTheFleet) {
  FleetBucket a(process(), "email", limit_, clock_, counters_);
  FleetBucket b(process(), "email", limit_, clock_, counters_);
  ASSERT_EQ(a.take(10), 10u);
  const uint64_t swaps = counters_.fleet_swaps.load();
  a.refund(7);  // the claim found 3 jobs
  EXPECT_EQ(a.spare(), 7u);
  EXPECT_EQ(a.take(5), 5u) << "served from the spare";
  EXPECT_EQ(counters_.fleet_swaps.load(), swaps) << "a refund and a spare take make no call";
  EXPECT_EQ(b.take(100), 0u) << "the spare is not the fleet's yet";

  clock_.advance(FleetBucket::kSpareHold);  // the 2 left are past their hold
  const uint64_t before = counters_.fleet_swaps.load();
  EXPECT_EQ(a.take(1), 1u);
  EXPECT_EQ(counters_.fleet_swaps.load(), before + 1)
      << "a spare past its hold is not used: the take swaps, returning it";
  EXPECT_EQ(a.spare(), 0u);
  clock_.advance(10ms);  // 20 ms in all: one token due
  EXPECT_EQ(b.take(100), 2u) << "the one due and the one a returned (its 2, less the 1 it took)";
}

// Two processes waiting on one trickling bucket: the winner's record is its
// own last write, so it takes at one call per take; the loser backs off
// (doubling, at most burst / rate), so it makes a few calls a second, not
// one per token. When the winner stops, the loser takes within the
// back-off, and no token was lost to overflow meanwhile.
TEST_P(FleetBucketTest, ALoserBacksOffWhileTheWinnerTakesAtOneCallPerTake) {
  QueueCounters& ca = metrics_.queue("process-a");
  QueueCounters& cb = metrics_.queue("process-b");
  FleetBucket a(process(), "email", limit_, clock_, ca);
  FleetBucket b(process(), "email", limit_, clock_, cb);
  ASSERT_EQ(a.take(100), 10u);
  ASSERT_EQ(b.take(100), 0u);  // reads the record: empty
  const uint64_t a_calls = ca.fleet_swaps.load(), b_calls = cb.fleet_swaps.load();
  uint32_t a_got = 0, b_got = 0;
  for (int step = 0; step < 50; ++step) {  // 1 s, a token every 20 ms
    clock_.advance(20ms);
    a_got += a.take(100);
    b_got += b.take(100);
  }
  EXPECT_EQ(a_got, 50u);
  EXPECT_EQ(b_got, 0u);
  EXPECT_EQ(ca.fleet_swaps.load() - a_calls, 50u) << "the winner: one call per take";
  // Back-offs 10, 20, 40, 80, 160, then 200 ms (burst / rate): about 9 calls.
  EXPECT_LE(cb.fleet_swaps.load() - b_calls, 10u) << "the loser backs off";
  EXPECT_GE(cb.fleet_swaps.load() - b_calls, 6u);
  EXPECT_LE(b.time_until(1), 200ms);

  // a stops taking: b's next call comes within the longest back-off, and
  // takes every token due since (at most the burst: none overflowed).
  int64_t waited_ms = 0;
  uint32_t got = 0;
  while (got == 0 && waited_ms <= 220) {
    clock_.advance(1ms);
    ++waited_ms;
    got = b.take(100);
  }
  ASSERT_GT(got, 0u) << "b never came back";
  EXPECT_LE(waited_ms, 200);
  EXPECT_EQ(got, std::min<uint32_t>(10, static_cast<uint32_t>(waited_ms / 20)));
}

TEST_P(FleetBucketTest, TakeAtLeastMakesNoCallWhenTheRecordSaysTooFew) {
  FleetBucket a(process(), "email", limit_, clock_, counters_);
  ASSERT_EQ(a.take(10), 10u);
  clock_.advance(60ms);  // 3 tokens
  const uint64_t swaps = counters_.fleet_swaps.load();
  EXPECT_EQ(a.take(10, 5), 0u);
  EXPECT_EQ(counters_.fleet_swaps.load(), swaps) << "decided from the cached record";
  clock_.advance(40ms);
  EXPECT_EQ(a.take(10, 5), 5u);
}

TEST_P(FleetBucketTest, ABackpressureHoldEmptiesTheBucketForEveryProcess) {
  FleetBucket a(process(), "email", limit_, clock_, counters_);
  FleetBucket b(process(), "email", limit_, clock_, counters_);
  a.empty_until(clock_.steady_now() + 2s);
  clock_.advance(1s);
  EXPECT_EQ(b.take(100), 0u) << "held, though 50 tokens' worth of time passed";
  clock_.advance(1s);
  EXPECT_EQ(b.take(100), 0u) << "held empty: nothing banked during the hold";
  clock_.advance(20ms);
  EXPECT_EQ(b.take(100), 1u);
}

// Three processes taking and refunding at random for 10 simulated seconds:
// what the fleet holds never exceeds burst + rate * t, and a greedy fleet
// gets within a token of it.
TEST_P(FleetBucketTest, RandomInterleavingOfThreeProcessesKeepsTheFleetBound) {
  std::vector<std::unique_ptr<FleetBucket>> fleet;
  for (int i = 0; i < 3; ++i)
    fleet.push_back(std::make_unique<FleetBucket>(process(), "email", limit_, clock_, counters_));
  std::mt19937 rng(7);
  uint64_t held = 0;
  const int64_t start_us = clock_.wall_now_us();
  while (clock_.wall_now_us() - start_us < 10'000'000) {
    FleetBucket& b = *fleet[rng() % fleet.size()];
    const uint32_t got = b.take(1 + rng() % 20);
    const uint32_t unused = got == 0 ? 0 : static_cast<uint32_t>(rng() % (got + 1)) / 3;
    b.refund(unused);
    held += got - unused;
    const double t = static_cast<double>(clock_.wall_now_us() - start_us) / 1e6;
    ASSERT_LE(static_cast<double>(held), limit_.burst + limit_.rate_per_sec * t + 1e-9);
    clock_.advance(std::chrono::microseconds(rng() % 15'000));
  }
  EXPECT_GE(static_cast<double>(held), limit_.burst + limit_.rate_per_sec * 10 - 25)
      << "the fleet ran at its rate (less at most the tokens lost to refund races)";
}

TEST_P(FleetBucketTest, AFailedSwapThrowsAndTheNextTakeWorks) {
  testing::FaultInjectingStorage& faulty = process();
  FleetBucket a(faulty, "email", limit_, clock_, counters_);
  faulty.fail_next(take_op(), 1, CONVEYOR_E_UNAVAILABLE);
  EXPECT_THROW(a.take(5), StorageError);
  EXPECT_EQ(a.take(5), 5u);
}

TEST_P(FleetBucketTest, ASwapWhoseReplyWasLostIsReadAfreshSoNothingIsTakenTwice) {
  testing::FaultInjectingStorage& faulty = process();
  FleetBucket a(faulty, "email", limit_, clock_, counters_);
  ASSERT_EQ(a.take(2), 2u);
  faulty.drop_reply_next(take_op());
  EXPECT_THROW(a.take(5), StorageError) << "applied, but the reply was lost";
  EXPECT_EQ(a.take(100), 3u) << "the lost take's 5 tokens are gone, not offered again";
}

// The point of add_shared_state: processes that take at the same moment
// never lose a race, so a take is one call. Two processes, each taking
// after the other took since its last call (every cached record stale):
// with the add, every take that finds tokens gets them in its one call.
TEST_P(FleetBucketTest, StaleRecordsCostARetryOnlyWithoutTheAdd) {
  QueueCounters& ca = metrics_.queue("process-a");
  QueueCounters& cb = metrics_.queue("process-b");
  FleetBucket a(process(), "email", limit_, clock_, ca);
  FleetBucket b(process(), "email", limit_, clock_, cb);
  ASSERT_EQ(a.take(4), 4u);
  ASSERT_EQ(b.take(4), 4u);  // a's record is stale now, b's fresh
  clock_.advance(100ms);     // 2 left + 5 due
  EXPECT_EQ(a.take(3), 3u);
  EXPECT_EQ(b.take(3), 3u);
  EXPECT_EQ(a.take(3), 1u) << "the last token";
  const uint64_t calls = ca.fleet_swaps.load() + cb.fleet_swaps.load();
  const uint64_t conflicts = ca.fleet_conflicts.load() + cb.fleet_conflicts.load();
  if (adds()) {
    EXPECT_EQ(calls, 5u) << "one call per take";
    EXPECT_EQ(conflicts, 0u);
  } else {
    EXPECT_GT(calls, 5u) << "a swap from a stale record loses and is retried";
    EXPECT_GT(conflicts, 0u);
  }
}

// A take above the burst (a job dearer than a burst lowered since it was
// enqueued) through the shared record: it waits for a full bucket and takes
// the whole cost, the record goes into debt, and every process sees it.
// Repeated over 10 simulated seconds, burst 2 at 10/s, cost 5: 2 jobs a
// second, and units taken in [0, t] never above max(burst, cost) + rate * t.
TEST_P(FleetBucketTest, TakesAboveTheBurstPutTheSharedRecordInDebt) {
  const RateLimit limit{10, 2, LimitScope::kFleet};  // a token per 100 ms
  FleetBucket a(process(), "email", limit, clock_, counters_);
  FleetBucket b(process(), "email", limit, clock_, counters_);
  EXPECT_EQ(a.take(5, 5), 5u) << "a full bucket: the whole cost";
  EXPECT_EQ(b.take(1), 0u) << "the other process sees the debt";
  EXPECT_EQ(b.time_until(1), 400ms) << "3 tokens owed, then 1";
  EXPECT_EQ(a.time_until(5), 500ms) << "until full";
  clock_.advance(400ms);
  EXPECT_EQ(a.take(5, 5), 0u) << "1 token: not full";
  clock_.advance(100ms);
  EXPECT_EQ(a.take(5, 5), 5u);

  uint64_t units = 10;
  uint32_t jobs = 2;
  const auto start = clock_.steady_now() - 500ms;
  const auto end = start + 10s;
  while (clock_.steady_now() <= end) {
    const uint32_t got = a.take(5, 5);
    ASSERT_TRUE(got == 0 || got == 5) << got;
    units += got;
    jobs += got / 5;
    const double t = std::chrono::duration<double>(clock_.steady_now() - start).count();
    ASSERT_LE(static_cast<double>(units), 5 + 10 * t + 1e-9) << "at t = " << t;
    clock_.advance(std::max<std::chrono::nanoseconds>(a.time_until(5), 1ms));
  }
  EXPECT_EQ(jobs, 21u) << "one every 500 ms, from 0 to 10 s";
  EXPECT_LE(units, 2u + 5 + 10 * 10);
}

INSTANTIATE_TEST_SUITE_P(TakeBy, FleetBucketTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "AddSharedState" : "SwapSharedState");
                         });

}  // namespace
}  // namespace conveyor
