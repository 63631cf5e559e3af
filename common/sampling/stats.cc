#include "common/sampling/stats.h"

#include <cmath>
#include <vector>

namespace specdec::sampling {
namespace {

// Series for P(a, x), valid for x < a + 1.
double GammaPSeries(double a, double x) {
  double sum = 1.0 / a, term = sum;
  for (int n = 1; n < 10000; ++n) {
    term *= x / (a + n);
    sum += term;
    if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
  }
  return sum * std::exp(-x + a * std::log(x) - std::lgamma(a));
}

// Continued fraction (Lentz) for Q(a, x), valid for x >= a + 1.
double GammaQContinuedFraction(double a, double x) {
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - std::lgamma(a)) * h;
}

}  // namespace

double RegularizedGammaQ(double a, double x) {
  if (x <= 0) return 1.0;
  if (x < a + 1) return 1.0 - GammaPSeries(a, x);
  return GammaQContinuedFraction(a, x);
}

double ChiSquarePValue(std::span<const int64_t> observed, std::span<const double> expected_probs) {
  double n = 0, psum = 0;
  for (int64_t o : observed) n += static_cast<double>(o);
  for (double p : expected_probs) psum += p;
  if (n == 0 || psum <= 0 || observed.size() != expected_probs.size()) return 0.0;
  double chi2 = 0, pooled_obs = 0, pooled_exp = 0;
  int cells = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    const double e = n * expected_probs[i] / psum;
    const double o = static_cast<double>(observed[i]);
    if (e == 0) {
      if (o > 0) return 0.0;  // an impossible outcome happened
      continue;
    }
    if (e < 5) {
      pooled_obs += o;
      pooled_exp += e;
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pooled_exp >= 5) {
    chi2 += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
    ++cells;
  }
  if (cells < 2) return 1.0;
  return RegularizedGammaQ((cells - 1) / 2.0, chi2 / 2.0);
}

}  // namespace specdec::sampling
