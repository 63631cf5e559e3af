// The target side of one request: its KV cache, sampling parameters and random stream, and the
// operations a target replica performs for it (prefill, verify a chain or tree, plain AR step).
// Used in-process by the decoder and, behind KV-cache handles, by the target service.
#ifndef SPECDEC_COMMON_ENGINE_TARGET_SESSION_H_
#define SPECDEC_COMMON_ENGINE_TARGET_SESSION_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/verify.h"
#include "common/model/kv_cache.h"
#include "common/sampling/sampler.h"

namespace specdec::model {
class Transformer;
}

namespace specdec::engine {

struct PrefillOutcome {
  // False after a part of the prompt that left more of it to run (RunBatch's prefill_rows): the
  // fields below are then unset, and the session takes only the rest of the same prompt next.
  bool complete = true;
  int32_t first_token = -1;  // sampled from the last position: the first committed token
  at::Tensor last_logits;    // raw float32 [vocab] of the last prompt position
  at::Tensor features;       // [prompt_len, F] of the capture layers (undefined if none)
};

struct VerifyRequest {
  // Row 0 is the last committed token (emitted but not yet run through the target); rows 1.. are
  // the draft chain, or tree nodes when tree_parents is set.
  std::span<const int32_t> tokens;
  // Tree: parent row of every row (row 0's is -1, every other parent an earlier row). Empty for
  // a chain.
  std::span<const int32_t> tree_parents;
  Proposal proposal = Proposal::kSampled;
  // kSampled at temperature > 0: draft distributions, row-major [*, vocab]. Chain: one row per
  // draft token (rows 1..K). Tree: one row per row of `tokens` (the q its children were drawn
  // from). Unused otherwise.
  std::span<const float> draft_probs;
  bool want_features = false;  // return the capture-layer features of the committed rows
};

struct VerifyOutcome {
  VerifyResult result;             // for a tree, accepted_nodes are row indices (>= 1)
  std::vector<int32_t> committed;  // accepted draft tokens then result.next_token
  at::Tensor features;             // features of row 0 and the accepted rows, in path order
};

// Not thread-safe: one scheduler thread drives a session at a time.
class TargetSession {
 public:
  TargetSession(const model::Transformer& target, const sampling::SamplingParams& sampling,
                std::vector<int64_t> capture_layers);
  ~TargetSession();

  // Prefills `prompt` into the fresh cache (a session begun in parts by RunBatch: its rest).
  absl::StatusOr<PrefillOutcome> Prefill(std::span<const int32_t> prompt);
  // Runs `last` through the target and samples the next token. With `features`, also returns
  // `last`'s capture-layer features there (the row a verify of no draft would return, without
  // its bookkeeping: an AR step of a request whose DFlash drafter may draft later).
  absl::StatusOr<int32_t> Step(int32_t last, at::Tensor* features = nullptr);
  // Verifies drafts in one forward pass, keeps only row 0 and the accepted rows in the cache.
  absl::StatusOr<VerifyOutcome> Verify(const VerifyRequest& request);

  // Verifies the requests of several sessions (each session at most once) in one batched forward
  // pass over their ragged rows: continuous batching. Each result equals that session's Verify
  // up to floating-point rounding (docs/design.md §2.6). A request that fails validation gets its
  // own error and leaves its session untouched; the others still run. Sessions that want features
  // must share their capture layers (callers group them; see CanShareBatch).
  static std::vector<absl::StatusOr<VerifyOutcome>> VerifyBatch(
      std::span<TargetSession* const> sessions, std::span<const VerifyRequest> requests);
  // Whether `a` verifying `ra` and `b` verifying `rb` may run in one VerifyBatch.
  static bool CanShareBatch(const TargetSession& a, const VerifyRequest& ra, const TargetSession& b,
                            const VerifyRequest& rb);

  // One forward pass over the prompts of fresh sessions and the verify requests of others (every
  // session at most once): prefills are batched with each other and with decoding, so that a
  // new request's prompt does not cost the running ones a pass of their own. Each result equals
  // that session's Prefill or Verify up to floating-point rounding; a request that fails
  // validation gets its own error and leaves its session untouched. Sessions that want features
  // (a prefill does when its session has capture layers) must share their capture layers (see
  // WantsFeaturesOnPrefill and CanShareBatch).
  //
  // A prompt may be prefilled in parts (chunked prefill): `prefill_rows[i]` > 0 runs only that
  // many of prompt i's rows not yet in its session's cache, and the session then expects the
  // rest of the same prompt in a later RunBatch (a verify on it fails until the last part has
  // run). The last part's outcome equals a prefill of the whole prompt at once, bit for bit;
  // features are those of every prompt row. Empty `prefill_rows`, or 0: the whole rest.
  struct BatchResults {
    std::vector<absl::StatusOr<PrefillOutcome>> prefills;
    std::vector<absl::StatusOr<VerifyOutcome>> verifies;
  };
  static BatchResults RunBatch(std::span<TargetSession* const> prefill_sessions,
                               std::span<const std::span<const int32_t>> prompts,
                               std::span<TargetSession* const> verify_sessions,
                               std::span<const VerifyRequest> verifies,
                               std::span<const int64_t> prefill_rows = {});
  bool WantsFeaturesOnPrefill() const { return !capture_.empty(); }
  // Before the prefill: this session's passes keep no features (its request will not draft).
  void StopCapturing() { capture_.clear(); }
  const std::vector<int64_t>& capture_layers() const { return capture_; }

  int64_t length() const { return cache_->length(); }
  int64_t kv_bytes() const { return cache_->allocated_bytes(); }
  const sampling::SamplingParams& sampling() const { return sampling_; }

 private:
  struct Prepared;
  absl::StatusOr<Prepared> PrepareVerify(const VerifyRequest& req) const;
  absl::StatusOr<VerifyOutcome> FinishVerify(const Prepared& prep, const VerifyRequest& req,
                                             const at::Tensor& logits, const at::Tensor& features);
  // The rows of `prompt` this pass runs (the whole rest when `rows` is 0 or more than that), or
  // the error that keeps them from running.
  absl::StatusOr<std::span<const int32_t>> PreparePrefill(std::span<const int32_t> prompt,
                                                          int64_t rows = 0) const;
  PrefillOutcome FinishPrefill(const at::Tensor& logits, const at::Tensor& features);
  // Keeps a part's features; returns the outcome of a part that leaves more of the prompt.
  PrefillOutcome PartDone(int64_t prompt_length, const at::Tensor& features);

  const model::Transformer& target_;
  sampling::SamplingParams sampling_;
  std::vector<int64_t> capture_;
  std::unique_ptr<model::KvCache> cache_;
  sampling::Rng rng_;
  // While a prompt is prefilled in parts: its length (0 otherwise) and its parts' features.
  int64_t prompt_length_ = 0;
  std::vector<at::Tensor> prompt_features_;
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_TARGET_SESSION_H_
