// Durable rate-limit overrides and the change marker.
#include "fixture.hpp"

#include <cstddef>

#include <cmath>
#include <limits>

namespace conveyor::conformance {
namespace {

class RateLimits : public ConformanceTest {};
class ChangeMarker : public ConformanceTest {};

std::string queues_of(const std::vector<LimitCopy>& limits) {
  std::string out;
  for (const LimitCopy& l : limits) out += (out.empty() ? "" : ",") + l.queue;
  return out;
}

TEST_F(RateLimits, SetIsListedWithItsValues) {
  auto h = open();
  Status s = h->set_rate_limit("email", 2.5, 7, kT0 + 5);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<LimitCopy> l = h->limits();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].queue, "email");
  EXPECT_EQ(l[0].rate_per_sec, 2.5);
  EXPECT_EQ(l[0].burst, 7u);
  EXPECT_EQ(l[0].updated_at_us, kT0 + 5) << "updated_at_us must be set_rate_limit's now_us";
  EXPECT_GE(l[0].struct_size, offsetof(conveyor_rate_limit, scope));  // the 1.0 size
}

TEST_F(RateLimits, FractionalAndExtremeRatesRoundTrip) {
  auto h = open();
  ASSERT_TRUE(h->set_rate_limit("slow", 0.001, 1, kT0).ok());
  ASSERT_TRUE(h->set_rate_limit("third", 1.0 / 3.0, 2, kT0).ok());
  ASSERT_TRUE(h->set_rate_limit("fast", 1e6, 4'000'000'000u, kT0).ok());
  std::vector<LimitCopy> l = h->limits();
  ASSERT_EQ(l.size(), 3u) << queues_of(l);
  EXPECT_EQ(l[0].queue, "fast");
  EXPECT_EQ(l[0].rate_per_sec, 1e6);
  EXPECT_EQ(l[0].burst, 4'000'000'000u) << "burst is a uint32_t: every value must survive";
  EXPECT_EQ(l[1].rate_per_sec, 0.001);
  EXPECT_EQ(l[2].rate_per_sec, 1.0 / 3.0) << "rate_per_sec is a double: store it exactly";
}

TEST_F(RateLimits, SetReplacesTheOverride) {
  auto h = open();
  ASSERT_TRUE(h->set_rate_limit("email", 2.5, 7, kT0).ok());
  ASSERT_TRUE(h->set_rate_limit("email", 40, 1, kT0 + kSecond).ok());
  std::vector<LimitCopy> l = h->limits();
  ASSERT_EQ(l.size(), 1u) << "storage_plugin.h set_rate_limit: \"Sets (creates or replaces)\"";
  EXPECT_EQ(l[0].rate_per_sec, 40);
  EXPECT_EQ(l[0].burst, 1u);
  EXPECT_EQ(l[0].updated_at_us, kT0 + kSecond);
}

TEST_F(RateLimits, ListIsInQueueNameOrder) {
  auto h = open();
  for (const char* q : {"charlie", "alpha", "delta", "bravo"})
    ASSERT_TRUE(h->set_rate_limit(q, 1, 1, kT0).ok());
  EXPECT_EQ(queues_of(h->limits()), "alpha,bravo,charlie,delta")
      << "storage_plugin.h list_rate_limits: \"in queue-name order\"";
}

TEST_F(RateLimits, DeleteRemovesOnlyThatOverride) {
  auto h = open();
  for (const char* q : {"alpha", "bravo", "charlie"})
    ASSERT_TRUE(h->set_rate_limit(q, 1, 1, kT0).ok());
  Status s = h->delete_rate_limit("bravo");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(queues_of(h->limits()), "alpha,charlie");
}

TEST_F(RateLimits, DeleteMissingIsNotFound) {
  auto h = open();
  Status never = h->delete_rate_limit("never");
  EXPECT_STATUS(never.code, CONVEYOR_E_NOT_FOUND)
      << never << " (storage_plugin.h delete_rate_limit: \"CONVEYOR_E_NOT_FOUND when the queue "
      << "has none\")";
  ASSERT_TRUE(h->set_rate_limit("once", 1, 1, kT0).ok());
  ASSERT_TRUE(h->delete_rate_limit("once").ok());
  Status twice = h->delete_rate_limit("once");
  EXPECT_STATUS(twice.code, CONVEYOR_E_NOT_FOUND) << "deleting again: " << twice;
}

TEST_F(RateLimits, OverrideNeedsNoJobs) {
  auto h = open();
  ASSERT_TRUE(h->set_rate_limit("future", 5, 5, kT0).ok());
  EXPECT_EQ(queues_of(h->limits()), "future");
}

// Each invalid value must be refused and leave nothing behind.
void expect_rejected(Handle& h, double rate, uint32_t burst, const char* what) {
  Status s = h.set_rate_limit("email", rate, burst, kT0);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
      << what << ": " << s << " (storage_plugin.h set_rate_limit: \"rate_per_sec > 0 and finite, "
      << "burst >= 1, else CONVEYOR_E_INVALID\")";
  EXPECT_TRUE(h.limits().empty()) << what << " was stored";
}

TEST_F(RateLimits, RejectsZeroOrNegativeRate) {
  auto h = open();
  expect_rejected(*h, 0.0, 1, "rate 0");
  expect_rejected(*h, -0.0, 1, "rate -0");
  expect_rejected(*h, -1.0, 1, "rate -1");
  expect_rejected(*h, -std::numeric_limits<double>::denorm_min(), 1, "rate -denorm_min");
}

TEST_F(RateLimits, RejectsNaNRate) {
  auto h = open();
  expect_rejected(*h, std::numeric_limits<double>::quiet_NaN(), 1, "rate NaN");
  expect_rejected(*h, -std::numeric_limits<double>::quiet_NaN(), 1, "rate -NaN");
}

TEST_F(RateLimits, RejectsInfiniteRate) {
  auto h = open();
  expect_rejected(*h, std::numeric_limits<double>::infinity(), 1, "rate +inf");
  expect_rejected(*h, -std::numeric_limits<double>::infinity(), 1, "rate -inf");
}

TEST_F(RateLimits, RejectsZeroBurst) {
  auto h = open();
  expect_rejected(*h, 10.0, 0, "burst 0");
}

TEST_F(RateLimits, RejectedReplacementKeepsTheOldOverride) {
  auto h = open();
  ASSERT_TRUE(h->set_rate_limit("email", 3, 3, kT0).ok());
  Status s = h->set_rate_limit("email", 0, 3, kT0 + 1);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID) << s;
  std::vector<LimitCopy> l = h->limits();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].rate_per_sec, 3) << "an invalid replacement changed the stored override";
}

// ---- change marker ----

constexpr const char* kMarkerRule =
    " (storage_plugin.h change_marker: \"a number that changes ... whenever any process sets or "
    "deletes an override or pauses or resumes a queue\")";

TEST_F(ChangeMarker, IsStableWhenNothingChanges) {
  auto h = open();
  const int64_t a = h->marker();
  const int64_t b = h->marker();
  EXPECT_EQ(a, b) << "the marker changed between two reads with no change in between";
}

TEST_F(ChangeMarker, ChangesWhenAnOverrideIsSet) {
  auto h = open();
  const int64_t before = h->marker();
  ASSERT_TRUE(h->set_rate_limit("email", 1, 1, kT0).ok());
  EXPECT_NE(h->marker(), before) << kMarkerRule;
}

TEST_F(ChangeMarker, ChangesWhenAnOverrideIsReplaced) {
  auto h = open();
  ASSERT_TRUE(h->set_rate_limit("email", 1, 1, kT0).ok());
  const int64_t before = h->marker();
  ASSERT_TRUE(h->set_rate_limit("email", 2, 2, kT0 + 1).ok());
  EXPECT_NE(h->marker(), before) << kMarkerRule;
}

TEST_F(ChangeMarker, ChangesWhenAnOverrideIsDeleted) {
  auto h = open();
  ASSERT_TRUE(h->set_rate_limit("email", 1, 1, kT0).ok());
  const int64_t before = h->marker();
  ASSERT_TRUE(h->delete_rate_limit("email").ok());
  EXPECT_NE(h->marker(), before) << kMarkerRule;
}

TEST_F(ChangeMarker, ChangesWhenAQueueIsPaused) {
  auto h = open();
  h->add(JobSpec{});
  const int64_t before = h->marker();
  h->pause("default", true, kT0);
  EXPECT_NE(h->marker(), before) << kMarkerRule;
}

TEST_F(ChangeMarker, ChangesWhenAQueueIsResumed) {
  auto h = open();
  h->pause("default", true, kT0);
  const int64_t before = h->marker();
  h->pause("default", false, kT0 + 1);
  EXPECT_NE(h->marker(), before) << kMarkerRule;
}

TEST_F(ChangeMarker, EveryChangeInASequenceIsSeen) {
  auto h = open();
  int64_t last = h->marker();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(h->set_rate_limit("email", 1 + i, 1, kT0 + i).ok());
    const int64_t now = h->marker();
    EXPECT_NE(now, last) << "change " << i + 1 << " of 5 was not seen" << kMarkerRule;
    last = now;
  }
}

TEST_F(ChangeMarker, IsSharedByEveryHandle) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  auto writer = open();
  auto reader = open();
  const int64_t before = reader->marker();
  ASSERT_TRUE(writer->set_rate_limit("email", 1, 1, kT0).ok());
  EXPECT_NE(reader->marker(), before)
      << "another handle's override change did not move this handle's marker" << kMarkerRule;
  std::vector<LimitCopy> l = reader->limits();
  ASSERT_EQ(l.size(), 1u) << "another handle's override is not listed";
  EXPECT_EQ(l[0].queue, "email");
}

// ---- ABI 1.2: scope ----

class RateLimitScope : public ConformanceTest {};

TEST_F(RateLimitScope, SetRateLimitV2StoresTheScopeListReportsIt) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, set_rate_limit_v2);
  ASSERT_TRUE(h->set_rate_limit_v2("fleet", 2.5, 7, CONVEYOR_SCOPE_FLEET, kT0 + 3).ok());
  ASSERT_TRUE(h->set_rate_limit_v2("local", 4, 2, CONVEYOR_SCOPE_PROCESS, kT0 + 4).ok());
  std::vector<LimitCopy> l = h->limits();
  ASSERT_EQ(l.size(), 2u) << queues_of(l);
  EXPECT_EQ(l[0].queue, "fleet");
  EXPECT_TRUE(l[0].reports_scope) << "struct_size " << l[0].struct_size
                                  << " does not cover conveyor_rate_limit.scope";
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(l[0].rate_per_sec, 2.5);
  EXPECT_EQ(l[0].burst, 7u);
  EXPECT_EQ(l[0].updated_at_us, kT0 + 3);
  EXPECT_EQ(l[1].queue, "local");
  EXPECT_EQ(l[1].scope, CONVEYOR_SCOPE_PROCESS);
}

TEST_F(RateLimitScope, ReplacingChangesTheScope) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, set_rate_limit_v2);
  ASSERT_TRUE(h->set_rate_limit_v2("q", 1, 1, CONVEYOR_SCOPE_FLEET, kT0).ok());
  ASSERT_TRUE(h->set_rate_limit_v2("q", 1, 1, CONVEYOR_SCOPE_PROCESS, kT0).ok());
  std::vector<LimitCopy> l = h->limits();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_PROCESS);
  // The 1.0 slot stores PROCESS, replacing a fleet limit too.
  ASSERT_TRUE(h->set_rate_limit_v2("q", 1, 1, CONVEYOR_SCOPE_FLEET, kT0).ok());
  ASSERT_TRUE(h->set_rate_limit("q", 3, 2, kT0 + 1).ok());
  l = h->limits();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_PROCESS)
      << "storage_plugin.h conveyor_rate_limit.scope: \"CONVEYOR_SCOPE_PROCESS when set by "
         "set_rate_limit\"";
  EXPECT_EQ(l[0].rate_per_sec, 3);
}

TEST_F(RateLimitScope, SetRateLimitReportsProcess) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, set_rate_limit_v2);
  ASSERT_TRUE(h->set_rate_limit("old", 5, 5, kT0).ok());
  std::vector<LimitCopy> l = h->limits();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(l[0].reports_scope);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_PROCESS);
}

TEST_F(RateLimitScope, UnknownScopeIsInvalidAndStoresNothing) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, set_rate_limit_v2);
  ASSERT_TRUE(h->set_rate_limit_v2("kept", 2, 2, CONVEYOR_SCOPE_FLEET, kT0).ok());
  for (int32_t scope : {2, -1, 1000}) {
    EXPECT_STATUS(h->set_rate_limit_v2("new", 1, 1, scope, kT0).code, CONVEYOR_E_INVALID)
        << "scope " << scope;
    EXPECT_STATUS(h->set_rate_limit_v2("kept", 9, 9, scope, kT0).code, CONVEYOR_E_INVALID)
        << "scope " << scope;
  }
  std::vector<LimitCopy> l = h->limits();
  ASSERT_EQ(l.size(), 1u) << queues_of(l);
  EXPECT_EQ(l[0].rate_per_sec, 2) << "a refused replacement changed the override";
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_FLEET);
}

TEST_F(RateLimitScope, InvalidRateOrBurstIsRefusedAsBySetRateLimit) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, set_rate_limit_v2);
  EXPECT_STATUS(h->set_rate_limit_v2("q", 0, 1, CONVEYOR_SCOPE_FLEET, kT0).code,
                CONVEYOR_E_INVALID);
  EXPECT_STATUS(h->set_rate_limit_v2("q", std::numeric_limits<double>::infinity(), 1,
                                     CONVEYOR_SCOPE_FLEET, kT0)
                    .code,
                CONVEYOR_E_INVALID);
  EXPECT_STATUS(h->set_rate_limit_v2("q", 1, 0, CONVEYOR_SCOPE_FLEET, kT0).code,
                CONVEYOR_E_INVALID);
  EXPECT_TRUE(h->limits().empty());
}

TEST_F(RateLimitScope, SetRateLimitV2ChangesTheMarker) {
  auto h = open();
  CONFORMANCE_REQUIRE_SLOT(h, set_rate_limit_v2);
  const int64_t before = h->marker();
  ASSERT_TRUE(h->set_rate_limit_v2("q", 1, 1, CONVEYOR_SCOPE_FLEET, kT0).ok());
  const int64_t after = h->marker();
  EXPECT_NE(after, before) << kMarkerRule;
  ASSERT_TRUE(h->set_rate_limit_v2("q", 1, 1, CONVEYOR_SCOPE_PROCESS, kT0).ok());
  EXPECT_NE(h->marker(), after) << "changing only the scope is a change too";
}

}  // namespace
}  // namespace conveyor::conformance
