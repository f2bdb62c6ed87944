#include <conveyor/internal/token_bucket.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace conveyor {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

SteadyTime at(int64_t ns) { return SteadyTime(nanoseconds(ns)); }

TEST(TokenBucket, StartsFullAtBurst) {
  TokenBucket b(RateLimit{50, 10}, at(0));
  EXPECT_EQ(b.available(at(0)), 10u);
  EXPECT_EQ(b.take(100, at(0)), 10u);
  EXPECT_EQ(b.available(at(0)), 0u);
}

TEST(TokenBucket, RefillsContinuouslyAtRate) {
  TokenBucket b(RateLimit{50, 10}, at(0));
  b.take(10, at(0));
  EXPECT_EQ(b.available(at(19'999'999)), 0u);  // one token every 20 ms
  EXPECT_EQ(b.available(at(20'000'000)), 1u);
  EXPECT_EQ(b.available(at(100'000'000)), 5u);
  EXPECT_EQ(b.available(at(10'000'000'000)), 10u);  // capped at burst
}

TEST(TokenBucket, TimeUntilNextIsExactlyTheNextTokenDue) {
  TokenBucket b(RateLimit{50, 10}, at(0));
  b.take(10, at(0));
  EXPECT_EQ(b.time_until_next(at(0)), nanoseconds(20'000'000));
  EXPECT_EQ(b.time_until_next(at(5'000'000)), nanoseconds(15'000'000));
  EXPECT_EQ(b.time_until_next(at(20'000'000)), nanoseconds(0));
}

TEST(TokenBucket, RefundGivesBackUnusedTokensButNeverBeyondBurst) {
  TokenBucket b(RateLimit{10, 5}, at(0));
  EXPECT_EQ(b.take(5, at(0)), 5u);
  b.refund(3);  // claimed only 2 of 5
  EXPECT_EQ(b.available(at(0)), 3u);
  b.refund(100);
  EXPECT_EQ(b.available(at(0)), 5u);
}

TEST(TokenBucket, FractionalRateRoundsTokenCostUp) {
  TokenBucket b(RateLimit{3, 1}, at(0));
  EXPECT_EQ(b.token_ns(), 333'333'334);
  b.take(1, at(0));
  EXPECT_EQ(b.available(at(333'333'333)), 0u);
  EXPECT_EQ(b.available(at(333'333'334)), 1u);
}

TEST(TokenBucket, ReconfigureKeepsHeldTokensUpToNewBurst) {
  TokenBucket b(RateLimit{100, 50}, at(0));
  b.take(10, at(0));  // 40 held
  b.reconfigure(RateLimit{10, 20}, at(0));
  EXPECT_EQ(b.available(at(0)), 20u);
  b.reconfigure(RateLimit{1000, 500}, at(0));
  EXPECT_EQ(b.available(at(0)), 20u);  // no free refill on reconfigure
}

TEST(TokenBucket, ClockGoingBackwardsRefillsNothing) {
  TokenBucket b(RateLimit{10, 1}, at(1'000'000'000));
  b.take(1, at(1'000'000'000));
  EXPECT_EQ(b.available(at(0)), 0u);
  EXPECT_EQ(b.available(at(1'100'000'000)), 1u);
}

// A dispatcher pass reads the clock more than once: tokens taken and given
// back at a later reading are all there at an earlier one.
TEST(TokenBucket, ATakeAndRefundLeaveTheBucketFullAtAnEarlierNow) {
  TokenBucket b(RateLimit{0.5, 3}, at(0));
  EXPECT_EQ(b.take(3, at(1'000'000)), 3u);
  b.refund(3);
  EXPECT_EQ(b.available(at(500'000)), 3u);
  EXPECT_EQ(b.take(10, at(500'000)), 3u);
  EXPECT_EQ(b.available(at(900'000)), 0u);
}

// The conformance property of docs/reference.md ("Rate limits"): starting from a full bucket, for
// any sequence of takes, the tokens taken in [0, t] never exceed
// burst + rate * t. Checked for many random schedules and limits.
TEST(TokenBucket, NeverExceedsBurstPlusRateTimesT) {
  std::mt19937_64 rng(12345);
  const std::vector<RateLimit> limits = {{50, 10}, {5000, 500}, {0.5, 1},     {3, 1},
                                         {7.3, 2}, {1e6, 1},    {123.456, 7}, {1, 4000}};
  for (const RateLimit& limit : limits) {
    for (int trial = 0; trial < 20; ++trial) {
      TokenBucket b(limit, at(0));
      int64_t now = 0;
      uint64_t taken = 0;
      const int64_t max_step = static_cast<int64_t>(3e9 / limit.rate_per_sec) + 1;
      for (int i = 0; i < 5000; ++i) {
        now += std::uniform_int_distribution<int64_t>(0, max_step)(rng);
        uint32_t want = std::uniform_int_distribution<uint32_t>(0, limit.burst + 3)(rng);
        uint32_t got = b.take(want, at(now));
        // Sometimes hand part back, as the dispatcher does after a short claim.
        uint32_t unused = got == 0 ? 0 : std::uniform_int_distribution<uint32_t>(0, got)(rng) / 2;
        b.refund(unused);
        taken += got - unused;
        const double bound = limit.burst + limit.rate_per_sec * (static_cast<double>(now) / 1e9);
        ASSERT_LE(static_cast<double>(taken), bound)
            << "rate " << limit.rate_per_sec << " burst " << limit.burst << " at t=" << now << "ns";
      }
    }
  }
}

// A drained bucket settles at the configured rate: over 10 simulated seconds
// a greedy taker gets burst + rate * 10 tokens, give or take one.
TEST(TokenBucket, GreedyTakerAchievesTheRate) {
  for (RateLimit limit : {RateLimit{50, 10}, RateLimit{5000, 500}}) {
    TokenBucket b(limit, at(0));
    uint64_t taken = 0;
    int64_t now = 0;
    while (now <= 10'000'000'000) {
      taken += b.take(UINT32_MAX, at(now));
      now += b.time_until_next(at(now)).count();
    }
    const double expected = limit.burst + limit.rate_per_sec * 10;
    EXPECT_NEAR(static_cast<double>(taken), expected, 1.0) << limit.rate_per_sec;
  }
}

TEST(TokenBucket, TakeAtLeastTakesNothingUntilThatManyAreThere) {
  TokenBucket b(RateLimit{50, 10}, at(0));
  b.take(10, at(0));
  EXPECT_EQ(b.take(10, at(60'000'000), 5), 0u) << "3 tokens, 5 needed: none taken";
  EXPECT_EQ(b.available(at(60'000'000)), 3u);
  EXPECT_EQ(b.time_until(5, at(60'000'000)), nanoseconds(40'000'000));
  EXPECT_EQ(b.take(10, at(100'000'000), 5), 5u);
  EXPECT_EQ(b.time_until(50, at(100'000'000)), nanoseconds(200'000'000))
      << "more than the burst waits for a full bucket";
}

TEST(TokenBucket, EmptyUntilHoldsAndRefillsFromEmptyAfter) {
  TokenBucket b(RateLimit{10, 5}, at(0));
  b.empty_until(at(2'000'000'000));
  EXPECT_EQ(b.available(at(1'999'999'999)), 0u);
  EXPECT_EQ(b.available(at(2'000'000'000)), 0u) << "nothing banked during the hold";
  EXPECT_EQ(b.time_until_next(at(0)), nanoseconds(2'100'000'000));
  EXPECT_EQ(b.available(at(2'100'000'000)), 1u);
  b.empty_until(at(1'000'000'000));  // an earlier end never shortens a hold
  EXPECT_EQ(b.available(at(2'100'000'000)), 1u);
}

// A take whose at_least is above the burst (a job dearer than a burst
// lowered since it was enqueued) waits for a full bucket, then takes its
// whole cost: the bucket is in debt, and nothing is available until the
// debt is repaid.
TEST(TokenBucket, ATakeAboveTheBurstWaitsForAFullBucketAndGoesIntoDebt) {
  TokenBucket b(RateLimit{10, 2}, at(0));  // a token per 100 ms
  EXPECT_EQ(b.take(4, at(0), 5), 0u) << "fewer than at_least asked: none";
  EXPECT_EQ(b.take(5, at(0), 5), 5u) << "a full bucket: the whole cost";
  EXPECT_EQ(b.available(at(0)), 0u);
  EXPECT_EQ(b.available(at(299'999'999)), 0u) << "3 tokens of debt first";
  EXPECT_EQ(b.available(at(400'000'000)), 1u);
  EXPECT_EQ(b.time_until(5, at(0)), milliseconds(500)) << "until full again";
  EXPECT_EQ(b.take(5, at(400'000'000), 5), 0u) << "1 token: not full";
  EXPECT_EQ(b.take(5, at(500'000'000), 5), 5u);
  b.refund(5);  // a claim that found no job: as if nothing was taken
  EXPECT_EQ(b.available(at(500'000'000)), 2u);
}

// Repeated takes of cost 5 from a bucket of burst 2 at 10/s over 10
// simulated seconds: at 2 a second (not starved), and units taken in [0, t]
// never above max(burst, cost) + rate * t (a clamped cost would take 25
// units' worth a second for 2 tokens each).
TEST(TokenBucket, TakesOfACostAboveTheBurstKeepTheLongRunRate) {
  TokenBucket b(RateLimit{10, 2}, at(0));
  uint64_t units = 0;
  uint32_t jobs = 0;
  int64_t now = 0;
  while (now <= 10'000'000'000) {
    const uint32_t got = b.take(5, at(now), 5);
    ASSERT_TRUE(got == 0 || got == 5) << got;
    units += got;
    jobs += got / 5;
    ASSERT_LE(static_cast<double>(units), 5 + 10 * (static_cast<double>(now) / 1e9))
        << "at " << now << " ns";
    now += std::max<int64_t>(1'000'000, b.time_until(5, at(now)).count());
  }
  EXPECT_EQ(jobs, 21u) << "one every 500 ms, from 0 to 10 s";
  EXPECT_LE(units, 2u + 5 + 10 * 10);
}

// The bound with debt, for random schedules mixing takes below and above
// the burst, with refunds: taken in [0, t] <= max(burst, the largest
// at_least) + rate * t.
TEST(TokenBucket, NeverExceedsTheLargestCostPlusRateTimesT) {
  std::mt19937_64 rng(54321);
  const std::vector<RateLimit> limits = {{50, 10}, {0.5, 1}, {7.3, 2}, {1e6, 1}, {123.456, 7}};
  for (const RateLimit& limit : limits) {
    for (int trial = 0; trial < 20; ++trial) {
      TokenBucket b(limit, at(0));
      int64_t now = 0;
      uint64_t taken = 0;
      uint32_t largest = limit.burst;
      const int64_t max_step = static_cast<int64_t>(3e9 / limit.rate_per_sec) + 1;
      for (int i = 0; i < 5000; ++i) {
        now += std::uniform_int_distribution<int64_t>(0, max_step)(rng);
        const uint32_t least = std::uniform_int_distribution<uint32_t>(1, 3 * limit.burst + 2)(rng);
        const uint32_t want = least + std::uniform_int_distribution<uint32_t>(0, 3)(rng);
        const uint32_t got = b.take(want, at(now), least);
        if (got > 0) largest = std::max(largest, least);
        const uint32_t unused =
            got == 0 ? 0 : std::uniform_int_distribution<uint32_t>(0, got)(rng) / 2;
        b.refund(unused);
        taken += got - unused;
        const double bound = largest + limit.rate_per_sec * (static_cast<double>(now) / 1e9);
        ASSERT_LE(static_cast<double>(taken), bound)
            << "rate " << limit.rate_per_sec << " burst " << limit.burst << " at t=" << now << "ns";
      }
    }
  }
}

// A limit change keeps a debt (in whole tokens, at the new rate): changing
// the limit never forgives it.
TEST(TokenBucket, ReconfigureKeepsADebt) {
  TokenBucket b(RateLimit{10, 2}, at(0));
  ASSERT_EQ(b.take(5, at(0), 5), 5u);  // 3 tokens owed, full at 500 ms
  b.reconfigure(RateLimit{10, 4}, at(0));
  EXPECT_EQ(b.available(at(300'000'000)), 0u) << "the 3 tokens owed first";
  EXPECT_EQ(b.available(at(400'000'000)), 1u);
  EXPECT_EQ(b.time_until(4, at(0)), milliseconds(700));
  b.reconfigure(RateLimit{20, 1}, at(0));  // still 3 tokens owed, now 50 ms each
  EXPECT_EQ(b.time_until(1, at(0)), milliseconds(200)) << "the 3 owed, then 1";
}

}  // namespace
}  // namespace conveyor
