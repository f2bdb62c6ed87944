// Backpressure holds on a ManualClock: one hold per episode, named delays
// (zero included), the doubling when none is named and its cap, successes
// that start it over, and clearing.
#include "backoffs.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using std::nullopt;

class BackoffsTest : public ::testing::Test {
 protected:
  BackoffsTest() {
    config.backoff_base_ms = 1000;
    config.max_backoff_s = 3600;
  }
  EngineConfig config;
  ManualClock clock;
};

TEST_F(BackoffsTest, ANamedDelayHoldsExactlyThatLongAndShowsItsEndAndWhy) {
  Backoffs b(config, clock);
  const auto a = b.hold("api", 2500ms, clock.steady_now(), "HTTP 429: slow down");
  EXPECT_TRUE(a.changed);
  EXPECT_EQ(a.hold.until, clock.steady_now() + 2500ms);
  EXPECT_EQ(a.hold.until_us, clock.wall_now_us() + 2'500'000);
  EXPECT_EQ(a.hold.reason, "HTTP 429: slow down");
  clock.advance(2499ms);
  ASSERT_TRUE(b.active("api"));
  EXPECT_EQ(b.active_all().count("api"), 1u);
  clock.advance(1ms);
  EXPECT_FALSE(b.active("api"));
  EXPECT_TRUE(b.active_all().empty());
}

// The 44 refusals of one claimed batch (every request sent before the first
// refusal arrived) are one hold of the base length. Before episodes, each
// answer doubled the hold: 44 answers reached the cap, an hour.
TEST_F(BackoffsTest, TheAnswersOfOneBatchInFlightAreOneHold) {
  Backoffs b(config, clock);
  const SteadyTime sent = clock.steady_now();
  clock.advance(20ms);
  const auto first = b.hold("api", nullopt, sent, "HTTP 429");
  EXPECT_TRUE(first.changed);
  for (int i = 0; i < 43; ++i) {
    clock.advance(1ms);
    const auto a = b.hold("api", nullopt, sent, "HTTP 429");
    EXPECT_FALSE(a.changed);
    EXPECT_EQ(a.hold.until, first.hold.until);
  }
  EXPECT_EQ(b.active("api")->length, 1000ms);
  EXPECT_EQ(b.active("api")->until, first.hold.until);
}

TEST_F(BackoffsTest, WithoutADelayTheHoldDoublesOnlyWhenTheResumedQueueIsRefusedAgain) {
  Backoffs b(config, clock);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 9; ++i) {
    const auto a = b.hold("api", nullopt, clock.steady_now(), "HTTP 503");
    lengths.push_back(a.hold.length.count());
    clock.advance(a.hold.length);  // resumed: the first request is refused again
  }
  // Capped at kMaxUnnamedHold, though max_backoff_s is an hour.
  EXPECT_EQ(lengths,
            (std::vector<int64_t>{1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000}));
  // Long after the last hold, the doubling starts over.
  clock.advance(10min);
  EXPECT_EQ(b.hold("api", nullopt, clock.steady_now(), "HTTP 503").hold.length, 1000ms);
}

TEST_F(BackoffsTest, TheUnnamedCapIsAlsoBoundedByMaxBackoff) {
  config.max_backoff_s = 5;
  Backoffs b(config, clock);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 5; ++i) {
    const auto a = b.hold("api", nullopt, clock.steady_now(), "HTTP 503");
    lengths.push_back(a.hold.length.count());
    clock.advance(a.hold.length);
  }
  EXPECT_EQ(lengths, (std::vector<int64_t>{1000, 2000, 4000, 5000, 5000}));
}

TEST_F(BackoffsTest, ASuccessAfterResumingStartsTheDoublingOver) {
  Backoffs b(config, clock);
  auto a = b.hold("api", nullopt, clock.steady_now(), "HTTP 429");
  clock.advance(a.hold.length);
  a = b.hold("api", nullopt, clock.steady_now(), "HTTP 429");
  EXPECT_EQ(a.hold.length, 2000ms);
  clock.advance(a.hold.length);
  // A request sent before the hold began succeeds: that says nothing.
  b.succeeded("api", a.hold.began - 1ms);
  a = b.hold("api", nullopt, clock.steady_now(), "HTTP 429");
  EXPECT_EQ(a.hold.length, 4000ms);
  clock.advance(a.hold.length);
  // One sent after it resumed does.
  b.succeeded("api", clock.steady_now());
  clock.advance(100ms);
  EXPECT_EQ(b.hold("api", nullopt, clock.steady_now(), "HTTP 429").hold.length, 1000ms);
}

// Retry-After: 0, or a date already past, means "now": a hold of zero, also
// when it comes again and again. Before, 0 read as "none named" and doubled.
TEST_F(BackoffsTest, AZeroDelayIsAHoldOfZeroThatNeverGrows) {
  Backoffs b(config, clock);
  for (int i = 0; i < 6; ++i) {
    const auto a = b.hold("api", 0ms, clock.steady_now(), "HTTP 429");
    EXPECT_TRUE(a.changed);
    EXPECT_EQ(a.hold.length, 0ms);
    EXPECT_FALSE(b.active("api"));
    clock.advance(10ms);
  }
}

TEST_F(BackoffsTest, ANamedDelayIsCappedAtMaxBackoff) {
  config.max_backoff_s = 10;
  Backoffs b(config, clock);
  EXPECT_EQ(b.hold("api", 1h, clock.steady_now(), "HTTP 429").hold.length, 10s);
}

TEST_F(BackoffsTest, ClearEndsTheHoldAndTheEpisode) {
  Backoffs b(config, clock);
  auto a = b.hold("api", nullopt, clock.steady_now(), "HTTP 429");
  clock.advance(a.hold.length);
  b.hold("api", nullopt, clock.steady_now(), "HTTP 429");
  EXPECT_TRUE(b.clear("api"));
  EXPECT_FALSE(b.active("api"));
  EXPECT_FALSE(b.clear("api"));
  EXPECT_FALSE(b.clear("other"));
  EXPECT_EQ(b.hold("api", nullopt, clock.steady_now(), "HTTP 429").hold.length, 1000ms);
}

}  // namespace
}  // namespace conveyor
