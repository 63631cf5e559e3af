#include "services/router/load_aware_hook.h"

#include <algorithm>
#include <string>

#include "common/engine/cost_aware_hook.h"

namespace specdec::services {

LoadAwareSpeculation::Step LoadAwareHook::Next() {
  LoadAwareSpeculation::Step s = load_aware_.Next(LoadAwareSpeculation::Clock::now());
  if (s.new_epoch) {
    metrics_.load_aware
        .Add({{"level", LoadAwareSpeculation::LevelName(s.level)},
              {"arm", LoadAwareSpeculation::ArmName(s.arm)}})
        .Increment();
  }
  return s;
}

bool NeedsDrafter(const std::optional<LoadAwareSpeculation::Step>& open,
                  LoadAwareSpeculation::Clock::time_point now,
                  LoadAwareSpeculation::Clock::duration lifetime) {
  return !open || open->arm != LoadAwareSpeculation::Arm::kAr || open->holds - now < lifetime;
}

bool LoadAwareHook::Speculates(const engine::LoopView& view) {
  acceptance_class_ = engine::BlockCostModel::AcceptanceClass(view.temperature);
  const LoadAwareSpeculation::Clock::time_point now = LoadAwareSpeculation::Clock::now();
  if (NeedsDrafter(load_aware_.Peek(now), now, load_aware_.EpochLength())) return true;
  planned_ = Next();  // its one run's first step counts here
  return false;
}

void LoadAwareHook::PlanStep(const engine::LoopView& view, engine::StepPlan* plan) {
  acceptance_class_ = engine::BlockCostModel::AcceptanceClass(view.temperature);
  planned_ = Next();
  plan->speculate = planned_.arm == LoadAwareSpeculation::Arm::kSpeculative;
  // A run of either arm lasts at most until its arm is next due to change (then both arms' runs
  // end within a step of an epoch boundary, so neither arm's steps spill into the other's
  // epochs), and at least a moment (a run makes at least one step). Step::run_for.
  plan->run_tokens = std::min(view.tokens_left, kLoadAwareMaxRunTokens);
  plan->run_max_ms =
      std::max(0.01, std::chrono::duration<double, std::milli>(planned_.run_for).count());
}

int32_t LoadAwareHook::ChooseBlock(const engine::LoopView& view, int32_t block) {
  if (!view.hosted || !adapt_block_) return block;
  // The block the step-cost model predicts fastest for the requests in flight now.
  const int32_t best =
      block_model_.BestBlock(static_cast<int>(load_aware_.in_flight()), block,
                             engine::BlockCostModel::AcceptanceClass(view.temperature));
  metrics_.load_aware_block
      .Add({{"level", LoadAwareSpeculation::LevelName(planned_.level)},
            {"block_size", std::to_string(best)}})
      .Increment();
  return best;
}

namespace {
constexpr double kLookupDecay = 0.95;  // the weight the request's lookup odds keep per step
}  // namespace

std::optional<engine::LookupWeighing> LoadAwareHook::WeighRunLookups(const engine::LoopView& view,
                                                                     int32_t run_block,
                                                                     int32_t most) {
  acceptance_class_ = engine::BlockCostModel::AcceptanceClass(view.temperature);
  if (most < 1) return std::nullopt;
  const int sessions = std::max(1, static_cast<int>(load_aware_.in_flight()));
  const int32_t block = std::max(1, run_block);
  const engine::BlockCostModel::Reading r =
      block_model_.Read(sessions, block, most + 1, acceptance_class_);
  const double step_ms = static_cast<size_t>(block) < r.step_ms.size() ? r.step_ms[block] : 0;
  const double alternative = step_ms > 0 ? block_model_.Tau(block, acceptance_class_) / step_ms : 0;
  return engine::RunWeighingOf(r, alternative, lookup_odds_, kLookupDecay);
}

void LoadAwareHook::Observe(const engine::StepPlan& plan, engine::StepOrigin origin,
                            const engine::StepResult& step, bool first) {
  engine::ObserveStepIn(block_model_, step, origin, first, acceptance_class_);
  lookup_odds_.Decay(kLookupDecay);
  if (origin == engine::StepOrigin::kLookup) {
    lookup_odds_.Observe(step.drafted, step.accepted, step.lookup_match);
  }
  // A lookup step (taken before the loop plans, or inside a run where the sequence repeats) is
  // no arm's choice: both arms' runs look up alike, so neither arm's count or epochs take it.
  if (origin == engine::StepOrigin::kLookup) return;
  metrics_.load_aware_steps.Add({{"arm", LoadAwareSpeculation::ArmName(planned_.arm)}}).Increment();
  if (origin == engine::StepOrigin::kDrafted) {
    load_aware_.Observe(planned_, last_epoch_ == planned_.epoch);
    last_epoch_ = planned_.epoch;
    return;
  }
  // A step of a server-side run. The run may outlast its epoch (it lasts while the arm holds),
  // so each step after the first asks which epoch it ended in and counts there, if that epoch
  // runs the same arm (a plan that changed under the run leaves its last steps uncounted). A
  // step is clean when this request's previous step counted in the same epoch, or when it is
  // the first step of a run (it began in this epoch, after the request's previous step ended).
  const LoadAwareSpeculation::Step at = first ? planned_ : Next();
  if (at.arm == planned_.arm) load_aware_.Observe(at, first || last_epoch_ == at.epoch);
  last_epoch_ = at.epoch;
}

}  // namespace specdec::services
