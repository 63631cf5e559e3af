#include "common/sampling/stats.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"

namespace specdec::sampling {
namespace {

// exp(-x + a log x - lgamma(a)): the common prefactor of the series and the continued fraction.
double Prefactor(double a, double x) { return std::exp(-x + a * std::log(x) - std::lgamma(a)); }

// Series for the lower regularized P(a, x), valid for x < a + 1.
double GammaPSeries(double a, double x) {
  double sum = 1.0 / a, term = sum;
  for (int n = 1; n < 100000; ++n) {
    term *= x / (a + n);
    sum += term;
    if (std::fabs(term) < std::fabs(sum) * 1e-16) break;
  }
  return sum * Prefactor(a, x);
}

// Continued fraction (modified Lentz) for Q(a, x), valid for x >= a + 1.
double GammaQContinuedFraction(double a, double x) {
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-16) break;
  }
  return Prefactor(a, x) * h;
}

}  // namespace

double RegularizedGammaQ(double a, double x) {
  if (x <= 0) return 1.0;
  if (x < a + 1) return 1.0 - GammaPSeries(a, x);
  return GammaQContinuedFraction(a, x);
}

double ChiSquareSurvival(double statistic, int dof) {
  if (dof <= 0) return 1.0;
  if (std::isinf(statistic)) return 0.0;
  return RegularizedGammaQ(dof / 2.0, statistic / 2.0);
}

std::string ChiSquareResult::ToString() const {
  return absl::StrFormat("chi2=%.6g dof=%d cells=%d p=%.6g", statistic, dof, cells, p_value);
}

ChiSquareResult ChiSquareTest(std::span<const int64_t> observed,
                              std::span<const double> expected_probs) {
  ChiSquareResult r;
  double n = 0, psum = 0;
  for (int64_t o : observed) n += static_cast<double>(o);
  for (double p : expected_probs) psum += p;
  if (observed.size() != expected_probs.size() || n == 0 || !(psum > 0)) {
    r.p_value = 0;
    return r;
  }
  // Cells as (observed, expected) after pooling the small ones.
  std::vector<std::pair<double, double>> cells;
  double pooled_obs = 0, pooled_exp = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    const double e = n * expected_probs[i] / psum;
    const double o = static_cast<double>(observed[i]);
    if (!(e > 0)) {
      if (o > 0) {  // an impossible outcome happened
        r.statistic = std::numeric_limits<double>::infinity();
        r.p_value = 0;
        return r;
      }
      continue;
    }
    if (e < 5) {
      pooled_obs += o;
      pooled_exp += e;
    } else {
      cells.push_back({o, e});
    }
  }
  if (pooled_exp >= 5) {
    cells.push_back({pooled_obs, pooled_exp});
  } else if (pooled_exp > 0) {
    if (cells.empty()) {
      cells.push_back({pooled_obs, pooled_exp});
    } else {
      size_t smallest = 0;
      for (size_t i = 1; i < cells.size(); ++i) {
        if (cells[i].second < cells[smallest].second) smallest = i;
      }
      cells[smallest].first += pooled_obs;
      cells[smallest].second += pooled_exp;
    }
  }
  r.cells = static_cast<int>(cells.size());
  for (const auto& [o, e] : cells) r.statistic += (o - e) * (o - e) / e;
  if (r.cells < 2) {
    r.p_value = 1;
    return r;
  }
  r.dof = r.cells - 1;
  r.p_value = ChiSquareSurvival(r.statistic, r.dof);
  return r;
}

double ChiSquarePValue(std::span<const int64_t> observed, std::span<const double> expected_probs) {
  return ChiSquareTest(observed, expected_probs).p_value;
}

}  // namespace specdec::sampling
