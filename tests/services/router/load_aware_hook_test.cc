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

// A hook over a fresh learner and cost model, and a DFLASH_ADAPTIVE request's view.
class LoadAwareHookTest : public ::testing::Test {
 protected:
  LoadAwareHookTest() {
    view.method = engine::Method::kDflashAdaptive;
    view.tokens_left = 64;
  }
  prometheus::Registry registry;
  RouterMetrics metrics{registry};
  LoadAwareSpeculation load_aware;
  engine::BlockCostModel model;
  LoadAwareHook hook{load_aware, model, metrics, /*adapt_block=*/false};
  engine::LoopView view;
};

// A request needs its drafter unless the open epoch runs AR and holds AR past the request's
// expected end.
TEST(NeedsDrafter, OnlyWhereTheArmHoldsArPastTheRequestsEnd) {
  using Clock = LoadAwareSpeculation::Clock;
  const Clock::time_point now = Clock::now();
  const auto lifetime = std::chrono::milliseconds(500);
  LoadAwareSpeculation::Step ar;
  ar.arm = LoadAwareSpeculation::Arm::kAr;
  ar.holds = now + std::chrono::milliseconds(900);
  EXPECT_FALSE(NeedsDrafter(ar, now, lifetime));
  ar.holds = now + std::chrono::milliseconds(400);  // the level explores within its life
  EXPECT_TRUE(NeedsDrafter(ar, now, lifetime));
  LoadAwareSpeculation::Step speculative = ar;
  speculative.arm = LoadAwareSpeculation::Arm::kSpeculative;
  speculative.holds = now + std::chrono::seconds(2);
  EXPECT_TRUE(NeedsDrafter(speculative, now, lifetime));
  EXPECT_TRUE(NeedsDrafter(std::nullopt, now, lifetime)) << "no epoch open: the next is unknown";
}

// A fresh learner alternates from the speculative arm: its first request speculates.
TEST_F(LoadAwareHookTest, ARequestSpeculatesWhileTheLearnerMayRunTheSpeculativeArm) {
  EXPECT_TRUE(hook.Speculates(view));
  engine::StepPlan plan;
  hook.PlanStep(view, &plan);
  EXPECT_TRUE(hook.Speculates(view));
}

TEST_F(LoadAwareHookTest, PlannedStepsCountForTheirArmAndLookupsForNeither) {
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

// A planned run weighs its lookups against AR's measured step (a run of AR steps), from the
// request's own lookups: after lookups that failed at their first token, the run declines them.
TEST_F(LoadAwareHookTest, ARunWeighsItsLookupsFromTheRequestsOwn) {
  EXPECT_FALSE(hook.WeighRunLookups(view, 1, 0).has_value());
  // AR steps of 1 ms, and 5-row passes of 1.2 ms, measured.
  for (int i = 0; i < 40; ++i) {
    engine::StepResult ar = StepOf(1, 0);
    ar.pass_rows = 1;
    ar.pass_ms = 1;
    hook.Observe(engine::StepPlan{}, engine::StepOrigin::kArRun, ar, false);
    engine::StepResult lookup = StepOf(1, 4);
    lookup.pass_rows = 5;
    lookup.pass_ms = 1.2;
    lookup.verify_ms = 1.2;
    lookup.looked_up = true;
    lookup.lookup_match = 3;
    hook.Observe(engine::StepPlan{}, engine::StepOrigin::kLookup, lookup, false);
  }
  const std::optional<engine::LookupWeighing> w = hook.WeighRunLookups(view, 1, 4);
  ASSERT_TRUE(w.has_value());
  EXPECT_GT(w->alternative_rate, 0);
  EXPECT_GT(w->odds.first_drafted[3], 1);
  EXPECT_EQ(w->Tokens(4, 3), 0);
  // A new request starts from the machine's lookups alone: they failed too.
  LoadAwareHook fresh(load_aware, model, metrics, /*adapt_block=*/false);
  EXPECT_EQ(fresh.WeighRunLookups(view, 1, 4)->Tokens(4, 3), 0);
}

}  // namespace
}  // namespace specdec::services
