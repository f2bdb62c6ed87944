// How a queue resumes after a hold, on a ManualClock: half the refused rate,
// doubling to the knee, a slow climb beyond, the pace kept to the job, and
// the ramp's end.
#include "resume_ramp.hpp"

#include <gtest/gtest.h>

namespace conveyor {
namespace {

using namespace std::chrono_literals;

// Takes every job the ramp allows, asking for 50 at every millisecond, for d.
uint32_t take_all(ResumeRamp& ramp, ManualClock& clock, std::chrono::milliseconds d) {
  uint32_t taken = 0;
  for (auto t = 0ms; t < d; t += 1ms) {
    taken += ramp.take(50, clock.steady_now());
    clock.advance(1ms);
  }
  return taken;
}

TEST(ResumeRampTest, ResumesAtHalfTheRefusedRateAndClimbsBackSlowlyPastTheKnee) {
  ManualClock clock;
  const SteadyTime start = clock.steady_now();
  ResumeRamp ramp(/*refused_rate=*/20, /*ceiling=*/0, start);
  EXPECT_DOUBLE_EQ(ramp.rate(start), 10);
  EXPECT_NEAR(ramp.rate(start + 500ms), 14.142, 0.001);
  // Knee 18 (at log2(1.8) = 0.85 s), then 1% of 20 = 0.2 more each second.
  EXPECT_DOUBLE_EQ(ramp.rate(start + 1s), 18 + 0.2 * (1 - std::log2(1.8)));
  EXPECT_NEAR(ramp.rate(start + 5s), 18 + 0.2 * (5 - std::log2(1.8)), 1e-9);
}

TEST(ResumeRampTest, NoBurstOnResumingAndThePaceIsKept) {
  ManualClock clock;
  ResumeRamp ramp(20, 0, clock.steady_now());
  EXPECT_EQ(ramp.take(50, clock.steady_now()), 1u);
  EXPECT_EQ(ramp.take(50, clock.steady_now()), 0u);
  EXPECT_EQ(ramp.time_until_next(clock.steady_now()), 100ms);  // 10 jobs/s
  // Over the first second: the integral of 10 * 2^t up to the knee (18/s at
  // 0.848 s), about 11.6 jobs, plus the first one.
  const uint32_t first_second = 1 + take_all(ramp, clock, 1000ms);
  EXPECT_GE(first_second, 11u);
  EXPECT_LE(first_second, 14u);
}

TEST(ResumeRampTest, WithoutAKnownRateItStartsAtTheFloorAndDoublesEachSecond) {
  ManualClock clock;
  const SteadyTime start = clock.steady_now();
  ResumeRamp ramp(0, 0, start);
  EXPECT_DOUBLE_EQ(ramp.rate(start), ResumeRamp::kFloor);
  EXPECT_DOUBLE_EQ(ramp.rate(start + 3s), 8 * ResumeRamp::kFloor);
  // 1 + 2 + 4 + 8 jobs/s over four seconds: about 15/ln 2 = 21.6.
  const uint32_t taken = take_all(ramp, clock, 4000ms);
  EXPECT_GE(taken, 20u);
  EXPECT_LE(taken, 24u);
}

TEST(ResumeRampTest, EndsAtTheQueuesOwnLimit) {
  ManualClock clock;
  const SteadyTime start = clock.steady_now();
  ResumeRamp ramp(/*refused_rate=*/100, /*ceiling=*/20, start);
  EXPECT_DOUBLE_EQ(ramp.rate(start), 20);
  EXPECT_TRUE(ramp.finished(start));
  ResumeRamp slower(20, 20, start);
  EXPECT_FALSE(slower.finished(start + 1s));
  EXPECT_LT(slower.rate(start + 10s), 20);         // 18 + 0.2 * 9.15
  EXPECT_DOUBLE_EQ(slower.rate(start + 11s), 20);  // 18 + 0.2 * 10.15, capped at 20
  EXPECT_TRUE(slower.finished(start + 11s));
}

TEST(ResumeRampTest, WithoutALimitItEndsOnceItNoLongerHoldsTheQueueBack) {
  ManualClock clock;
  ResumeRamp ramp(20, 0, clock.steady_now());
  take_all(ramp, clock, 3000ms);  // always asks for more than it gives
  EXPECT_FALSE(ramp.finished(clock.steady_now()));
  // The queue asks for no more than the ramp gives (its workers bound it).
  for (int i = 0; i < 30; ++i) {
    clock.advance(100ms);
    EXPECT_EQ(ramp.take(1, clock.steady_now()), 1u);
  }
  EXPECT_TRUE(ramp.finished(clock.steady_now()));
}

}  // namespace
}  // namespace conveyor
