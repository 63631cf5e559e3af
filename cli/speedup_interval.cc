#include "cli/speedup_interval.h"

#include <algorithm>
#include <random>
#include <vector>

namespace specdec::cli {
namespace {

double Ratio(double ar, double method) { return method > 0 ? ar / method : 0; }

}  // namespace

SpeedupInterval BootstrapSpeedup(std::span<const double> ar_ms, std::span<const double> method_ms,
                                 int resamples, uint64_t seed) {
  const size_t n = std::min(ar_ms.size(), method_ms.size());
  double ar = 0, method = 0;
  for (size_t i = 0; i < n; ++i) {
    ar += ar_ms[i];
    method += method_ms[i];
  }
  SpeedupInterval r;
  r.speedup = r.low = r.high = Ratio(ar, method);
  if (n < 2 || resamples < 1 || method <= 0) return r;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::vector<double> ratios(static_cast<size_t>(resamples));
  for (double& ratio : ratios) {
    double a = 0, m = 0;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = pick(rng);
      a += ar_ms[i];
      m += method_ms[i];
    }
    ratio = Ratio(a, m);
  }
  std::sort(ratios.begin(), ratios.end());
  const auto at = [&](double q) {
    return ratios[static_cast<size_t>(q * static_cast<double>(ratios.size() - 1) + 0.5)];
  };
  r.low = at(0.025);
  r.high = at(0.975);
  return r;
}

}  // namespace specdec::cli
