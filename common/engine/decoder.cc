#include "common/engine/decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/engine/dyspec_tree.h"
#include "common/engine/verify.h"
#include "common/model/block_pilot.h"
#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"

namespace specdec::engine {
namespace {

using Clock = std::chrono::steady_clock;
using model::KvCache;
using model::LogitsMode;
using model::SequenceInput;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::vector<float> ToVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// One request's state. Invariant between steps: the target cache holds every committed token
// except `last_`, which has been emitted but not yet run through the target.
class Runner {
 public:
  Runner(const EngineModels& models, const DecodeOptions& options, const CommitCallback& cb)
      : m_(models),
        o_(options),
        cb_(cb),
        rng_(options.sampling.seed),
        greedy_(options.sampling.temperature == 0.f) {
    stats_.method = options.method;
  }

  absl::StatusOr<DecodeResult> Run(std::span<const int32_t> prompt) {
    auto t0 = Clock::now();
    prompt_.assign(prompt.begin(), prompt.end());
    cache_ = m_.target->NewCache();
    if (o_.max_new_tokens > 0) {
      switch (o_.method) {
        case Method::kAr:
          RETURN_IF_ERROR(RunAr());
          break;
        case Method::kDraftChain:
          RETURN_IF_ERROR(RunChain());
          break;
        case Method::kDyspecTree:
          RETURN_IF_ERROR(RunTree());
          break;
        case Method::kDflash:
        case Method::kDflashAdaptive:
          RETURN_IF_ERROR(RunDflash());
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

  // Target rows for verification: warped probabilities, or raw logits when greedy (only their
  // argmax matters then).
  std::vector<float> TargetRows(const at::Tensor& logits) const {
    std::vector<float> raw = ToVector(logits);
    if (greedy_) return raw;
    const int64_t v = logits.size(1);
    std::vector<float> probs(raw.size());
    for (int64_t r = 0; r < logits.size(0); ++r) {
      sampling::WarpedProbsInto(std::span<const float>(raw).subspan(r * v, v), o_.sampling,
                                std::span<float>(probs).subspan(r * v, v));
    }
    return probs;
  }

  int32_t SampleRow(const at::Tensor& logits_row) {
    std::vector<float> v = ToVector(logits_row);
    return sampling::SampleToken(v, o_.sampling, rng_);
  }

  // Runs the prompt through the target; samples the first token. `capture` = DFlash layers.
  absl::Status Prefill(const std::vector<int64_t>& capture, at::Tensor* features,
                       at::Tensor* last_logits) {
    auto t0 = Clock::now();
    SequenceInput in{cache_.get(), prompt_, {}, {}, LogitsMode::kLast};
    model::ForwardOptions fo;
    fo.capture_layers = capture;
    ASSIGN_OR_RETURN(auto out, m_.target->Forward(std::span<const SequenceInput>(&in, 1), fo));
    if (features) *features = out[0].features;
    if (last_logits) *last_logits = out[0].logits;
    last_ = SampleRow(out[0].logits.select(0, 0));
    stats_.prefill_ms = MsSince(t0);
    step_.verify_ms = stats_.prefill_ms;
    finished_ = Commit(std::span<const int32_t>(&last_, 1), /*after_prefill=*/true);
    return absl::OkStatus();
  }

  // One plain AR step on the target (also the tail of speculative methods).
  absl::Status ArStep() {
    auto t0 = Clock::now();
    SequenceInput in{cache_.get(), std::span<const int32_t>(&last_, 1)};
    ASSIGN_OR_RETURN(auto out, m_.target->Forward(std::span<const SequenceInput>(&in, 1)));
    last_ = SampleRow(out[0].logits.select(0, 0));
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
    drafted = positions;
    if (static_cast<int32_t>(stats_.drafted_per_position.size()) < drafted) {
      stats_.drafted_per_position.resize(drafted, 0);
      stats_.accepted_per_position.resize(drafted, 0);
    }
    for (int32_t i = 0; i < drafted; ++i) {
      ++stats_.drafted_per_position[i];
      if (i < accepted) ++stats_.accepted_per_position[i];
    }
  }

  absl::Status RunAr() {
    RETURN_IF_ERROR(Prefill({}, nullptr, nullptr));
    while (!finished_) RETURN_IF_ERROR(ArStep());
    return absl::OkStatus();
  }

  // ---- draft model helpers (DRAFT_CHAIN, DYSPEC_TREE). The draft cache holds a prefix of the
  // committed tokens; `draft_pending_` are the committed tokens it has not seen yet.
  absl::Status RequireDraftLm() {
    if (m_.draft_lm == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(MethodName(o_.method), " needs a draft model; none is loaded"));
    }
    if (m_.draft_lm->config().vocab_size != m_.target->config().vocab_size) {
      return absl::FailedPreconditionError("draft and target vocabularies differ");
    }
    return absl::OkStatus();
  }

  // Distribution used for drafting from draft logits: the warped q when sampling; the plain
  // softmax (T=1) when greedy, whose ranking is the draft's preference and whose values give
  // DySpec its path estimates.
  std::vector<float> DraftDist(const at::Tensor& logits_row) const {
    std::vector<float> raw = ToVector(logits_row);
    sampling::SamplingParams p = o_.sampling;
    if (greedy_) p = sampling::SamplingParams{1.f, 0, 1.f, 0};
    return sampling::WarpedProbs(raw, p);
  }

  absl::Status RunChain() {
    RETURN_IF_ERROR(RequireDraftLm());
    RETURN_IF_ERROR(Prefill({}, nullptr, nullptr));
    auto dcache = m_.draft_lm->NewCache();
    std::vector<int32_t> pending = prompt_;
    pending.push_back(last_);
    const int64_t vocab = m_.target->config().vocab_size;
    while (!finished_) {
      const int32_t k = std::min(o_.draft_length, Remaining() - 1);
      if (k <= 0) {
        RETURN_IF_ERROR(ArStep());
        continue;
      }
      // Draft k tokens autoregressively.
      auto t0 = Clock::now();
      std::vector<int32_t> draft;
      std::vector<float> q_rows;
      std::vector<int32_t> feed = pending;
      for (int32_t i = 0; i < k; ++i) {
        SequenceInput in{dcache.get(), feed};
        ASSIGN_OR_RETURN(auto out, m_.draft_lm->Forward(std::span<const SequenceInput>(&in, 1)));
        std::vector<float> q = DraftDist(out[0].logits.select(0, 0));
        const int32_t d = greedy_ ? sampling::Argmax(q) : sampling::SampleFromProbs(q, rng_);
        q_rows.insert(q_rows.end(), q.begin(), q.end());
        draft.push_back(d);
        feed.assign(1, d);
      }
      step_.draft_ms = MsSince(t0);
      stats_.draft_ms += step_.draft_ms;
      // The draft cache now holds the committed prefix + pending + draft[0..k-2].
      const int64_t draft_base = dcache->length() - (k - 1);

      auto t1 = Clock::now();
      const int64_t base = cache_->length();
      std::vector<int32_t> block = {last_};
      block.insert(block.end(), draft.begin(), draft.end());
      SequenceInput in{cache_.get(), block, {}, {}, LogitsMode::kAll};
      ASSIGN_OR_RETURN(auto out, m_.target->Forward(std::span<const SequenceInput>(&in, 1)));
      std::vector<float> p_rows = TargetRows(out[0].logits);
      VerifyResult v = VerifyChain(draft, ProbRows{p_rows, vocab}, ProbRows{q_rows, vocab},
                                   Proposal::kSampled, greedy_, rng_);
      RETURN_IF_ERROR(cache_->Truncate(base + v.num_accepted + 1));
      step_.verify_ms = MsSince(t1);
      stats_.verify_ms += step_.verify_ms;
      ++stats_.verify_steps;
      RecordAcceptance(k, v.num_accepted);

      // Keep the draft cache's accepted part; whatever it has not seen becomes pending.
      const int32_t kept = std::min(v.num_accepted, k - 1);
      RETURN_IF_ERROR(dcache->Truncate(draft_base + kept));
      pending.assign(draft.begin() + kept, draft.begin() + v.num_accepted);
      pending.push_back(v.next_token);
      std::vector<int32_t> commit(draft.begin(), draft.begin() + v.num_accepted);
      commit.push_back(v.next_token);
      last_ = v.next_token;
      finished_ = Commit(commit);
    }
    return absl::OkStatus();
  }

  absl::Status RunTree() {
    RETURN_IF_ERROR(RequireDraftLm());
    RETURN_IF_ERROR(Prefill({}, nullptr, nullptr));
    auto dcache = m_.draft_lm->NewCache();
    std::vector<int32_t> pending = prompt_;
    const int64_t vocab = m_.target->config().vocab_size;
    while (!finished_) {
      const int32_t depth_cap = std::min(o_.tree_max_depth, Remaining() - 1);
      if (depth_cap <= 0 || o_.tree_budget <= 0) {
        RETURN_IF_ERROR(ArStep());
        continue;
      }
      auto t0 = Clock::now();
      // Bring the draft cache up to the committed context (everything before last_).
      if (!pending.empty()) {
        SequenceInput in{dcache.get(), pending, {}, {}, LogitsMode::kNone};
        RETURN_IF_ERROR(m_.draft_lm->Forward(std::span<const SequenceInput>(&in, 1)).status());
        pending.clear();
      }
      const int64_t ctx = dcache->length();
      std::vector<int32_t> cached_path;  // tree tokens after last_ currently in the draft cache
      bool root_cached = false;
      DraftDistFn dist =
          [&](const DraftTree& tree,
              std::span<const int32_t> nodes) -> absl::StatusOr<std::vector<std::vector<float>>> {
        std::vector<std::vector<float>> result;
        if (nodes.size() == 1) {
          // Path approach: keep the longest common prefix of the cached path and extend it.
          std::vector<int32_t> path = nodes[0] < 0 ? std::vector<int32_t>() : tree.Path(nodes[0]);
          size_t common = 0;
          if (root_cached) {
            while (common < path.size() && common < cached_path.size() &&
                   path[common] == cached_path[common]) {
              ++common;
            }
          }
          std::vector<int32_t> feed;
          if (!root_cached || path.empty() ||
              (common == path.size() && common == cached_path.size())) {
            // Recompute from last_ (first call, or the same path asked twice).
            RETURN_IF_ERROR(dcache->Truncate(ctx));
            feed.push_back(last_);
            feed.insert(feed.end(), path.begin(), path.end());
          } else {
            if (common == path.size()) --common;  // need at least one token to get logits
            RETURN_IF_ERROR(dcache->Truncate(ctx + 1 + static_cast<int64_t>(common)));
            feed.assign(path.begin() + common, path.end());
          }
          SequenceInput in{dcache.get(), feed};
          ASSIGN_OR_RETURN(auto out, m_.draft_lm->Forward(std::span<const SequenceInput>(&in, 1)));
          root_cached = true;
          cached_path = path;
          result.push_back(DraftDist(out[0].logits.select(0, 0)));
          return result;
        }
        // A whole layer at once: rerun the tree so far under a tree mask.
        RETURN_IF_ERROR(dcache->Truncate(ctx));
        root_cached = false;
        std::vector<int32_t> toks = {last_};
        std::vector<int32_t> parents = {-1};
        std::vector<int32_t> pos = {static_cast<int32_t>(ctx)};
        for (int32_t i = 0; i < tree.size(); ++i) {
          toks.push_back(tree.tokens[i]);
          parents.push_back(tree.parents[i] + 1);
          pos.push_back(static_cast<int32_t>(ctx + tree.depths[i]));
        }
        SequenceInput in{dcache.get(), toks, pos, parents, LogitsMode::kAll};
        ASSIGN_OR_RETURN(auto out, m_.draft_lm->Forward(std::span<const SequenceInput>(&in, 1)));
        for (int32_t n : nodes) result.push_back(DraftDist(out[0].logits.select(0, n + 1)));
        return result;
      };
      TreeParams tp;
      // Tree rows sit past the committed length until compaction: stay inside the context.
      tp.budget = static_cast<int32_t>(
          std::min<int64_t>(o_.tree_budget, m_.target->max_context() - cache_->length() - 1));
      tp.max_depth = depth_cap;
      tp.threshold = o_.tree_threshold;
      tp.greedy = greedy_;
      ASSIGN_OR_RETURN(DraftTree tree, BuildDyspecTree(tp, dist, rng_));
      step_.draft_ms = MsSince(t0);
      stats_.draft_ms += step_.draft_ms;

      // Verify all nodes in one target pass under the tree mask.
      auto t1 = Clock::now();
      const int64_t base = cache_->length();
      std::vector<int32_t> toks = {last_}, parents = {-1};
      std::vector<int32_t> pos = {static_cast<int32_t>(base)};
      for (int32_t i = 0; i < tree.size(); ++i) {
        toks.push_back(tree.tokens[i]);
        parents.push_back(tree.parents[i] + 1);
        pos.push_back(static_cast<int32_t>(base + tree.depths[i]));
      }
      SequenceInput in{cache_.get(), toks, pos, parents, LogitsMode::kAll};
      ASSIGN_OR_RETURN(auto out, m_.target->Forward(std::span<const SequenceInput>(&in, 1)));
      std::vector<float> p_rows = TargetRows(out[0].logits);
      std::vector<float> q_rows;
      if (!greedy_) {
        q_rows.assign(static_cast<size_t>(tree.size() + 1) * vocab, 0.f);
        for (int32_t r = 0; r <= tree.size(); ++r) {
          if (!tree.dists[r].empty()) {
            std::copy(tree.dists[r].begin(), tree.dists[r].end(), q_rows.begin() + r * vocab);
          }
        }
      }
      VerifyResult v = VerifyTree(tree.tokens, tree.parents, ProbRows{p_rows, vocab},
                                  ProbRows{q_rows, vocab}, Proposal::kSampled, greedy_, rng_);
      std::vector<int64_t> keep = {base};
      for (int32_t n : v.accepted_nodes) keep.push_back(base + 1 + n);
      RETURN_IF_ERROR(cache_->KeepRows(base, keep));
      step_.verify_ms = MsSince(t1);
      stats_.verify_ms += step_.verify_ms;
      ++stats_.verify_steps;
      const int32_t depth =
          tree.size() == 0 ? 0 : *std::max_element(tree.depths.begin(), tree.depths.end());
      RecordAcceptance(tree.size(), v.num_accepted, depth);

      // Draft cache: keep last_ and the cached part of the accepted path.
      std::vector<int32_t> accepted;
      for (int32_t n : v.accepted_nodes) accepted.push_back(tree.tokens[n]);
      if (root_cached) {
        size_t common = 0;
        while (common < accepted.size() && common < cached_path.size() &&
               accepted[common] == cached_path[common]) {
          ++common;
        }
        RETURN_IF_ERROR(dcache->Truncate(ctx + 1 + static_cast<int64_t>(common)));
        pending.assign(accepted.begin() + common, accepted.end());
      } else {
        RETURN_IF_ERROR(dcache->Truncate(ctx));
        pending = {last_};
        pending.insert(pending.end(), accepted.begin(), accepted.end());
      }
      accepted.push_back(v.next_token);
      last_ = v.next_token;
      finished_ = Commit(accepted);
    }
    return absl::OkStatus();
  }

  absl::Status RunDflash() {
    if (m_.dflash == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(MethodName(o_.method), " needs a DFlash drafter; none is loaded"));
    }
    const model::DFlashDrafter& drafter = *m_.dflash;
    at::Tensor features, last_logits;
    RETURN_IF_ERROR(Prefill(drafter.config().target_layer_ids, &features, &last_logits));
    int32_t b = o_.block_size > 0 ? o_.block_size : drafter.config().block_size;
    if (o_.method == Method::kDflashAdaptive) {
      auto t0 = Clock::now();
      if (m_.policy == nullptr) {
        stats_.policy_fallback = true;
        stats_.note = absl::StrCat(
            "no BlockPilot policy loaded; using the drafter's training "
            "block size ",
            drafter.config().block_size);
        b = drafter.config().block_size;
      } else {
        std::vector<float> raw = ToVector(last_logits.select(0, 0));
        auto pred = m_.policy->Predict(raw);
        if (!pred.ok()) {
          stats_.policy_fallback = true;
          stats_.note = absl::StrCat("policy failed (", pred.status().message(),
                                     "); using the training block size");
          b = drafter.config().block_size;
        } else {
          b = pred->block_size;
        }
      }
      stats_.policy_ms = MsSince(t0);
    }
    if (b < 2) b = 2;
    stats_.block_size = b;
    auto dcache = drafter.NewCache();
    const int64_t vocab = m_.target->config().vocab_size;
    model::ForwardOptions fo;
    fo.capture_layers = drafter.config().target_layer_ids;
    while (!finished_) {
      const int32_t vs = std::min(b, Remaining());
      if (vs <= 1) {
        RETURN_IF_ERROR(ArStep());
        continue;
      }
      auto t0 = Clock::now();
      model::DraftInput di;
      di.cache = dcache.get();
      di.new_features = features;
      di.last_token = last_;
      di.block_size = vs;
      ASSIGN_OR_RETURN(auto dl, drafter.Draft(std::span<const model::DraftInput>(&di, 1)));
      at::Tensor draft_ids = dl[0].argmax(1).to(at::kInt).contiguous();
      std::vector<int32_t> draft(draft_ids.data_ptr<int32_t>(),
                                 draft_ids.data_ptr<int32_t>() + draft_ids.numel());
      step_.draft_ms = MsSince(t0);
      stats_.draft_ms += step_.draft_ms;

      auto t1 = Clock::now();
      const int64_t base = cache_->length();
      std::vector<int32_t> block = {last_};
      block.insert(block.end(), draft.begin(), draft.end());
      SequenceInput in{cache_.get(), block, {}, {}, LogitsMode::kAll};
      ASSIGN_OR_RETURN(auto out, m_.target->Forward(std::span<const SequenceInput>(&in, 1), fo));
      std::vector<float> p_rows = TargetRows(out[0].logits);
      // The drafter proposes its argmax: one-hot proposals (DESIGN §2.1).
      VerifyResult v =
          VerifyChain(draft, ProbRows{p_rows, vocab}, ProbRows{}, Proposal::kOneHot, greedy_, rng_);
      RETURN_IF_ERROR(cache_->Truncate(base + v.num_accepted + 1));
      features = out[0].features.narrow(0, 0, v.num_accepted + 1);
      step_.verify_ms = MsSince(t1);
      stats_.verify_ms += step_.verify_ms;
      ++stats_.verify_steps;
      RecordAcceptance(vs - 1, v.num_accepted);
      std::vector<int32_t> commit(draft.begin(), draft.begin() + v.num_accepted);
      commit.push_back(v.next_token);
      last_ = v.next_token;
      finished_ = Commit(commit);
    }
    return absl::OkStatus();
  }

  const EngineModels& m_;
  const DecodeOptions& o_;
  const CommitCallback& cb_;
  sampling::Rng rng_;
  const bool greedy_;
  std::vector<int32_t> prompt_;
  std::unique_ptr<KvCache> cache_;
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
