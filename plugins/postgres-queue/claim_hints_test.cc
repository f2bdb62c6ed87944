// Claim hints: where a claim starts its scan (no server needed).
#include "claim_hints.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <string>
#include <vector>

namespace conveyor::pgqueue {
namespace {

constexpr std::chrono::hours kNoReset{1};

bool same(const ClaimKey& a, const ClaimKey& b) { return !(a < b) && !(b < a); }

// A claim under move generation 0 whose last candidate (won or lost) was at
// walked.
void took(ClaimHints& hints, const ClaimHints::Start& from, ClaimKey walked) {
  hints.advance("q", from, &walked, 0);
}

TEST(ClaimHints, UnknownQueueStartsAtTheBeginning) {
  ClaimHints hints(kNoReset);
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{}));
}

TEST(ClaimHints, AdvancesToTheLastCandidateAndNeverBack) {
  ClaimHints hints(kNoReset);
  auto from = hints.start("q");
  took(hints, from, ClaimKey{0, 10, 5});
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{0, 10, 5}));
  from = hints.start("q");
  took(hints, from, ClaimKey{0, 9, 1});  // a slower claim reporting late
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{0, 10, 5}));
  EXPECT_TRUE(same(hints.start("other").key, ClaimKey{}));
}

TEST(ClaimHints, AnAppendBelowTheHintMovesItBack) {
  ClaimHints hints(kNoReset);
  took(hints, hints.start("q"), ClaimKey{0, 10, 5});
  hints.lower("q", ClaimKey{-1, 20, 9});
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{-1, 20, 9}));
  hints.lower("q", ClaimKey{3, 0, 0});  // above the hint: no change
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{-1, 20, 9}));
}

TEST(ClaimHints, AnAdvanceStopsAtAnEntryAppendedWhileTheClaimRan) {
  ClaimHints hints(kNoReset);
  const auto from = hints.start("q");       // a claim starts...
  hints.lower("q", ClaimKey{0, 1, 1});      // ...an enqueue appends meanwhile...
  hints.lower("other", ClaimKey{0, 0, 0});  // (another queue's append is no concern)
  took(hints, from, ClaimKey{0, 50, 50});   // ...the claim must not skip it
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{0, 1, 1}));
}

TEST(ClaimHints, AnAppendAboveWhereTheClaimTookDoesNotHoldItBack) {
  ClaimHints hints(kNoReset);
  const auto from = hints.start("q");
  hints.lower("q", ClaimKey{0, 90, 90});  // a new job at the end of the queue
  took(hints, from, ClaimKey{0, 50, 50});
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{0, 50, 50}));
}

TEST(ClaimHints, AnAbandonedOrForgottenClaimMovesNothing) {
  ClaimHints hints(kNoReset);
  const auto failed = hints.start("q");
  hints.abandon(failed);
  took(hints, failed, ClaimKey{0, 50, 50});  // a stray report after abandon
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{}));
  const auto from = hints.start("q");
  hints.forget_all();  // e.g. a release appended entries at unknown keys
  took(hints, from, ClaimKey{0, 50, 50});
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{}));
}

TEST(ClaimHints, AHintFromAnotherMoveGenerationIsVoid) {
  ClaimHints hints(kNoReset);
  took(hints, hints.start("q"), ClaimKey{0, 10, 5});
  ClaimHints::Start from = hints.start("q");
  EXPECT_EQ(from.moves, 0);
  // Entries were copied forward meanwhile: the database ignored the hint
  // (generation 0), scanned from the start and reports generation 1.
  const ClaimKey first{0, 3, 2};
  hints.advance("q", from, &first, 1);
  EXPECT_TRUE(same(hints.start("q").key, first));
  EXPECT_EQ(hints.start("q").moves, 1);
  // A claim that took nothing under a new generation leaves a fresh start.
  hints.advance("q", hints.start("q"), nullptr, 2);
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{}));
  EXPECT_EQ(hints.start("q").moves, 2);
}

TEST(ClaimHints, ForgetAllStartsOver) {
  ClaimHints hints(kNoReset);
  took(hints, hints.start("q"), ClaimKey{0, 10, 5});
  hints.forget_all();
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{}));
}

// The periodic probe runs off the claim path: claims always start at the
// hint, and a probe that found an unclaimed entry below it (another process
// appended it) takes the hint back there, also for claims in flight.
TEST(ClaimHints, AProbeBelowTheHintTakesItBackAndClaimsNeverProbe) {
  using namespace std::chrono_literals;
  ClaimHints::Clock::time_point now{};
  ClaimHints hints(1s, [&] { return now; });
  EXPECT_FALSE(hints.next_probe()) << "no hint, nothing to probe";
  took(hints, hints.start("q"), ClaimKey{0, 10, 5});
  EXPECT_FALSE(hints.next_probe()) << "not due before the period";
  now += 1s;
  const auto in_flight = hints.start("q");
  EXPECT_TRUE(same(in_flight.key, ClaimKey{0, 10, 5})) << "a claim starts at the hint, always";
  ASSERT_EQ(hints.next_probe(), "q");
  EXPECT_FALSE(hints.next_probe()) << "returned once per period";
  const ClaimKey below{0, 2, 99};
  hints.probed("q", &below, /*moves=*/0, 5ms);
  EXPECT_TRUE(same(hints.start("q").key, below));
  // The claim in flight took entries above: it does not move the hint past
  // what the probe found.
  took(hints, in_flight, ClaimKey{0, 11, 6});
  EXPECT_TRUE(same(hints.start("q").key, below));
  // A probe under another move generation, or one that found nothing,
  // changes no hint.
  now += 1s;
  ASSERT_TRUE(hints.next_probe());
  const ClaimKey lower{0, 1, 1};
  hints.probed("q", &lower, /*moves=*/1, 5ms);
  EXPECT_TRUE(same(hints.start("q").key, below));
  took(hints, hints.start("q"), below);  // a claim ran: the next probe is due
  now += 1s;
  ASSERT_TRUE(hints.next_probe());
  hints.probed("q", nullptr, 0, 5ms);
  EXPECT_TRUE(same(hints.start("q").key, below));
}

// A probe walks the claimed history of the queue: the longer it took, the
// longer until the next one (20 times its duration, between the reset
// period and 30 s), so a large backlog is not walked every second.
TEST(ClaimHints, TheProbePeriodGrowsWithWhatTheLastProbeCost) {
  using namespace std::chrono_literals;
  ClaimHints::Clock::time_point now{};
  ClaimHints hints(1s, [&] { return now; });
  // The first claim of the queue walks from the beginning, taking 200 ms.
  auto first = hints.start("q");
  now += 200ms;
  took(hints, first, ClaimKey{0, 10, 5});
  now += 3900ms;  // 4.1 s after the walk began, 3.9 s after it ended
  EXPECT_FALSE(hints.next_probe()) << "due 20 x 200 ms = 4 s after the walk";
  now += 100ms;
  ASSERT_TRUE(hints.next_probe());
  // This probe takes 5 s (a backlog of a million claimed entries).
  now += 5s;
  hints.probed("q", nullptr, 0, 5s);
  took(hints, hints.start("q"), ClaimKey{0, 10, 5});  // claims go on
  now += 29s;
  EXPECT_FALSE(hints.next_probe()) << "20 x 5 s is capped at 30 s, not yet reached";
  now += 1s;
  ASSERT_TRUE(hints.next_probe()) << "at most 30 s between probes";
  // A quick probe brings the period back down to the reset period.
  now += 10ms;
  hints.probed("q", nullptr, 0, 10ms);
  took(hints, hints.start("q"), ClaimKey{0, 10, 5});
  now += 999ms;
  EXPECT_FALSE(hints.next_probe());
  now += 1ms;
  EXPECT_TRUE(hints.next_probe());
}

// A hint no claim used since its last probe is not probed: idle queues cost
// nothing; the first claim after idleness makes the probe due at once.
TEST(ClaimHints, OnlyHintsClaimedFromSinceTheLastProbeAreProbed) {
  using namespace std::chrono_literals;
  ClaimHints::Clock::time_point now{};
  ClaimHints hints(1s, [&] { return now; });
  const auto claim = [&](const std::string& queue, ClaimKey walked) {
    hints.advance(queue, hints.start(queue), &walked, 0);
  };
  claim("busy", ClaimKey{0, 10, 5});
  claim("idle", ClaimKey{0, 10, 5});
  now += 1s;
  std::vector<std::string> both{*hints.next_probe()};
  hints.probed(both.back(), nullptr, 0, 1ms);
  now += 19ms;  // the probes' share of the time: see the next test
  both.push_back(*hints.next_probe());
  hints.probed(both.back(), nullptr, 0, 1ms);
  std::sort(both.begin(), both.end());
  EXPECT_EQ(both, (std::vector<std::string>{"busy", "idle"}));
  claim("busy", ClaimKey{0, 11, 6});
  now += 1h;
  EXPECT_EQ(hints.next_probe(), "busy");
  EXPECT_FALSE(hints.next_probe()) << "idle for an hour: no probe";
  hints.probed("busy", nullptr, 0, 1ms);
  now += 19ms;
  // A claim of the idle queue (a notification woke it) that found nothing.
  hints.advance("idle", hints.start("idle"), nullptr, 0);
  EXPECT_EQ(hints.next_probe(), "idle") << "due at once after a claim";
}

// The probes of all queues together take at most a twentieth of the time:
// after a probe that took t, the next of any queue waits 19 t. Without it,
// 100 busy queues probed every second each held the server for a third of a
// drain's time. The queue probed longest ago goes first.
TEST(ClaimHints, ProbesOfAllQueuesTogetherTakeATwentiethOfTheTime) {
  using namespace std::chrono_literals;
  ClaimHints::Clock::time_point now{};
  ClaimHints hints(1s, [&] { return now; });
  const auto claim = [&](const std::string& queue) {
    const ClaimKey walked{0, 10, 5};
    hints.advance(queue, hints.start(queue), &walked, 0);
  };
  for (const char* q : {"a", "b", "c"}) claim(q);
  now += 1s;
  const std::optional<std::string> first = hints.next_probe();
  ASSERT_TRUE(first);
  now += 10ms;
  hints.probed(*first, nullptr, 0, 10ms);
  now += 189ms;
  EXPECT_FALSE(hints.next_probe()) << "19 x 10 ms after the probe ended, not yet";
  now += 1ms;
  const std::optional<std::string> second = hints.next_probe();
  ASSERT_TRUE(second);
  EXPECT_NE(*second, *first);
  hints.probed(*second, nullptr, 0, 0ms);  // a probe that cost nothing pauses nothing
  const std::optional<std::string> third = hints.next_probe();
  ASSERT_TRUE(third);
  EXPECT_NE(*third, *first);
  EXPECT_NE(*third, *second);
  hints.probed(*third, nullptr, 0, 0ms);
  // All three claimed again; the first was probed longest ago.
  for (const char* q : {"a", "b", "c"}) claim(q);
  now += 2s;
  EXPECT_EQ(hints.next_probe(), first) << "the queue probed longest ago goes first";
}

}  // namespace
}  // namespace conveyor::pgqueue
