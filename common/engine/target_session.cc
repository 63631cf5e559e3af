#include "common/engine/target_session.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "common/engine/warped_rows.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"

namespace specdec::engine {
namespace {

std::vector<float> ToVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

absl::Status PrefillUnfinished() {
  return absl::FailedPreconditionError(
      "the session's prompt is still being prefilled in parts; its last part comes first");
}

}  // namespace

TargetSession::TargetSession(const model::Transformer& target,
                             const sampling::SamplingParams& sampling,
                             std::vector<int64_t> capture_layers)
    : target_(target),
      sampling_(sampling),
      capture_(std::move(capture_layers)),
      cache_(target.NewCache()),
      rng_(sampling.seed) {}

TargetSession::~TargetSession() { target_.RecycleCache(std::move(cache_)); }

absl::StatusOr<std::span<const int32_t>> TargetSession::PreparePrefill(
    std::span<const int32_t> prompt, int64_t rows) const {
  const int64_t done = cache_->length();
  const int64_t length = static_cast<int64_t>(prompt.size());
  if (prompt_length_ > 0) {
    // The rest of a prompt prefilled in parts: checked whole with its first part.
    if (length != prompt_length_) {
      return absl::FailedPreconditionError(
          absl::StrCat("prefill: the session holds the first ", done, " tokens of a prompt of ",
                       prompt_length_, " tokens; its rest was expected, not a prompt of ", length));
    }
  } else {
    if (done != 0) return absl::FailedPreconditionError("session already prefilled");
    if (prompt.empty()) return absl::InvalidArgumentError("prefill: the prompt is empty");
    const int64_t vocab = target_.config().vocab_size;
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] < 0 || prompt[i] >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "prefill: token id ", prompt[i], " at position ", i, " is outside [0, ", vocab, ")"));
      }
    }
    if (length > target_.max_context()) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefill: ", length, " prompt tokens exceed the maximum context of ",
                       target_.max_context()));
    }
  }
  const int64_t rest = length - done;
  return prompt.subspan(static_cast<size_t>(done),
                        static_cast<size_t>(rows > 0 ? std::min(rows, rest) : rest));
}

PrefillOutcome TargetSession::FinishPrefill(const at::Tensor& logits, const at::Tensor& features) {
  PrefillOutcome r;
  r.last_logits = logits.select(0, 0);
  r.features = features;
  if (!prompt_features_.empty() && features.defined()) {
    prompt_features_.push_back(features);
    r.features = at::cat(prompt_features_, 0);
  }
  prompt_length_ = 0;
  prompt_features_.clear();
  std::vector<float> row = ToVector(r.last_logits);
  r.first_token = sampling::SampleToken(row, sampling_, rng_);
  return r;
}

PrefillOutcome TargetSession::PartDone(int64_t prompt_length, const at::Tensor& features) {
  prompt_length_ = prompt_length;
  if (features.defined()) prompt_features_.push_back(features);
  PrefillOutcome r;
  r.complete = false;
  return r;
}

absl::StatusOr<PrefillOutcome> TargetSession::Prefill(std::span<const int32_t> prompt) {
  ASSIGN_OR_RETURN(std::span<const int32_t> rest, PreparePrefill(prompt));
  model::SequenceInput in{cache_.get(), rest, {}, {}, model::LogitsMode::kLast};
  model::ForwardOptions fo;
  fo.capture_layers = capture_;
  ASSIGN_OR_RETURN(auto out, target_.Forward(std::span<const model::SequenceInput>(&in, 1), fo));
  return FinishPrefill(out[0].logits, out[0].features);
}

absl::StatusOr<int32_t> TargetSession::Step(int32_t last, at::Tensor* features) {
  if (prompt_length_ > 0) return PrefillUnfinished();
  model::SequenceInput in{cache_.get(), std::span<const int32_t>(&last, 1)};
  model::ForwardOptions fo;
  if (features != nullptr) fo.capture_layers = capture_;
  ASSIGN_OR_RETURN(auto out, target_.Forward(std::span<const model::SequenceInput>(&in, 1), fo));
  if (features != nullptr) *features = out[0].features;
  std::vector<float> row = ToVector(out[0].logits.select(0, 0));
  return sampling::SampleToken(row, sampling_, rng_);
}

struct TargetSession::Prepared {
  int64_t base = 0;                // cache length before the pass
  std::vector<int32_t> positions;  // tree: depth-based RoPE positions; chain: empty
};

absl::StatusOr<TargetSession::Prepared> TargetSession::PrepareVerify(
    const VerifyRequest& req) const {
  const int64_t rows = static_cast<int64_t>(req.tokens.size());
  const int64_t vocab = target_.config().vocab_size;
  const bool tree = !req.tree_parents.empty();
  const bool greedy = sampling_.temperature == 0.f;
  if (prompt_length_ > 0) return PrefillUnfinished();
  if (rows < 1) return absl::InvalidArgumentError("verify needs at least the last token");
  if (tree &&
      (static_cast<int64_t>(req.tree_parents.size()) != rows || req.tree_parents[0] != -1)) {
    return absl::InvalidArgumentError(
        "tree_parents must have one entry per row and row 0's parent must be -1");
  }
  if (!greedy && req.proposal == Proposal::kSampled) {
    const int64_t want = (tree ? rows : rows - 1) * vocab;
    if (static_cast<int64_t>(req.draft_probs.size()) != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft_probs must hold ", want / vocab, " rows of ", vocab,
                       " probabilities for sampled proposals at temperature > 0, got ",
                       req.draft_probs.size(), " values"));
    }
  }
  // What Forward would reject, checked here so one bad request cannot fail a whole batch.
  for (int64_t i = 0; i < rows; ++i) {
    if (req.tokens[i] < 0 || req.tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("verify: token id ", req.tokens[i], " at row ",
                                                     i, " is outside [0, ", vocab, ")"));
    }
  }
  Prepared p;
  p.base = cache_->length();
  if (p.base + rows > target_.max_context()) {
    return absl::InvalidArgumentError(absl::StrCat("verify: ", p.base, " cached + ", rows,
                                                   " new tokens exceed the maximum context of ",
                                                   target_.max_context()));
  }
  if (tree) {
    std::vector<int32_t> depth(rows, 0);
    p.positions.resize(rows);
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t par = req.tree_parents[i];
      if (i > 0 && (par < 0 || par >= i)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tree parent of row ", i, " is ", par, "; it must be an earlier row"));
      }
      depth[i] = i == 0 ? 0 : depth[par] + 1;
      p.positions[i] = static_cast<int32_t>(p.base + depth[i]);
    }
  }
  return p;
}

absl::StatusOr<VerifyOutcome> TargetSession::FinishVerify(const Prepared& prep,
                                                          const VerifyRequest& req,
                                                          const at::Tensor& logits,
                                                          const at::Tensor& features) {
  const int64_t rows = static_cast<int64_t>(req.tokens.size());
  const int64_t vocab = target_.config().vocab_size;
  const bool tree = !req.tree_parents.empty();
  const bool greedy = sampling_.temperature == 0.f;
  const int64_t base = prep.base;
  WarpedRows p_rows(ToVector(logits), vocab, sampling_);
  VerifyOutcome o;
  std::vector<int64_t> kept_rows = {0};
  if (tree) {
    // Verification works on nodes = rows 1..n, parents shifted to node indices.
    std::vector<int32_t> nodes(req.tokens.begin() + 1, req.tokens.end());
    std::vector<int32_t> parents(rows - 1);
    for (int64_t i = 1; i < rows; ++i) parents[i - 1] = req.tree_parents[i] - 1;
    o.result = VerifyTree(nodes, parents, p_rows.View(), ProbRows{req.draft_probs, vocab},
                          req.proposal, greedy, rng_);
    for (int32_t& n : o.result.accepted_nodes) {
      n += 1;  // back to rows
      kept_rows.push_back(n);
      o.committed.push_back(req.tokens[n]);
    }
    std::vector<int64_t> keep;
    for (int64_t r : kept_rows) keep.push_back(base + r);
    RETURN_IF_ERROR(cache_->KeepRows(base, keep));
  } else {
    o.result = VerifyChain(req.tokens.subspan(1), p_rows.View(), ProbRows{req.draft_probs, vocab},
                           req.proposal, greedy, rng_);
    for (int32_t i = 1; i <= o.result.num_accepted; ++i) {
      kept_rows.push_back(i);
      o.committed.push_back(req.tokens[i]);
    }
    RETURN_IF_ERROR(cache_->Truncate(base + o.result.num_accepted + 1));
  }
  o.committed.push_back(o.result.next_token);
  if (req.want_features && features.defined()) {
    o.features =
        tree ? features.index_select(0, at::tensor(kept_rows, at::kLong).to(features.device()))
             : features.narrow(0, 0, o.result.num_accepted + 1);
  }
  return o;
}

absl::StatusOr<VerifyOutcome> TargetSession::Verify(const VerifyRequest& req) {
  ASSIGN_OR_RETURN(Prepared prep, PrepareVerify(req));
  model::SequenceInput in{cache_.get(), req.tokens, prep.positions, req.tree_parents,
                          model::LogitsMode::kAll};
  model::ForwardOptions fo;
  if (req.want_features) fo.capture_layers = capture_;
  ASSIGN_OR_RETURN(auto out, target_.Forward(std::span<const model::SequenceInput>(&in, 1), fo));
  return FinishVerify(prep, req, out[0].logits, out[0].features);
}

bool TargetSession::CanShareBatch(const TargetSession& a, const VerifyRequest& ra,
                                  const TargetSession& b, const VerifyRequest& rb) {
  if (&a == &b || &a.target_ != &b.target_) return false;
  return !ra.want_features || !rb.want_features || a.capture_ == b.capture_;
}

std::vector<absl::StatusOr<VerifyOutcome>> TargetSession::VerifyBatch(
    std::span<TargetSession* const> sessions, std::span<const VerifyRequest> requests) {
  if (sessions.size() == 1) return {sessions[0]->Verify(requests[0])};
  return RunBatch({}, {}, sessions, requests).verifies;
}

TargetSession::BatchResults TargetSession::RunBatch(
    std::span<TargetSession* const> prefill_sessions,
    std::span<const std::span<const int32_t>> prompts,
    std::span<TargetSession* const> verify_sessions, std::span<const VerifyRequest> verifies,
    std::span<const int64_t> prefill_rows) {
  BatchResults r;
  r.prefills.assign(prefill_sessions.size(), absl::InternalError("not run"));
  r.verifies.assign(verify_sessions.size(), absl::InternalError("not run"));
  std::vector<size_t> run_prefills, run_verifies;  // indices that passed validation
  std::vector<std::span<const int32_t>> parts(prefill_sessions.size());
  const std::vector<int64_t>* capture = nullptr;
  const model::Transformer* target = nullptr;
  for (size_t i = 0; i < prefill_sessions.size(); ++i) {
    auto part =
        prefill_sessions[i]->PreparePrefill(prompts[i], prefill_rows.empty() ? 0 : prefill_rows[i]);
    if (!part.ok()) {
      r.prefills[i] = part.status();
      continue;
    }
    parts[i] = *part;
    if (prefill_sessions[i]->WantsFeaturesOnPrefill()) capture = &prefill_sessions[i]->capture_;
    target = &prefill_sessions[i]->target_;
    run_prefills.push_back(i);
  }
  std::vector<Prepared> preps(verify_sessions.size());
  for (size_t i = 0; i < verify_sessions.size(); ++i) {
    auto p = verify_sessions[i]->PrepareVerify(verifies[i]);
    if (!p.ok()) {
      r.verifies[i] = p.status();
      continue;
    }
    preps[i] = *std::move(p);
    if (verifies[i].want_features) capture = &verify_sessions[i]->capture_;
    target = &verify_sessions[i]->target_;
    run_verifies.push_back(i);
  }
  if (target == nullptr) return r;
  std::vector<model::SequenceInput> inputs;
  std::vector<bool> last_part(prefill_sessions.size());
  for (size_t i : run_prefills) {
    TargetSession* s = prefill_sessions[i];
    last_part[i] = s->cache_->length() + static_cast<int64_t>(parts[i].size()) ==
                   static_cast<int64_t>(prompts[i].size());
    const model::LogitsMode logits =
        last_part[i] ? model::LogitsMode::kLast : model::LogitsMode::kNone;
    inputs.push_back(model::SequenceInput{s->cache_.get(), parts[i], {}, {}, logits});
  }
  for (size_t i : run_verifies) {
    inputs.push_back(model::SequenceInput{verify_sessions[i]->cache_.get(), verifies[i].tokens,
                                          preps[i].positions, verifies[i].tree_parents,
                                          model::LogitsMode::kAll});
  }
  model::ForwardOptions fo;
  if (capture != nullptr) fo.capture_layers = *capture;
  auto out = target->Forward(inputs, fo);
  if (!out.ok()) {
    // Not expected after validation; keep the requests apart so the error lands where due.
    for (size_t i : run_prefills) r.prefills[i] = prefill_sessions[i]->Prefill(prompts[i]);
    for (size_t i : run_verifies) r.verifies[i] = verify_sessions[i]->Verify(verifies[i]);
    return r;
  }
  size_t k = 0;
  for (size_t i : run_prefills) {
    const at::Tensor features =
        prefill_sessions[i]->WantsFeaturesOnPrefill() ? (*out)[k].features : at::Tensor();
    r.prefills[i] = last_part[i] ? prefill_sessions[i]->FinishPrefill((*out)[k].logits, features)
                                 : prefill_sessions[i]->PartDone(
                                       static_cast<int64_t>(prompts[i].size()), features);
    ++k;
  }
  for (size_t i : run_verifies) {
    r.verifies[i] = verify_sessions[i]->FinishVerify(preps[i], verifies[i], (*out)[k].logits,
                                                     (*out)[k].features);
    ++k;
  }
  return r;
}

}  // namespace specdec::engine
