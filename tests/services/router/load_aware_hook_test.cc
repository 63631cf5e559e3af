// LoadAwareHook: each planned step is counted for the arm that planned it; a lookup draft, which
// the step loop takes before any plan, is counted for neither arm.
#include "services/router/load_aware_hook.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

namespace specdec::services {
namespace {

// The sum of counter `name` over the children labelled `arm` (any arm when empty).
double Steps(prometheus::Registry& registry, const std::string& arm = "") {
  double total = 0;
  for (const auto& family : registry.Collect()) {
    if (family.name != "specdec_load_aware_steps_total") continue;
    for (const auto& m : family.metric) {
      bool match = arm.empty();
      for (const auto& l : m.label) match = match || (l.name == "arm" && l.value == arm);
      if (match) total += m.counter.value;
    }
  }
  return total;
}

engine::StepResult StepOf(int32_t committed, int32_t drafted) {
  engine::StepResult step;
  step.committed.assign(static_cast<size_t>(committed), 7);
  step.drafted = drafted;
  step.accepted = committed - 1;
  step.positions = drafted;
  step.verify_ms = 1;
  step.wall_ms = 1;
  return step;
}

TEST(LoadAwareHookTest, PlannedStepsCountForTheirArmAndLookupsForNeither) {
  prometheus::Registry registry;
  RouterMetrics metrics(registry);
  LoadAwareSpeculation load_aware;
  engine::BlockCostModel model;
  LoadAwareHook hook(load_aware, model, metrics, /*adapt_block=*/false);
  engine::LoopView view;
  view.method = engine::Method::kDflashAdaptive;
  view.tokens_left = 64;
  view.block_size = 8;

  engine::StepPlan plan;
  hook.PlanStep(view, &plan);
  const std::string arm = plan.speculate ? "speculative" : "AR";
  const engine::StepOrigin origin =
      plan.speculate ? engine::StepOrigin::kDrafted : engine::StepOrigin::kArRun;
  hook.Observe(plan, origin, StepOf(plan.speculate ? 3 : 1, plan.speculate ? 7 : 0), true);
  EXPECT_EQ(Steps(registry), 1);
  EXPECT_EQ(Steps(registry, arm), 1);

  hook.Observe(engine::StepPlan{}, engine::StepOrigin::kLookup, StepOf(4, 5), true);
  EXPECT_EQ(Steps(registry), 1) << "a lookup step was counted for the arm of the last plan";

  hook.PlanStep(view, &plan);
  hook.Observe(plan, plan.speculate ? engine::StepOrigin::kDrafted : engine::StepOrigin::kArRun,
               StepOf(2, plan.speculate ? 7 : 0), true);
  EXPECT_EQ(Steps(registry), 2);
}

}  // namespace
}  // namespace specdec::services
