#include "common/engine/step_loop.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/engine/block_cost_model.h"
#include "common/engine/prompt_lookup.h"
#include "common/engine/request_limits.h"
#include "common/engine/stop_rule.h"
#include "common/util/clock.h"
#include "common/util/status_macros.h"

namespace specdec::engine {
namespace {

// One request's loop. `last_` is the last committed token: sampled, not yet run through the
// target (row 0 of the next verify).
class StepLoop {
 public:
  StepLoop(const LoopParts& parts, std::span<const int32_t> prompt, const DecodeOptions& options)
      : parts_(parts),
        prompt_(prompt),
        options_(options),
        stop_(options.max_new_tokens, options.stop_token_ids, MakeTextStop(parts, options)),
        drafter_(parts.drafter) {
    stats_.method = options.method;
  }

  absl::StatusOr<DecodeResult> Run() {
    if (options_.max_new_tokens > 0) {
      RETURN_IF_ERROR(Prefill());
      while (!stop_.finished()) {
        if (parts_.cancelled && parts_.cancelled()) {
          return absl::CancelledError("cancelled by the client");
        }
        RETURN_IF_ERROR(Step());
      }
    }
    FlushText();
    stats_.total_ms = MsSince(start_);
    if (itl_count_ > 0) stats_.mean_itl_ms = itl_sum_ms_ / itl_count_;
    DecodeResult r;
    r.tokens = std::move(out_);
    r.stopped = stop_.stopped();
    r.stop_token = stop_.stop_token();
    r.stop_string = stop_.stop_string();
    r.text = std::move(text_);
    r.stats = std::move(stats_);
    return r;
  }

  static std::unique_ptr<TextStop> MakeTextStop(const LoopParts& parts,
                                                const DecodeOptions& options) {
    if (parts.tokenizer == nullptr || (!parts.decode_text && options.stop_strings.empty())) {
      return nullptr;
    }
    return std::make_unique<TextStop>(*parts.tokenizer, options.stop_strings);
  }

 private:
  bool Speculative() const { return options_.method != Method::kAr; }
  // Whether this step may still speculate: a speculative method whose drafter has not failed,
  // in a request the planning hook did not run as AR.
  bool MaySpeculate() const {
    return Speculative() && !drafter_failed_ && !stats_.speculation_skipped;
  }
  int64_t CacheLength() const { return static_cast<int64_t>(prompt_.size()) + produced_ - 1; }

  absl::Status Prefill() {
    const auto t0 = SteadyClock::now();
    if (Speculative() && parts_.hook && !parts_.hook->Speculates(View())) SkipSpeculation();
    PrefillAsk ask;
    ask.may_draft = MaySpeculate();
    ask.logits = ask.may_draft && options_.method == Method::kDflashAdaptive &&
                 options_.block_size == 0 && parts_.policy != nullptr;
    ASSIGN_OR_RETURN(prefill_, parts_.target->Prefill(prompt_, ask));
    hosted_ = MaySpeculate() && IsDflash(options_.method) && parts_.target->HostedBlockSize() > 0;
    stats_.prefill_ms = MsSince(t0);
    stats_.queue_ms += prefill_.queue_ms;
    stats_.network_ms += prefill_.network_ms;
    history_.Assign(prompt_);
    StepResult first;
    first.committed = {prefill_.first_token};
    first.verify_ms = stats_.prefill_ms;
    Commit(first, /*prefill=*/true);
    return absl::OkStatus();
  }

  absl::Status Step() {
    const int32_t left = stop_.tokens_left();
    if (stats_.speculation_skipped) return RunWithoutDrafter(left);
    if (!MaySpeculate() || left <= 1) return RunAr(std::min(left, kMaxRunTokens), 0, false);
    // The request's block (BlockPilot's pick for DFLASH_ADAPTIVE) before its first plan: the
    // planning weighs AR against this request's blocks from the first step on, and a request
    // whose speculation would not pay never opens its drafter.
    if (stats_.block_size == 0 && IsDflash(options_.method) && (hosted_ || drafter_ != nullptr)) {
      ChooseBlockSize();
    }
    // DFLASH_ADAPTIVE: where the sequence repeats, a lookup draft costs one short target pass and
    // no drafter pass, whatever the planning would choose, from the first step on. A target that
    // drafts itself takes a verify between its runs too (its hosted drafter keeps every committed
    // row), and looks up at every step inside them (SetRunLookup).
    if (std::optional<Draft> lookup = AdaptiveLookupDraft(left)) {
      const int32_t tokens =
          parts_.hook ? parts_.hook->LookupTokens(View(), lookup->positions, lookup->lookup_match)
                      : AdaptiveLookupTokens(lookup->positions, lookup->lookup_match);
      if (tokens > 0) {
        lookup->tokens.resize(static_cast<size_t>(std::min(tokens, lookup->positions)));
        lookup->positions = static_cast<int32_t>(lookup->tokens.size());
        return VerifyDraft(StepPlan{}, *std::move(lookup), StepOrigin::kLookup, 0, 0);
      }
    }
    StepPlan plan;
    plan.run_tokens = left;
    if (parts_.hook) parts_.hook->PlanStep(View(), &plan);
    if (!plan.speculate) {
      return RunAr(std::min({plan.run_tokens, left, kMaxRunTokens}), plan.run_max_ms, true, &plan);
    }
    if (options_.method == Method::kNgram) return RunLookups(plan);
    if (!speculation_started_) {
      StartSpeculation();
      if (!MaySpeculate()) return absl::OkStatus();  // the drafter is gone: the rest runs as AR
    }
    if (hosted_) return RunHosted(plan);
    return DraftAndVerify(plan);
  }

  LoopView View() const {
    return LoopView{options_.method, stop_.tokens_left(),   stats_.block_size,
                    hosted_,         predicted_acceptance_, options_.sampling.temperature};
  }

  // Opens the drafter (unless the target drafts) and picks DFlash's block size.
  void StartSpeculation() {
    speculation_started_ = true;
    if (!hosted_) {
      if (drafter_ == nullptr) return DrafterFailed(parts_.drafter_unavailable);
      if (absl::Status s = drafter_->Open(prompt_); !s.ok()) return DrafterFailed(s);
    }
    if (IsDflash(options_.method) && stats_.block_size == 0) ChooseBlockSize();
  }

  void ChooseBlockSize() {
    const int32_t trained =
        hosted_ ? parts_.target->HostedBlockSize() : drafter_->TrainedBlockSize();
    int32_t b = options_.block_size > 0 ? options_.block_size : trained;
    if (options_.method == Method::kDflashAdaptive && options_.block_size == 0) {
      const auto t0 = SteadyClock::now();
      absl::StatusOr<BlockChoice> chosen =
          absl::UnavailableError("no block-size policy is available");
      if (parts_.policy) chosen = parts_.policy->ChooseBlockSize(prefill_.last_logits);
      if (chosen.ok()) {
        b = chosen->block_size;
        // A curve measured at another temperature is not this request's acceptance (at T=1 a
        // drafter's token is accepted far less often than at T=0): the machine's, measured at
        // this request's temperature, is its prior instead.
        if (BlockCostModel::AcceptanceClass(chosen->acceptance_temperature) ==
            BlockCostModel::AcceptanceClass(options_.sampling.temperature)) {
          predicted_acceptance_ = std::move(chosen->acceptance);
        }
        stats_.block_size_from_policy = true;
      } else {
        stats_.policy_fallback = true;
        stats_.note = absl::StrCat(chosen.status().message(),
                                   "; using the drafter's training block size ", trained);
      }
      stats_.policy_ms = MsSince(t0);
    }
    stats_.block_size = std::clamp(b, kMinBlockSize, kMaxBlockSize);
  }

  void SkipSpeculation() {
    stats_.speculation_skipped = true;
    skipped_plan_.speculate = false;
    stats_.note =
        "ran without the drafter: speculation has been losing to AR on this machine (its recent "
        "probes at this temperature, or the load-aware learner at this load), and a few requests "
        "still measure it";
  }

  void DrafterFailed(const absl::Status& why) {
    drafter_failed_ = true;
    drafter_ = nullptr;
    stats_.drafter_fallback = true;
    stats_.note = absl::StrCat("drafter failed (", why.message(), "); finished as AR");
  }

  // Up to `tokens` single-row steps on the target. `planned`: a planning hook chose them.
  absl::Status RunAr(int32_t tokens, double max_ms, bool planned, const StepPlan* plan = nullptr) {
    RunPlan run;
    run.max_tokens = tokens;
    run.max_ms = max_ms;
    // A DFlash drafter that will draft later needs the features of what AR steps commit.
    run.features = planned && !hosted_ && IsDflash(options_.method) && MaySpeculate();
    if (planned && hosted_) SetRunLookup(1, &run);
    return RunOnTarget(run, plan, StepOrigin::kArRun);
  }

  // The rest of a request the hook runs without its drafter (Speculates): one planned run of AR
  // steps, so that the hook's model keeps measuring them, with the lookups it predicts pay.
  absl::Status RunWithoutDrafter(int32_t left) {
    RunPlan run;
    run.max_tokens = std::min(left, kMaxRunTokens);
    if (options_.method == Method::kDflashAdaptive && options_.adaptive_lookup) {
      SetLookupOf(1, &run);
    }
    return RunOnTarget(run, &skipped_plan_, StepOrigin::kArRun);
  }

  // A run in which the target drafts every block with the drafter it hosts.
  absl::Status RunHosted(const StepPlan& plan) {
    stats_.target_drafted = true;
    RunPlan run;
    run.max_tokens = std::min({plan.run_tokens, stop_.tokens_left(), kMaxRunTokens});
    run.block_size = BlockOfStep();
    run.max_ms = plan.run_max_ms;
    SetRunLookup(run.block_size, &run);
    return RunOnTarget(run, &plan, StepOrigin::kTargetDraftedRun);
  }

  // NGRAM: a run in which the target drafts every step by prompt lookup (prompt_lookup.h).
  absl::Status RunLookups(const StepPlan& plan) {
    RunPlan run;
    run.max_tokens = std::min({plan.run_tokens, stop_.tokens_left(), kMaxRunTokens});
    run.lookup = NgramLookup(options_.draft_length);
    run.max_ms = plan.run_max_ms;
    return RunOnTarget(run, &plan, StepOrigin::kLookupRun);
  }

  bool LooksUp() const {
    return options_.method == Method::kDflashAdaptive && options_.adaptive_lookup &&
           stats_.block_size >= kMinBlockSize;
  }

  // DFLASH_ADAPTIVE's lookups inside a planned run of a target that drafts itself, whose steps are
  // blocks of `run_block` rows (1: AR steps): as long as the planning hook predicts they pay.
  // Such runs are long (the loop decides once per run, and in the cluster each decision costs a
  // round trip). Where the loop drafts, its AR runs are short and it decides each lookup between
  // them itself, probes included: lookups inside those runs too were measured to cost at T = 1.
  void SetRunLookup(int32_t run_block, RunPlan* run) {
    if (LooksUp()) SetLookupOf(run_block, run);
  }

  // The lookups of a planned run whose steps are blocks of `run_block` rows: weighed by the run
  // where the hook weighs them, else the hook's shape (AdaptiveLookup's without a hook).
  void SetLookupOf(int32_t run_block, RunPlan* run) {
    const int32_t most = options_.draft_length;
    if (parts_.hook == nullptr) {
      run->lookup = AdaptiveLookup(most);
      return;
    }
    run->lookup_weighing = parts_.hook->WeighRunLookups(View(), run_block, most);
    run->lookup = run->lookup_weighing ? NgramLookup(most)
                                       : parts_.hook->RunLookupShape(View(), run_block, most);
  }

  int32_t BlockOfStep() {
    const int32_t b =
        parts_.hook ? parts_.hook->ChooseBlock(View(), stats_.block_size) : stats_.block_size;
    return std::clamp(b, kMinBlockSize, std::max(kMinBlockSize, stats_.block_size));
  }

  absl::Status RunOnTarget(RunPlan run, const StepPlan* plan, StepOrigin origin) {
    run.stop_token_ids = options_.stop_token_ids;
    const bool planned_ar = plan != nullptr && origin == StepOrigin::kArRun;
    bool first = true;
    return parts_.target->Run(last_, run, [&](StepResult&& step) {
      // NGRAM's runs look up at every step; another run's lookup step is DFLASH_ADAPTIVE's.
      const bool lookup = step.looked_up && origin != StepOrigin::kLookupRun;
      if (lookup) ++stats_.lookup_steps;
      if (planned_ar && !lookup) ++stats_.planned_ar_steps;
      if (plan && parts_.hook) {
        parts_.hook->Observe(*plan, lookup ? StepOrigin::kLookup : origin, step, first);
      }
      first = false;
      Commit(step, false, origin == StepOrigin::kTargetDraftedRun ? run.block_size : 0);
      return !stop_.finished() && !(parts_.cancelled && parts_.cancelled());
    });
  }

  // The drafter proposes, the target verifies, both keep the committed path.
  absl::Status DraftAndVerify(const StepPlan& plan) {
    const int32_t left = stop_.tokens_left();
    DraftShape shape;
    int32_t block = 0;
    if (IsDflash(options_.method)) {
      block = BlockRows(BlockOfStep(), left, CacheLength(), parts_.max_context);
      if (block < kMinBlockSize) return RunAr(1, 0, false);
      shape.length = block - 1;
    } else {
      const bool tree = options_.method == Method::kDyspecTree;
      shape.length = std::min(tree ? options_.tree_max_depth : options_.draft_length, left - 1);
      // Tree rows sit past the committed length until compaction: stay inside the context.
      shape.tree_budget = static_cast<int32_t>(
          std::min<int64_t>(options_.tree_budget, parts_.max_context - CacheLength() - 1));
      if (tree && shape.tree_budget < 1) return RunAr(1, 0, false);
    }
    const auto t0 = SteadyClock::now();
    absl::StatusOr<Draft> draft = drafter_->Propose(last_, shape);
    if (!draft.ok()) {
      DrafterFailed(draft.status());
      return absl::OkStatus();
    }
    return VerifyDraft(plan, *std::move(draft), StepOrigin::kDrafted, block, MsSince(t0));
  }

  // The target verifies `draft` (which took `draft_ms`), both sides keep the committed path.
  absl::Status VerifyDraft(const StepPlan& plan, const Draft& draft, StepOrigin origin,
                           int32_t block, double draft_ms) {
    // No drafter side where the target drafts (hosted runs): nothing to tell it.
    const bool want_features = drafter_ != nullptr && drafter_->WantsFeatures();
    ASSIGN_OR_RETURN(StepResult step, parts_.target->Verify(last_, draft, want_features));
    step.draft_ms = draft_ms;
    step.wall_ms = draft_ms + step.verify_ms;
    step.positions = draft.positions;
    step.lookup_match = draft.lookup_match;
    if (origin == StepOrigin::kLookup) ++stats_.lookup_steps;
    if (parts_.hook) parts_.hook->Observe(plan, origin, step, true);
    Commit(step, false, block);
    if (!stop_.finished() && drafter_ != nullptr) {
      if (absl::Status s = drafter_->Accept(step); !s.ok()) DrafterFailed(s);
    }
    return absl::OkStatus();
  }

  // DFLASH_ADAPTIVE's prompt lookup before planning (the longest suffix match's continuation of
  // up to draft_length tokens, cut to what the request and the context leave; how much of it the
  // step verifies is LookupTokens' call), as a one-hot chain (lossless at any temperature); none
  // when nothing matches.
  std::optional<Draft> AdaptiveLookupDraft(int32_t left) {
    if (!LooksUp()) return {};
    Draft d;
    d.tokens = history_.Draft(NgramLookup(options_.draft_length), left, parts_.max_context,
                              &d.lookup_match);
    if (d.tokens.empty()) return {};
    d.proposal = Proposal::kOneHot;
    d.positions = static_cast<int32_t>(d.tokens.size());
    return d;
  }

  void Commit(const StepResult& step, bool prefill, int32_t block = 0) {
    history_.Append(step.committed);
    produced_ += static_cast<int64_t>(step.committed.size());
    if (!step.committed.empty()) last_ = step.committed.back();
    std::string text;
    const size_t kept = stop_.Take(step.committed, &text);
    const std::span<const int32_t> tokens = std::span<const int32_t>(step.committed).first(kept);
    out_.insert(out_.end(), tokens.begin(), tokens.end());
    StepInfo info;
    info.verify_ms = step.verify_ms;
    if (!prefill) {
      info = RecordStep(step, block);
      stats_.committed_tokens += static_cast<int64_t>(kept);
    }
    RecordLatency(kept);
    text_ += text;
    info.text = std::move(text);
    if (parts_.on_commit) parts_.on_commit(tokens, info);
  }

  // Text a stop string might still have begun in, released at the end.
  void FlushText() {
    StepInfo info;
    info.step = -1;
    info.text = stop_.FlushText();
    if (info.text.empty()) return;
    text_ += info.text;
    if (parts_.on_commit) parts_.on_commit({}, info);
  }

  StepInfo RecordStep(const StepResult& step, int32_t block) {
    ++stats_.verify_steps;
    stats_.drafted_tokens += step.drafted;
    stats_.accepted_tokens += step.accepted;
    stats_.verify_ms += step.verify_ms;
    stats_.draft_ms += step.draft_ms;
    stats_.queue_ms += step.queue_ms;
    stats_.network_ms += step.network_ms;
    stats_.decode_ms += step.wall_ms >= 0 ? step.wall_ms : step.verify_ms + step.draft_ms;
    if (!step.draft_error.empty()) {
      if (stats_.hosted_draft_failures++ == 0 && stats_.note.empty()) {
        stats_.note = absl::StrCat("the target's hosted drafter failed on a step (",
                                   step.draft_error, "); that step ran as AR");
      }
    }
    const size_t positions = static_cast<size_t>(std::max(0, step.positions));
    if (stats_.drafted_per_position.size() < positions) {
      stats_.drafted_per_position.resize(positions, 0);
      stats_.accepted_per_position.resize(positions, 0);
    }
    for (size_t i = 0; i < positions; ++i) {
      ++stats_.drafted_per_position[i];
      if (static_cast<int32_t>(i) < step.accepted) ++stats_.accepted_per_position[i];
    }
    return StepInfo{stats_.verify_steps, step.drafted,  step.accepted,  step.positions, block,
                    step.batch_size,     step.draft_ms, step.verify_ms, step.network_ms};
  }

  void RecordLatency(size_t kept) {
    if (kept == 0) return;
    const auto now = SteadyClock::now();
    if (!any_token_) {
      any_token_ = true;
      stats_.ttft_ms = MsSince(start_);
    } else {
      itl_sum_ms_ += std::chrono::duration<double, std::milli>(now - last_commit_).count() /
                     static_cast<double>(kept);
      ++itl_count_;
    }
    last_commit_ = now;
  }

  const LoopParts& parts_;
  std::span<const int32_t> prompt_;
  const DecodeOptions& options_;
  const SteadyClock::time_point start_ = SteadyClock::now();
  StopRule stop_;
  DrafterSide* drafter_;  // null once it failed
  PrefillResult prefill_;
  std::vector<float> predicted_acceptance_;  // DFLASH_ADAPTIVE: from the policy (BlockChoice)
  bool hosted_ = false;
  bool speculation_started_ = false;
  StepPlan skipped_plan_;  // the plan of a request the hook runs as AR (SkipSpeculation)
  bool drafter_failed_ = false;
  int32_t last_ = -1;
  int64_t produced_ = 0;  // tokens the target committed, the prefill's included
  std::vector<int32_t> out_;
  LookupHistory history_;  // the prompt and every committed token (prompt lookup)
  std::string text_;  // the completion's text, when decoded
  DecodeStats stats_;
  bool any_token_ = false;
  SteadyClock::time_point last_commit_;
  double itl_sum_ms_ = 0;
  int64_t itl_count_ = 0;
};

}  // namespace

absl::StatusOr<DecodeResult> RunStepLoop(const LoopParts& parts, std::span<const int32_t> prompt,
                                         const DecodeOptions& options) {
  if (parts.target == nullptr) return absl::FailedPreconditionError("no target side");
  if (!options.stop_strings.empty() && parts.tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        "stop strings need a tokenizer to decode the completion; none is loaded");
  }
  StepLoop loop(parts, prompt, options);
  return loop.Run();
}

}  // namespace specdec::engine
