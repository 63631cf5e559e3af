#include "common/engine/cost_aware_hook.h"

#include <algorithm>
#include <cmath>

namespace specdec::engine {

BlockCostModel::StepCost StepCostOf(const StepResult& step, StepOrigin origin, bool first) {
  // A lookup step's draft cost nothing the drafter's would: only its target pass is measured.
  const bool lookup = origin == StepOrigin::kLookup || origin == StepOrigin::kLookupRun;
  const bool drafted = step.drafted > 0 && !lookup;
  BlockCostModel::StepCost c;
  c.sessions = std::max(1, step.batch_size);
  c.pass_rows = step.pass_rows > 0 ? step.pass_rows : step.drafted + 1;
  c.prompt_rows = step.pass_prompt_rows;
  c.pass_ms = step.pass_ms > 0 ? step.pass_ms : step.verify_ms;
  c.draft_rows = !drafted ? 0 : step.draft_rows > 0 ? step.draft_rows : step.drafted + 1;
  c.draft_ms = drafted ? step.draft_ms : 0;
  c.wall_ms = (first && origin != StepOrigin::kDrafted) || lookup ? -1.0 : step.wall_ms;
  return c;
}

void ObserveStepIn(BlockCostModel& model, const StepResult& step, StepOrigin origin, bool first,
                   int acceptance_class) {
  model.ObserveStep(StepCostOf(step, origin, first));
  // NGRAM's lookups (suffixes down to 1 token) are not DFLASH_ADAPTIVE's: their acceptance is
  // neither the drafter's nor its lookups' prior.
  if (origin == StepOrigin::kLookupRun) return;
  if (origin == StepOrigin::kLookup) {
    model.ObserveLookup(step.drafted, step.accepted, acceptance_class, step.lookup_match);
  } else if (step.drafted > 0) {
    model.ObserveAcceptance(step.drafted, step.accepted, acceptance_class);
  }
}

CostAwareHook::CostAwareHook(BlockCostModel& model, Options options)
    : model_(model), options_(options) {}

BlockCostModel::Reading CostAwareHook::Read(int32_t max_block, int32_t max_rows) const {
  return model_.Read(options_.sessions, max_block, max_rows, acceptance_class_);
}

double CostAwareHook::RequestTau(const BlockCostModel::Reading& r, int32_t block) const {
  double tau = 1;
  for (int i = 0; i + 1 < block && i < BlockCostModel::kMaxPositions; ++i) {
    const size_t k = static_cast<size_t>(i);
    double prior_weight = 0, share = 0;
    if (k < predicted_.size()) {
      prior_weight = 1;
      share = predicted_[k];
    } else if (k < r.share.size()) {
      share = r.share[k];
      prior_weight = r.share_weight[k];
    }
    const double prior = prior_weight > 0 ? options_.prior_steps : 0;
    const double steps = drafted_[k] + prior;
    if (steps > 0) tau += (accepted_[k] + prior * share) / steps;
  }
  return tau;
}

double CostAwareHook::Rate(const BlockCostModel::Reading& r, int32_t block) const {
  const size_t b = static_cast<size_t>(std::max(1, block));
  const double ms = b < r.step_ms.size() ? r.step_ms[b] : 0;
  return ms > 0 ? RequestTau(r, block) / ms : 0;
}

int32_t CostAwareHook::BestBlockIn(const BlockCostModel::Reading& r, int32_t cap) const {
  int32_t best = cap;
  double best_rate = Rate(r, cap);
  if (best_rate <= 0) return cap;
  for (int32_t b = cap - 1; b >= 1; --b) {
    const double rate = Rate(r, b);
    if (rate > best_rate) {
      best_rate = rate;
      best = b;
    }
  }
  return best;
}

namespace {

// The machine's share of lookups of each match length accepting their first token, as priors
// (an accepted step before any was measured).
LookupPriors PriorsOf(const BlockCostModel::Reading& r) {
  LookupPriors priors;
  for (size_t m = 0; m < priors.first.size(); ++m) {
    priors.first[m] = r.lookup_weight[m] > 0 ? r.lookup_share[m] : 1;
  }
  return priors;
}

}  // namespace

LookupWeighing RunWeighingOf(const BlockCostModel::Reading& r, double alternative_rate,
                             const LookupOdds& odds, double decay) {
  LookupWeighing w;
  w.rows_ms = r.drafterless_ms;
  w.priors = PriorsOf(r);
  w.alternative_rate = alternative_rate;
  w.decay = decay;
  w.odds = odds;
  return w;
}

double CostAwareHook::LookupRate(const BlockCostModel::Reading& r, int32_t tokens,
                                 int32_t match) const {
  return engine::LookupRate(lookup_odds_, r.drafterless_ms, PriorsOf(r), tokens, match);
}

double CostAwareHook::PredictedRate(int32_t block) const {
  return Rate(Read(std::max(1, block), 0), block);
}

int32_t CostAwareHook::BestBlock(int32_t cap) const { return BestBlockIn(Read(cap, 0), cap); }

double CostAwareHook::PredictedLookupRate(int32_t tokens, int32_t match) const {
  return LookupRate(Read(1, tokens + 1), tokens, match);
}

void CostAwareHook::Follow(const LoopView& view) {
  acceptance_class_ = BlockCostModel::AcceptanceClass(view.temperature);
}

int32_t CostAwareHook::LookupTokens(const LoopView& view, int32_t available, int32_t match) {
  Follow(view);
  lookup_odds_.Decay(options_.request_decay);
  const int32_t cap = std::max(2, view.block_size);
  const BlockCostModel::Reading r = Read(cap, available + 1);
  const double alternative = Rate(r, BestBlockIn(r, cap));
  double best_rate = 0;
  const int32_t best =
      BestLookup(lookup_odds_, r.drafterless_ms, PriorsOf(r), available, match, &best_rate);
  constexpr auto kLookup = BlockCostModel::ProbeKind::kLookup;
  if (alternative <= 0 || best_rate >= alternative) {
    lookups_declined_ = 0;
    model_.SetProbeWait(kLookup, acceptance_class_, options_.probe_every);
    return best;
  }
  const int wait = model_.ProbeWait(kLookup, acceptance_class_, options_.probe_every);
  if (++lookups_declined_ < wait) return 0;
  // The probe: the draft's best length, so that this request's acceptance stays measured; none
  // where even that is predicted far below the alternative (the wait doubles alike).
  lookups_declined_ = 0;
  model_.SetProbeWait(kLookup, acceptance_class_, std::min(2 * wait, options_.max_probe_every));
  return best_rate >= options_.probe_min_share * alternative ? best : 0;
}

std::optional<LookupWeighing> CostAwareHook::WeighRunLookups(const LoopView& view,
                                                             int32_t run_block, int32_t most) {
  Follow(view);
  if (most < 1) return std::nullopt;
  const BlockCostModel::Reading r = Read(std::max(1, run_block), most + 1);
  return RunWeighingOf(r, Rate(r, std::max(1, run_block)), lookup_odds_, options_.request_decay);
}

std::vector<int32_t> CostAwareHook::ExploredBlocks(int32_t cap) {
  std::vector<int32_t> blocks = {1};
  for (int32_t b : {2, 3, 4, 6, 8, 12}) {
    if (b < cap) blocks.push_back(b);
  }
  blocks.push_back(cap);
  return blocks;
}

int32_t CostAwareHook::Decide(const LoopView& view, int32_t cap) {
  Follow(view);
  if (predicted_.empty() && !view.predicted_acceptance.empty()) {
    // A share is a probability: what a remote policy sends outside [0, 1] (or NaN) is clamped.
    for (float a : view.predicted_acceptance) {
      if (predicted_.size() >= static_cast<size_t>(BlockCostModel::kMaxPositions)) break;
      predicted_.push_back(std::isnan(a) ? 0.f : std::clamp(a, 0.f, 1.f));
    }
  }
  for (size_t i = 0; i < drafted_.size(); ++i) {
    drafted_[i] *= options_.request_decay;
    accepted_[i] *= options_.request_decay;
  }
  const int64_t n = model_.NextDecision();
  const bool warming = n < options_.warmup;
  exploring_ = warming || n % std::max<int64_t>(1, options_.explore_every) == 0;
  const BlockCostModel::Reading r = Read(cap, 0);
  const int32_t best = warming ? cap : BestBlockIn(r, cap);
  if (exploring_) {
    const std::vector<int32_t> blocks = ExploredBlocks(cap);
    const int64_t turn = warming ? n : n / options_.explore_every;
    const int32_t candidate =
        blocks[static_cast<size_t>(turn % static_cast<int64_t>(blocks.size()))];
    if (warming || Rate(r, candidate) >= options_.explore_min_share * Rate(r, best)) {
      return candidate;
    }
    exploring_ = false;
  }
  constexpr auto kBlock = BlockCostModel::ProbeKind::kBlock;
  if (best >= 2) {
    model_.SetProbeWait(kBlock, acceptance_class_, options_.probe_every);
    return best;
  }
  const int wait = model_.ProbeWait(kBlock, acceptance_class_, options_.probe_every);
  if (model_.CountUndraftedDecision(acceptance_class_) < wait) return best;
  return Probe(r, cap, wait);
}

int32_t CostAwareHook::Probe(const BlockCostModel::Reading& r, int32_t cap, int wait) {
  // The probe: the best block, AR aside. Should AR still win after it, the next waits longer,
  // for every request of this temperature class.
  model_.SetProbeWait(BlockCostModel::ProbeKind::kBlock, acceptance_class_,
                      std::min(2 * wait, options_.max_probe_every));
  int32_t probe = cap;
  for (int32_t b = cap - 1; b >= 2; --b) {
    if (Rate(r, b) > Rate(r, probe)) probe = b;
  }
  // The class's count starts again here, so that its other requests do not probe meanwhile.
  model_.ResetUndrafted(acceptance_class_);
  // A probe predicted far below AR does not draft, but counts as one: the next is a longer wait
  // away.
  return Rate(r, probe) < options_.probe_min_share * Rate(r, 1) ? 1 : probe;
}

bool CostAwareHook::Speculates(const LoopView& view) {
  Follow(view);
  constexpr auto kBlock = BlockCostModel::ProbeKind::kBlock;
  if (model_.ProbeWait(kBlock, acceptance_class_, options_.probe_every) <
      options_.max_probe_every) {
    model_.ResetLosing(acceptance_class_);
    return true;
  }
  return model_.NextLosingRequestMeasures(acceptance_class_, options_.measure_every_requests,
                                          options_.max_measure_every_requests);
}

void CostAwareHook::PlanStep(const LoopView& view, StepPlan* plan) {
  // Before the request's first speculative step its block is not known yet: that step decides in
  // ChooseBlock.
  exploring_ = false;
  decided_ = view.block_size >= 2 ? Decide(view, view.block_size) : 0;
  // A target-drafted run lasts until the next decision; one that explores, about one step.
  if (view.hosted) {
    plan->run_tokens =
        std::min(plan->run_tokens, exploring_ ? std::max(2, decided_) : options_.hosted_run_tokens);
  }
  if (view.block_size >= 2 && decided_ < 2) {
    plan->speculate = false;
    // As long as a target-drafted run where runs cost a round trip each (the router's hosted
    // drafting), so that the two are compared at the same share of round trips.
    plan->run_tokens = std::min(plan->run_tokens,
                                view.hosted ? options_.hosted_run_tokens : options_.ar_run_tokens);
  }
}

int32_t CostAwareHook::ChooseBlock(const LoopView& view, int32_t block) {
  // A speculative step that PlanStep did not decide (the request's first) decides here, among
  // the blocks only.
  const int32_t b = decided_ >= 2 ? decided_ : std::max(2, Decide(view, block));
  decided_ = 0;
  return std::min(b, block);
}

void CostAwareHook::Observe(const StepPlan& plan, StepOrigin origin, const StepResult& step,
                            bool first) {
  const SteadyClock::time_point now = SteadyClock::now();
  BlockCostModel::StepCost cost = StepCostOf(step, origin, first);
  cost.wall_ms = last_step_end_ && origin != StepOrigin::kLookup
                     ? std::chrono::duration<double, std::milli>(now - *last_step_end_).count()
                     : -1.0;
  last_step_end_ = now;
  model_.ObserveStep(cost);
  if (origin == StepOrigin::kLookup) {  // the drafter's acceptance is not this step's
    if (options_.share_acceptance) {
      model_.ObserveLookup(step.drafted, step.accepted, acceptance_class_, step.lookup_match);
    }
    lookup_odds_.Observe(step.drafted, step.accepted, step.lookup_match);
    return;
  }
  if (step.drafted > 0) {
    if (options_.share_acceptance) {
      model_.ObserveAcceptance(step.drafted, step.accepted, acceptance_class_);
    }
    model_.ResetUndrafted(acceptance_class_);
  }
  for (int i = 0; i < step.drafted && i < BlockCostModel::kMaxPositions; ++i) {
    drafted_[i] += 1;
    if (i < step.accepted) accepted_[i] += 1;
  }
}

}  // namespace specdec::engine
