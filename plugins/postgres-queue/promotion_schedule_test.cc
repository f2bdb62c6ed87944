// The promotion schedule: when a claim must promote `later` rows first (no
// server needed).
#include "promotion_schedule.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace conveyor::pgqueue {
namespace {

constexpr std::chrono::hours kNoCheck{1};

// Whether a claim of q at now must promote; if so, the promotion reports next.
bool claim_promotes(PromotionSchedule& s, int64_t now, std::optional<int64_t> next) {
  uint64_t started = 0;
  if (!s.due("q", now, &started)) return false;
  s.promoted("q", started, next);
  return true;
}

TEST(PromotionSchedule, AQueueNeverCheckedIsCheckedOnItsFirstClaim) {
  PromotionSchedule s(kNoCheck);
  EXPECT_TRUE(claim_promotes(s, 100, std::nullopt));
  EXPECT_FALSE(claim_promotes(s, 200, std::nullopt));  // `later` held nothing for q
}

TEST(PromotionSchedule, PromotesWhenTheEarliestRowTheDatabaseReportedIsDue) {
  PromotionSchedule s(kNoCheck);
  EXPECT_TRUE(claim_promotes(s, 100, 500));
  EXPECT_FALSE(claim_promotes(s, 499, 500));
  EXPECT_TRUE(claim_promotes(s, 500, std::nullopt));
  EXPECT_FALSE(claim_promotes(s, 10'000, std::nullopt));
}

TEST(PromotionSchedule, RowsThisProcessAddsAreDueOnTime) {
  PromotionSchedule s(kNoCheck);
  EXPECT_TRUE(claim_promotes(s, 100, std::nullopt));
  s.added("q", 300);
  s.added("other", 150);  // another queue's row is no reason for q
  EXPECT_FALSE(claim_promotes(s, 299, 300));
  EXPECT_TRUE(claim_promotes(s, 300, std::nullopt));
  s.added_somewhere(400);  // a retry of a queue not named
  EXPECT_TRUE(claim_promotes(s, 400, std::nullopt));
}

TEST(PromotionSchedule, ARowAddedWhileAPromotionRanIsNotForgotten) {
  PromotionSchedule s(kNoCheck);
  uint64_t started = 0;
  ASSERT_TRUE(s.due("q", 100, &started));
  s.added("q", 200);  // after the promotion's snapshot: not in its report
  s.promoted("q", started, std::nullopt);
  EXPECT_TRUE(claim_promotes(s, 200, std::nullopt));
}

TEST(PromotionSchedule, RowsOfOtherProcessesAreFoundByThePeriodicCheck) {
  PromotionSchedule s(std::chrono::milliseconds(1));
  EXPECT_TRUE(claim_promotes(s, 100, std::nullopt));
  // Past the check period (a deadline, not a race: any later claim checks).
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(claim_promotes(s, 100, std::nullopt));
}

}  // namespace
}  // namespace conveyor::pgqueue
