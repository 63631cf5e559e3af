// DFLASH_ADAPTIVE's block choice by predicted throughput, the same in process and in the router
// (docs/design.md §2.8). Before each step it takes the candidate with the most committed tokens
// per millisecond:
//   AR: 1 / StepMs(1)        a block of b rows, 2 <= b <= cap: tau(b) / StepMs(b),
// with StepMs the pass costs measured on this machine at this load (a BlockCostModel shared by
// every request) and tau(b) = 1 + the acceptance of draft positions 0 .. b-2 as this request has
// shown it lately, a prior counting as `prior_steps` steps of it: the acceptance BlockPilot
// predicted for this request where it predicted one for this request's temperature, else the
// machine's at this request's temperature (BlockCostModel::AcceptanceClass). `cap` is the
// request's block: BlockPilot's pick, or the drafter's training block size. So that costs and
// acceptance stay measured at every candidate, the shared model's first `warmup` decisions and
// one in `explore_every` after them take the candidates in turn, and a request on AR drafts its
// best block once its temperature class has decided `probe_every` times without drafting (then
// after twice as many while AR keeps winning; the wait and the count are kept per class in the
// shared model, so the next request goes on from them, however short each request is).
// Exploration skips a candidate predicted at under half the best's rate, and a probe a block
// predicted at under `probe_min_share` of AR's. A prompt-lookup draft is
// weighed the same way: its first k tokens (the k with the best rate) are verified when
// tau_lookup(k) / (the cost of a (k+1)-row pass without a drafter) is at least the best candidate's
// rate. tau_lookup = 1 + sum over i < k of the chance that positions 0..i are all accepted, a
// product of this request's per-position rates given the position before was accepted, each
// with a prior of one step: for the first position, kept per length of the suffix the lookup
// matched (a 1-token match is right far less often than a 3-token one), the machine's lookup
// acceptance for that length at this temperature (BlockCostModel::LookupShare; before any, an
// accepted step); for the others, kept for all lengths together, the request's own chance of
// the first position (whether the sequence repeats is the request's own, and every lookup
// measures its first position, so its steps soon outweigh the priors; lookup_weighing.h). A planned
// run weighs its steps' lookups the same way itself, step by step, against the run's own steps
// (LookupWeighing). A request that declined `probe_every` lookups in a row verifies the next at its
// best length unless that is predicted at under `probe_min_share` of the alternative (the wait
// doubles either way). Every choice is lossless: the block only changes how much is drafted, never
// what is committed.
#ifndef SPECDEC_COMMON_ENGINE_COST_AWARE_HOOK_H_
#define SPECDEC_COMMON_ENGINE_COST_AWARE_HOOK_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/engine/block_cost_model.h"
#include "common/engine/lookup_weighing.h"
#include "common/engine/step_loop.h"
#include "common/util/clock.h"

namespace specdec::engine {

// A step as BlockCostModel measures it: the passes the side reported (StepResult's pass fields),
// else the step's own rows and times; a run's first step has no wall time (it includes the
// run's round trip).
BlockCostModel::StepCost StepCostOf(const StepResult& step, StepOrigin origin, bool first);
// Feeds one step of a request in `acceptance_class` into `model`: its costs and, when the drafter
// or DFLASH_ADAPTIVE's lookup drafted it, its acceptance.
void ObserveStepIn(BlockCostModel& model, const StepResult& step, StepOrigin origin, bool first,
                   int acceptance_class);

// A planned run's weighing of its lookups (LookupWeighing) from a reading of the model, with
// drafter-less step costs up to the reading's max_rows, the machine's share of lookups accepting
// their first token per match length as priors, and `odds` (the request's lookups so far).
LookupWeighing RunWeighingOf(const BlockCostModel::Reading& r, double alternative_rate,
                             const LookupOdds& odds, double decay);

class CostAwareHook final : public PlanningHook {
 public:
  struct Options {
    int sessions = 1;        // requests sharing the target's passes
    double prior_steps = 4;  // weight of the prior (predicted or machine) acceptance, in steps
    // Weight this request's observed acceptance keeps per decision: recent steps count most, and
    // a request that stopped drafting drifts back to the machine's acceptance (so that a bad
    // patch does not keep it on AR for the rest of the request).
    double request_decay = 0.95;
    // Once the requests of a temperature class have decided this many times without drafting
    // (BlockCostModel::CountUndraftedDecision), the deciding one drafts its best block once, so
    // that acceptance stays measured; each probe after which AR still wins doubles the wait, up
    // to max_probe_every, and a decision to speculate resets it. The wait is the class's, shared
    // with the model's other requests (BlockCostModel::ProbeWait). Lookup probes alike, counted
    // within a request.
    int probe_every = 8;
    int max_probe_every = 64;
    // A probe whose block is predicted at less than this share of AR's rate does not draft (the
    // wait doubles as after a probe that lost): measuring what the prior says loses by half is
    // not worth its cost (the drafter catches up on every row since it last ran).
    double probe_min_share = 0.5;
    int64_t warmup = 16;             // the shared model's first decisions explore
    int64_t explore_every = 32;      // then one decision in this many explores
    // After the warm-up, an exploring decision skips a candidate predicted at less than this
    // share of the best candidate's rate (it decides as usual instead): measuring it would cost
    // more than its chance of winning is worth, and its costs were measured in the warm-up.
    double explore_min_share = 0.5;
    // false: this request's acceptance stays its own and never reaches the shared model (a
    // warm-up request on a made-up prompt measures the machine's costs, not its acceptance).
    bool share_acceptance = true;
    // Where the drafter's probes keep losing at a temperature class (its wait at
    // max_probe_every), a new request of that class runs without the drafter from its prefill
    // on, but the first, and then one after this many, which speculates and probes as usual
    // (Speculates); while those keep losing, each wait doubles up to the longest.
    int measure_every_requests = 8;
    int max_measure_every_requests = 64;
    int32_t ar_run_tokens = 4;       // an AR run's tokens before the next decision (not hosted)
    int32_t hosted_run_tokens = 16;  // a target-drafted run's tokens before the next decision
  };
  explicit CostAwareHook(BlockCostModel& model) : CostAwareHook(model, Options{}) {}
  CostAwareHook(BlockCostModel& model, Options options);

  // False where the drafter's probes at the request's temperature class have kept losing (the
  // block wait at max_probe_every), for all but the measuring ones (measure_every_requests): one
  // measures, and where its drafter wins, the wait shortens and the next speculate.
  bool Speculates(const LoopView& view) override;
  void PlanStep(const LoopView& view, StepPlan* plan) override;
  int32_t ChooseBlock(const LoopView& view, int32_t block) override;
  int32_t LookupTokens(const LoopView& view, int32_t available, int32_t match) override;
  // The run weighs each of its lookups as LookupTokens would without a probe (the loop's lookups
  // before planning probe): from this request's lookup odds, the machine's first-token prior per
  // match length and the costs of drafter-less steps now, against the run's own steps' rate
  // (PredictedRate(run_block)); nullopt where most < 1.
  std::optional<LookupWeighing> WeighRunLookups(const LoopView& view, int32_t run_block,
                                                int32_t most) override;
  void Observe(const StepPlan& plan, StepOrigin origin, const StepResult& step,
               bool first) override;

  // Predicted committed tokens per millisecond of this request's next step with a block of
  // `block` rows (1: AR); 0 while the model has no pass measured.
  double PredictedRate(int32_t block) const;
  // The candidate with the highest PredictedRate among AR and blocks 2..cap (from the largest
  // down, a smaller one only when strictly faster); cap while nothing is measured.
  int32_t BestBlock(int32_t cap) const;
  // Predicted committed tokens per millisecond of a step verifying the first `tokens` tokens of
  // a lookup draft found by a suffix of `match` tokens; 0 while the model has no pass measured.
  double PredictedLookupRate(int32_t tokens, int32_t match) const;

 private:
  // The candidates the exploration schedule takes in turn.
  static std::vector<int32_t> ExploredBlocks(int32_t cap);
  int32_t Decide(const LoopView& view, int32_t cap);
  // The probe's block, or 1 where even it is predicted far below AR; `wait` is the wait that
  // ended (the next doubles it).
  int32_t Probe(const BlockCostModel::Reading& r, int32_t cap, int wait);
  // Takes the request's temperature class from the loop's view.
  void Follow(const LoopView& view);
  // The shared model as this request's class sees it, for blocks up to `max_block` and lookup
  // steps of up to `max_rows` rows: one lock per decision.
  BlockCostModel::Reading Read(int32_t max_block, int32_t max_rows) const;
  // PredictedRate, BestBlock and PredictedLookupRate on a reading.
  double Rate(const BlockCostModel::Reading& r, int32_t block) const;
  int32_t BestBlockIn(const BlockCostModel::Reading& r, int32_t cap) const;
  double LookupRate(const BlockCostModel::Reading& r, int32_t tokens, int32_t match) const;
  double RequestTau(const BlockCostModel::Reading& r, int32_t block) const;

  BlockCostModel& model_;
  const Options options_;
  // When the previous step was observed: a step's wall time is the time since, everything the
  // request did for it included (drafting, verifying, committing, the drafter's update).
  std::optional<SteadyClock::time_point> last_step_end_;
  std::array<double, BlockCostModel::kMaxPositions> drafted_{}, accepted_{};  // this request's
  std::vector<float> predicted_;  // BlockPilot's acceptance curve for this request (may be empty)
  LookupOdds lookup_odds_;        // this request's lookup steps (decayed like its drafted steps)
  int lookups_declined_ = 0;  // lookup drafts declined in a row
  int32_t decided_ = 0;       // the block PlanStep chose for the next speculative step (0: none)
  bool exploring_ = false;  // the last decision explored
  int acceptance_class_ = 0;  // BlockCostModel::AcceptanceClass of the request's temperature
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_COST_AWARE_HOOK_H_
