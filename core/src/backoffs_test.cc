// Backpressure holds on a ManualClock: named delays, the doubling when none
// is named, the cap, and clearing.
#include "backoffs.hpp"

#include <gtest/gtest.h>

namespace conveyor {
namespace {

using namespace std::chrono_literals;

class BackoffsTest : public ::testing::Test {
 protected:
  BackoffsTest() {
    config.backoff_base_ms = 1000;
    config.max_backoff_s = 10;
  }
  EngineConfig config;
  ManualClock clock;
};

TEST_F(BackoffsTest, ANamedDelayHoldsExactlyThatLongAndShowsItsEnd) {
  Backoffs b(config, clock);
  const auto h = b.hold("api", 2500ms);
  EXPECT_EQ(h.until, clock.steady_now() + 2500ms);
  EXPECT_EQ(h.until_us, clock.wall_now_us() + 2'500'000);
  clock.advance(2499ms);
  ASSERT_TRUE(b.active("api"));
  EXPECT_EQ(b.active_all().count("api"), 1u);
  clock.advance(1ms);
  EXPECT_FALSE(b.active("api"));
  EXPECT_TRUE(b.active_all().empty());
}

TEST_F(BackoffsTest, WithoutADelayHoldsDoubleWhileTheyFollowEachOtherUpToTheCap) {
  Backoffs b(config, clock);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 6; ++i) {
    const auto h = b.hold("api", 0ms);
    lengths.push_back(h.length.count());
    clock.advance(h.length);  // the next 429 comes right after the hold
  }
  EXPECT_EQ(lengths, (std::vector<int64_t>{1000, 2000, 4000, 8000, 10000, 10000}));
  // Long after the last hold, the doubling starts over.
  clock.advance(1min);
  EXPECT_EQ(b.hold("api", 0ms).length, 1000ms);
}

TEST_F(BackoffsTest, ALongerNamedDelayIsCappedAndAShorterOneDoesNotShortenAHold) {
  Backoffs b(config, clock);
  EXPECT_EQ(b.hold("api", 1h).length, 10s);
  const SteadyTime end = clock.steady_now() + 10s;
  b.hold("api", 1s);
  EXPECT_EQ(b.active("api")->until, end);
}

TEST_F(BackoffsTest, ClearEndsTheHold) {
  Backoffs b(config, clock);
  b.hold("api", 5s);
  EXPECT_TRUE(b.clear("api"));
  EXPECT_FALSE(b.active("api"));
  EXPECT_FALSE(b.clear("api"));
  EXPECT_FALSE(b.clear("other"));
}

}  // namespace
}  // namespace conveyor
