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
  both.push_back(*hints.next_probe());
  hints.probed(both.back(), nullptr, 0, 1ms);
  std::sort(both.begin(), both.end());
  EXPECT_EQ(both, (std::vector<std::string>{"busy", "idle"}));
  claim("busy", ClaimKey{0, 11, 6});
  now += 1h;
  EXPECT_EQ(hints.next_probe(), "busy");
  EXPECT_FALSE(hints.next_probe()) << "idle for an hour: no probe";
  hints.probed("busy", nullptr, 0, 1ms);
  // A claim of the idle queue (a notification woke it) that found nothing.
  hints.advance("idle", hints.start("idle"), nullptr, 0);
  EXPECT_EQ(hints.next_probe(), "idle") << "due at once after a claim";
}

// The probes of all queues together take at most a twentieth of the time:
// a probe that took t is charged 20 t, and the charges may start up to 1 s
// behind the clock, so cheap probes of many queues run one after another
// while dear ones are spaced out. Without it, 100 busy queues probed every
// second each held the server for a third of a drain's time. The queue
// probed longest ago goes first.
TEST(ClaimHints, ProbesOfAllQueuesTogetherTakeATwentiethOfTheTime) {
  using namespace std::chrono_literals;
  ClaimHints::Clock::time_point now{};
  ClaimHints hints(1s, [&] { return now; });
  const auto claim_all = [&] {
    for (const char* q : {"a", "b", "c"}) {
      const ClaimKey walked{0, 10, 5};
      hints.advance(q, hints.start(q), &walked, 0);
    }
  };
  claim_all();
  now += 10s;
  // Cheap probes (1 ms, charged 20 ms each, from 1 s back): all three now.
  std::vector<std::string> order;
  for (int i = 0; i < 3; ++i) {
    const std::optional<std::string> q = hints.next_probe();
    ASSERT_TRUE(q) << "cheap probe " << i << " held back";
    now += 1ms;
    hints.probed(*q, nullptr, 0, 1ms);
    order.push_back(*q);
  }
  // Dear probes (100 ms, charged 2 s each): the first runs on the credit,
  // the next waits until the charges are paid.
  claim_all();
  now += 2s;  // 12.003 s; the charges reached 9.061 s
  EXPECT_EQ(hints.next_probe(), order[0]) << "the queue probed longest ago goes first";
  now += 100ms;
  hints.probed(order[0], nullptr, 0, 100ms);  // charged from 11.103 s to 13.103 s
  now += 899ms;
  EXPECT_FALSE(hints.next_probe()) << "13.002 s: the charges reach 13.103 s";
  now += 100ms;
  EXPECT_FALSE(hints.next_probe()) << "13.102 s: not yet";
  now += 1ms;
  EXPECT_EQ(hints.next_probe(), order[1]);
  now += 100ms;
  hints.probed(order[1], nullptr, 0, 100ms);  // at 13.203 s: from 13.103 s to 15.103 s
  now += 1899ms;
  EXPECT_FALSE(hints.next_probe()) << "15.102 s: the charges reach 15.103 s";
  now += 1ms;
  EXPECT_EQ(hints.next_probe(), order[2]);
}

}  // namespace
}  // namespace conveyor::pgqueue
