#include "key_accuracy.hpp"

#include <gtest/gtest.h>

namespace conveyor::bench {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// Key k starts its jobs at first + i / rate, i = 0..n-1: exactly its limit
// (burst 1) from its first start.
void add_key(std::vector<KeyStart>& s, uint32_t key, int64_t first, int n, double rate) {
  for (int i = 0; i < n; ++i) s.push_back({key, first + static_cast<int64_t>(i * kSecond / rate)});
}

TEST(AnalyzeKeys, KeysAtTheirLimitHaveNoExcessAndShareTheWindow) {
  const RateLimit limit{2, 1};
  std::vector<KeyStart> s;
  add_key(s, 0, kSecond / 10, 20, 2);
  add_key(s, 1, kSecond / 5, 20, 2);
  const KeyAccuracy a = analyze_keys(s, 3, limit, kSecond, 9 * kSecond);
  EXPECT_EQ(a.started, 40u);
  EXPECT_EQ(a.worst_excess_from_first, 0.0);
  EXPECT_EQ(a.worst_excess_from_start, 0.0);
  // Each key started 16 jobs in [1 s, 9 s]; key 2 none.
  EXPECT_EQ(a.count_min, 0.0);
  EXPECT_EQ(a.count_median, 16.0);
  EXPECT_EQ(a.count_max, 16.0);
  EXPECT_NEAR(a.jobs_per_sec, 32.0 / 8.0, 1e-9);
}

TEST(AnalyzeKeys, OneKeyAheadOfItsBucketIsFoundFromItsFirstStart) {
  const RateLimit limit{2, 1};
  std::vector<KeyStart> s;
  add_key(s, 0, 0, 10, 2);
  // Key 1 starts late (5 s), then runs two jobs at once: one more than its
  // burst allows from its first start, though within burst + rate * t from
  // engine start (1 + 2 * 5 = 11).
  add_key(s, 1, 5 * kSecond, 3, 2);
  s.push_back({1, 5 * kSecond});
  const KeyAccuracy a = analyze_keys(s, 2, limit, 0, 10 * kSecond);
  EXPECT_NEAR(a.worst_excess_from_first, 1.0, 1e-9);
  EXPECT_EQ(a.worst_key, 1u);
  EXPECT_EQ(a.worst_excess_from_start, 0.0);
}

TEST(AnalyzeKeys, ExcessFromEngineStartIsSound) {
  const RateLimit limit{2, 1};
  std::vector<KeyStart> s = {{0, 0}, {0, 0}};  // two at t = 0, burst 1
  const KeyAccuracy a = analyze_keys(s, 1, limit, 0, kSecond);
  EXPECT_NEAR(a.worst_excess_from_start, 1.0, 1e-9);
  EXPECT_NEAR(a.worst_excess_from_first, 1.0, 1e-9);
}

TEST(KeyStartLog, KeepsWhatFitsAndCountsTheRest) {
  KeyStartLog log(2);
  log.record(3, 10);
  log.record(4, 20);
  log.record(5, 30);
  EXPECT_EQ(log.size(), 2u);
  EXPECT_EQ(log.dropped(), 1u);
  const std::vector<KeyStart> e = log.entries();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].key, 4u);
  EXPECT_EQ(e[1].t_ns, 20);
}

}  // namespace
}  // namespace conveyor::bench
