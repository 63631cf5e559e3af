// The drafter side of one request: a draft model's cache and the drafting operations a drafter
// replica performs for it. Used in-process by the decoder and, behind handles, by the drafter
// service.
#ifndef SPECDEC_COMMON_ENGINE_DRAFT_SESSION_H_
#define SPECDEC_COMMON_ENGINE_DRAFT_SESSION_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/dyspec_tree.h"
#include "common/model/kv_cache.h"
#include "common/sampling/sampler.h"

namespace specdec::model {
class Transformer;
class DFlashDrafter;
struct DraftInput;
}  // namespace specdec::model

namespace specdec::engine {

// The drafter side draws from its own stream of the request's seed (the target and the drafter
// may live in different processes).
inline constexpr uint64_t kDrafterRngStream = 1;

struct DraftedChain {
  std::vector<int32_t> tokens;
  std::vector<float> probs;  // sampling: one q row per token ([K, vocab]); empty when greedy
};

struct DraftedTree {
  DraftTree tree;
  std::vector<float> probs;  // sampling: [nodes + 1, vocab], row 0 = root; empty when greedy
};

// A small autoregressive draft model (DRAFT_CHAIN, DYSPEC_TREE). Not thread-safe.
class ArDraftSession {
 public:
  ArDraftSession(const model::Transformer& draft, const sampling::SamplingParams& sampling);
  ~ArDraftSession();

  // Committed tokens the draft has not seen (the prompt, at first). They are run lazily.
  void Extend(std::span<const int32_t> tokens);
  // Drafts k tokens after `last` (the last committed token).
  absl::StatusOr<DraftedChain> DraftChain(int32_t last, int32_t k);
  // Builds a DySpec tree below `last`.
  absl::StatusOr<DraftedTree> DraftTree(int32_t last, const TreeParams& params);
  // After verification: `accepted` are the accepted draft tokens (chain prefix or tree path)
  // following `last`; the cache keeps what it already computed of them.
  absl::Status Commit(std::span<const int32_t> accepted);

 private:
  std::vector<float> Dist(const at::Tensor& logits_row) const;
  absl::Status CatchUp();

  const model::Transformer& draft_;
  sampling::SamplingParams sampling_;
  sampling::Rng rng_;
  std::unique_ptr<model::KvCache> cache_;
  std::vector<int32_t> pending_;  // committed tokens not yet in the cache
  int32_t last_ = -1;             // the root of the last draft
  int64_t ctx_ = 0;               // cache length before `last_`
  bool root_cached_ = false;      // cache = context + last_ + spec_
  std::vector<int32_t> spec_;     // draft tokens after last_ held in the cache
};

// The DFlash block drafter (DFLASH, DFLASH_ADAPTIVE): context = fused target features. Proposes
// its argmax (one-hot proposals). Not thread-safe.
class DFlashDraftSession {
 public:
  explicit DFlashDraftSession(const model::DFlashDrafter& drafter);
  ~DFlashDraftSession();
  // Target features ([m, F], the same F every call) of newly committed tokens; consumed by the
  // next DraftBlock. They are copied (the caller may pass a view into a whole pass's output)
  // into one growing buffer, so that a request taking many AR steps between drafts costs a row
  // copy per step, not a tensor.
  void Extend(const at::Tensor& features);
  // Drafts block_size - 1 tokens after `last`.
  absl::StatusOr<std::vector<int32_t>> DraftBlock(int32_t last, int32_t block_size);
  // DraftBlock for several sessions (each at most once) in one batched drafter pass: continuous
  // batching. If the batch is rejected, every session drafts alone so each error lands on its
  // own request.
  static std::vector<absl::StatusOr<std::vector<int32_t>>> DraftBlockBatch(
      std::span<DFlashDraftSession* const> sessions, std::span<const int32_t> lasts,
      std::span<const int32_t> block_sizes);
  int64_t context_length() const { return cache_->length(); }

 private:
  model::DraftInput Input(int32_t last, int32_t block_size) const;
  static std::vector<int32_t> Argmax(const at::Tensor& logits);

  void ConsumePending();

  const model::DFlashDrafter& drafter_;
  std::unique_ptr<model::KvCache> cache_;
  at::Tensor pending_;  // [capacity, F]: rows [0, pending_rows_) not yet in the drafter's cache
  int64_t pending_rows_ = 0;
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_DRAFT_SESSION_H_
