// Load awareness as the step loop's planning hook: each step of a DFLASH_ADAPTIVE request runs
// the arm LoadAwareSpeculation chose for the current load (an AR run, or speculation), target-
// drafted runs take the block BlockCostModel predicts fastest, and every step is reported back
// (to the learner, and to the cost model; lookup drafts, which no arm chose, to the cost model
// only).
#ifndef SPECDEC_SERVICES_ROUTER_LOAD_AWARE_HOOK_H_
#define SPECDEC_SERVICES_ROUTER_LOAD_AWARE_HOOK_H_

#include <cstdint>
#include <optional>

#include "common/engine/block_cost_model.h"
#include "common/engine/lookup_weighing.h"
#include "common/engine/step_loop.h"
#include "services/router/load_aware.h"
#include "services/router/router_metrics.h"

namespace specdec::services {

// At most this many tokens per server-side run of a load-aware request; a run is sized (at the
// measured step time) to end when its arm is next due to change (LoadAwareSpeculation's
// Step::holds), so that the request follows the next arm promptly.
inline constexpr int32_t kLoadAwareMaxRunTokens = 512;

// Whether a request beginning at `now`, expected to live `lifetime`, needs its drafter: not when
// the epoch open now (`open`; nullopt: none) runs AR and holds AR past the request's expected
// end, since it would then never run the speculative arm, and a drafter session, the features
// of every row and a policy call would be spent on nothing.
bool NeedsDrafter(const std::optional<LoadAwareSpeculation::Step>& open,
                  LoadAwareSpeculation::Clock::time_point now,
                  LoadAwareSpeculation::Clock::duration lifetime);

// One request's hook over the router's shared learner and cost model. Not thread-safe (one
// request's loop); the shared objects are.
class LoadAwareHook final : public engine::PlanningHook {
 public:
  // `adapt_block`: target-drafted runs use BlockCostModel's block (at most the request's).
  LoadAwareHook(LoadAwareSpeculation& load_aware, engine::BlockCostModel& block_model,
                RouterMetrics& metrics, bool adapt_block)
      : load_aware_(load_aware),
        block_model_(block_model),
        metrics_(metrics),
        adapt_block_(adapt_block) {}

  // False where NeedsDrafter says so for the open epoch and the requests' mean lifetime (the
  // learner's EpochLength): the request then runs as one AR run, its steps counted for AR.
  bool Speculates(const engine::LoopView& view) override;
  void PlanStep(const engine::LoopView& view, engine::StepPlan* plan) override;
  int32_t ChooseBlock(const engine::LoopView& view, int32_t block) override;
  // The run weighs its lookups against its own steps' rate as the cost model predicts it at the
  // requests in flight now (AR, or the machine's tau of the run's block over its step), from the
  // request's lookups so far (engine::RunWeighingOf).
  std::optional<engine::LookupWeighing> WeighRunLookups(const engine::LoopView& view,
                                                        int32_t run_block, int32_t most) override;
  void Observe(const engine::StepPlan& plan, engine::StepOrigin origin,
               const engine::StepResult& step, bool first) override;

 private:
  // The arm of a step beginning now (a new epoch is counted in the metrics).
  LoadAwareSpeculation::Step Next();

  LoadAwareSpeculation& load_aware_;
  engine::BlockCostModel& block_model_;
  RouterMetrics& metrics_;
  const bool adapt_block_;
  LoadAwareSpeculation::Step planned_;  // the arm of the step or run being taken
  uint64_t last_epoch_ = 0;             // the epoch this request's previous step counted in
  int acceptance_class_ = 0;  // BlockCostModel::AcceptanceClass of the request's temperature
  engine::LookupOdds lookup_odds_;  // the request's lookup steps, decayed per step
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_LOAD_AWARE_HOOK_H_
