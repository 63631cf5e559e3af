// CostAwareHook: step costs as the model measures them, the exploration schedule, and the choice
// of AR or a block by predicted committed tokens per millisecond, per request.
#include "common/engine/cost_aware_hook.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace specdec::engine {
namespace {

// A drafted step of `drafted` tokens of which `accepted` were accepted, with its times.
StepResult Drafted(int drafted, int accepted, double verify_ms, double draft_ms) {
  StepResult s;
  s.drafted = drafted;
  s.accepted = accepted;
  s.positions = drafted;
  s.verify_ms = verify_ms;
  s.draft_ms = draft_ms;
  s.wall_ms = verify_ms + draft_ms;
  return s;
}

// A prompt-lookup step found by a suffix match of `match` tokens.
StepResult LookedUp(int drafted, int accepted, double verify_ms, int32_t match = 2) {
  StepResult s = Drafted(drafted, accepted, verify_ms, 0);
  s.looked_up = true;
  s.lookup_match = match;
  return s;
}

// Steps on a machine whose target pass costs verify(rows) and drafter pass draft(rows), at
// blocks 1 (AR), 2, 4, 8 and 16, accepting position i with probability accept[i] (as the share
// of steps accepting exactly the first i positions, which every block then sees alike).
template <typename Verify, typename Draft>
void Measure(BlockCostModel& m, Verify verify, Draft draft, const std::vector<int>& accepted_cycle,
             int acceptance_class = 0) {
  for (int round = 0; round < 8; ++round) {
    StepResult ar;
    ar.verify_ms = verify(1);
    ar.wall_ms = ar.verify_ms;
    ObserveStepIn(m, ar, StepOrigin::kArRun, /*first=*/false, /*acceptance_class=*/0);
    for (int b : {2, 4, 8, 16}) {
      for (int a : accepted_cycle) {
        ObserveStepIn(m, Drafted(b - 1, std::min(a, b - 1), verify(b), draft(b)),
                      StepOrigin::kDrafted, true, acceptance_class);
      }
    }
  }
}

TEST(CostAwareHookTest, StepCostsComeFromThePassesOrElseFromTheStep) {
  StepResult s = Drafted(3, 1, 4.0, 2.0);
  BlockCostModel::StepCost c = StepCostOf(s, StepOrigin::kDrafted, true);
  EXPECT_EQ(c.pass_rows, 4);
  EXPECT_DOUBLE_EQ(c.pass_ms, 4.0);
  EXPECT_EQ(c.draft_rows, 4);
  EXPECT_DOUBLE_EQ(c.draft_ms, 2.0);
  EXPECT_DOUBLE_EQ(c.wall_ms, 6.0);
  // A target's report of a batched pass wins; a run's first step has no wall time.
  s.pass_rows = 40;
  s.pass_ms = 9.0;
  s.draft_rows = 64;
  s.batch_size = 10;
  s.pass_prompt_rows = 25;
  c = StepCostOf(s, StepOrigin::kTargetDraftedRun, true);
  EXPECT_EQ(c.sessions, 10);
  EXPECT_EQ(c.pass_rows, 40);
  EXPECT_EQ(c.prompt_rows, 25);
  EXPECT_DOUBLE_EQ(c.pass_ms, 9.0);
  EXPECT_EQ(c.draft_rows, 64);
  EXPECT_LT(c.wall_ms, 0);
  // An AR step drafts nothing.
  StepResult ar;
  ar.verify_ms = 1.5;
  c = StepCostOf(ar, StepOrigin::kArRun, false);
  EXPECT_EQ(c.pass_rows, 1);
  EXPECT_EQ(c.draft_rows, 0);
  EXPECT_DOUBLE_EQ(c.draft_ms, 0);
}

// A prompt-lookup step measures the target's pass only: no draft cost, no wall time, and
// nothing of the drafter's acceptance, in the shared model or the request's.
TEST(CostAwareHookTest, ALookupStepMeasuresThePassButNotTheDrafter) {
  const StepResult s = Drafted(5, 5, 4.0, 0.01);
  BlockCostModel::StepCost c = StepCostOf(s, StepOrigin::kLookup, true);
  EXPECT_EQ(c.pass_rows, 6);
  EXPECT_DOUBLE_EQ(c.pass_ms, 4.0);
  EXPECT_EQ(c.draft_rows, 0);
  EXPECT_DOUBLE_EQ(c.draft_ms, 0);
  EXPECT_LT(c.wall_ms, 0);

  BlockCostModel m;
  ObserveStepIn(m, Drafted(5, 1, 4.0, 2.0), StepOrigin::kDrafted, true, 0);
  double before_weight = 0, after_weight = 0;
  const double before = m.AcceptedShare(1, 0, &before_weight);
  ObserveStepIn(m, s, StepOrigin::kLookup, true, 0);
  CostAwareHook hook(m);
  const double tau_before = hook.PredictedRate(6);
  hook.Observe(StepPlan{}, StepOrigin::kLookup, s, true);
  EXPECT_DOUBLE_EQ(m.AcceptedShare(1, 0, &after_weight), before);
  EXPECT_DOUBLE_EQ(after_weight, before_weight);
  EXPECT_DOUBLE_EQ(hook.PredictedRate(6), tau_before);
}

// A warm-up request (share_acceptance = false) measures the passes for everyone but keeps its
// drafter and lookup acceptance to itself.
TEST(CostAwareHookTest, ARequestThatSharesNoAcceptanceStillMeasuresCosts) {
  for (bool share : {true, false}) {
    SCOPED_TRACE(share);
    BlockCostModel m;
    CostAwareHook hook(m, {.share_acceptance = share});
    hook.Observe(StepPlan{}, StepOrigin::kDrafted, Drafted(3, 2, 4.0, 1.0), true);
    hook.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, 4, 3.0), true);
    EXPECT_GT(m.StepMs(1, 4), 0);
    double drafter_weight = 0, lookup_weight = 0;
    const double drafter_share = m.AcceptedShare(0, 0, &drafter_weight);
    const double lookup_share = m.LookupShare(0, 0, 2, &lookup_weight);
    EXPECT_EQ(m.SpeculativeSteps(), share ? 1 : 0);
    EXPECT_DOUBLE_EQ(drafter_weight, share ? 1.0 : 0.0);
    EXPECT_DOUBLE_EQ(drafter_share, share ? 1.0 : 0.0);
    EXPECT_DOUBLE_EQ(lookup_weight, share ? 1.0 : 0.0);
    EXPECT_DOUBLE_EQ(lookup_share, share ? 1.0 : 0.0);
    // The request's own acceptance counts either way: positions 0 and 1 accepted, 2 rejected.
    EXPECT_NEAR(hook.PredictedRate(4) * m.StepMs(1, 4), 3.0, 1e-9);
  }
}

TEST(CostAwareHookTest, TheFirstDecisionsTakeEveryCandidateInTurn) {
  BlockCostModel m;
  CostAwareHook hook(m, {.warmup = 16, .explore_every = 1000});
  std::vector<int32_t> taken;
  for (int i = 0; i < 16; ++i) {
    StepPlan plan;
    plan.run_tokens = 100;
    hook.PlanStep(LoopView{Method::kDflashAdaptive, 100, 16, false}, &plan);
    taken.push_back(plan.speculate ? hook.ChooseBlock(LoopView{}, 16) : 1);
  }
  const std::vector<int32_t> cycle = {1, 2, 3, 4, 6, 8, 12, 16};
  for (size_t i = 0; i < taken.size(); ++i) EXPECT_EQ(taken[i], cycle[i % cycle.size()]) << i;
}

TEST(CostAwareHookTest, ExpensiveRowsAndFallingAcceptancePickASmallBlock) {
  // A CPU: each row costs as much as the rest of a pass. Position 0 is accepted 2/3 of the
  // time, position 1 1/3, later ones never: AR makes 1 token in 2 ms, b = 2 1.67 in 3.1 ms,
  // b = 3 2 in 4.1 ms, ...
  BlockCostModel m;
  Measure(
      m, [](int rows) { return 1.0 + rows; }, [](int rows) { return 0.1; }, {0, 1, 2});
  CostAwareHook hook(m);
  EXPECT_EQ(hook.BestBlock(16), 2);
  EXPECT_GT(hook.PredictedRate(2), hook.PredictedRate(16));
  EXPECT_GT(hook.PredictedRate(2), hook.PredictedRate(1));
}

TEST(CostAwareHookTest, CheapRowsAndHighAcceptanceKeepTheWholeBlock) {
  // A GPU: a 16-row pass costs about a 1-row one, and every drafted position is accepted.
  BlockCostModel m;
  Measure(
      m, [](int rows) { return 10.0 + 0.01 * rows; }, [](int rows) { return 1.0; }, {15});
  CostAwareHook hook(m);
  EXPECT_EQ(hook.BestBlock(16), 16);
}

TEST(CostAwareHookTest, NothingAcceptedPlansAnArRun) {
  BlockCostModel m;
  Measure(
      m, [](int rows) { return 1.0 + 0.5 * rows; }, [](int rows) { return 1.0; }, {0});
  CostAwareHook hook(m, {.warmup = 0, .explore_every = 1000});
  EXPECT_EQ(hook.BestBlock(16), 1);
  StepPlan plan;
  plan.run_tokens = 100;
  m.NextDecision();  // past the exploring decision 0
  hook.PlanStep(LoopView{Method::kDflashAdaptive, 100, 16, false}, &plan);
  EXPECT_FALSE(plan.speculate);
  EXPECT_EQ(plan.run_tokens, 4);
}

// Decisions 1..130 of a request whose drafted steps accept nothing, each taking
// step_ms(block) ms: the decisions that drafted.
template <typename StepMs>
std::vector<int> DraftedDecisions(CostAwareHook& hook, StepMs step_ms) {
  std::vector<int> drafted;
  for (int d = 1; d <= 130; ++d) {
    StepPlan plan;
    plan.run_tokens = 100;
    hook.PlanStep(LoopView{Method::kDflashAdaptive, 100, 16, false}, &plan);
    if (!plan.speculate) continue;
    drafted.push_back(d);
    const int32_t b = hook.ChooseBlock(LoopView{}, 16);
    EXPECT_GE(b, 2);
    hook.Observe(plan, StepOrigin::kDrafted, Drafted(b - 1, 0, step_ms(b), 1.0), true);
  }
  return drafted;
}

TEST(CostAwareHookTest, ARequestOnArProbesItsBestBlockEveryFewDecisions) {
  BlockCostModel m;
  Measure(
      m, [](int rows) { return 1.0 + 0.5 * rows; }, [](int rows) { return 1.0; }, {0});
  CostAwareHook hook(m, {.probe_every = 8, .warmup = 0, .explore_every = 1000});
  m.NextDecision();  // past the exploring decision 0
  // Every probe that leaves AR ahead doubles the wait: 8, 16, 32, then 64 at most.
  EXPECT_EQ(DraftedDecisions(hook, [](int32_t) { return 2.0; }),
            (std::vector<int>{8, 24, 56, 120}));
}

// The wait and the count of decisions that did not draft are the temperature class's: a new
// request at T = 0 after one whose probes kept losing goes on from them (the first request
// decided 10 times after its last probe, so the next probes at 64 - 10), not from probe_every;
// a request at T = 1 still probes after probe_every.
TEST(CostAwareHookTest, ProbesThatKeepLosingMakeTheClassesNextRequestsWaitLonger) {
  BlockCostModel m;
  Measure(
      m, [](int rows) { return 1.0 + 0.5 * rows; }, [](int rows) { return 1.0; }, {0});
  m.NextDecision();  // past the exploring decision 0
  const CostAwareHook::Options options = {.probe_every = 8, .warmup = 0, .explore_every = 1000};
  auto first_probe = [&](float temperature) {
    CostAwareHook hook(m, options);
    for (int d = 1; d <= 200; ++d) {
      StepPlan plan;
      plan.run_tokens = 100;
      LoopView view{Method::kDflashAdaptive, 100, 16, false, {}, temperature};
      hook.PlanStep(view, &plan);
      if (plan.speculate) return d;
    }
    return 0;
  };
  CostAwareHook first(m, options);
  EXPECT_EQ(DraftedDecisions(first, [](int32_t) { return 2.0; }),
            (std::vector<int>{8, 24, 56, 120}));
  EXPECT_EQ(first_probe(0.0), 54);
  EXPECT_EQ(first_probe(1.0), 8);
  EXPECT_EQ(m.ProbeWait(BlockCostModel::ProbeKind::kBlock, 0, 8), 64);
  EXPECT_EQ(m.ProbeWait(BlockCostModel::ProbeKind::kLookup, 0, 8), 8);  // no lookup probed
}

// Once the drafter's probes at a temperature class have backed off to the longest wait, the
// class's new requests run without the drafter, but the measuring ones, ever rarer while they
// lose; another class, or a class whose wait a winning decision shortened, speculates.
TEST(CostAwareHookTest, WhereTheDraftersProbesKeepLosingMostRequestsRunWithoutIt) {
  BlockCostModel m;
  Measure(
      m, [](int rows) { return 1.0 + 0.5 * rows; }, [](int rows) { return 1.0; }, {0});
  m.NextDecision();  // past the exploring decision 0
  const CostAwareHook::Options options = {
      .probe_every = 8, .warmup = 0, .explore_every = 1000, .measure_every_requests = 4};
  auto speculates = [&](float temperature) {
    CostAwareHook hook(m, options);
    return hook.Speculates(LoopView{Method::kDflashAdaptive, 100, 0, false, {}, temperature});
  };
  EXPECT_TRUE(speculates(0.0));  // nothing probed yet
  CostAwareHook first(m, options);
  EXPECT_EQ(DraftedDecisions(first, [](int32_t) { return 2.0; }),
            (std::vector<int>{8, 24, 56, 120}));
  // The first measures, then one after 4 more, after 8, after 16, ... while they keep losing.
  std::vector<int> measuring;
  for (int i = 0; i < 40; ++i) {
    if (speculates(0.0)) measuring.push_back(i);
  }
  EXPECT_EQ(measuring, (std::vector<int>{0, 4, 12, 28}));
  EXPECT_TRUE(speculates(1.0));
  m.SetProbeWait(BlockCostModel::ProbeKind::kBlock, 0, 8);  // as a decision to speculate does
  EXPECT_TRUE(speculates(0.0));
  EXPECT_TRUE(speculates(0.0));
  // Once the probes lose again, the class starts measuring from the shortest wait.
  m.SetProbeWait(BlockCostModel::ProbeKind::kBlock, 0, 64);
  measuring.clear();
  for (int i = 0; i < 6; ++i) {
    if (speculates(0.0)) measuring.push_back(i);
  }
  EXPECT_EQ(measuring, (std::vector<int>{0, 4}));
}

// Requests too short to reach the wait on their own (a hosted run decides once per 16 tokens)
// probe all the same: the class counts their decisions together, and one probe resets the count
// for all of them.
TEST(CostAwareHookTest, ShortRequestsReachTheProbeWaitTogether) {
  BlockCostModel m;
  Measure(
      m, [](int rows) { return 1.0 + 0.5 * rows; }, [](int rows) { return 1.0; }, {0});
  m.NextDecision();  // past the exploring decision 0
  const CostAwareHook::Options options = {.probe_every = 8, .warmup = 0, .explore_every = 1000};
  std::vector<int> probing_requests;
  for (int request = 0; request < 12; ++request) {
    CostAwareHook hook(m, options);
    for (int d = 0; d < 5; ++d) {
      StepPlan plan;
      plan.run_tokens = 100;
      hook.PlanStep(LoopView{Method::kDflashAdaptive, 100, 16, false}, &plan);
      if (!plan.speculate) continue;
      probing_requests.push_back(request);
      const int32_t b = hook.ChooseBlock(LoopView{}, 16);
      hook.Observe(plan, StepOrigin::kDrafted, Drafted(b - 1, 0, 2.0, 1.0), true);
    }
  }
  // Class decisions 8, 24 and 56 probe (waits 8, 16, 32): requests 1, 4 and 11 of 5 decisions.
  EXPECT_EQ(probing_requests, (std::vector<int>{1, 4, 11}));
  EXPECT_EQ(m.ProbeWait(BlockCostModel::ProbeKind::kBlock, 0, 8), 64);
}

TEST(CostAwareHookTest, AProbeThatPaysEndsTheBackOff) {
  // AR: 1.1 ms a token; a block of 2 that accepts nothing 1 token in 1.4 ms, one that accepts
  // half its drafted tokens (as a single accepted probe makes it for this prior) 1.5 in 1.4.
  BlockCostModel m;
  Measure(
      m, [](int rows) { return 1.0 + 0.1 * rows; }, [](int rows) { return 0.2; }, {0});
  CostAwareHook hook(m, {.prior_steps = 1, .probe_every = 8, .warmup = 0, .explore_every = 1000});
  m.NextDecision();
  std::vector<int> drafted;
  for (int d = 1; d <= 200; ++d) {
    StepPlan plan;
    plan.run_tokens = 100;
    hook.PlanStep(LoopView{Method::kDflashAdaptive, 100, 16, false}, &plan);
    if (!plan.speculate) continue;
    drafted.push_back(d);
    const int32_t b = hook.ChooseBlock(LoopView{}, 16);
    // The request accepts every drafted token from decision 50 to 60, nothing otherwise.
    const int accepted = d >= 50 && d <= 60 ? b - 1 : 0;
    hook.Observe(plan, StepOrigin::kDrafted, Drafted(b - 1, accepted, 1.0 + 0.1 * b, 0.2), true);
  }
  ASSERT_GE(drafted.size(), 4u);
  EXPECT_EQ(std::vector<int>(drafted.begin(), drafted.begin() + 2), (std::vector<int>{8, 24}));
  // The probe at 56 pays, the request speculates while it accepts, and once AR wins again the
  // next probe comes `probe_every` decisions after its last drafted step, not 64.
  const auto after = std::find(drafted.begin(), drafted.end(), 56);
  ASSERT_NE(after, drafted.end());
  auto last = after;
  while (last + 1 != drafted.end() && *(last + 1) == *last + 1) ++last;
  EXPECT_GT(*last, 56);
  ASSERT_NE(last + 1, drafted.end());
  EXPECT_EQ(*(last + 1), *last + 8);
}

// A probe of a block the prior predicts at under probe_min_share of AR's rate does not draft
// (and the wait before the next still doubles).
TEST(CostAwareHookTest, AProbePredictedFarBelowArDoesNotDraft) {
  // AR: 2 ms a token; a block of 2 costs 3 + 2 ms and accepts nothing (0.4 of AR's rate).
  for (double min_share : {0.5, 0.0}) {
    BlockCostModel m;
    Measure(
        m, [](int rows) { return 1.0 + rows; }, [](int rows) { return 2.0; }, {0});
    CostAwareHook hook(
        m, {.probe_every = 8, .probe_min_share = min_share, .warmup = 0, .explore_every = 1000});
    m.NextDecision();  // past the exploring decision 0
    const std::vector<int> probes = DraftedDecisions(hook, [](int32_t b) { return 1.0 + b; });
    EXPECT_EQ(probes, (min_share > 0 ? std::vector<int>{} : std::vector<int>{8, 24, 56, 120}));
  }
}

// The machine's greedy requests accept every drafted token, its T=1 requests none: a request's
// prior is the acceptance at its own temperature, so a greedy request drafts its whole block and
// a T=1 request runs AR on the same machine.
TEST(CostAwareHookTest, ARequestsPriorIsTheMachinesAcceptanceAtItsTemperature) {
  auto verify = [](int rows) { return 1.0 + 0.1 * rows; };
  auto draft = [](int rows) { return 0.2; };
  BlockCostModel m;
  Measure(m, verify, draft, {15}, BlockCostModel::AcceptanceClass(0));
  Measure(m, verify, draft, {0}, BlockCostModel::AcceptanceClass(1));
  m.NextDecision();  // past the exploring decision 0
  for (float temperature : {0.f, 1.f}) {
    CostAwareHook hook(m, {.warmup = 0, .explore_every = 1000});
    LoopView view{Method::kDflashAdaptive, 100, 16, false, {}, temperature};
    StepPlan plan;
    plan.run_tokens = 100;
    hook.PlanStep(view, &plan);
    EXPECT_EQ(plan.speculate, temperature == 0) << temperature;
    EXPECT_EQ(hook.BestBlock(16), temperature == 0 ? 16 : 1) << temperature;
  }
}

TEST(CostAwareHookTest, ExplorationSkipsACandidateFarBelowTheBest) {
  // AR: 2 ms a token; a block of 2 costs 3 + 2 ms and accepts nothing (0.4 of AR's rate).
  for (double min_share : {0.5, 0.0}) {
    BlockCostModel m;
    Measure(
        m, [](int rows) { return 1.0 + rows; }, [](int rows) { return 2.0; }, {0});
    CostAwareHook hook(
        m, {.probe_every = 8, .warmup = 0, .explore_every = 1, .explore_min_share = min_share});
    std::vector<int32_t> taken;
    for (int d = 0; d < 7; ++d) {
      StepPlan plan;
      plan.run_tokens = 100;
      hook.PlanStep(LoopView{Method::kDflashAdaptive, 100, 16, false}, &plan);
      const int32_t b = plan.speculate ? hook.ChooseBlock(LoopView{}, 16) : 1;
      taken.push_back(b);
      if (b >= 2) hook.Observe(plan, StepOrigin::kDrafted, Drafted(b - 1, 0, 4.0, 2.0), true);
    }
    if (min_share > 0) {
      EXPECT_EQ(taken, (std::vector<int32_t>(7, 1)));
    } else {
      EXPECT_EQ(taken, (std::vector<int32_t>{1, 2, 3, 4, 6, 8, 12}));
    }
  }
}

TEST(CostAwareHookTest, ARequestsOwnAcceptanceOutweighsTheMachinesWithSteps) {
  // The machine's requests accept nothing, but this one accepts every drafted token: after a
  // few steps of its own it speculates with large blocks where others run AR. (A model per
  // request here: the machine's share follows every request's steps.)
  auto verify = [](int rows) { return 1.0 + 0.1 * rows; };
  auto draft = [](int rows) { return 0.2; };
  BlockCostModel m, same_machine;
  Measure(m, verify, draft, {0});
  Measure(same_machine, verify, draft, {0});
  CostAwareHook repetitive(m, {.warmup = 0, .explore_every = 1000});
  EXPECT_EQ(repetitive.BestBlock(16), 1);
  for (int i = 0; i < 40; ++i) {
    repetitive.Observe(StepPlan{}, StepOrigin::kDrafted, Drafted(15, 15, 2.5, 0.2), true);
  }
  EXPECT_GT(repetitive.BestBlock(16), 8);
  CostAwareHook other(same_machine, {.warmup = 0, .explore_every = 1000});
  EXPECT_EQ(other.BestBlock(16), 1);
}

// BlockPilot's predicted acceptance curve is the request's prior in place of the machine's: a
// request predicted to accept most positions drafts a large block on a machine whose requests
// accept nothing, and one predicted to accept nothing runs AR on a machine that accepts all.
TEST(CostAwareHookTest, APredictedCurveIsTheRequestsPriorInPlaceOfTheMachines) {
  auto verify = [](int rows) { return 1.0 + 0.1 * rows; };
  auto draft = [](int rows) { return 0.2; };
  const std::vector<float> high(15, 0.95f), none(15, 0.0f);
  struct Case {
    std::vector<int> machine_accepts;
    const std::vector<float>* predicted;
    bool expect_large;
  };
  for (const Case& c : {Case{{0}, &high, true}, Case{{15}, &none, false}}) {
    BlockCostModel m;
    Measure(m, verify, draft, c.machine_accepts);
    CostAwareHook hook(m, {.warmup = 0, .explore_every = 1000});
    m.NextDecision();  // past the exploring decision 0
    LoopView view{Method::kDflashAdaptive, 100, 16, false, *c.predicted};
    StepPlan plan;
    plan.run_tokens = 100;
    hook.PlanStep(view, &plan);
    if (c.expect_large) {
      ASSERT_TRUE(plan.speculate);
      EXPECT_GT(hook.ChooseBlock(view, 16), 8);
    } else {
      EXPECT_FALSE(plan.speculate);
      EXPECT_EQ(hook.BestBlock(16), 1);
    }
  }
}

// A remote policy's curve is untrusted input: NaN and values outside [0, 1] are clamped, so the
// predicted rates stay finite and a share above 1 cannot claim more than every position.
TEST(CostAwareHookTest, AMalformedPredictedCurveIsClamped) {
  BlockCostModel m;
  Measure(
      m, [](int rows) { return 1.0 + 0.1 * rows; }, [](int rows) { return 0.2; }, {0});
  CostAwareHook hook(m, {.warmup = 0, .explore_every = 1000});
  m.NextDecision();
  const std::vector<float> bad = {std::nanf(""), 7.0f, -3.0f, 1.0f};
  LoopView view{Method::kDflashAdaptive, 100, 5, false, bad};
  StepPlan plan;
  plan.run_tokens = 100;
  hook.PlanStep(view, &plan);
  for (int32_t b = 1; b <= 5; ++b) EXPECT_TRUE(std::isfinite(hook.PredictedRate(b))) << b;
  // tau(5) = 1 + 0 + 1 + 0 + 1 at most: the prior's shares are 0, 1, 0, 1.
  EXPECT_LE(hook.PredictedRate(5) * m.StepMs(1, 5), 3.0 + 1e-9);
}

// A prompt-lookup draft is verified as far as its predicted rate beats the request's best
// candidate: whole where this request's lookups are accepted, cut where only the first token
// is, and declined (but for a probe every few lookups) where nothing is.
TEST(CostAwareHookTest, ALookupDraftIsVerifiedAsFarAsItPays) {
  // Each row costs as much as the rest of a pass; the drafter's blocks accept nothing.
  auto verify = [](int rows) { return 1.0 + rows; };
  auto draft = [](int rows) { return 0.1; };
  const LoopView view{Method::kDflashAdaptive, 100, 16, false};
  auto observe_lookups = [](CostAwareHook& hook, int accepted) {
    for (int i = 0; i < 30; ++i) {
      hook.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, accepted, 5.0), true);
    }
  };
  {
    BlockCostModel m;
    Measure(m, verify, draft, {0});
    CostAwareHook hook(m, {.warmup = 0, .explore_every = 1000});
    EXPECT_EQ(hook.LookupTokens(view, 4, 2), 4);  // the prior: lookups are accepted
    observe_lookups(hook, 4);
    EXPECT_EQ(hook.LookupTokens(view, 4, 2), 4);
    EXPECT_GT(hook.PredictedLookupRate(4, 2), hook.PredictedRate(1));
  }
  {
    BlockCostModel m;
    Measure(m, verify, draft, {0});
    CostAwareHook hook(m, {.warmup = 0, .explore_every = 1000});
    observe_lookups(hook, 1);  // only the first token is ever accepted
    EXPECT_EQ(hook.LookupTokens(view, 4, 2), 1);
  }
  {
    BlockCostModel m;
    Measure(m, verify, draft, {0});
    CostAwareHook hook(m, {.probe_every = 4, .warmup = 0, .explore_every = 1000});
    observe_lookups(hook, 0);
    std::vector<int32_t> taken;
    for (int i = 0; i < 20; ++i) taken.push_back(hook.LookupTokens(view, 4, 2));
    // Probes after 4, then 8, then 16 declines while lookups keep failing, each at the draft's
    // best length (1: a 2-row pass, predicted within half of AR's rate).
    std::vector<int32_t> want(20, 0);
    want[3] = want[11] = 1;
    EXPECT_EQ(taken, want);
  }
  {
    // A pass costs its rows squared: even a 1-token lookup (a 2-row pass) is predicted far below
    // AR's rate once lookups fail, so the probes are skipped (their waits still double).
    auto costly = [](int rows) { return 1.0 * rows * rows; };
    BlockCostModel m;
    Measure(m, costly, draft, {0});
    CostAwareHook hook(m, {.probe_every = 4, .warmup = 0, .explore_every = 1000});
    for (int i = 0; i < 30; ++i) {
      hook.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, 0, costly(5)), true);
    }
    std::vector<int32_t> taken;
    for (int i = 0; i < 20; ++i) taken.push_back(hook.LookupTokens(view, 4, 2));
    EXPECT_EQ(taken, std::vector<int32_t>(20, 0));
  }
}

// A planned run weighs its lookups against the run's own steps from the request's odds: whole
// drafts where they are accepted, their first token where only it is, none where nothing is (the
// run does not probe; the loop's lookups before planning do).
TEST(CostAwareHookTest, ARunWeighsItsLookupsAgainstItsOwnSteps) {
  auto verify = [](int rows) { return 1.0 + rows; };
  auto draft = [](int rows) { return 0.1; };
  const LoopView view{Method::kDflashAdaptive, 100, 16, false};
  for (int accepted : {4, 1, 0}) {
    BlockCostModel m;
    Measure(m, verify, draft, {0});
    CostAwareHook hook(m, {.probe_every = 1, .warmup = 0, .explore_every = 1000});
    for (int i = 0; i < 30; ++i) {
      for (int32_t match = 1; match <= kLookupMaxMatch; ++match) {
        hook.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, accepted, 5.0, match), true);
      }
    }
    const std::optional<LookupWeighing> run = hook.WeighRunLookups(view, 1, 4);
    ASSERT_TRUE(run.has_value());
    // Whole drafts when they are accepted whole; a 1-token lookup (a 2-row pass committing about
    // 2 tokens) when only the first token is; none when nothing is.
    const int32_t want = accepted == 4 ? 4 : accepted == 1 ? 1 : 0;
    for (int32_t match = 1; match <= kLookupMaxMatch; ++match) {
      EXPECT_EQ(run->Tokens(4, match), want) << accepted << " " << match;
    }
    EXPECT_EQ(want > 0, hook.PredictedLookupRate(want > 0 ? want : 1, 1) >= hook.PredictedRate(1));
    EXPECT_DOUBLE_EQ(run->alternative_rate, hook.PredictedRate(1));
    // A run of blocks of 16 rows (cheap per token only if they were accepted) is the weaker
    // alternative: a lookup beats it at least as often.
    EXPECT_GE(hook.WeighRunLookups(view, 16, 4)->Tokens(4, 1), want);
  }
  BlockCostModel unmeasured;
  EXPECT_FALSE(CostAwareHook(unmeasured).WeighRunLookups(view, 1, 0).has_value());
  // Nothing measured yet: every lookup, whole.
  const std::optional<LookupWeighing> first = CostAwareHook(unmeasured).WeighRunLookups(view, 1, 4);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->Tokens(4, 1), 4);
}

// Lookups are weighed per length of the suffix they matched: where 1-token matches fail and
// longer ones are accepted whole, a request (and, through the machine's prior, the next request)
// declines a 1-token match's draft and verifies a 3-token match's whole, and so does a planned
// run.
TEST(CostAwareHookTest, LookupsAreWeighedByTheLengthOfTheirMatch) {
  auto verify = [](int rows) { return 1.0 + rows; };
  auto draft = [](int rows) { return 0.1; };
  BlockCostModel m;
  Measure(m, verify, draft, {0});
  const LoopView view{Method::kDflashAdaptive, 100, 16, false};
  CostAwareHook earlier(m, {.warmup = 0, .explore_every = 1000});
  for (int i = 0; i < 30; ++i) {
    earlier.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, 0, 5.0, 1), true);
    earlier.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, 4, 5.0, 2), true);
    earlier.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, 4, 5.0, 3), true);
  }
  double weight = 0;
  EXPECT_DOUBLE_EQ(m.LookupShare(0, 0, 1, &weight), 0.0);
  EXPECT_GT(weight, 0);
  EXPECT_DOUBLE_EQ(m.LookupShare(0, 0, 3, &weight), 1.0);
  EXPECT_EQ(earlier.LookupTokens(view, 4, 1), 0);
  EXPECT_EQ(earlier.LookupTokens(view, 4, 3), 4);
  const std::optional<LookupWeighing> run = earlier.WeighRunLookups(view, 1, 4);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->Tokens(4, 1), 0);
  EXPECT_EQ(run->Tokens(4, 3), 4);
  CostAwareHook next(m, {.warmup = 0, .explore_every = 1000});
  EXPECT_EQ(next.LookupTokens(view, 4, 1), 0);
  EXPECT_EQ(next.LookupTokens(view, 4, 3), 4);
  EXPECT_LT(next.PredictedLookupRate(4, 1), next.PredictedRate(1));
  EXPECT_GT(next.PredictedLookupRate(4, 2), next.PredictedRate(1));
}

// A request's lookup prior is the machine's lookup acceptance at its temperature: once lookups
// have failed for requests at T = 1, a new request at T = 1 declines its first lookup draft,
// while one at T = 0, whose lookups were accepted, verifies the whole draft.
TEST(CostAwareHookTest, ARequestsLookupPriorIsTheMachinesAtItsTemperature) {
  auto verify = [](int rows) { return 1.0 + rows; };
  auto draft = [](int rows) { return 0.1; };
  BlockCostModel m;
  Measure(m, verify, draft, {0});
  const LoopView greedy{Method::kDflashAdaptive, 100, 16, false, {}, 0.f};
  const LoopView sampled{Method::kDflashAdaptive, 100, 16, false, {}, 1.f};
  {
    CostAwareHook earlier(m, {.warmup = 0, .explore_every = 1000});
    for (int i = 0; i < 30; ++i) {
      earlier.LookupTokens(greedy, 4, 2);
      earlier.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, 4, 5.0), true);
    }
    CostAwareHook earlier_sampled(m, {.warmup = 0, .explore_every = 1000});
    for (int i = 0; i < 30; ++i) {
      earlier_sampled.LookupTokens(sampled, 4, 2);
      earlier_sampled.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, 0, 5.0), true);
    }
  }
  double weight = 0;
  EXPECT_DOUBLE_EQ(m.LookupShare(0, BlockCostModel::AcceptanceClass(1.0), 2, &weight), 0.0);
  EXPECT_GT(weight, 0);
  EXPECT_DOUBLE_EQ(m.LookupShare(0, BlockCostModel::AcceptanceClass(0.0), 2, &weight), 1.0);
  CostAwareHook at_t1(m, {.warmup = 0, .explore_every = 1000});
  EXPECT_EQ(at_t1.LookupTokens(sampled, 4, 2), 0);
  CostAwareHook at_t0(m, {.warmup = 0, .explore_every = 1000});
  EXPECT_EQ(at_t0.LookupTokens(greedy, 4, 2), 4);
}

// Past the first position, a lookup's acceptance is the request's own: a request whose lookups
// were accepted whole so far verifies the whole next one, although the machine's lookups (half
// accepted whole, half not at all) accept each position half the time.
TEST(CostAwareHookTest, ARequestWhoseLookupsRepeatVerifiesThemWhole) {
  auto verify = [](int rows) { return 1.0 + rows; };
  auto draft = [](int rows) { return 0.1; };
  BlockCostModel m;
  Measure(m, verify, draft, {0});
  const LoopView view{Method::kDflashAdaptive, 100, 16, false};
  {
    CostAwareHook earlier(m, {.warmup = 0, .explore_every = 1000});
    for (int i = 0; i < 40; ++i) {
      earlier.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, i % 2 == 0 ? 4 : 0, verify(5)),
                      true);
    }
  }
  double weight = 0;
  EXPECT_NEAR(m.LookupShare(3, 0, 2, &weight), 0.5, 0.05);
  CostAwareHook hook(m, {.warmup = 0, .explore_every = 1000});
  for (int i = 0; i < 3; ++i) {
    hook.Observe(StepPlan{}, StepOrigin::kLookup, LookedUp(4, 4, verify(5)), true);
  }
  EXPECT_EQ(hook.LookupTokens(view, 4, 2), 4);
}

}  // namespace
}  // namespace specdec::engine
