#include "common/engine/lookup_weighing.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace specdec::engine {
namespace {

// Each position's chance is the one given that the position before was accepted, with a prior
// of one step: the match length's first-token prior for the first, then the request's own chance
// of the first position for every later one.
TEST(LookupOddsTest, TauCountsEachPositionGivenTheOneBefore) {
  LookupPriors prior;
  prior.first = {1, 0.5, 0.5, 0.5};
  LookupOdds odds;
  EXPECT_DOUBLE_EQ(odds.Tau(0, 2, prior), 1.0);
  EXPECT_DOUBLE_EQ(odds.Tau(3, 2, prior), 1 + 0.5 + 0.25 + 0.125);
  // Two lookups of a 2-token match, each accepting its first token of 4 and not the second.
  odds.Observe(4, 1, 2);
  odds.Observe(4, 1, 2);
  const double first = (2 + 0.5) / (2 + 1), second = first * (0 + first) / (2 + 1);
  // Position 2 was never reached: its chance is the prior, the first position's.
  EXPECT_DOUBLE_EQ(odds.Tau(3, 2, prior), 1 + first + second + second * first);
  // Other match lengths keep their own first position and share the later ones.
  EXPECT_DOUBLE_EQ(odds.Tau(2, 3, prior), 1 + 0.5 + 0.5 * (0.5 / 3));
  odds.Decay(0.5);
  EXPECT_DOUBLE_EQ(odds.first_drafted[2], 1.0);
  EXPECT_DOUBLE_EQ(odds.reached[1], 1.0);
  odds.Observe(0, 0, 2);  // nothing drafted: nothing to count
  EXPECT_DOUBLE_EQ(odds.first_drafted[2], 1.0);
}

LookupWeighing CheapRows(double first_prior) {
  LookupWeighing w;
  w.rows_ms = {0, 1.0, 1.25, 1.5, 1.75, 2.0};  // a step of r rows: 1 + (r - 1) / 4 ms
  w.priors.first = {first_prior, first_prior, first_prior, first_prior};
  w.alternative_rate = 1.0;  // the run's own step: 1 token in 1 ms
  return w;
}

// A run that starts from an optimistic prediction (4 tokens at a 3-token match, where the
// machine's such lookups accept their first token 90% of the time) cuts its lookups to the first
// token once its steps accept only that, to none once they accept nothing, and looks up again once
// those steps have decayed (the prior's lookups pay again).
// BestLookup in one pass against every k's LookupRate taken on its own: the same k (the longest
// among equal rates) and the same rate, bit for bit.
TEST(LookupWeighingTest, BestLookupIsTheLongestOfTheBestRates) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 2000; ++trial) {
    LookupOdds odds;
    for (int i = 0; i < 1 + static_cast<int>(rng() % 30); ++i) {
      const int32_t drafted = 1 + static_cast<int32_t>(rng() % 20);
      odds.Observe(drafted, static_cast<int32_t>(rng() % (drafted + 1)),
                   static_cast<int32_t>(rng() % 4));
      if (rng() % 3 == 0) odds.Decay(0.9);
    }
    LookupPriors priors;
    for (double& p : priors.first) p = u(rng);
    std::vector<double> rows_ms(2 + rng() % 24);
    for (size_t r = 1; r < rows_ms.size(); ++r) {
      // Some rows unknown, some costs equal (ties), the rest growing.
      rows_ms[r] = rng() % 7 == 0 ? 0 : rng() % 5 == 0 ? 1.0 : 1.0 + 0.1 * u(rng) * r;
    }
    const int32_t most = static_cast<int32_t>(rng() % 22) - 1;
    const int32_t match = static_cast<int32_t>(rng() % 4);
    int32_t want = most;
    double want_rate = LookupRate(odds, rows_ms, priors, most, match);
    for (int32_t k = most - 1; k >= 1; --k) {
      const double r = LookupRate(odds, rows_ms, priors, k, match);
      if (r > want_rate) {
        want_rate = r;
        want = k;
      }
    }
    double rate = -1;
    ASSERT_EQ(BestLookup(odds, rows_ms, priors, most, match, &rate), want) << "trial " << trial;
    ASSERT_EQ(rate, want_rate) << "trial " << trial;
  }
}

TEST(LookupWeighingTest, ARunFollowsWhatItsOwnLookupsAreAcceptedAt) {
  LookupWeighing w = CheapRows(0.9);
  EXPECT_EQ(w.Tokens(4, 3), 4);
  EXPECT_EQ(w.Tokens(2, 3), 2);  // at most what was found
  EXPECT_EQ(w.Tokens(0, 3), 0);
  for (int i = 0; i < 3; ++i) w.AfterStep(true, 4, 1, 3);
  EXPECT_EQ(w.Tokens(4, 3), 1);
  int steps = 0;
  while (w.Tokens(4, 3) > 0 && steps < 50) {
    w.AfterStep(true, 1, 0, 3);
    ++steps;
  }
  EXPECT_EQ(w.Tokens(4, 3), 0);
  EXPECT_GT(steps, 1);
  // Steps that do not look up only decay the odds back towards the prior.
  steps = 0;
  while (w.Tokens(4, 3) == 0 && steps < 200) {
    w.AfterStep(false, 0, 0, 0);
    ++steps;
  }
  EXPECT_GT(w.Tokens(4, 3), 0);
  EXPECT_GT(steps, 2);
}

// Lookups accepted whole keep being verified whole.
TEST(LookupWeighingTest, AcceptedLookupsStayWhole) {
  LookupWeighing w = CheapRows(0.53);
  for (int i = 0; i < 20; ++i) {
    w.AfterStep(true, 4, 4, 2);
    EXPECT_EQ(w.Tokens(4, 2), 4) << i;
  }
}

// Where the step's costs are unknown a lookup pays only against an unknown alternative, and a
// prior under the cost of a row declines even the first token.
TEST(LookupWeighingTest, UnknownCostsAndPoorPriors) {
  LookupWeighing w;
  w.alternative_rate = 1.0;
  EXPECT_EQ(w.Tokens(4, 3), 0);  // no step cost measured
  w.alternative_rate = 0;
  EXPECT_EQ(w.Tokens(4, 3), 4);          // nothing to weigh against: the whole draft
  LookupWeighing poor = CheapRows(0.2);  // 1.2 tokens in 1.25 ms < 1 token a ms
  EXPECT_EQ(poor.Tokens(4, 1), 0);
}

}  // namespace
}  // namespace specdec::engine
