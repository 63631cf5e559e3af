// Goodness-of-fit helpers for the distribution tests of the sampling and verification code
// (lossless speculative decoding is checked by comparing token frequencies with the target
// distribution). Pure functions; thread-safe.
#ifndef SPECDEC_COMMON_SAMPLING_STATS_H_
#define SPECDEC_COMMON_SAMPLING_STATS_H_

#include <cstdint>
#include <span>
#include <string>

namespace specdec::sampling {

// Upper regularized incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a), for a > 0; 1 for x <= 0.
// Relative accuracy ~1e-12 where Q is not vanishingly small.
double RegularizedGammaQ(double a, double x);

// Survival function of the chi-square distribution: P(X >= statistic) with `dof` > 0 degrees of
// freedom, i.e. Q(dof / 2, statistic / 2).
double ChiSquareSurvival(double statistic, int dof);

// The outcome of a Pearson chi-square goodness-of-fit test.
struct ChiSquareResult {
  double statistic = 0;  // sum over cells of (observed - expected)^2 / expected; inf if impossible
  int dof = 0;           // cells used - 1
  int cells = 0;         // cells after merging
  double p_value = 1;    // ChiSquareSurvival(statistic, dof); 0 if impossible, 1 if < 2 cells

  // "chi2=12.3 dof=9 cells=10 p=0.197", for test logs.
  std::string ToString() const;
};

// Pearson chi-square test of `observed` counts against `expected_probs` (same length, else
// p_value 0; the probabilities are renormalized). Cells with expected count < 5 are pooled into
// one cell; a pool still below 5 is merged into the smallest regular cell. An observation in a
// zero-probability cell makes the result impossible (statistic inf, p_value 0).
ChiSquareResult ChiSquareTest(std::span<const int64_t> observed,
                              std::span<const double> expected_probs);

// ChiSquareTest(observed, expected_probs).p_value.
double ChiSquarePValue(std::span<const int64_t> observed, std::span<const double> expected_probs);

}  // namespace specdec::sampling

#endif  // SPECDEC_COMMON_SAMPLING_STATS_H_
