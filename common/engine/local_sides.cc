#include "common/engine/local_sides.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/engine/draft_session.h"
#include "common/engine/prompt_lookup.h"
#include "common/engine/target_session.h"
#include "common/model/block_pilot.h"
#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "common/util/clock.h"
#include "common/util/status_macros.h"

namespace specdec::engine {
namespace {

std::vector<float> ToVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// The target session; with `feed`, every committed row's features go to the DFlash drafter's
// session as they are computed. It keeps the cached sequence for lookup runs.
class LocalTarget final : public TargetSide {
 public:
  LocalTarget(const model::Transformer& target, const sampling::SamplingParams& sampling,
              std::vector<int64_t> capture, DFlashDraftSession* feed)
      : session_(target, sampling, std::move(capture)),
        feed_(feed),
        max_context_(target.max_context()) {}

  absl::StatusOr<PrefillResult> Prefill(std::span<const int32_t> prompt,
                                        const PrefillAsk& ask) override {
    if (!ask.may_draft) {
      session_.StopCapturing();
      feed_ = nullptr;
    }
    ASSIGN_OR_RETURN(PrefillOutcome out, session_.Prefill(prompt));
    sequence_.Assign(prompt);
    Feed(out.features);
    PrefillResult r;
    r.first_token = out.first_token;
    if (ask.logits) r.last_logits = ToVector(out.last_logits);
    return r;
  }

  absl::StatusOr<StepResult> Verify(int32_t last, const Draft& draft, bool want_features) override {
    std::vector<int32_t> rows = {last}, parents;
    rows.insert(rows.end(), draft.tokens.begin(), draft.tokens.end());
    if (!draft.parents.empty()) {
      parents.push_back(-1);
      for (int32_t p : draft.parents) parents.push_back(p + 1);
    }
    VerifyRequest req;
    req.tokens = rows;
    req.tree_parents = parents;
    req.proposal = draft.proposal;
    req.draft_probs = draft.probs;
    req.want_features = want_features && feed_ != nullptr;
    const auto t0 = SteadyClock::now();
    ASSIGN_OR_RETURN(VerifyOutcome out, session_.Verify(req));
    StepResult step;
    step.verify_ms = MsSince(t0);
    step.committed = std::move(out.committed);
    step.drafted = static_cast<int32_t>(draft.tokens.size());
    step.accepted = out.result.num_accepted;
    Keep(last, step.committed);
    Feed(out.features);
    return step;
  }

  absl::Status Run(int32_t last, const RunPlan& plan, const StepSink& sink) override {
    if (plan.block_size >= 2) {
      return absl::FailedPreconditionError("the in-process target hosts no drafter");
    }
    const auto begun = SteadyClock::now();
    std::optional<LookupWeighing> weighing = plan.lookup_weighing;  // the run's own
    for (int32_t done = 0; done < plan.max_tokens;) {
      ASSIGN_OR_RETURN(StepResult step, RunStep(last, plan, plan.max_tokens - done,
                                                weighing ? &*weighing : nullptr));
      done += static_cast<int32_t>(step.committed.size());
      last = step.committed.back();
      if (weighing) {
        weighing->AfterStep(step.looked_up, step.drafted, step.accepted, step.lookup_match);
      }
      if (!sink(std::move(step))) break;
      if (plan.max_ms > 0 && MsSince(begun) >= plan.max_ms) break;
    }
    return absl::OkStatus();
  }

 private:
  // One step of a run that may commit `left` tokens: a lookup draft's verify where the plan
  // looks up and the sequence repeats (the tokens `weighing` gives, where the run weighs its
  // lookups), else a single-row step.
  absl::StatusOr<StepResult> RunStep(int32_t last, const RunPlan& plan, int32_t left,
                                     const LookupWeighing* weighing) {
    if (plan.lookup.max_tokens > 0) {
      Draft d;
      d.tokens = sequence_.DraftAfter(last, plan.lookup, left, max_context_, &d.lookup_match);
      if (weighing != nullptr) {
        const auto found = static_cast<int32_t>(d.tokens.size());
        d.tokens.resize(static_cast<size_t>(weighing->Tokens(found, d.lookup_match)));
      }
      if (!d.tokens.empty()) {
        d.proposal = Proposal::kOneHot;
        d.positions = static_cast<int32_t>(d.tokens.size());
        ASSIGN_OR_RETURN(StepResult step, Verify(last, d, plan.features));
        step.positions = d.positions;
        step.wall_ms = step.verify_ms;
        step.looked_up = true;
        step.lookup_match = d.lookup_match;
        return step;
      }
    }
    const auto t0 = SteadyClock::now();
    StepResult step;
    at::Tensor features;
    const bool keep_features = plan.features && feed_ != nullptr;
    ASSIGN_OR_RETURN(int32_t next, session_.Step(last, keep_features ? &features : nullptr));
    step.committed = {next};
    step.verify_ms = MsSince(t0);
    Keep(last, step.committed);
    Feed(features);
    step.wall_ms = step.verify_ms;
    return step;
  }

  // After a step: the cache holds row 0 and the accepted rows (all committed tokens but the
  // last, which is the next step's row 0).
  void Keep(int32_t last, const std::vector<int32_t>& committed) {
    sequence_.Append(last);
    sequence_.Append(std::span<const int32_t>(committed).first(committed.size() - 1));
  }

  void Feed(const at::Tensor& features) {
    if (feed_ != nullptr && features.defined()) feed_->Extend(features);
  }

  TargetSession session_;
  DFlashDraftSession* feed_;
  const int64_t max_context_;
  LookupHistory sequence_;  // the cached tokens
};

// The small autoregressive draft model: chains (DRAFT_CHAIN) or DySpec trees (DYSPEC_TREE).
class LocalArDrafter final : public DrafterSide {
 public:
  LocalArDrafter(const model::Transformer& draft, const DecodeOptions& options)
      : session_(draft, options.sampling),
        tree_(options.method == Method::kDyspecTree),
        threshold_(options.tree_threshold) {}

  absl::Status Open(std::span<const int32_t> prompt) override {
    session_.Extend(prompt);
    return absl::OkStatus();
  }

  absl::StatusOr<Draft> Propose(int32_t last, const DraftShape& shape) override {
    Draft d;
    if (!tree_) {
      ASSIGN_OR_RETURN(DraftedChain c, session_.DraftChain(last, shape.length));
      d.tokens = std::move(c.tokens);
      d.probs = std::move(c.probs);
      d.positions = static_cast<int32_t>(d.tokens.size());
      return d;
    }
    TreeParams tp;
    tp.budget = shape.tree_budget;
    tp.max_depth = shape.length;
    tp.threshold = threshold_;
    ASSIGN_OR_RETURN(DraftedTree t, session_.DraftTree(last, tp));
    d.tokens = std::move(t.tree.tokens);
    d.parents = std::move(t.tree.parents);
    d.probs = std::move(t.probs);
    d.positions =
        t.tree.depths.empty() ? 0 : *std::max_element(t.tree.depths.begin(), t.tree.depths.end());
    return d;
  }

  absl::Status Accept(const StepResult& step) override {
    return session_.Commit(
        std::span<const int32_t>(step.committed).first(step.committed.size() - 1));
  }

 private:
  ArDraftSession session_;
  const bool tree_;
  const float threshold_;
};

// The DFlash drafter; the target side feeds its session the committed rows' features.
class LocalDflashDrafter final : public DrafterSide {
 public:
  LocalDflashDrafter(DFlashDraftSession* session, int32_t trained_block)
      : session_(session), trained_block_(trained_block) {}

  absl::Status Open(std::span<const int32_t>) override { return absl::OkStatus(); }

  absl::StatusOr<Draft> Propose(int32_t last, const DraftShape& shape) override {
    Draft d;
    ASSIGN_OR_RETURN(d.tokens, session_->DraftBlock(last, shape.length + 1));
    d.proposal = Proposal::kOneHot;  // the drafter proposes its argmax (docs/design.md §2.1)
    d.positions = static_cast<int32_t>(d.tokens.size());
    return d;
  }

  absl::Status Accept(const StepResult&) override { return absl::OkStatus(); }
  int32_t TrainedBlockSize() const override { return trained_block_; }
  bool WantsFeatures() const override { return true; }

 private:
  DFlashDraftSession* session_;
  const int32_t trained_block_;
};

class LocalBlockPolicy final : public BlockPolicy {
 public:
  explicit LocalBlockPolicy(const model::BlockPilot& policy) : policy_(policy) {}
  absl::StatusOr<BlockChoice> ChooseBlockSize(std::span<const float> last_logits) override {
    ASSIGN_OR_RETURN(auto prediction, policy_.Predict(last_logits));
    return BlockChoice{prediction.block_size, std::move(prediction.acceptance),
                       static_cast<float>(policy_.config().acceptance_temperature)};
  }

 private:
  const model::BlockPilot& policy_;
};

}  // namespace

absl::Status CheckModelsServe(const EngineModels& models, Method method) {
  if (models.target == nullptr) return absl::FailedPreconditionError("no target model loaded");
  if (method == Method::kDraftChain || method == Method::kDyspecTree) {
    if (models.draft_lm == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(MethodName(method), " needs a draft model; none is loaded"));
    }
    if (models.draft_lm->config().vocab_size != models.target->config().vocab_size) {
      return absl::FailedPreconditionError("draft and target vocabularies differ");
    }
  }
  if (IsDflash(method) && models.dflash == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(MethodName(method), " needs a DFlash drafter; none is loaded"));
  }
  return absl::OkStatus();
}

struct LocalSides::Sessions {
  std::unique_ptr<DFlashDraftSession> dflash;
  std::unique_ptr<LocalTarget> target;
  std::unique_ptr<DrafterSide> drafter;
  std::unique_ptr<LocalBlockPolicy> policy;
  int64_t max_context = 0;
  const tokenizer::Tokenizer* tokenizer = nullptr;
};

LocalSides::LocalSides(const EngineModels& models, const DecodeOptions& options)
    : sessions_(std::make_unique<Sessions>()) {
  Sessions& s = *sessions_;
  s.max_context = models.target->max_context();
  s.tokenizer = models.tokenizer;
  std::vector<int64_t> capture;
  if (IsDflash(options.method) && models.dflash != nullptr) {
    s.dflash = std::make_unique<DFlashDraftSession>(*models.dflash);
    capture = models.dflash->config().target_layer_ids;
    s.drafter =
        std::make_unique<LocalDflashDrafter>(s.dflash.get(), models.dflash->config().block_size);
    if (models.policy != nullptr) s.policy = std::make_unique<LocalBlockPolicy>(*models.policy);
  } else if (options.method != Method::kAr && models.draft_lm != nullptr) {
    s.drafter = std::make_unique<LocalArDrafter>(*models.draft_lm, options);
  }
  s.target = std::make_unique<LocalTarget>(*models.target, options.sampling, std::move(capture),
                                           s.dflash.get());
}

LocalSides::~LocalSides() = default;

LoopParts LocalSides::Parts() const {
  LoopParts p;
  p.target = sessions_->target.get();
  p.drafter = sessions_->drafter.get();
  p.policy = sessions_->policy.get();
  p.max_context = sessions_->max_context;
  p.tokenizer = sessions_->tokenizer;
  return p;
}

}  // namespace specdec::engine
