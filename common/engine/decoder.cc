#include "common/engine/decoder.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/engine/draft_session.h"
#include "common/engine/dyspec_tree.h"
#include "common/engine/target_session.h"
#include "common/engine/verify.h"
#include "common/model/block_pilot.h"
#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"

namespace specdec::engine {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::vector<float> ToVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// One request's orchestration over a target session and (optionally) a draft session: the same
// sequence of operations the router performs over RPC. `last_` is the last committed token,
// emitted but not yet run through the target.
class Runner {
 public:
  Runner(const EngineModels& models, const DecodeOptions& options, const CommitCallback& cb)
      : m_(models), o_(options), cb_(cb) {
    stats_.method = options.method;
  }

  absl::StatusOr<DecodeResult> Run(std::span<const int32_t> prompt) {
    auto t0 = Clock::now();
    if (o_.max_new_tokens > 0) {
      switch (o_.method) {
        case Method::kAr:
          RETURN_IF_ERROR(RunAr(prompt));
          break;
        case Method::kDraftChain:
        case Method::kDyspecTree:
          RETURN_IF_ERROR(RunDraftLm(prompt));
          break;
        case Method::kDflash:
        case Method::kDflashAdaptive:
          RETURN_IF_ERROR(RunDflash(prompt));
          break;
      }
    }
    stats_.total_ms = MsSince(t0);
    DecodeResult r;
    r.tokens = std::move(out_);
    r.stopped = stopped_;
    r.stats = std::move(stats_);
    return r;
  }

 private:
  int32_t Remaining() const { return o_.max_new_tokens - static_cast<int32_t>(out_.size()); }

  // Appends tokens to the output, honouring stop tokens and the length cap. Returns true when
  // the request is finished.
  bool Commit(std::span<const int32_t> toks, bool after_prefill = false) {
    step_.step = after_prefill ? 0 : stats_.verify_steps;
    size_t n = 0;
    for (int32_t t : toks) {
      if (Remaining() <= 0) break;
      out_.push_back(t);
      ++n;
      if (std::find(o_.stop_token_ids.begin(), o_.stop_token_ids.end(), t) !=
          o_.stop_token_ids.end()) {
        stopped_ = true;
        break;
      }
    }
    if (!after_prefill) stats_.committed_tokens += static_cast<int64_t>(n);
    if (cb_ && n > 0) cb_(toks.first(n), step_);
    step_ = StepInfo();
    return stopped_ || Remaining() <= 0;
  }

  absl::Status Prefill(std::span<const int32_t> prompt, std::vector<int64_t> capture,
                       PrefillOutcome* out) {
    auto t0 = Clock::now();
    target_ = std::make_unique<TargetSession>(*m_.target, o_.sampling, std::move(capture));
    ASSIGN_OR_RETURN(*out, target_->Prefill(prompt));
    last_ = out->first_token;
    stats_.prefill_ms = MsSince(t0);
    step_.verify_ms = stats_.prefill_ms;
    finished_ = Commit(std::span<const int32_t>(&last_, 1), /*after_prefill=*/true);
    return absl::OkStatus();
  }

  // One plain AR step on the target (also the tail of speculative methods).
  absl::Status ArStep() {
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(last_, target_->Step(last_));
    step_.verify_ms = MsSince(t0);
    stats_.verify_ms += step_.verify_ms;
    ++stats_.verify_steps;
    finished_ = Commit(std::span<const int32_t>(&last_, 1));
    return absl::OkStatus();
  }

  // `drafted` tokens were proposed covering `positions` draft positions (chain: one token per
  // position; tree: positions are depths), of which the first `accepted` were accepted.
  void RecordAcceptance(int32_t drafted, int32_t accepted, int32_t positions = -1) {
    stats_.drafted_tokens += drafted;
    stats_.accepted_tokens += accepted;
    step_.drafted = drafted;
    step_.accepted = accepted;
    step_.block_size = stats_.block_size;
    if (positions < 0) positions = drafted;
    if (static_cast<int32_t>(stats_.drafted_per_position.size()) < positions) {
      stats_.drafted_per_position.resize(positions, 0);
      stats_.accepted_per_position.resize(positions, 0);
    }
    for (int32_t i = 0; i < positions; ++i) {
      ++stats_.drafted_per_position[i];
      if (i < accepted) ++stats_.accepted_per_position[i];
    }
  }

  // Verifies `rows` (row 0 = last_) on the target and commits the outcome.
  absl::StatusOr<VerifyOutcome> VerifyAndCommit(VerifyRequest req, Clock::time_point t0) {
    ASSIGN_OR_RETURN(VerifyOutcome v, target_->Verify(req));
    step_.verify_ms = MsSince(t0);
    stats_.verify_ms += step_.verify_ms;
    ++stats_.verify_steps;
    return v;
  }

  absl::Status RunAr(std::span<const int32_t> prompt) {
    PrefillOutcome pre;
    RETURN_IF_ERROR(Prefill(prompt, {}, &pre));
    while (!finished_) RETURN_IF_ERROR(ArStep());
    return absl::OkStatus();
  }

  absl::Status RunDraftLm(std::span<const int32_t> prompt) {
    if (m_.draft_lm == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(MethodName(o_.method), " needs a draft model; none is loaded"));
    }
    if (m_.draft_lm->config().vocab_size != m_.target->config().vocab_size) {
      return absl::FailedPreconditionError("draft and target vocabularies differ");
    }
    PrefillOutcome pre;
    RETURN_IF_ERROR(Prefill(prompt, {}, &pre));
    ArDraftSession drafter(*m_.draft_lm, o_.sampling);
    drafter.Extend(prompt);
    const bool tree = o_.method == Method::kDyspecTree;
    while (!finished_) {
      const int32_t room = Remaining() - 1;  // a step commits at most depth + 1 tokens
      const int32_t depth = std::min(tree ? o_.tree_max_depth : o_.draft_length, room);
      if (depth <= 0) {
        RETURN_IF_ERROR(ArStep());
        continue;
      }
      auto t0 = Clock::now();
      std::vector<int32_t> rows = {last_}, parents;
      std::vector<float> q;
      int32_t positions = depth;
      if (tree) {
        TreeParams tp;
        // Tree rows sit past the committed length until compaction: stay inside the context.
        tp.budget = static_cast<int32_t>(
            std::min<int64_t>(o_.tree_budget, m_.target->max_context() - target_->length() - 1));
        tp.max_depth = depth;
        tp.threshold = o_.tree_threshold;
        ASSIGN_OR_RETURN(DraftedTree d, drafter.DraftTree(last_, tp));
        parents.push_back(-1);
        for (int32_t i = 0; i < d.tree.size(); ++i) {
          rows.push_back(d.tree.tokens[i]);
          parents.push_back(d.tree.parents[i] + 1);
        }
        positions =
            d.tree.size() == 0 ? 0 : *std::max_element(d.tree.depths.begin(), d.tree.depths.end());
        q = std::move(d.probs);
      } else {
        ASSIGN_OR_RETURN(DraftedChain d, drafter.DraftChain(last_, depth));
        rows.insert(rows.end(), d.tokens.begin(), d.tokens.end());
        q = std::move(d.probs);
      }
      step_.draft_ms = MsSince(t0);
      stats_.draft_ms += step_.draft_ms;

      VerifyRequest req;
      req.tokens = rows;
      req.tree_parents = parents;
      req.proposal = Proposal::kSampled;
      req.draft_probs = q;
      ASSIGN_OR_RETURN(VerifyOutcome v, VerifyAndCommit(req, Clock::now()));
      RecordAcceptance(static_cast<int32_t>(rows.size()) - 1, v.result.num_accepted, positions);
      RETURN_IF_ERROR(
          drafter.Commit(std::span<const int32_t>(v.committed).first(v.committed.size() - 1)));
      last_ = v.result.next_token;
      finished_ = Commit(v.committed);
    }
    return absl::OkStatus();
  }

  absl::Status RunDflash(std::span<const int32_t> prompt) {
    if (m_.dflash == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(MethodName(o_.method), " needs a DFlash drafter; none is loaded"));
    }
    const model::DFlashDrafter& dflash = *m_.dflash;
    PrefillOutcome pre;
    RETURN_IF_ERROR(Prefill(prompt, dflash.config().target_layer_ids, &pre));
    int32_t b = o_.block_size > 0 ? o_.block_size : dflash.config().block_size;
    if (o_.method == Method::kDflashAdaptive) {
      auto t0 = Clock::now();
      if (m_.policy == nullptr) {
        stats_.policy_fallback = true;
        stats_.note =
            absl::StrCat("no BlockPilot policy loaded; using the drafter's training block size ",
                         dflash.config().block_size);
        b = dflash.config().block_size;
      } else {
        std::vector<float> raw = ToVector(pre.last_logits);
        auto pred = m_.policy->Predict(raw);
        if (!pred.ok()) {
          stats_.policy_fallback = true;
          stats_.note = absl::StrCat("policy failed (", pred.status().message(),
                                     "); using the training block size");
          b = dflash.config().block_size;
        } else {
          b = pred->block_size;
        }
      }
      stats_.policy_ms = MsSince(t0);
    }
    if (b < 2) b = 2;
    stats_.block_size = b;
    DFlashDraftSession drafter(dflash);
    drafter.Extend(pre.features);
    while (!finished_) {
      const int32_t vs = std::min(b, Remaining());
      if (vs <= 1) {
        RETURN_IF_ERROR(ArStep());
        continue;
      }
      auto t0 = Clock::now();
      ASSIGN_OR_RETURN(std::vector<int32_t> draft, drafter.DraftBlock(last_, vs));
      step_.draft_ms = MsSince(t0);
      stats_.draft_ms += step_.draft_ms;
      std::vector<int32_t> rows = {last_};
      rows.insert(rows.end(), draft.begin(), draft.end());
      VerifyRequest req;
      req.tokens = rows;
      req.proposal = Proposal::kOneHot;  // the drafter proposes its argmax (DESIGN §2.1)
      req.want_features = true;
      ASSIGN_OR_RETURN(VerifyOutcome v, VerifyAndCommit(req, Clock::now()));
      RecordAcceptance(vs - 1, v.result.num_accepted);
      drafter.Extend(v.features);
      last_ = v.result.next_token;
      finished_ = Commit(v.committed);
    }
    return absl::OkStatus();
  }

  const EngineModels& m_;
  const DecodeOptions& o_;
  const CommitCallback& cb_;
  std::unique_ptr<TargetSession> target_;
  int32_t last_ = -1;
  std::vector<int32_t> out_;
  bool stopped_ = false;
  bool finished_ = false;
  DecodeStats stats_;
  StepInfo step_;  // the step being assembled for the next Commit
};

}  // namespace

absl::StatusOr<DecodeResult> Decode(const EngineModels& models, std::span<const int32_t> prompt,
                                    const DecodeOptions& options, const CommitCallback& on_commit) {
  // Inference only: skip autograd bookkeeping on every op (tensors made here never leave).
  c10::InferenceMode inference;
  if (models.target == nullptr) return absl::FailedPreconditionError("no target model loaded");
  if (prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (options.max_new_tokens < 0) {
    return absl::InvalidArgumentError("max_new_tokens must be >= 0");
  }
  RETURN_IF_ERROR(sampling::ValidateSamplingParams(options.sampling));
  if (options.draft_length < 1 || options.draft_length > 64) {
    return absl::InvalidArgumentError("draft_length must be in [1, 64]");
  }
  if (options.tree_budget < 1 || options.tree_budget > 512 || options.tree_max_depth < 1 ||
      options.tree_max_depth > 64) {
    return absl::InvalidArgumentError("tree_budget must be in [1, 512], tree_max_depth in [1, 64]");
  }
  if (options.block_size != 0 && (options.block_size < 2 || options.block_size > 256)) {
    return absl::InvalidArgumentError("block_size must be 0 (default) or in [2, 256]");
  }
  const int64_t vocab = models.target->config().vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " has id ", prompt[i],
                                                     ", outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (static_cast<int64_t>(prompt.size()) + options.max_new_tokens > models.target->max_context()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt.size(), " tokens) + max_new_tokens (", options.max_new_tokens,
        ") exceeds the maximum context of ", models.target->max_context()));
  }
  Runner runner(models, options, on_commit);
  return runner.Run(prompt);
}

}  // namespace specdec::engine
