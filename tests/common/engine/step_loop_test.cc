// The step loop over fake sides: a target whose greedy continuation is a known sequence, and
// drafters that propose it with chosen mistakes. Checks what every method's loop commits, its
// statistics, its stop rule, and how it degrades; no model involved.
#include "common/engine/step_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "common/engine/request_limits.h"

namespace specdec::engine {
namespace {

// The target's continuation after any prompt: token i of the output is Truth(i).
int32_t Truth(int64_t i) { return static_cast<int32_t>((i * 7 + 3) % 50); }

// Greedy target over Truth: verifies a chain or a tree against it, runs AR steps, and (with
// `hosted_block` > 0) drafts blocks itself whose first `hosted_good` draft tokens are right; a
// run that looks up verifies the real lookup draft (prompt_lookup.h) of the sequence where it
// repeats (Truth repeats every 50 tokens).
class FakeTarget final : public TargetSide {
 public:
  int32_t hosted_block = 0;
  int32_t hosted_good = 0;
  int64_t produced = 0;  // tokens committed so far (the prefill's included)
  int prefills = 0, verifies = 0, runs = 0;
  int feature_runs = 0;                     // runs asked to keep their rows' features
  std::vector<int64_t> cache_after_verify;  // the cache length each verify's rows started at
  std::vector<LookupShape> run_lookups;     // each run's RunPlan::lookup
  std::vector<bool> run_weighed;            // each run's RunPlan::lookup_weighing is set
  std::vector<PrefillAsk> prefill_asks;
  int64_t prompt_length = 0;
  std::vector<int32_t> sequence;  // the prompt and every committed token

  absl::StatusOr<PrefillResult> Prefill(std::span<const int32_t> prompt,
                                        const PrefillAsk& ask) override {
    ++prefills;
    prefill_asks.push_back(ask);
    prompt_length = static_cast<int64_t>(prompt.size());
    sequence.assign(prompt.begin(), prompt.end());
    PrefillResult r;
    r.first_token = Truth(produced++);
    sequence.push_back(r.first_token);
    if (ask.logits) r.last_logits = {1.f, 2.f};
    return r;
  }

  absl::StatusOr<StepResult> Verify(int32_t last, const Draft& draft, bool) override {
    ++verifies;
    cache_after_verify.push_back(prompt_length + produced - 1);
    StepResult s;
    s.drafted = static_cast<int32_t>(draft.tokens.size());
    if (draft.parents.empty()) {
      while (s.accepted < s.drafted && draft.tokens[s.accepted] == Truth(produced + s.accepted)) {
        s.committed.push_back(draft.tokens[s.accepted]);
        ++s.accepted;
      }
    } else {
      // Tree: follow the right child at each depth.
      int32_t node = -1;
      while (true) {
        int32_t next = -1;
        for (size_t i = 0; i < draft.tokens.size(); ++i) {
          if (draft.parents[i] == node && draft.tokens[i] == Truth(produced + s.accepted)) {
            next = static_cast<int32_t>(i);
            break;
          }
        }
        if (next < 0) break;
        s.committed.push_back(draft.tokens[next]);
        ++s.accepted;
        node = next;
      }
    }
    s.committed.push_back(Truth(produced + s.accepted));
    Keep(s.committed);
    s.verify_ms = 1;
    return s;
  }

  void Keep(const std::vector<int32_t>& committed) {
    produced += static_cast<int64_t>(committed.size());
    sequence.insert(sequence.end(), committed.begin(), committed.end());
  }

  absl::Status Run(int32_t last, const RunPlan& plan, const StepSink& sink) override {
    ++runs;
    run_lookups.push_back(plan.lookup);
    run_weighed.push_back(plan.lookup_weighing.has_value());
    std::optional<LookupWeighing> weighing = plan.lookup_weighing;
    if (plan.features) ++feature_runs;
    if (plan.block_size > 0 && hosted_block == 0) return absl::InternalError("not hosted");
    int32_t left = plan.max_tokens;
    while (left > 0) {
      StepResult s;
      // `sequence` ends with the step's row 0 (the last committed token).
      std::vector<int32_t> lookup = LookupDraft(sequence, plan.lookup, left, 512);
      if (weighing) {
        const auto found = static_cast<int32_t>(lookup.size());
        lookup.resize(static_cast<size_t>(weighing->Tokens(found, kLookupMaxMatch)));
      }
      if (!lookup.empty()) {
        Draft d;
        d.tokens = lookup;
        s = *Verify(sequence.back(), d, false);
        --verifies;  // counts the loop's verifies only
        s.looked_up = true;
        s.positions = s.drafted;
      } else {
        const int32_t rows = plan.block_size > 0 ? std::min(plan.block_size, left) : 1;
        s.drafted = rows - 1;
        s.positions = rows - 1;
        s.accepted = std::min(s.drafted, hosted_good);
        for (int32_t i = 0; i <= s.accepted; ++i) s.committed.push_back(Truth(produced + i));
        Keep(s.committed);
      }
      left -= static_cast<int32_t>(s.committed.size());
      if (weighing) weighing->AfterStep(s.looked_up, s.drafted, s.accepted, kLookupMaxMatch);
      if (!sink(std::move(s))) break;
    }
    return absl::OkStatus();
  }

  int32_t HostedBlockSize() const override { return hosted_block; }
};

// Proposes the target's continuation, wrong from draft position `good` on; chains, trees (the
// right token and a wrong sibling at each depth) or DFlash blocks. Fails from call `fail_at`.
class FakeDrafter final : public DrafterSide {
 public:
  FakeDrafter(const FakeTarget& target, bool tree, int32_t trained_block, int32_t good)
      : target_(target), tree_(tree), trained_block_(trained_block), good_(good) {}
  int fail_at = -1;
  int calls = 0;
  bool opened = false;
  std::vector<DraftShape> shapes;

  absl::Status Open(std::span<const int32_t>) override {
    opened = true;
    return absl::OkStatus();
  }
  absl::StatusOr<Draft> Propose(int32_t, const DraftShape& shape) override {
    if (fail_at >= 0 && calls++ >= fail_at) return absl::UnavailableError("drafter went away");
    shapes.push_back(shape);
    Draft d;
    d.proposal = trained_block_ > 0 ? Proposal::kOneHot : Proposal::kSampled;
    for (int32_t i = 0; i < shape.length; ++i) {
      const int32_t right = Truth(target_.produced + i);
      const int32_t token = i < good_ ? right : (right + 1) % 50;
      if (!tree_) {
        d.tokens.push_back(token);
        continue;
      }
      if (static_cast<int32_t>(d.tokens.size()) + 2 > shape.tree_budget) break;
      const int32_t parent = i == 0 ? -1 : static_cast<int32_t>(d.tokens.size()) - 2;
      d.tokens.push_back(token);
      d.parents.push_back(parent);
      d.tokens.push_back((right + 2) % 50);
      d.parents.push_back(parent);
    }
    d.positions =
        tree_ ? static_cast<int32_t>(d.tokens.size() / 2) : static_cast<int32_t>(d.tokens.size());
    return d;
  }
  absl::Status Accept(const StepResult&) override { return absl::OkStatus(); }
  int32_t TrainedBlockSize() const override { return trained_block_; }
  bool WantsFeatures() const override { return trained_block_ > 0; }

 private:
  const FakeTarget& target_;
  const bool tree_;
  const int32_t trained_block_;
  const int32_t good_;
};

class FakePolicy final : public BlockPolicy {
 public:
  absl::StatusOr<int32_t> block = 7;
  std::vector<float> acceptance;
  float acceptance_temperature = 0;
  int calls = 0;
  absl::StatusOr<BlockChoice> ChooseBlockSize(std::span<const float> logits) override {
    ++calls;
    EXPECT_EQ(logits.size(), 2u);
    if (!block.ok()) return block.status();
    return BlockChoice{*block, acceptance, acceptance_temperature};
  }
};

std::vector<int32_t> TruthPrefix(int32_t n) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n; ++i) out.push_back(Truth(i));
  return out;
}

const std::vector<int32_t> kPrompt = {1, 2, 3, 4};

DecodeOptions Options(Method m, int32_t n) {
  DecodeOptions o;
  o.method = m;
  o.max_new_tokens = n;
  return o;
}

LoopParts Parts(FakeTarget* t, DrafterSide* d = nullptr, BlockPolicy* p = nullptr) {
  LoopParts parts;
  parts.target = t;
  parts.drafter = d;
  parts.policy = p;
  parts.max_context = 512;
  return parts;
}

TEST(StepLoopTest, ArCommitsTheTargetsTokensInRuns) {
  FakeTarget t;
  auto r = RunStepLoop(Parts(&t), kPrompt, Options(Method::kAr, 30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(30));
  EXPECT_FALSE(r->stopped);
  EXPECT_EQ(r->stats.verify_steps, 29);
  EXPECT_EQ(r->stats.committed_tokens, 29);
  EXPECT_DOUBLE_EQ(r->stats.tau(), 1.0);
  EXPECT_EQ(t.runs, 1);  // one run of 29 AR steps after the prefill
}

TEST(StepLoopTest, ChainAcceptanceAndStatistics) {
  FakeTarget t;
  FakeDrafter d(t, /*tree=*/false, 0, /*good=*/2);
  DecodeOptions o = Options(Method::kDraftChain, 40);
  o.draft_length = 4;
  std::vector<StepInfo> steps;
  LoopParts parts = Parts(&t, &d);
  parts.on_commit = [&](std::span<const int32_t>, const StepInfo& s) { steps.push_back(s); };
  auto r = RunStepLoop(parts, kPrompt, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(40));
  EXPECT_TRUE(d.opened);
  // Every full step drafts 4 and accepts 2, committing 3.
  ASSERT_GE(steps.size(), 3u);
  EXPECT_EQ(steps[0].step, 0);  // the prefill
  EXPECT_EQ(steps[1].drafted, 4);
  EXPECT_EQ(steps[1].accepted, 2);
  ASSERT_EQ(r->stats.drafted_per_position.size(), 4u);
  EXPECT_EQ(r->stats.accepted_per_position[1], r->stats.drafted_per_position[1]);
  EXPECT_EQ(r->stats.accepted_per_position[2], 0);
  EXPECT_EQ(static_cast<int64_t>(steps.size()), r->stats.verify_steps + 1);
  EXPECT_EQ(r->stats.committed_tokens, 39);
  EXPECT_GT(r->stats.tau(), 2.5);
  // No step commits past the length: the last chains are cut to the tokens left.
  for (const DraftShape& s : d.shapes) EXPECT_GE(s.length, 1);
  EXPECT_LE(d.shapes.back().length, 4);
}

TEST(StepLoopTest, AStopTokenEndsTheOutputBeforeIt) {
  for (Method m : {Method::kAr, Method::kDraftChain}) {
    FakeTarget t;
    FakeDrafter d(t, false, 0, 4);
    DecodeOptions o = Options(m, 40);
    o.stop_token_ids = {Truth(9)};  // Truth is periodic: 9 is its first occurrence
    auto r = RunStepLoop(Parts(&t, &d), kPrompt, o);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->stopped);
    EXPECT_EQ(r->stop_token, Truth(9));
    EXPECT_EQ(r->tokens, TruthPrefix(9)) << MethodName(m);
  }
}

TEST(StepLoopTest, TreesShrinkToTheContextLeft) {
  FakeTarget t;
  FakeDrafter d(t, /*tree=*/true, 0, 8);
  DecodeOptions o = Options(Method::kDyspecTree, 40);
  o.tree_budget = 16;
  o.tree_max_depth = 8;
  LoopParts parts = Parts(&t, &d);
  parts.max_context = static_cast<int64_t>(kPrompt.size()) + 40;  // the request fills it
  auto r = RunStepLoop(parts, kPrompt, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(40));
  // Every verified tree fitted: cache + row 0 + budget <= the context.
  ASSERT_EQ(d.shapes.size(), t.cache_after_verify.size());
  for (size_t i = 0; i < d.shapes.size(); ++i) {
    EXPECT_LE(t.cache_after_verify[i] + 1 + d.shapes[i].tree_budget, parts.max_context) << i;
  }
  EXPECT_LT(d.shapes.back().tree_budget, 16);
}

TEST(StepLoopTest, DflashUsesThePolicyOrFallsBackToTheTrainedBlock) {
  FakeTarget t;
  FakeDrafter d(t, false, /*trained_block=*/5, 3);
  FakePolicy p;
  auto r = RunStepLoop(Parts(&t, &d, &p), kPrompt, Options(Method::kDflashAdaptive, 30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(30));
  EXPECT_EQ(r->stats.block_size, 7);
  EXPECT_TRUE(r->stats.block_size_from_policy);
  EXPECT_EQ(d.shapes.front().length, 6);

  FakeTarget t2;
  FakeDrafter d2(t2, false, 5, 3);
  p.block = absl::UnavailableError("policy down");
  r = RunStepLoop(Parts(&t2, &d2, &p), kPrompt, Options(Method::kDflashAdaptive, 30));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, TruthPrefix(30));
  EXPECT_TRUE(r->stats.policy_fallback);
  EXPECT_EQ(r->stats.block_size, 5);
  EXPECT_NE(r->stats.note.find("policy down"), std::string::npos) << r->stats.note;
}

// The target's continuation repeats every 50 tokens: from then on DFLASH_ADAPTIVE drafts the
// earlier continuation by prompt lookup, which the target accepts whole, and calls the drafter
// only where nothing matches. The output stays the target's.
TEST(StepLoopTest, AdaptiveDraftsByPromptLookupWhereTheSequenceRepeats) {
  FakeTarget t;
  FakeDrafter d(t, false, /*trained_block=*/5, /*good=*/1);
  auto r = RunStepLoop(Parts(&t, &d), kPrompt, Options(Method::kDflashAdaptive, 150));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(150));
  EXPECT_GT(r->stats.lookup_steps, 10);
  // Each verify drafted by lookup or by the drafter (or was a last AR step).
  EXPECT_LE(static_cast<int64_t>(d.shapes.size()) + r->stats.lookup_steps, r->stats.verify_steps);
  EXPECT_GT(r->stats.tau(), 3.0);  // lookup drafts 4 right tokens a step, the drafter 1

  FakeTarget t2;
  FakeDrafter d2(t2, false, 5, 1);
  DecodeOptions o = Options(Method::kDflashAdaptive, 150);
  o.adaptive_lookup = false;
  r = RunStepLoop(Parts(&t2, &d2), kPrompt, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, TruthPrefix(150));
  EXPECT_EQ(r->stats.lookup_steps, 0);
  EXPECT_GT(d2.shapes.size(), 2 * d.shapes.size());

  FakeTarget t3;  // fixed-block DFLASH drafts with its drafter only
  FakeDrafter d3(t3, false, 5, 1);
  r = RunStepLoop(Parts(&t3, &d3), kPrompt, Options(Method::kDflash, 150));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.lookup_steps, 0);
}

// Takes every lookup the loop offers before planning, and checks that each looked-up step comes
// back with the length of the match it was offered with.
class MatchRecordingHook final : public PlanningHook {
 public:
  std::vector<int32_t> offered, observed;
  int32_t LookupTokens(const LoopView&, int32_t available, int32_t match) override {
    offered.push_back(match);
    return available;
  }
  void Observe(const StepPlan&, StepOrigin origin, const StepResult& step, bool) override {
    if (origin == StepOrigin::kLookup) observed.push_back(step.lookup_match);
  }
};

// DFLASH_ADAPTIVE offers its hook every lookup draft with the length of its suffix match (1 to
// kLookupMaxMatch), and the step verifying it reports that length back.
TEST(StepLoopTest, AdaptiveLookupsCarryTheLengthOfTheirMatch) {
  FakeTarget t;
  FakeDrafter d(t, false, /*trained_block=*/5, /*good=*/1);
  MatchRecordingHook hook;
  LoopParts parts = Parts(&t, &d);
  parts.hook = &hook;
  auto r = RunStepLoop(parts, kPrompt, Options(Method::kDflashAdaptive, 150));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(150));
  ASSERT_GT(hook.offered.size(), 10u);
  EXPECT_EQ(hook.observed, hook.offered);
  for (int32_t m : hook.offered) {
    EXPECT_GE(m, 1);
    EXPECT_LE(m, kLookupMaxMatch);
  }
}

TEST(StepLoopTest, ADrafterThatFailsMidRequestLeavesTheRestToAr) {
  FakeTarget t;
  FakeDrafter d(t, false, 0, 4);
  d.fail_at = 3;
  auto r = RunStepLoop(Parts(&t, &d), kPrompt, Options(Method::kDraftChain, 50));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, TruthPrefix(50));
  EXPECT_TRUE(r->stats.drafter_fallback);
  EXPECT_NE(r->stats.note.find("drafter went away"), std::string::npos);
  // No drafter at all: the same output, with the reason given.
  FakeTarget t2;
  LoopParts parts = Parts(&t2);
  parts.drafter_unavailable = absl::UnavailableError("no healthy drafter replica");
  r = RunStepLoop(parts, kPrompt, Options(Method::kDflash, 20));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, TruthPrefix(20));
  EXPECT_NE(r->stats.note.find("no healthy drafter replica"), std::string::npos);
}

TEST(StepLoopTest, TargetDraftedRunsNeedNoDrafterSide) {
  FakeTarget t;
  t.hosted_block = 6;
  t.hosted_good = 2;
  auto r = RunStepLoop(Parts(&t), kPrompt, Options(Method::kDflash, 33));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(33));
  EXPECT_TRUE(r->stats.target_drafted);
  EXPECT_EQ(r->stats.block_size, 6);
  // Full blocks draft 5 and accept 2; the last blocks are cut to the tokens left.
  EXPECT_GT(r->stats.drafted_tokens, 0);
  EXPECT_LE(r->stats.drafted_tokens, 5 * r->stats.verify_steps);
  EXPECT_LE(r->stats.accepted_tokens, 2 * r->stats.verify_steps);
  EXPECT_GE(r->stats.tau(), 2.5);
}

// A hook that keeps the origin of every step it observes.
class OriginRecordingHook final : public PlanningHook {
 public:
  std::vector<StepOrigin> origins;
  void Observe(const StepPlan&, StepOrigin origin, const StepResult&, bool) override {
    origins.push_back(origin);
  }
};

// NGRAM drafts by prompt lookup inside the target's runs: no drafter side, no verify round trips.
TEST(StepLoopTest, NgramDraftsInTheTargetsLookupRuns) {
  FakeTarget t;
  OriginRecordingHook hook;
  LoopParts parts = Parts(&t);
  parts.hook = &hook;
  DecodeOptions o = Options(Method::kNgram, 150);
  o.draft_length = 5;
  auto r = RunStepLoop(parts, kPrompt, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(150));
  EXPECT_FALSE(r->stats.drafter_fallback) << r->stats.note;
  EXPECT_EQ(t.verifies, 0);
  ASSERT_GE(t.runs, 1);
  for (const LookupShape& l : t.run_lookups) {
    EXPECT_EQ(l.max_tokens, 5);
    EXPECT_EQ(l.min_match, 1);
    EXPECT_EQ(l.min_tokens, 1);
  }
  EXPECT_GT(r->stats.drafted_tokens, 0);
  EXPECT_LE(r->stats.accepted_tokens, r->stats.drafted_tokens);
  EXPECT_GE(r->stats.tau(), 1.8);       // Truth repeats after 50 tokens: then every lookup is right
  EXPECT_EQ(r->stats.lookup_steps, 0);  // NGRAM's steps are not DFLASH_ADAPTIVE's lookups
  ASSERT_FALSE(hook.origins.empty());
  EXPECT_TRUE(std::all_of(hook.origins.begin(), hook.origins.end(),
                          [](StepOrigin o) { return o == StepOrigin::kLookupRun; }));
}

// A hook whose every decision is a target-drafted run of at most 8 tokens.
class ShortRunsHook final : public PlanningHook {
 public:
  void PlanStep(const LoopView&, StepPlan* plan) override { plan->run_tokens = 8; }
};

// Between a self-drafting target's runs and inside them, DFLASH_ADAPTIVE verifies lookup drafts
// on the target with no drafter side at all.
TEST(StepLoopTest, AdaptiveLooksUpBetweenTargetDraftedRuns) {
  FakeTarget t;
  t.hosted_block = 6;
  t.hosted_good = 1;
  ShortRunsHook hook;
  LoopParts parts = Parts(&t);
  parts.hook = &hook;
  auto r = RunStepLoop(parts, kPrompt, Options(Method::kDflashAdaptive, 150));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(150));
  EXPECT_TRUE(r->stats.target_drafted);
  EXPECT_GT(r->stats.lookup_steps, 5);
  EXPECT_GT(t.verifies, 0);                      // before planning
  EXPECT_GT(r->stats.lookup_steps, t.verifies);  // and inside the runs
}

// A hook that runs every other step as an AR run of 3 tokens.
class ViewRecordingHook final : public PlanningHook {
 public:
  std::vector<std::vector<float>> seen;
  std::vector<float> temperatures;
  void PlanStep(const LoopView& view, StepPlan*) override {
    seen.emplace_back(view.predicted_acceptance.begin(), view.predicted_acceptance.end());
    temperatures.push_back(view.temperature);
  }
};

// The policy's predicted acceptance reaches every planning decision, the first included.
TEST(StepLoopTest, ThePolicysPredictedAcceptanceReachesThePlanningHook) {
  FakeTarget t;
  FakeDrafter d(t, false, /*trained_block=*/5, 3);
  FakePolicy p;
  p.acceptance = {0.9f, 0.5f, 0.25f};
  ViewRecordingHook hook;
  LoopParts parts = Parts(&t, &d, &p);
  parts.hook = &hook;
  auto r = RunStepLoop(parts, kPrompt, Options(Method::kDflashAdaptive, 30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(30));
  ASSERT_GE(hook.seen.size(), 3u);
  for (size_t i = 0; i < hook.seen.size(); ++i) EXPECT_EQ(hook.seen[i], p.acceptance) << i;
}

// The policy's curve is acceptance at the temperature its labels were measured at: a request of
// another temperature class plans without it (the planning takes the machine's acceptance at
// its temperature), one of the same class with it; the hook sees the request's temperature.
TEST(StepLoopTest, ThePolicysCurveReachesOnlyRequestsOfItsTemperatureClass) {
  struct Case {
    float curve_temperature, request_temperature;
    bool expect_curve;
  };
  for (const Case& c : {Case{0.f, 1.f, false}, Case{0.f, 0.f, true}, Case{1.f, 0.8f, true},
                        Case{1.f, 0.3f, false}, Case{0.7f, 1.5f, false}}) {
    SCOPED_TRACE(testing::Message() << c.curve_temperature << " " << c.request_temperature);
    FakeTarget t;
    FakeDrafter d(t, false, /*trained_block=*/5, 3);
    FakePolicy p;
    p.acceptance = {0.9f, 0.5f, 0.25f};
    p.acceptance_temperature = c.curve_temperature;
    ViewRecordingHook hook;
    LoopParts parts = Parts(&t, &d, &p);
    parts.hook = &hook;
    DecodeOptions o = Options(Method::kDflashAdaptive, 30);
    o.sampling.temperature = c.request_temperature;
    auto r = RunStepLoop(parts, kPrompt, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_GE(hook.seen.size(), 3u);
    for (size_t i = 0; i < hook.seen.size(); ++i) {
      EXPECT_EQ(hook.seen[i], c.expect_curve ? p.acceptance : std::vector<float>{}) << i;
      EXPECT_EQ(hook.temperatures[i], c.request_temperature) << i;
    }
  }
}

class ArOnlyHook final : public PlanningHook {
 public:
  int32_t first_block = 0;
  void PlanStep(const LoopView& view, StepPlan* plan) override {
    if (first_block == 0) first_block = view.block_size;
    plan->speculate = false;
    plan->run_tokens = 4;
  }
};

// Plans AR runs of 8 tokens, declines every lookup before planning, and lets the runs' steps
// verify lookups of at most `allowed` tokens.
class RunLookupHook final : public PlanningHook {
 public:
  explicit RunLookupHook(int32_t allowed) : allowed_(allowed) {}
  std::vector<int32_t> run_blocks;
  int lookups_observed = 0;
  void PlanStep(const LoopView&, StepPlan* plan) override {
    plan->speculate = false;
    plan->run_tokens = 8;
  }
  int32_t LookupTokens(const LoopView&, int32_t, int32_t) override { return 0; }
  LookupShape RunLookupShape(const LoopView&, int32_t run_block, int32_t most) override {
    run_blocks.push_back(run_block);
    return AdaptiveLookup(std::min(allowed_, most));
  }
  void Observe(const StepPlan&, StepOrigin origin, const StepResult& step, bool) override {
    if (origin != StepOrigin::kLookup) return;
    ++lookups_observed;
    EXPECT_TRUE(step.looked_up);
    EXPECT_LE(step.drafted, allowed_);
    EXPECT_GE(step.drafted, 2);
  }

 private:
  const int32_t allowed_;
};

// The planned runs of a DFLASH_ADAPTIVE request whose target drafts itself look up at every
// step, as far as the hook predicts it pays; where the loop drafts (a drafter side), it decides
// each lookup between its runs itself and its AR runs do not look up.
TEST(StepLoopTest, AHostedRequestsRunsLookUpAsFarAsTheHookAllows) {
  struct Case {
    bool hosted;
    int32_t allowed;
  };
  // A hook that allows 1 token allows no lookup: adaptive lookups draft 2 tokens or more.
  for (const Case& c : {Case{true, 0}, Case{true, 1}, Case{true, 3}, Case{false, 3}}) {
    FakeTarget t;
    t.hosted_block = c.hosted ? 6 : 0;
    FakeDrafter d(t, false, /*trained_block=*/5, 3);
    FakePolicy p;
    RunLookupHook hook(c.allowed);
    LoopParts parts = Parts(&t, c.hosted ? nullptr : &d, &p);
    parts.hook = &hook;
    auto r = RunStepLoop(parts, kPrompt, Options(Method::kDflashAdaptive, 150));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->tokens, TruthPrefix(150));
    EXPECT_EQ(t.verifies, 0);  // no lookup before planning, no drafted step
    ASSERT_FALSE(t.run_lookups.empty());
    const int32_t want = c.hosted && c.allowed >= 2 ? c.allowed : 0;
    for (const LookupShape& l : t.run_lookups) {
      EXPECT_LE(l.min_tokens, std::max(1, l.max_tokens));  // what a target accepts
      EXPECT_EQ(l.max_tokens, want);
      if (want > 0) {
        EXPECT_EQ(l.min_match, 2);
        EXPECT_EQ(l.min_tokens, 2);
      }
    }
    for (int32_t b : hook.run_blocks) EXPECT_EQ(b, 1);  // AR runs
    EXPECT_EQ(r->stats.lookup_steps, hook.lookups_observed);
    if (want == 0) {
      EXPECT_EQ(r->stats.lookup_steps, 0);
    } else {
      EXPECT_GT(r->stats.lookup_steps, 10);
      EXPECT_GT(r->stats.accepted_tokens, 0);
    }
  }
}

// A DFLASH_ADAPTIVE request whose every plan is AR knows its block from the first plan, never
// opens its drafter, and still verifies lookup drafts where the text repeats.
TEST(StepLoopTest, ARequestPlannedAsArNeverOpensItsDrafterButLooksUp) {
  FakeTarget t;
  FakeDrafter d(t, false, /*trained_block=*/5, 3);
  FakePolicy p;
  ArOnlyHook hook;
  LoopParts parts = Parts(&t, &d, &p);
  parts.hook = &hook;
  auto r = RunStepLoop(parts, kPrompt, Options(Method::kDflashAdaptive, 150));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(150));
  EXPECT_EQ(hook.first_block, r->stats.block_size);
  EXPECT_GE(hook.first_block, 2);
  EXPECT_FALSE(d.opened);
  EXPECT_TRUE(d.shapes.empty());
  EXPECT_GT(r->stats.lookup_steps, 5);
}

// Runs every request without its drafter (Speculates) and lets the run's steps verify lookups
// of at most `allowed` tokens.
class NoDrafterHook final : public PlanningHook {
 public:
  explicit NoDrafterHook(int32_t allowed) : allowed_(allowed) {}
  int plans = 0, ar_steps = 0;
  bool Speculates(const LoopView& view) override {
    EXPECT_EQ(view.block_size, 0);  // before the prefill: no block chosen yet
    return false;
  }
  void PlanStep(const LoopView&, StepPlan*) override { ++plans; }
  int32_t LookupTokens(const LoopView&, int32_t, int32_t) override {
    ADD_FAILURE() << "a request without its drafter looks up inside its run only";
    return 0;
  }
  LookupShape RunLookupShape(const LoopView&, int32_t run_block, int32_t most) override {
    EXPECT_EQ(run_block, 1);
    return AdaptiveLookup(std::min(allowed_, most));
  }
  void Observe(const StepPlan& plan, StepOrigin origin, const StepResult&, bool) override {
    EXPECT_FALSE(plan.speculate);
    if (origin == StepOrigin::kArRun) ++ar_steps;
  }

 private:
  const int32_t allowed_;
};

// A request the hook runs without its drafter asks its prefill for no features and no logits,
// never asks the policy or opens the drafter, commits the target's tokens in one planned run whose
// steps the hook sees, and looks up in that run only as far as the hook allows.
TEST(StepLoopTest, ARequestTheHookRunsWithoutItsDrafterPaysNothingForIt) {
  for (int32_t allowed : {0, 3}) {
    FakeTarget t;
    FakeDrafter d(t, false, /*trained_block=*/5, 3);
    FakePolicy p;
    NoDrafterHook hook(allowed);
    LoopParts parts = Parts(&t, &d, &p);
    parts.hook = &hook;
    auto r = RunStepLoop(parts, kPrompt, Options(Method::kDflashAdaptive, 150));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->tokens, TruthPrefix(150));
    ASSERT_EQ(t.prefill_asks.size(), 1u);
    EXPECT_FALSE(t.prefill_asks[0].may_draft);
    EXPECT_FALSE(t.prefill_asks[0].logits);
    EXPECT_EQ(p.calls, 0);
    EXPECT_FALSE(d.opened);
    EXPECT_TRUE(d.shapes.empty());
    EXPECT_EQ(t.runs, 1);
    EXPECT_EQ(t.feature_runs, 0);
    EXPECT_EQ(t.verifies, 0);
    EXPECT_EQ(hook.plans, 0);
    EXPECT_TRUE(r->stats.speculation_skipped);
    EXPECT_EQ(r->stats.block_size, 0);
    EXPECT_FALSE(r->stats.note.empty());
    EXPECT_EQ(r->stats.planned_ar_steps, hook.ar_steps);
    EXPECT_EQ(r->stats.planned_ar_steps + r->stats.lookup_steps, r->stats.verify_steps);
    if (allowed == 0) {
      EXPECT_EQ(r->stats.lookup_steps, 0);
      EXPECT_EQ(r->stats.planned_ar_steps, 149);
    } else {
      EXPECT_GT(r->stats.lookup_steps, 10);
    }
  }
}

// Runs every request without its drafter and lets its run weigh its own lookups with `weighing`.
class WeighingHook final : public PlanningHook {
 public:
  explicit WeighingHook(LookupWeighing weighing) : weighing_(std::move(weighing)) {}
  bool Speculates(const LoopView&) override { return false; }
  LookupShape RunLookupShape(const LoopView&, int32_t, int32_t) override {
    ADD_FAILURE() << "a hook that weighs a run's lookups gives no fixed shape";
    return {};
  }
  std::optional<LookupWeighing> WeighRunLookups(const LoopView&, int32_t run_block,
                                                int32_t most) override {
    EXPECT_EQ(run_block, 1);
    return weighing_;
  }

 private:
  const LookupWeighing weighing_;
};

// A run the hook weighs looks up suffixes down to 1 token, up to the request's draft length, and
// verifies what its weighing gives: every lookup where any pays, none where none does.
TEST(StepLoopTest, ARunTheHookWeighsVerifiesWhatItsWeighingGives) {
  for (double alternative : {0.0, 100.0}) {
    FakeTarget t;
    FakeDrafter d(t, false, /*trained_block=*/5, 3);
    LookupWeighing w;
    w.rows_ms = {0, 1, 1, 1, 1, 1};
    w.alternative_rate = alternative;  // tokens per ms of the run's own step
    WeighingHook hook(w);
    LoopParts parts = Parts(&t, &d, nullptr);
    parts.hook = &hook;
    auto r = RunStepLoop(parts, kPrompt, Options(Method::kDflashAdaptive, 150));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->tokens, TruthPrefix(150));
    ASSERT_EQ(t.runs, 1);
    EXPECT_TRUE(t.run_weighed[0]);
    EXPECT_EQ(t.run_lookups[0].min_match, 1);
    EXPECT_EQ(t.run_lookups[0].min_tokens, 1);
    EXPECT_EQ(t.run_lookups[0].max_tokens, Options(Method::kDflashAdaptive, 150).draft_length);
    if (alternative == 0) {
      EXPECT_GT(r->stats.lookup_steps, 10);
    } else {
      EXPECT_EQ(r->stats.lookup_steps, 0);
    }
  }
}

// Where the hook lets a request speculate, its prefill keeps features for the drafter and returns
// the logits DFLASH_ADAPTIVE's policy reads.
TEST(StepLoopTest, ARequestThatMaySpeculateAsksItsPrefillForFeaturesAndLogits) {
  FakeTarget t;
  FakeDrafter d(t, false, /*trained_block=*/5, 3);
  FakePolicy p;
  LoopParts parts = Parts(&t, &d, &p);
  auto r = RunStepLoop(parts, kPrompt, Options(Method::kDflashAdaptive, 40));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(t.prefill_asks.size(), 1u);
  EXPECT_TRUE(t.prefill_asks[0].may_draft);
  EXPECT_TRUE(t.prefill_asks[0].logits);
  EXPECT_EQ(p.calls, 1);
  EXPECT_FALSE(r->stats.speculation_skipped);
}

class AlternatingHook final : public PlanningHook {
 public:
  int planned = 0, observed = 0;
  void PlanStep(const LoopView& view, StepPlan* plan) override {
    EXPECT_GT(view.tokens_left, 1);
    plan->speculate = planned++ % 2 == 1;
    plan->run_tokens = 3;
  }
  void Observe(const StepPlan&, StepOrigin, const StepResult&, bool) override { ++observed; }
};

TEST(StepLoopTest, APlanningHookChoosesArRunsAndSeesEveryStep) {
  FakeTarget t;
  FakeDrafter d(t, false, 5, 4);
  AlternatingHook hook;
  LoopParts parts = Parts(&t, &d);
  parts.hook = &hook;
  auto r = RunStepLoop(parts, kPrompt, Options(Method::kDflash, 40));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, TruthPrefix(40));
  EXPECT_GT(r->stats.planned_ar_steps, 0);
  EXPECT_GT(r->stats.drafted_tokens, 0);
  // Every planned step is observed; only a last single-token step is not planned.
  EXPECT_LE(hook.observed, r->stats.verify_steps);
  EXPECT_GE(hook.observed, r->stats.verify_steps - 1);
}

TEST(StepLoopTest, CancellationEndsTheRequest) {
  FakeTarget t;
  FakeDrafter d(t, false, 0, 4);
  LoopParts parts = Parts(&t, &d);
  int polls = 0;
  parts.cancelled = [&] { return ++polls > 3; };
  auto r = RunStepLoop(parts, kPrompt, Options(Method::kDraftChain, 100));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
}

TEST(StepLoopTest, ZeroNewTokensTouchesNothing) {
  FakeTarget t;
  auto r = RunStepLoop(Parts(&t), kPrompt, Options(Method::kAr, 0));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->tokens.empty());
  EXPECT_EQ(t.prefills, 0);
}

}  // namespace
}  // namespace specdec::engine
