#include "common/sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>
#include <numeric>
#include <vector>

#include "common/sampling/stats.h"
#include "common/util/status_matchers.h"

namespace specdec::sampling {
namespace {

constexpr double kPValue = 1e-4;
const float kInf = std::numeric_limits<float>::infinity();

SamplingParams Params(float temperature, int32_t top_k = 0, float top_p = 1.f) {
  return SamplingParams{temperature, top_k, top_p, 0};
}

int CountNonZero(const std::vector<float>& p) {
  return static_cast<int>(std::count_if(p.begin(), p.end(), [](float v) { return v != 0.f; }));
}

double Sum(const std::vector<float>& p) { return std::accumulate(p.begin(), p.end(), 0.0); }

// Straightforward reference of the warping contract: full sort, then top-k, then top-p.
std::vector<double> ReferenceWarp(const std::vector<float>& logits, const SamplingParams& sp) {
  const size_t n = logits.size();
  std::vector<double> out(n, 0.0);
  std::vector<float> key(n);
  for (size_t i = 0; i < n; ++i) key[i] = std::isnan(logits[i]) ? -kInf : logits[i];
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return key[a] > key[b] || (key[a] == key[b] && a < b); });
  const size_t k =
      (sp.top_k > 0 && static_cast<size_t>(sp.top_k) < n) ? static_cast<size_t>(sp.top_k) : n;
  const double max_key = key[order[0]];
  const double inv_t = 1.0 / static_cast<double>(sp.temperature);
  std::vector<double> w(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    w[i] = std::exp((static_cast<double>(key[order[i]]) - max_key) * inv_t);
    total += w[i];
  }
  size_t keep = k;
  double kept = total;
  if (sp.top_p < 1.f) {
    double mass = 0;
    for (size_t i = 0; i < k; ++i) {
      mass += w[i];
      if (mass >= static_cast<double>(sp.top_p) * total) {
        keep = i + 1;
        kept = mass;
        break;
      }
    }
  }
  for (size_t i = 0; i < keep; ++i) out[order[i]] = w[i] / kept;
  return out;
}

// Deterministic pseudo-normal logits (Box-Muller over our own Rng).
std::vector<float> RandomLogits(size_t n, double scale, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> l(n);
  for (size_t i = 0; i < n; ++i) {
    const double u1 = 1.0 - rng.Uniform(), u2 = rng.Uniform();
    l[i] = static_cast<float>(scale * std::sqrt(-2 * std::log(u1)) *
                              std::cos(2 * std::numbers::pi * u2));
  }
  return l;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  std::vector<float> l = {0.5f, 2.f, 2.f, -1.f};
  EXPECT_EQ(Argmax(l), 1);
  EXPECT_EQ(WarpedProbs(l, {}), (std::vector<float>{0, 1, 0, 0}));
  Rng rng(1);
  const uint64_t untouched = Rng(1).Next();
  EXPECT_EQ(SampleToken(l, {}, rng), 1);
  EXPECT_EQ(rng.Next(), untouched);  // greedy consumed no randomness
  // top-k / top-p do not matter at temperature 0.
  EXPECT_EQ(WarpedProbs(l, Params(0.f, 1, 0.1f)), (std::vector<float>{0, 1, 0, 0}));
}

TEST(Sampler, ArgmaxEdgeCases) {
  EXPECT_EQ(Argmax(std::vector<float>{}), -1);
  EXPECT_EQ(Argmax(std::vector<float>{std::nanf(""), 1.f, 3.f, std::nanf("")}), 2);
  EXPECT_EQ(Argmax(std::vector<float>{std::nanf(""), -kInf}), 0);
  EXPECT_EQ(Argmax(std::vector<float>{-kInf, -kInf, -5.f}), 2);
  EXPECT_EQ(Argmax(std::vector<float>{1.f, kInf, kInf}), 1);
}

TEST(Sampler, TemperatureMatchesSoftmax) {
  std::vector<float> l = {1.f, 2.f, 0.5f, -3.f};
  for (float t : {0.05f, 0.3f, 1.f, 2.5f, 100.f}) {
    auto p = WarpedProbs(l, Params(t));
    double z = 0;
    for (float v : l) z += std::exp(v / static_cast<double>(t));
    for (size_t i = 0; i < l.size(); ++i) {
      EXPECT_NEAR(p[i], std::exp(l[i] / static_cast<double>(t)) / z, 1e-6) << "T=" << t;
    }
    EXPECT_NEAR(Sum(p), 1.0, 1e-6);
  }
}

TEST(Sampler, LargeLogitsAreNumericallySafe) {
  std::vector<float> l = {1000.f, 1001.f, -1000.f, 999.f};
  auto p = WarpedProbs(l, Params(1.f));
  const double z = 1 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(p[1], 1 / z, 1e-6);
  EXPECT_NEAR(p[0], std::exp(-1.0) / z, 1e-6);
  EXPECT_NEAR(p[3], std::exp(-2.0) / z, 1e-6);
  EXPECT_EQ(p[2], 0.f);
  for (float v : p) EXPECT_TRUE(std::isfinite(v));
}

TEST(Sampler, TopKKeepsExactlyK) {
  std::vector<float> l = {1.f, 5.f, 3.f, 3.f, 0.f, 4.f};
  auto p = WarpedProbs(l, Params(1.f, 3));
  EXPECT_EQ(CountNonZero(p), 3);
  EXPECT_GT(p[1], 0);
  EXPECT_GT(p[5], 0);
  EXPECT_GT(p[2], 0);  // tie 3 vs 3 at the boundary: the lower id is kept
  EXPECT_EQ(p[3], 0);
  const double z = std::exp(5.0) + std::exp(4.0) + std::exp(3.0);
  EXPECT_NEAR(p[1], std::exp(5.0) / z, 1e-6);
  EXPECT_NEAR(Sum(p), 1.0, 1e-6);
  for (int k = 1; k <= 6; ++k) EXPECT_EQ(CountNonZero(WarpedProbs(l, Params(0.7f, k))), k);
  EXPECT_EQ(CountNonZero(WarpedProbs(l, Params(1.f, 100))), 6);  // k >= vocab: off
}

TEST(Sampler, TopPKeepsMinimalNucleus) {
  // Probabilities 0.15, 0.5, 0.05, 0.3 (logits are their logs).
  std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  auto p = WarpedProbs(l, Params(1.f, 0, 0.79f));  // 0.5 + 0.3 = 0.8 reaches 0.79
  EXPECT_NEAR(p[1], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(p[3], 0.3 / 0.8, 1e-6);
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[2], 0);
  p = WarpedProbs(l, Params(1.f, 0, 0.81f));  // needs the third token (0.15)
  EXPECT_NEAR(p[0], 0.15 / 0.95, 1e-6);
  EXPECT_EQ(p[2], 0);
  p = WarpedProbs(l, Params(1.f, 0, 0.1f));  // the top token alone reaches it
  EXPECT_FLOAT_EQ(p[1], 1.f);
  EXPECT_EQ(CountNonZero(p), 1);
  p = WarpedProbs(l, Params(1.f, 0, 1.f));  // off
  EXPECT_EQ(CountNonZero(p), 4);
}

TEST(Sampler, TopPTiesKeepLowerIds) {
  // 0.4, then three tokens of 0.2 at ids 3, 1, 0: top_p 0.5 needs one of them: the lowest id.
  std::vector<float> l = {std::log(0.2f), std::log(0.2f), std::log(0.4f), std::log(0.2f)};
  auto p = WarpedProbs(l, Params(1.f, 0, 0.5f));
  EXPECT_EQ(CountNonZero(p), 2);
  EXPECT_NEAR(p[2], 0.4 / 0.6, 1e-6);
  EXPECT_NEAR(p[0], 0.2 / 0.6, 1e-6);
  p = WarpedProbs(l, Params(1.f, 0, 0.7f));  // two of the 0.2s: ids 0 and 1
  EXPECT_EQ(CountNonZero(p), 3);
  EXPECT_EQ(p[3], 0.f);
}

TEST(Sampler, TopKAppliesBeforeTopP) {
  // p = 0.4, 0.3, 0.2, 0.1. top_k 2 renormalizes to 4/7, 3/7; top_p 0.5 then keeps only 4/7.
  std::vector<float> l = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  auto p = WarpedProbs(l, Params(1.f, 2, 0.5f));
  EXPECT_FLOAT_EQ(p[0], 1.f);
  EXPECT_EQ(CountNonZero(p), 1);
  p = WarpedProbs(l, Params(1.f, 3, 0.8f));  // 4/9 + 3/9 = 0.78 < 0.8: all three
  EXPECT_EQ(CountNonZero(p), 3);
  EXPECT_NEAR(p[2], 2.0 / 9, 1e-6);
}

TEST(Sampler, NegativeInfinityAndNanLogitsGetZeroMass) {
  std::vector<float> l = {-kInf, 0.f, -kInf, 1.f, std::nanf("")};
  for (const SamplingParams& sp : {Params(1.f), Params(1.f, 3), Params(1.f, 0, 0.99f)}) {
    auto p = WarpedProbs(l, sp);
    EXPECT_EQ(p[0], 0);
    EXPECT_EQ(p[2], 0);
    EXPECT_EQ(p[4], 0);
    EXPECT_NEAR(p[3], 1 / (1 + std::exp(-1.0)), 1e-6);
    Rng rng(3);
    for (int i = 0; i < 1000; ++i) {
      const int t = SampleToken(l, sp, rng);
      ASSERT_TRUE(t == 1 || t == 3) << t;
    }
  }
  // Nothing has a chance: the greedy token (lowest id).
  std::vector<float> none = {-kInf, -kInf, -kInf};
  EXPECT_EQ(WarpedProbs(none, Params(1.f)), (std::vector<float>{1, 0, 0}));
  EXPECT_EQ(WarpedProbs(none, Params(1.f, 2, 0.5f)), (std::vector<float>{1, 0, 0}));
  // +inf logits share the mass.
  EXPECT_EQ(WarpedProbs(std::vector<float>{kInf, 1.f, kInf}, Params(1.f)),
            (std::vector<float>{0.5f, 0, 0.5f}));
  EXPECT_TRUE(WarpedProbs(std::vector<float>{}, Params(1.f)).empty());
}

TEST(Sampler, ValidationNamesFieldAndRange) {
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams(Params(-1.f)), absl::StatusCode::kInvalidArgument,
                        "temperature must be in [0, 100]");
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams(Params(100.5f)), absl::StatusCode::kInvalidArgument,
                        "temperature");
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams(Params(std::nanf(""))),
                        absl::StatusCode::kInvalidArgument, "temperature");
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams(Params(1.f, -2)), absl::StatusCode::kInvalidArgument,
                        "top_k must be >= 0");
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams(Params(1.f, 0, 0.f)),
                        absl::StatusCode::kInvalidArgument, "top_p must be in (0, 1]");
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams(Params(1.f, 0, 1.5f)),
                        absl::StatusCode::kInvalidArgument, "top_p");
  SPECDEC_EXPECT_STATUS(ValidateSamplingParams(Params(1.f, 0, std::nanf(""))),
                        absl::StatusCode::kInvalidArgument, "top_p");
  SPECDEC_EXPECT_OK(ValidateSamplingParams(SamplingParams{0.7f, 40, 0.9f, 9}));
  SPECDEC_EXPECT_OK(ValidateSamplingParams(SamplingParams{}));
  SPECDEC_EXPECT_OK(ValidateSamplingParams(Params(100.f, 0, 1.f)));
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
    const double v = u.Uniform();
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
  }
}

TEST(Rng, MatchesReferenceStream) {
  // xoshiro256** seeded by splitmix64, values from an independent implementation of the
  // published reference algorithms. A change here changes every replayed run.
  Rng zero(0);
  EXPECT_EQ(zero.Next(), 0x99ec5f36cb75f2b4ull);
  EXPECT_EQ(zero.Next(), 0xbf6e1f784956452aull);
  EXPECT_EQ(zero.Next(), 0x1a5f849d4933e6e0ull);
  Rng r42(42);
  EXPECT_EQ(r42.Next(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(r42.Next(), 0x6104d9866d113a7eull);
  Rng seven(7);
  EXPECT_EQ(seven.Uniform(), 6310231968177966.0 * 0x1.0p-53);
  EXPECT_EQ(seven.Uniform(), 2510767866374405.0 * 0x1.0p-53);
}

TEST(Rng, StreamsAreIndependentOfEachOther) {
  Rng base(5), s0 = Rng::ForStream(5, 0), s1 = Rng::ForStream(5, 1), again = Rng::ForStream(5, 1);
  int same01 = 0, same_base = 0;
  for (int i = 0; i < 64; ++i) {
    const uint64_t x0 = s0.Next(), x1 = s1.Next();
    EXPECT_EQ(x1, again.Next());
    same01 += x0 == x1;
    same_base += base.Next() == x0;
  }
  EXPECT_EQ(same01, 0);
  EXPECT_EQ(same_base, 0);
}

TEST(Sampler, SampleFromProbsSkipsZeroNegativeAndNan) {
  std::vector<float> probs = {0.f, 2.f, -1.f, std::nanf(""), 0.f, 6.f, 0.f};  // unnormalized
  Rng rng(9);
  std::vector<int64_t> counts(probs.size(), 0);
  for (int i = 0; i < 40000; ++i) ++counts[SampleFromProbs(probs, rng)];
  EXPECT_EQ(counts[1] + counts[5], 40000);
  EXPECT_NEAR(counts[1] / 40000.0, 0.25, 0.02);
  // Exactly one draw per call.
  Rng a(11), b(11);
  SampleFromProbs(probs, a);
  b.Next();
  EXPECT_EQ(a.Next(), b.Next());
  // A single positive entry at the end is returned whatever the draw.
  std::vector<float> last = {0.f, 0.f, 0.f, 1e-30f};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(SampleFromProbs(last, rng), 3);
}

// Counts of `n` draws from `probs`, each reported as (token + shift) mod size: shift 0 is the
// real sampler, shift 1 a deliberately wrong one.
std::vector<int64_t> Draw(const std::vector<float>& probs, int shift, int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int64_t> counts(probs.size(), 0);
  for (int i = 0; i < n; ++i) {
    const int t = SampleFromProbs(probs, rng);
    ++counts[(t + shift) % probs.size()];
  }
  return counts;
}

const std::vector<float> kTenCategories = {0.02f, 0.1f, 0.05f, 0.2f, 0.08f,
                                           0.15f, 0.1f, 0.05f, 0.2f, 0.05f};

TEST(Sampler, SampleFromProbsPassesChiSquare) {
  std::vector<double> expected(kTenCategories.begin(), kTenCategories.end());
  for (uint64_t seed : {11, 12, 13}) {
    const ChiSquareResult r = ChiSquareTest(Draw(kTenCategories, 0, 200000, seed), expected);
    std::printf("[chi-square] SampleFromProbs seed %llu, 200000 draws: %s\n",
                static_cast<unsigned long long>(seed), r.ToString().c_str());
    EXPECT_EQ(r.dof, 9);
    EXPECT_GT(r.p_value, kPValue) << r.ToString();
  }
}

// The sampler walks 16-id chunks, then the ids of one: ten categories spread over 203 ids (in
// whole chunks and the 11-id tail, among zero, negative and NaN entries) keep their shares.
TEST(Sampler, SampleFromProbsOverChunksPassesChiSquare) {
  const std::vector<size_t> ids = {0, 15, 16, 47, 63, 64, 100, 191, 192, 202};
  std::vector<float> probs(203, 0.f);
  for (size_t i = 1; i < probs.size(); i += 7) probs[i] = i % 2 ? -0.5f : std::nanf("");
  for (size_t k = 0; k < ids.size(); ++k) probs[ids[k]] = kTenCategories[k];
  std::vector<double> expected(kTenCategories.begin(), kTenCategories.end());
  for (uint64_t seed : {21, 22}) {
    Rng rng(seed);
    std::vector<int64_t> counts(ids.size(), 0);
    for (int i = 0; i < 200000; ++i) {
      const int32_t t = SampleFromProbs(probs, rng);
      const auto at = std::find(ids.begin(), ids.end(), static_cast<size_t>(t));
      ASSERT_NE(at, ids.end()) << "sampled id " << t << " has no mass";
      ++counts[static_cast<size_t>(at - ids.begin())];
    }
    const ChiSquareResult r = ChiSquareTest(counts, expected);
    std::printf("[chi-square] SampleFromProbs over chunks, seed %llu: %s\n",
                static_cast<unsigned long long>(seed), r.ToString().c_str());
    EXPECT_GT(r.p_value, kPValue) << r.ToString();
  }
  // One positive id inside a chunk, none after it: returned whatever the draw.
  std::vector<float> one(40, 0.f);
  one[5] = 1e-30f;
  Rng rng(3);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(SampleFromProbs(one, rng), 5);
}

TEST(Sampler, ChiSquareCatchesAWrongSampler) {
  std::vector<double> expected(kTenCategories.begin(), kTenCategories.end());
  const ChiSquareResult r = ChiSquareTest(Draw(kTenCategories, 1, 200000, 11), expected);
  std::printf("[chi-square] shifted-by-one sampler, 200000 draws: %s (must be < %g)\n",
              r.ToString().c_str(), kPValue);
  EXPECT_LT(r.p_value, kPValue) << r.ToString();
}

TEST(Sampler, SampleTokenFollowsWarpedDistribution) {
  const std::vector<float> logits = RandomLogits(40, 1.5, 21);
  for (const SamplingParams& sp : {Params(1.f), Params(0.7f, 8), Params(1.3f, 0, 0.9f)}) {
    const std::vector<float> p = WarpedProbs(logits, sp);
    Rng rng(77);
    std::vector<int64_t> counts(logits.size(), 0);
    for (int i = 0; i < 100000; ++i) ++counts[SampleToken(logits, sp, rng)];
    const ChiSquareResult r = ChiSquareTest(counts, std::vector<double>(p.begin(), p.end()));
    std::printf("[chi-square] SampleToken T=%.2f top_k=%d top_p=%.3g: %s\n", sp.temperature,
                sp.top_k, sp.top_p, r.ToString().c_str());
    EXPECT_GT(r.p_value, kPValue) << r.ToString();
  }
}

// RandomLogits with a language model's head: the 32 lowest ids raised 14 down to 4.7 above the
// rest (a top token of about a third of the mass, a nucleus of 0.9 within a few dozen ids).
std::vector<float> PeakedLogits(size_t n, uint64_t seed) {
  std::vector<float> l = RandomLogits(n, 2.0, seed);
  for (size_t i = 0; i < 32 && i < n; ++i) l[i] += 14.f - 0.3f * static_cast<float>(i);
  return l;
}

TEST(Sampler, LargeVocabularyMatchesReference) {
  constexpr size_t kVocab = 151936;  // Qwen3
  // Continuous logits, logits rounded to 0.5 (many exact ties at every boundary), and peaked ones.
  const std::vector<float> continuous = RandomLogits(kVocab, 3.0, 5);
  std::vector<float> quantized = continuous;
  for (float& x : quantized) x = std::round(x * 2) / 2;
  const std::vector<float> peaked = PeakedLogits(kVocab, 7);
  std::vector<float> out(kVocab);
  for (const auto& [logits, sp] : std::vector<std::pair<std::vector<float>, SamplingParams>>{
           {continuous, Params(1.f)},
           {continuous, Params(0.8f, 50)},
           {continuous, Params(1.f, 0, 0.9f)},
           {continuous, Params(0.6f, 200, 0.95f)},
           {continuous, Params(1.f, 0, 0.05f)},
           {continuous, Params(2.f, 1)},
           {continuous, Params(1.f, 0, 0.999f)},
           {continuous, Params(50.f, 0, 0.5f)},
           {continuous, Params(0.05f, 0, 0.9f)},
           {continuous, Params(1.f, 5000, 0.9f)},
           {quantized, Params(1.f, 0, 0.9f)},
           {quantized, Params(1.f, 37)},
           {quantized, Params(0.7f, 3000, 0.6f)},
           {peaked, Params(1.f, 0, 0.9f)},
           {peaked, Params(0.7f, 0, 0.95f)},
           {peaked, Params(1.f, 40, 0.9f)},
           {peaked, Params(1.5f, 0, 0.99f)}}) {
    WarpedProbsInto(logits, sp, out);
    const std::vector<double> want = ReferenceWarp(logits, sp);
    int kept = 0;
    double max_err = 0;
    for (size_t i = 0; i < kVocab; ++i) {
      ASSERT_EQ(out[i] == 0.f, want[i] == 0.0) << "id " << i << " top_k " << sp.top_k;
      kept += out[i] != 0.f;
      max_err = std::max(max_err, std::fabs(out[i] - want[i]));
    }
    EXPECT_LT(max_err, 1e-6);
    EXPECT_NEAR(Sum(out), 1.0, 1e-4);
    std::printf("[warp] V=%zu T=%.2f top_k=%d top_p=%.3g kept=%d max_err=%.2g\n", kVocab,
                sp.temperature, sp.top_k, sp.top_p, kept, max_err);
  }
  // Scratch reuse across sizes must not leak state.
  std::vector<float> small = {0.f, 1.f, 2.f};
  EXPECT_EQ(CountNonZero(WarpedProbs(small, Params(1.f, 2))), 2);
}

TEST(Sampler, LargeVocabularyCost) {
  // Not a benchmark: a guard against an accidental full sort of the vocabulary per call.
  constexpr size_t kVocab = 151936;
  const std::vector<float> flat = RandomLogits(kVocab, 3.0, 6), peaked = PeakedLogits(kVocab, 6);
  std::vector<float> out(kVocab);
  struct Case {
    const char* name;
    const std::vector<float>& logits;
    SamplingParams sp;
  };
  for (const Case& c :
       {Case{"flat", flat, Params(1.f)}, Case{"flat", flat, Params(0.8f, 50)},
        Case{"flat", flat, Params(0.8f, 50, 0.9f)}, Case{"flat", flat, Params(1.f, 0, 0.9f)},
        Case{"peaked", peaked, Params(1.f, 0, 0.9f)},
        Case{"peaked", peaked, Params(0.7f, 0, 0.95f)}}) {
    const std::vector<float>& logits = c.logits;
    const SamplingParams& sp = c.sp;
    constexpr int kCalls = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) WarpedProbsInto(logits, sp, out);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        kCalls;
    std::printf("[warp] V=%zu %s T=%.2f top_k=%d top_p=%.3g: %.3f ms/call\n", kVocab, c.name,
                sp.temperature, sp.top_k, sp.top_p, ms);
    EXPECT_LT(ms, 50.0);  // generous: ~1-5 ms expected on the 2-core CI machine
  }
}

TEST(Stats, GammaQMatchesKnownValues) {
  // Q(1, x) = exp(-x); Q(0.5, x) = erfc(sqrt(x)).
  EXPECT_NEAR(RegularizedGammaQ(1.0, 2.0), std::exp(-2.0), 1e-12);
  EXPECT_NEAR(RegularizedGammaQ(0.5, 0.3), std::erfc(std::sqrt(0.3)), 1e-12);
  EXPECT_NEAR(RegularizedGammaQ(0.5, 9.0), std::erfc(3.0), 1e-15);
  EXPECT_EQ(RegularizedGammaQ(3.0, 0.0), 1.0);
  // Chi-square critical values: 2 dof at 5.991 and 10 dof at 18.307 have p = 0.05; 9 dof at
  // 33.720 has p = 1e-4 (the threshold the distribution tests use).
  EXPECT_NEAR(ChiSquareSurvival(5.991, 2), 0.05, 1e-4);
  EXPECT_NEAR(ChiSquareSurvival(18.307, 10), 0.05, 1e-4);
  EXPECT_NEAR(ChiSquareSurvival(33.720, 9), 1e-4, 2e-6);
}

TEST(Stats, ChiSquareTestComputesStatisticAndMergesSmallCells) {
  // 30 draws of a fair coin, 10 heads: chi2 = 2 * 5^2 / 15 = 3.333, 1 dof, p = 0.0679.
  std::vector<int64_t> coin = {10, 20};
  ChiSquareResult r = ChiSquareTest(coin, std::vector<double>{0.5, 0.5});
  EXPECT_NEAR(r.statistic, 10.0 / 3, 1e-12);
  EXPECT_EQ(r.dof, 1);
  EXPECT_NEAR(r.p_value, 0.0679, 1e-4);
  // Expected counts 50, 45, 3, 2 (n = 100): the two small cells pool into one of 5.
  r = ChiSquareTest(std::vector<int64_t>{50, 45, 3, 2}, std::vector<double>{50, 45, 3, 2});
  EXPECT_EQ(r.cells, 3);
  EXPECT_NEAR(r.statistic, 0.0, 1e-12);
  EXPECT_NEAR(r.p_value, 1.0, 1e-12);
  // Expected 60, 38, 2: the pool (2) is too small and joins the smallest regular cell (38).
  r = ChiSquareTest(std::vector<int64_t>{60, 30, 10}, std::vector<double>{0.6, 0.38, 0.02});
  EXPECT_EQ(r.cells, 2);
  EXPECT_NEAR(r.statistic, 0.0, 1e-12);
  // An outcome of probability zero is impossible.
  r = ChiSquareTest(std::vector<int64_t>{5, 1}, std::vector<double>{1.0, 0.0});
  EXPECT_TRUE(std::isinf(r.statistic));
  EXPECT_EQ(r.p_value, 0.0);
  EXPECT_EQ(ChiSquarePValue(std::vector<int64_t>{1, 2}, std::vector<double>{1.0}), 0.0);
  EXPECT_NE(r.ToString().find("p=0"), std::string::npos);
}

}  // namespace
}  // namespace specdec::sampling
