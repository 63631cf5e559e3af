// How many tokens of a prompt-lookup draft pay for their rows: the acceptance a request's lookups
// have shown (LookupOdds), the predicted rate of verifying the first k tokens of a draft, and a
// planned run's own weighing of its lookups step by step (LookupWeighing), the same in process and
// in the target service (docs/design.md §2.8). Torch-free.
#ifndef SPECDEC_COMMON_ENGINE_LOOKUP_WEIGHING_H_
#define SPECDEC_COMMON_ENGINE_LOOKUP_WEIGHING_H_

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "common/engine/prompt_lookup.h"

namespace specdec::engine {

// One request's lookup steps, decayed: per match length, the steps that drafted (first_drafted)
// and of them those whose first token was accepted; per later position i >= 1, the steps that
// drafted position i with every earlier one accepted (reached) and had it accepted.
inline constexpr int kLookupPositions = 16;  // the lookup draft positions weighed

// The prior of a lookup's first token, of one step, per suffix-match length (index
// LookupMatchIndex: 0 unknown, 1..kLookupMaxMatch): the share of lookups whose first token is
// accepted; 1 (an accepted step) where nothing was measured. A later position's prior is the
// request's own chance of the first position (LookupOdds::Tau): whether the sequence repeats is
// the request's own, and every lookup measures its first position, so the prior follows the
// request (a machine's share there cut lookups short of positions that nothing then measured
// again; a prior of an accepted step sent every new run at T = 1 into 4-token lookups whose
// later positions were accepted about half as often; docs/design.md §2.8).
struct LookupPriors {
  std::array<double, kLookupMaxMatch + 1> first{1, 1, 1, 1};
};

struct LookupOdds {
  static constexpr int kPositions = kLookupPositions;
  std::array<double, kLookupMaxMatch + 1> first_drafted{}, first_accepted{};
  std::array<double, kPositions> reached{}, accepted{};

  void Decay(double factor);
  // A lookup step of a `match`-token suffix drafted `drafted` tokens; `accepted` were accepted.
  void Observe(int32_t drafted, int32_t accepted, int32_t match);
  // Expected tokens a step verifying the first `tokens` tokens of a draft found by a `match`-
  // token suffix commits: 1 + the sum over i < tokens of the chance that positions 0..i are all
  // accepted, each position's chance given the one before was accepted with a prior of one step
  // (priors.first[match] for the first, the first position's chance for the others).
  double Tau(int32_t tokens, int32_t match, const LookupPriors& priors) const;
};

// Predicted committed tokens per millisecond of a step verifying `tokens` tokens of a draft found
// by a `match`-token suffix: Tau / rows_ms[tokens + 1] (rows_ms[r]: the cost of a step of r rows
// without a drafter pass; [0] unused). 0 where that cost is unknown (outside rows_ms, or <= 0).
double LookupRate(const LookupOdds& odds, std::span<const double> rows_ms,
                  const LookupPriors& priors, int32_t tokens, int32_t match);
// The k in [1, most] with the highest LookupRate (the longest among equals), its rate in `rate`.
int32_t BestLookup(const LookupOdds& odds, std::span<const double> rows_ms,
                   const LookupPriors& priors, int32_t most, int32_t match, double* rate);

// A planned run's weighing of its own lookups: at each step where the sequence repeats, the run
// verifies the best k of the draft (BestLookup) when its predicted rate is at least the run's own
// step's (`alternative_rate`), else takes its own step; after every step its odds decay and take
// the step's lookup. So a run that starts from the planner's prediction follows what its lookups
// are accepted at, where a shape fixed for the whole run could not (at T = 1 a run of a whole
// request kept verifying 4-token lookups at about 20% acceptance). The planner's odds are the
// run's start; the run's steps reach the planner as they commit, so it needs nothing back.
struct LookupWeighing {
  std::vector<double> rows_ms;  // [r]: a step of r rows without a drafter pass; [0] unused
  LookupPriors priors;
  double alternative_rate = 0;  // tokens per ms of the run's own step (<= 0: unknown, any pays)
  double decay = 0.95;          // the weight the odds keep per step of the run
  LookupOdds odds;

  // How many of a lookup draft of `available` tokens, found by a `match`-token suffix, the next
  // step verifies: BestLookup's k where it is predicted at least at alternative_rate, else 0.
  int32_t Tokens(int32_t available, int32_t match) const;
  // After each step of the run: the odds decay, and take the step's lookup where it was one.
  void AfterStep(bool looked_up, int32_t drafted, int32_t accepted, int32_t match);
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_LOOKUP_WEIGHING_H_
