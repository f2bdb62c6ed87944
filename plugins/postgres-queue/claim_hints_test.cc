// Claim hints: where a claim starts its scan (no server needed).
#include "claim_hints.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace conveyor::pgqueue {
namespace {

constexpr std::chrono::hours kNoReset{1};

bool same(const ClaimKey& a, const ClaimKey& b) { return !(a < b) && !(b < a); }

// A claim under move generation 0 that took its first entry at first.
void took(ClaimHints& hints, const ClaimHints::Start& from, ClaimKey first) {
  hints.advance("q", from, &first, 0);
}

TEST(ClaimHints, UnknownQueueStartsAtTheBeginning) {
  ClaimHints hints(kNoReset);
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{}));
}

TEST(ClaimHints, AdvancesToTheFirstKeyTakenAndNeverBack) {
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

TEST(ClaimHints, ForgetAllAndThePeriodicResetStartOver) {
  ClaimHints hints(kNoReset);
  took(hints, hints.start("q"), ClaimKey{0, 10, 5});
  hints.forget_all();
  EXPECT_TRUE(same(hints.start("q").key, ClaimKey{}));

  ClaimHints short_lived(std::chrono::milliseconds(1));
  took(short_lived, short_lived.start("q"), ClaimKey{0, 10, 5});
  // Wait past the reset period (a deadline, not a race: any later start probes).
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto probe = short_lived.start("q");
  EXPECT_TRUE(probe.probe);
  EXPECT_TRUE(same(probe.key, ClaimKey{}));
  // Other claims meanwhile keep the hint.
  const auto other = short_lived.start("q");
  EXPECT_FALSE(other.probe);
  EXPECT_TRUE(same(other.key, ClaimKey{0, 10, 5}));
  short_lived.abandon(other);
  // The probe found an entry another process appended below the hint.
  took(short_lived, probe, ClaimKey{0, 2, 99});
  EXPECT_TRUE(same(short_lived.start("q").key, ClaimKey{0, 2, 99}));
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
  auto early = hints.start("q");
  EXPECT_FALSE(early.probe) << "the next probe is due 20 x 200 ms = 4 s after the walk";
  hints.abandon(early);
  now += 100ms;
  auto probe = hints.start("q");
  ASSERT_TRUE(probe.probe);
  // This probe takes 5 s (a backlog of a million claimed entries).
  now += 5s;
  took(hints, probe, ClaimKey{0, 10, 7});
  now += 29s;
  auto waiting = hints.start("q");
  EXPECT_FALSE(waiting.probe) << "20 x 5 s is capped at 30 s, not yet reached";
  EXPECT_TRUE(same(waiting.key, ClaimKey{0, 10, 7}));
  hints.abandon(waiting);
  now += 1s;
  auto capped = hints.start("q");
  EXPECT_TRUE(capped.probe) << "at most 30 s between probes";
  // A quick probe brings the period back down to the reset period.
  now += 10ms;
  took(hints, capped, ClaimKey{0, 10, 8});
  now += 999ms;
  auto soon = hints.start("q");
  EXPECT_FALSE(soon.probe);
  hints.abandon(soon);
  now += 1ms;
  EXPECT_TRUE(hints.start("q").probe);
}

}  // namespace
}  // namespace conveyor::pgqueue
