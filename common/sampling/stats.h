// Goodness-of-fit helpers for the distribution tests of the sampling and verification code.
#ifndef SPECDEC_COMMON_SAMPLING_STATS_H_
#define SPECDEC_COMMON_SAMPLING_STATS_H_

#include <cstdint>
#include <span>

namespace specdec::sampling {

// Upper regularized incomplete gamma Q(a, x).
double RegularizedGammaQ(double a, double x);

// Pearson chi-square p-value of `observed` counts against `expected_probs` (same length; they
// are renormalized). Cells with expected count < 5 are merged into one pooled cell (and dropped
// if the pooled cell is still < 5); an observation in a zero-probability cell gives p = 0.
double ChiSquarePValue(std::span<const int64_t> observed, std::span<const double> expected_probs);

}  // namespace specdec::sampling

#endif  // SPECDEC_COMMON_SAMPLING_STATS_H_
