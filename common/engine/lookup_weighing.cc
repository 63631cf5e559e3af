#include "common/engine/lookup_weighing.h"

#include <algorithm>

namespace specdec::engine {

void LookupOdds::Decay(double factor) {
  for (auto* counts : {&first_drafted, &first_accepted}) {
    for (double& c : *counts) c *= factor;
  }
  for (auto* counts : {&reached, &accepted}) {
    for (double& c : *counts) c *= factor;
  }
}

void LookupOdds::Observe(int32_t drafted, int32_t accepted_tokens, int32_t match) {
  if (drafted <= 0) return;
  const size_t m = LookupMatchIndex(match);
  first_drafted[m] += 1;
  if (accepted_tokens > 0) first_accepted[m] += 1;
  for (int i = 1; i < drafted && i < kPositions; ++i) {
    if (i <= accepted_tokens) reached[i] += 1;
    if (i < accepted_tokens) accepted[i] += 1;
  }
}

double LookupOdds::Tau(int32_t tokens, int32_t match, const LookupPriors& priors) const {
  const size_t m = LookupMatchIndex(match);
  const double first = (first_accepted[m] + priors.first[m]) / (first_drafted[m] + 1);
  double tau = 1, all_accepted = 1;
  for (int i = 0; i < tokens && i < kPositions; ++i) {
    all_accepted *= i == 0 ? first : (accepted[i] + first) / (reached[i] + 1);
    tau += all_accepted;
  }
  return tau;
}

double LookupRate(const LookupOdds& odds, std::span<const double> rows_ms,
                  const LookupPriors& priors, int32_t tokens, int32_t match) {
  const size_t rows = static_cast<size_t>(std::max(0, tokens)) + 1;
  const double ms = rows < rows_ms.size() ? rows_ms[rows] : 0;
  return ms > 0 ? odds.Tau(tokens, match, priors) / ms : 0;
}

int32_t BestLookup(const LookupOdds& odds, std::span<const double> rows_ms,
                   const LookupPriors& priors, int32_t most, int32_t match, double* rate) {
  // LookupRate for k = 1 .. most in one pass: Tau(k) is Tau(k - 1) plus one term (the same sums
  // in the same order), so a step that weighs a 16-token draft adds 16 terms, not 136.
  if (most < 1) {
    *rate = LookupRate(odds, rows_ms, priors, most, match);
    return most;
  }
  const size_t m = LookupMatchIndex(match);
  const double first = (odds.first_accepted[m] + priors.first[m]) / (odds.first_drafted[m] + 1);
  double tau = 1, all_accepted = 1;
  int32_t best = most;
  *rate = 0;
  for (int32_t k = 1; k <= most; ++k) {
    const int i = k - 1;
    if (i < LookupOdds::kPositions) {
      all_accepted *= i == 0 ? first : (odds.accepted[i] + first) / (odds.reached[i] + 1);
      tau += all_accepted;
    }
    const size_t rows = static_cast<size_t>(k) + 1;
    const double ms = rows < rows_ms.size() ? rows_ms[rows] : 0;
    const double rate_k = ms > 0 ? tau / ms : 0;
    // The longest among equals: a later (longer) k takes a tie.
    if (k == 1 || rate_k >= *rate) {
      *rate = rate_k;
      best = k;
    }
  }
  return best;
}

int32_t LookupWeighing::Tokens(int32_t available, int32_t match) const {
  if (available < 1) return 0;
  double rate = 0;
  const int32_t best = BestLookup(odds, rows_ms, priors, available, match, &rate);
  return alternative_rate <= 0 || rate >= alternative_rate ? best : 0;
}

void LookupWeighing::AfterStep(bool looked_up, int32_t drafted, int32_t accepted, int32_t match) {
  odds.Decay(decay);
  if (looked_up) odds.Observe(drafted, accepted, match);
}

}  // namespace specdec::engine
