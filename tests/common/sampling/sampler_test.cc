#include "common/sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "common/sampling/stats.h"
#include "common/util/status_matchers.h"

namespace specdec::sampling {
namespace {

constexpr double kPValue = 1e-4;
const float kInf = std::numeric_limits<float>::infinity();

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  std::vector<float> l = {0.5f, 2.f, 2.f, -1.f};
  EXPECT_EQ(Argmax(l), 1);
  auto p = WarpedProbs(l, {});
  EXPECT_EQ(p, (std::vector<float>{0, 1, 0, 0}));
  Rng rng(1);
  const uint64_t before = Rng(1).Next();
  EXPECT_EQ(SampleToken(l, {}, rng), 1);
  EXPECT_EQ(rng.Next(), before);  // greedy consumed no randomness
}

TEST(Sampler, TemperatureMatchesSoftmax) {
  std::vector<float> l = {1.f, 2.f, 0.5f, -3.f};
  for (float t : {0.3f, 1.f, 2.5f}) {
    auto p = WarpedProbs(l, {t, 0, 1.f, 0});
    double z = 0;
    for (float v : l) z += std::exp(v / t);
    for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(p[i], std::exp(l[i] / t) / z, 1e-6);
  }
}

TEST(Sampler, TopKKeepsExactlyK) {
  std::vector<float> l = {1.f, 5.f, 3.f, 3.f, 0.f, 4.f};
  auto p = WarpedProbs(l, {1.f, 3, 1.f, 0});
  int nonzero = 0;
  for (float v : p) nonzero += v > 0;
  EXPECT_EQ(nonzero, 3);
  EXPECT_GT(p[1], 0);
  EXPECT_GT(p[5], 0);
  EXPECT_GT(p[2], 0);  // tie 3 vs 3: lower id kept
  EXPECT_EQ(p[3], 0);
  double s = 0;
  for (float v : p) s += v;
  EXPECT_NEAR(s, 1.0, 1e-6);
}

TEST(Sampler, TopPKeepsMinimalNucleus) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (as logits of their logs).
  std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  auto p = WarpedProbs(l, {1.f, 0, 0.79f, 0});  // 0.5 + 0.3 reaches it
  EXPECT_NEAR(p[1], 0.5 / 0.8, 1e-5);
  EXPECT_NEAR(p[3], 0.3 / 0.8, 1e-5);
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[2], 0);
  p = WarpedProbs(l, {1.f, 0, 0.81f, 0});  // needs the third token
  EXPECT_GT(p[0], 0);
  EXPECT_EQ(p[2], 0);
  p = WarpedProbs(l, {1.f, 0, 0.1f, 0});  // only the top token
  EXPECT_FLOAT_EQ(p[1], 1.f);
}

TEST(Sampler, NegativeInfinityLogitsGetZeroMass) {
  std::vector<float> l = {-kInf, 0.f, -kInf, 1.f};
  auto p = WarpedProbs(l, {1.f, 0, 1.f, 0});
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[2], 0);
  Rng rng(3);
  for (int i = 0; i < 1000; ++i) {
    int t = SampleFromProbs(p, rng);
    EXPECT_TRUE(t == 1 || t == 3);
  }
}

TEST(Sampler, ValidationNamesFieldAndRange) {
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams({-1.f, 0, 1.f, 0}),
                        absl::StatusCode::kInvalidArgument, "temperature must be in [0, 100]");
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams({std::nanf(""), 0, 1.f, 0}),
                        absl::StatusCode::kInvalidArgument, "temperature");
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams({1.f, -2, 1.f, 0}),
                        absl::StatusCode::kInvalidArgument, "top_k must be >= 0");
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams({1.f, 0, 0.f, 0}),
                        absl::StatusCode::kInvalidArgument, "top_p must be in (0, 1]");
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams({1.f, 0, 1.5f, 0}),
                        absl::StatusCode::kInvalidArgument, "top_p");
  SPECDEC_EXPECT_OK(ValidateSamplingParams({0.7f, 40, 0.9f, 9}));
}

TEST(Rng, DeterministicPerSeed) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
  Rng u(7);
  for (int i = 0; i < 10000; ++i) {
    double v = u.Uniform();
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
  }
}

std::vector<int64_t> Draw(const std::vector<float>& probs, int shift, int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int64_t> counts(probs.size(), 0);
  for (int i = 0; i < n; ++i) {
    int t = SampleFromProbs(probs, rng);
    ++counts[(t + shift) % probs.size()];
  }
  return counts;
}

TEST(Sampler, SampleFromProbsPassesChiSquare) {
  std::vector<float> probs = {0.02f, 0.1f, 0.05f, 0.2f, 0.08f, 0.15f, 0.1f, 0.05f, 0.2f, 0.05f};
  std::vector<double> expected(probs.begin(), probs.end());
  const double p = ChiSquarePValue(Draw(probs, 0, 200000, 11), expected);
  std::printf("[chi-square] SampleFromProbs p-value %.4g over 200000 draws\n", p);
  EXPECT_GT(p, kPValue);
}

TEST(Sampler, ChiSquareCatchesAWrongSampler) {
  std::vector<float> probs = {0.02f, 0.1f, 0.05f, 0.2f, 0.08f, 0.15f, 0.1f, 0.05f, 0.2f, 0.05f};
  std::vector<double> expected(probs.begin(), probs.end());
  const double p = ChiSquarePValue(Draw(probs, 1, 200000, 11), expected);
  std::printf("[chi-square] shifted sampler p-value %.4g (must be tiny)\n", p);
  EXPECT_LT(p, kPValue);
}

TEST(Stats, GammaQMatchesKnownValues) {
  // Q(1, x) = exp(-x); chi-square with 2 dof at 5.991 has p = 0.05.
  EXPECT_NEAR(RegularizedGammaQ(1.0, 2.0), std::exp(-2.0), 1e-12);
  EXPECT_NEAR(RegularizedGammaQ(1.0, 5.991 / 2), 0.05, 1e-4);
  // 10 dof at 18.307 -> 0.05.
  EXPECT_NEAR(RegularizedGammaQ(5.0, 18.307 / 2), 0.05, 1e-4);
}

}  // namespace
}  // namespace specdec::sampling
