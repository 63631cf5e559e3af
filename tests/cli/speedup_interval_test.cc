#include "cli/speedup_interval.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace specdec::cli {
namespace {

TEST(SpeedupIntervalTest, TheSpeedupIsTheRatioOfTotalsInsideItsInterval) {
  const std::vector<double> ar = {10, 20, 30, 40}, method = {8, 25, 15, 40};
  const SpeedupInterval r = BootstrapSpeedup(ar, method);
  EXPECT_DOUBLE_EQ(r.speedup, 100.0 / 88.0);
  EXPECT_LT(r.low, r.speedup);
  EXPECT_GT(r.high, r.speedup);
  // Seeded: the same times, the same interval.
  const SpeedupInterval again = BootstrapSpeedup(ar, method);
  EXPECT_EQ(again.low, r.low);
  EXPECT_EQ(again.high, r.high);
}

TEST(SpeedupIntervalTest, APromptSetWithOneRatioHasNoSpread) {
  const std::vector<double> ar = {3, 7, 11, 40}, method = {1.5, 3.5, 5.5, 20};
  const SpeedupInterval r = BootstrapSpeedup(ar, method);
  EXPECT_DOUBLE_EQ(r.speedup, 2.0);
  EXPECT_DOUBLE_EQ(r.low, 2.0);
  EXPECT_DOUBLE_EQ(r.high, 2.0);
  const SpeedupInterval one = BootstrapSpeedup(std::vector<double>{4}, std::vector<double>{5});
  EXPECT_DOUBLE_EQ(one.low, 0.8);
  EXPECT_DOUBLE_EQ(one.high, 0.8);
  EXPECT_EQ(BootstrapSpeedup({}, {}).speedup, 0);
}

// Simulated benches: 40 prompts whose AR time varies 5-fold, the method 1.1x faster on average
// with 20% noise per prompt. Over 200 such sets the 95% interval holds the mean speedup about 95%
// of the time (191 with these seeds). The count is fixed by the seeds; the bounds are those a
// true 95% coverage stays within with probability about 0.997 (180-198 of 200). An interval of
// the 25th-75th percentiles covers 98 and fails.
TEST(SpeedupIntervalTest, TheIntervalCoversTheTrueSpeedupAboutNineteenTimesInTwenty) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> length(1, 5);
  std::normal_distribution<double> noise(1.0, 0.2);
  int covered = 0;
  double width = 0;
  for (int set = 0; set < 200; ++set) {
    std::vector<double> ar, method;
    for (int p = 0; p < 40; ++p) {
      const double t = length(rng);
      ar.push_back(t);
      method.push_back(t / 1.1 * std::max(0.2, noise(rng)));
    }
    const SpeedupInterval r = BootstrapSpeedup(ar, method, 1000, static_cast<uint64_t>(set));
    // The ratio of totals estimates 1.1 / E[noise] (= 1.1 here, the noise having mean 1).
    covered += r.low <= 1.1 && 1.1 <= r.high;
    width += r.high - r.low;
  }
  EXPECT_GE(covered, 180);
  EXPECT_LE(covered, 198);
  EXPECT_GT(width / 200, 0.05);  // 20% noise over 40 prompts: a few percent either way
  EXPECT_LT(width / 200, 0.3);
}

}  // namespace
}  // namespace specdec::cli
