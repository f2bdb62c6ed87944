#include "sample_stats.hpp"

#include <gtest/gtest.h>

#include <numeric>

namespace conveyor::bench {
namespace {

TEST(Percentile, NearestRankOnOneToHundred) {
  std::vector<double> v(100);
  std::iota(v.begin(), v.end(), 1.0);
  EXPECT_EQ(percentile(v, 50), 50.0);
  EXPECT_EQ(percentile(v, 95), 95.0);
  EXPECT_EQ(percentile(v, 99), 99.0);
  EXPECT_EQ(percentile(v, 100), 100.0);
  EXPECT_EQ(percentile(v, 0.1), 1.0);
}

TEST(Percentile, SmallSamplesRoundUpToARealSample) {
  EXPECT_EQ(percentile({7.0}, 99), 7.0);
  EXPECT_EQ(percentile({1.0, 2.0, 3.0}, 50), 2.0);
  EXPECT_EQ(percentile({1.0, 2.0, 3.0}, 99), 3.0);
  EXPECT_EQ(percentile({}, 50), 0.0);
}

TEST(Median, OddEvenAndUnsorted) {
  EXPECT_EQ(median({3, 1, 2}), 2.0);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median({}), 0.0);
}

}  // namespace
}  // namespace conveyor::bench
