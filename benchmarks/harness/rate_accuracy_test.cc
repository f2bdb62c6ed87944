#include "rate_accuracy.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace conveyor::bench {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// A perfect limiter: burst at t0, then one start every 1/rate.
std::vector<int64_t> perfect(const RateLimit& l, int64_t t0_ns, double seconds) {
  std::vector<int64_t> s(l.burst, t0_ns);
  const int64_t step = static_cast<int64_t>(1e9 / l.rate_per_sec);
  for (int64_t t = t0_ns + step; t <= t0_ns + static_cast<int64_t>(seconds * 1e9); t += step)
    s.push_back(t);
  return s;
}

TEST(AnalyzeRate, PerfectLimiterHasNoExcessAndNoError) {
  const RateLimit l{50, 10};
  auto a = analyze_rate(perfect(l, 1'000'000, 10), l, 11 * kSecond);
  EXPECT_EQ(a.started, 10u + 500u);
  EXPECT_EQ(a.worst_excess, 0.0);
  EXPECT_NEAR(a.achieved_per_sec, 50.0, 1e-6);
  EXPECT_NEAR(a.overall_per_sec, 50.0, 1e-6);
  EXPECT_NEAR(a.error_pct, 0.0, 1e-6);
  EXPECT_NEAR(a.first_start_s, 0.001, 1e-12);
}

TEST(AnalyzeRate, OneStartAheadOfTheBoundIsAnExcessOfOne) {
  const RateLimit l{50, 10};
  auto s = perfect(l, 0, 2);
  // An 11th job at t = 0: one more than the burst allows at that instant.
  s.insert(s.begin(), 0);
  auto a = analyze_rate(s, l, 3 * kSecond);
  EXPECT_NEAR(a.worst_excess, 1.0, 1e-9);
  EXPECT_EQ(a.worst_excess_at_s, 0.0);
}

TEST(AnalyzeRate, TooFastAfterTheBurstShowsAsErrorAndExcess) {
  const RateLimit l{100, 5};
  // 101/s: about 1% fast; after 10 s about 10 jobs ahead of the bound.
  std::vector<int64_t> s(5, 0);
  for (int i = 1; i <= 1010; ++i) s.push_back(static_cast<int64_t>(i * (1e9 / 101.0)));
  auto a = analyze_rate(s, l, 20 * kSecond);
  EXPECT_NEAR(a.error_pct, 1.0, 0.01);
  EXPECT_NEAR(a.overall_per_sec, 101.0, 0.01);
  EXPECT_GT(a.worst_excess, 9.0);
}

// A first claim 40 ms late, then a catch-up within the bound: the start-up
// inflates the overall figure, not the steady rate.
TEST(AnalyzeRate, SlowFirstClaimDoesNotSkewTheSteadyRate) {
  const RateLimit l{5000, 500};
  const int64_t step = 200'000;             // 1/5000 s
  std::vector<int64_t> s(700, 40'000'000);  // burst + 40 ms of tokens, all at 40 ms
  for (int64_t t = 40'000'000 + step; t <= 10 * kSecond; t += step) s.push_back(t);
  auto a = analyze_rate(s, l, 10 * kSecond);
  EXPECT_EQ(a.worst_excess, 0.0);
  EXPECT_NEAR(a.error_pct, 0.0, 0.001);
  EXPECT_GT(a.overall_per_sec, 5000.0 * 1.003);
}

TEST(AnalyzeRate, StartsAfterTheWindowAreIgnored) {
  const RateLimit l{10, 1};
  std::vector<int64_t> s = {0, kSecond / 10, 2 * kSecond / 10, 5 * kSecond, 5 * kSecond};
  auto a = analyze_rate(s, l, kSecond);
  EXPECT_EQ(a.started, 3u);
  EXPECT_EQ(a.worst_excess, 0.0);
}

TEST(AnalyzeRate, NoMoreThanTheBurstHasNoRate) {
  const RateLimit l{10, 5};
  auto a = analyze_rate({0, 0, 0}, l, kSecond);
  EXPECT_EQ(a.started, 3u);
  EXPECT_EQ(a.achieved_per_sec, 0.0);
  EXPECT_EQ(a.overall_per_sec, 0.0);
  EXPECT_EQ(a.worst_excess, 0.0);
  EXPECT_EQ(analyze_rate({}, l, kSecond).started, 0u);
}

TEST(WorstWindowExcess, PerfectLimiterHasNone) {
  const RateLimit l{50, 10};
  EXPECT_EQ(worst_window_excess(perfect(l, 3 * kSecond, 10), l).excess, 0.0);
}

TEST(WorstWindowExcess, ABurstInTheMiddleIsFoundWhereAWindowFromTheStartMissesIt) {
  const RateLimit l{50, 10};
  // 5 s at half the rate banks a full bucket; then 15 starts in one instant.
  std::vector<int64_t> s;
  for (int64_t t = 0; t < 5 * kSecond; t += kSecond / 25) s.push_back(t);
  for (int i = 0; i < 15; ++i) s.push_back(5 * kSecond);
  EXPECT_EQ(analyze_rate(s, l, 6 * kSecond).worst_excess, 0.0) << "within burst + rate * t";
  const WindowExcess w = worst_window_excess(s, l);
  EXPECT_NEAR(w.excess, 5.0, 1e-9) << "15 at once against a burst of 10";
  EXPECT_NEAR(w.at_s, 5.0, 1e-9);
  EXPECT_NEAR(w.length_s, 0.0, 1e-9);
}

TEST(WorstWindowExcess, TwoBucketsAtTheRateEachExceedByTheRateTimesTheirSpan) {
  const RateLimit l{50, 10};
  std::vector<int64_t> a = perfect(l, 0, 10), b = perfect(l, kSecond / 100, 10);
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  const WindowExcess w = worst_window_excess(a, l);
  // Twice the starts of one bucket over ~10 s: about burst + 50 * 10 too many.
  EXPECT_GT(w.excess, 500.0);
  EXPECT_LT(w.excess, 512.0);
}

}  // namespace
}  // namespace conveyor::bench
