#include "common/engine/draft_session.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"

namespace specdec::engine {
namespace {

// The DFlash session's pending-feature buffer: its first capacity, and the largest kept after a
// draft consumed it.
constexpr int64_t kMinPendingRows = 32;
constexpr int64_t kMaxKeptPendingRows = 256;

std::vector<float> ToVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

size_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

ArDraftSession::ArDraftSession(const model::Transformer& draft,
                               const sampling::SamplingParams& sampling)
    : draft_(draft),
      sampling_(sampling),
      rng_(sampling::Rng::ForStream(sampling.seed, kDrafterRngStream)),
      cache_(draft.NewCache()) {}

ArDraftSession::~ArDraftSession() { draft_.RecycleCache(std::move(cache_)); }

void ArDraftSession::Extend(std::span<const int32_t> tokens) {
  pending_.insert(pending_.end(), tokens.begin(), tokens.end());
}

// Warped q when sampling; the plain softmax when greedy (its ranking is the draft's preference
// and its values give DySpec its path estimates; the warped q would be one-hot).
std::vector<float> ArDraftSession::Dist(const at::Tensor& logits_row) const {
  std::vector<float> raw = ToVector(logits_row);
  sampling::SamplingParams p = sampling_;
  if (p.temperature == 0.f) p = sampling::SamplingParams{1.f, 0, 1.f, 0};
  return sampling::WarpedProbs(raw, p);
}

absl::Status ArDraftSession::CatchUp() {
  if (!pending_.empty()) {
    model::SequenceInput in{cache_.get(), pending_, {}, {}, model::LogitsMode::kNone};
    RETURN_IF_ERROR(draft_.Forward(std::span<const model::SequenceInput>(&in, 1)).status());
    pending_.clear();
  }
  ctx_ = cache_->length();
  root_cached_ = false;
  spec_.clear();
  return absl::OkStatus();
}

absl::StatusOr<DraftedChain> ArDraftSession::DraftChain(int32_t last, int32_t k) {
  RETURN_IF_ERROR(CatchUp());
  last_ = last;
  DraftedChain out;
  const bool greedy = sampling_.temperature == 0.f;
  std::vector<int32_t> feed = {last};
  for (int32_t i = 0; i < k; ++i) {
    model::SequenceInput in{cache_.get(), feed};
    ASSIGN_OR_RETURN(auto o, draft_.Forward(std::span<const model::SequenceInput>(&in, 1)));
    std::vector<float> q = Dist(o[0].logits.select(0, 0));
    const int32_t d = greedy ? sampling::Argmax(q) : sampling::SampleFromProbs(q, rng_);
    if (!greedy) out.probs.insert(out.probs.end(), q.begin(), q.end());
    out.tokens.push_back(d);
    feed.assign(1, d);
  }
  // The cache holds last and the first k-1 drafts.
  root_cached_ = true;
  spec_.assign(out.tokens.begin(), out.tokens.end() - 1);
  return out;
}

absl::StatusOr<DraftedTree> ArDraftSession::DraftTree(int32_t last, const TreeParams& params) {
  RETURN_IF_ERROR(CatchUp());
  last_ = last;
  DraftDistFn dist =
      [&](const engine::DraftTree& tree,
          std::span<const int32_t> nodes) -> absl::StatusOr<std::vector<std::vector<float>>> {
    std::vector<std::vector<float>> result;
    if (nodes.size() == 1) {
      // Path approach: keep the longest common prefix of the cached path and extend it.
      std::vector<int32_t> path = nodes[0] < 0 ? std::vector<int32_t>() : tree.Path(nodes[0]);
      size_t common = root_cached_ ? CommonPrefix(path, spec_) : 0;
      std::vector<int32_t> feed;
      if (!root_cached_ || path.empty() || (common == path.size() && common == spec_.size())) {
        RETURN_IF_ERROR(cache_->Truncate(ctx_));
        feed.push_back(last_);
        feed.insert(feed.end(), path.begin(), path.end());
      } else {
        if (common == path.size()) --common;  // need at least one token to get logits
        RETURN_IF_ERROR(cache_->Truncate(ctx_ + 1 + static_cast<int64_t>(common)));
        feed.assign(path.begin() + common, path.end());
      }
      model::SequenceInput in{cache_.get(), feed};
      ASSIGN_OR_RETURN(auto o, draft_.Forward(std::span<const model::SequenceInput>(&in, 1)));
      root_cached_ = true;
      spec_ = path;
      result.push_back(Dist(o[0].logits.select(0, 0)));
      return result;
    }
    // A whole layer at once: rerun the tree so far under a tree mask.
    RETURN_IF_ERROR(cache_->Truncate(ctx_));
    root_cached_ = false;
    spec_.clear();
    std::vector<int32_t> toks = {last_}, parents = {-1};
    std::vector<int32_t> pos = {static_cast<int32_t>(ctx_)};
    for (int32_t i = 0; i < tree.size(); ++i) {
      toks.push_back(tree.tokens[i]);
      parents.push_back(tree.parents[i] + 1);
      pos.push_back(static_cast<int32_t>(ctx_ + tree.depths[i]));
    }
    model::SequenceInput in{cache_.get(), toks, pos, parents, model::LogitsMode::kAll};
    ASSIGN_OR_RETURN(auto o, draft_.Forward(std::span<const model::SequenceInput>(&in, 1)));
    for (int32_t n : nodes) result.push_back(Dist(o[0].logits.select(0, n + 1)));
    return result;
  };
  TreeParams p = params;
  p.greedy = sampling_.temperature == 0.f;
  DraftedTree out;
  ASSIGN_OR_RETURN(out.tree, BuildDyspecTree(p, dist, rng_));
  if (!p.greedy) {
    const size_t vocab = static_cast<size_t>(draft_.config().vocab_size);
    out.probs.assign((out.tree.size() + 1) * vocab, 0.f);
    for (int32_t r = 0; r <= out.tree.size(); ++r) {
      if (!out.tree.dists[r].empty()) {
        std::copy(out.tree.dists[r].begin(), out.tree.dists[r].end(),
                  out.probs.begin() + r * vocab);
      }
    }
  }
  if (!root_cached_) {
    // The threshold variant left the whole tree in the cache: drop it, recompute last_ later.
    RETURN_IF_ERROR(cache_->Truncate(ctx_));
  }
  return out;
}

absl::Status ArDraftSession::Commit(std::span<const int32_t> accepted) {
  if (!root_cached_) {
    RETURN_IF_ERROR(cache_->Truncate(ctx_));
    pending_.push_back(last_);
    pending_.insert(pending_.end(), accepted.begin(), accepted.end());
    return absl::OkStatus();
  }
  const size_t common = CommonPrefix(accepted, spec_);
  RETURN_IF_ERROR(cache_->Truncate(ctx_ + 1 + static_cast<int64_t>(common)));
  pending_.insert(pending_.end(), accepted.begin() + common, accepted.end());
  root_cached_ = false;
  spec_.clear();
  return absl::OkStatus();
}

DFlashDraftSession::DFlashDraftSession(const model::DFlashDrafter& drafter)
    : drafter_(drafter), cache_(drafter.NewCache()) {}

DFlashDraftSession::~DFlashDraftSession() { drafter_.RecycleCache(std::move(cache_)); }

void DFlashDraftSession::Extend(const at::Tensor& features) {
  if (!features.defined() || features.size(0) == 0) return;
  const int64_t n = features.size(0);
  const bool fits = pending_.defined() && pending_.dim() == features.dim() &&
                    pending_.size(1) == features.size(1) &&
                    pending_.scalar_type() == features.scalar_type() &&
                    pending_.device() == features.device() && pending_rows_ + n <= pending_.size(0);
  if (!fits) {
    const int64_t capacity = std::max<int64_t>(
        {pending_rows_ + n, pending_.defined() ? 2 * pending_.size(0) : 0, kMinPendingRows});
    std::vector<int64_t> shape(features.sizes().begin(), features.sizes().end());
    shape[0] = capacity;
    at::Tensor grown = at::empty(shape, features.options());
    if (pending_rows_ > 0) {
      // Callers pass rows of one width (the services check it at their boundary).
      grown.narrow(0, 0, pending_rows_).copy_(pending_.narrow(0, 0, pending_rows_));
    }
    pending_ = grown;
  }
  if (features.device().is_cpu() && features.is_contiguous()) {
    // Row-major rows of one width: the destination by address, no view (a step's one row).
    const int64_t row_bytes = features.nbytes() / n;
    std::memcpy(static_cast<char*>(pending_.data_ptr()) + pending_rows_ * row_bytes,
                features.data_ptr(), features.nbytes());
  } else {
    pending_.narrow(0, pending_rows_, n).copy_(features);
  }
  pending_rows_ += n;
}

void DFlashDraftSession::ConsumePending() {
  pending_rows_ = 0;
  // A buffer that grew over a long context is not kept for the short gaps between drafts.
  if (pending_.defined() && pending_.size(0) > kMaxKeptPendingRows) pending_ = at::Tensor();
}

model::DraftInput DFlashDraftSession::Input(int32_t last, int32_t block_size) const {
  model::DraftInput di;
  di.cache = cache_.get();
  if (pending_rows_ > 0) di.new_features = pending_.narrow(0, 0, pending_rows_);
  di.last_token = last;
  di.block_size = block_size;
  return di;
}

// Row by row on the calling thread: ATen's argmax over a block's logits (16 x 8,192 on the pack)
// is a parallel region of its OpenMP pool, whose idle threads then spin on the cores the compute
// pool's workers need (docs/results/2026-11-27-compute-pool.md).
std::vector<int32_t> DFlashDraftSession::Argmax(const at::Tensor& logits) {
  const at::Tensor f =
      logits.scalar_type() == at::kFloat && logits.is_contiguous() && logits.is_cpu()
          ? logits
          : logits.to(at::kCPU, at::kFloat).contiguous();
  const int64_t rows = f.size(0), vocab = f.size(1);
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  const float* data = f.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    ids[static_cast<size_t>(r)] =
        sampling::Argmax(std::span<const float>(data + r * vocab, static_cast<size_t>(vocab)));
  }
  return ids;
}

absl::StatusOr<std::vector<int32_t>> DFlashDraftSession::DraftBlock(int32_t last,
                                                                    int32_t block_size) {
  model::DraftInput di = Input(last, block_size);
  ASSIGN_OR_RETURN(auto logits, drafter_.Draft(std::span<const model::DraftInput>(&di, 1)));
  ConsumePending();
  return Argmax(logits[0]);
}

std::vector<absl::StatusOr<std::vector<int32_t>>> DFlashDraftSession::DraftBlockBatch(
    std::span<DFlashDraftSession* const> sessions, std::span<const int32_t> lasts,
    std::span<const int32_t> block_sizes) {
  std::vector<absl::StatusOr<std::vector<int32_t>>> out;
  bool same_drafter = true;
  std::vector<model::DraftInput> inputs;
  for (size_t i = 0; i < sessions.size(); ++i) {
    same_drafter = same_drafter && &sessions[i]->drafter_ == &sessions[0]->drafter_;
    inputs.push_back(sessions[i]->Input(lasts[i], block_sizes[i]));
  }
  if (sessions.size() > 1 && same_drafter) {
    auto logits = sessions[0]->drafter_.Draft(inputs);
    if (logits.ok()) {
      for (size_t i = 0; i < sessions.size(); ++i) {
        sessions[i]->ConsumePending();
        out.push_back(Argmax((*logits)[i]));
      }
      return out;
    }
  }
  for (size_t i = 0; i < sessions.size(); ++i) {
    out.push_back(sessions[i]->DraftBlock(lasts[i], block_sizes[i]));
  }
  return out;
}

}  // namespace specdec::engine
