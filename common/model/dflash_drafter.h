// DFlash block-diffusion drafter (docs/design.md §2.4): proposes a whole block of draft tokens in
// one non-causal forward pass, conditioned on fused target features injected as context K/V.
#ifndef SPECDEC_COMMON_MODEL_DFLASH_DRAFTER_H_
#define SPECDEC_COMMON_MODEL_DFLASH_DRAFTER_H_

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/kv_cache.h"
#include "common/model/model_config.h"
#include "common/model/transformer.h"
#include "common/model/weights.h"

namespace specdec::model {

class KvCachePool;

struct DFlashConfig {
  ModelConfig layers;                     // shapes of the drafter's Qwen3 decoder layers
  int32_t block_size = 16;                // training block size B
  int32_t mask_token_id = 0;              // embedded with the target's embedding for rows 1..b-1
  std::vector<int64_t> target_layer_ids;  // target layers whose outputs form the features
};

// Default target layers when a config has none: spread evenly from 1 to L-3 (the public recipe).
std::vector<int64_t> DefaultTargetLayerIds(int64_t num_target_layers, int64_t num_draft_layers);

// Parses a z-lab style DFlash `config.json` (Qwen3 fields + block_size + dflash_config).
absl::StatusOr<DFlashConfig> ParseDFlashConfig(std::string_view json, const std::string& origin,
                                               int64_t num_target_layers);
std::string DFlashConfigToJson(const DFlashConfig& config);

// One sequence of a batched draft step.
struct DraftInput {
  KvCache* cache = nullptr;  // the drafter's context cache for this sequence (from NewCache)
  // Target features of the tokens committed since the last step, [m, len(target_layer_ids) *
  // target_hidden] (m may be 0). Their positions continue the cache: cache->length() + i.
  at::Tensor new_features;
  int32_t last_token = 0;  // committed token not yet run through the target: block row 0
  int32_t block_size = 0;  // b >= 2; positions of the block are start .. start + b - 1
};

// A loaded drafter bound to its target (whose embedding and LM head it uses). Immutable after
// construction; Draft is safe to call concurrently on distinct caches.
class DFlashDrafter {
 public:
  // Loads `<dir>/config.json` + safetensors weights `fc`, `hidden_norm`, `layers.*`, `norm`
  // (an optional `model.` prefix is accepted). The target must outlive the drafter.
  static absl::StatusOr<std::unique_ptr<DFlashDrafter>> Load(const std::string& dir,
                                                             const Transformer& target);
  static absl::StatusOr<std::unique_ptr<DFlashDrafter>> FromTensors(
      const DFlashConfig& config, const std::map<std::string, at::Tensor>& weights,
      const Transformer& target);
  // Names and shapes of the drafter's own weights, as they appear in a checkpoint.
  static std::vector<TensorSpec> WeightShapes(const DFlashConfig& config, int64_t target_hidden);
  static std::map<std::string, at::Tensor> RandomWeights(const DFlashConfig& config,
                                                         int64_t target_hidden, uint64_t seed,
                                                         double std = 0.05);
  ~DFlashDrafter();

  // Appends each sequence's new context K/V to its cache and returns the draft logits of block
  // rows 1..b-1 (float32 [b-1, vocab]): row k-1 predicts the token at position start + k.
  absl::StatusOr<std::vector<at::Tensor>> Draft(std::span<const DraftInput> batch) const;

  // A drafter cache, and its return when its sequence ends: as Transformer::NewCache and
  // RecycleCache, kept where the target's passes are fixed.
  std::unique_ptr<KvCache> NewCache() const;
  void RecycleCache(std::unique_ptr<KvCache> cache) const;
  const DFlashConfig& config() const { return config_; }
  const Transformer& target() const { return target_; }
  // CUDA graphs of draft passes captured so far, over all caches (the target's
  // LoadOptions::cuda_graphs decides whether the drafter captures).
  int64_t captured_graphs() const { return captured_graphs_.load(); }

  struct Weights;  // dflash_internal.h

 private:
  DFlashDrafter(DFlashConfig config, const Transformer& target, std::unique_ptr<Weights> w);

  // A sequence drafting alone whose new context rows fit in its block runs as a fixed pass (design
  // §2.9), captured as a CUDA graph when its target captures its own (dflash_fixed_pass.cc).
  struct FixedPass;
  bool TakesFixedPass(const DraftInput& in) const;
  // `in` (validated) through its cache's fixed pass of its block size; nullopt when it takes the
  // general path this time (the block size's first use, a failed capture).
  std::optional<std::vector<at::Tensor>> RunFixedPass(const DraftInput& in) const;
  // The pass itself, from `pass`'s input tensors to its logits: what a graph captures.
  void RunFixedPassBody(FixedPass& pass, const KvCache& cache) const;

  DFlashConfig config_;
  const Transformer& target_;
  std::unique_ptr<Weights> weights_;
  uint64_t id_;
  mutable std::atomic<int64_t> captured_graphs_{0};
  std::unique_ptr<KvCachePool> cache_pool_;  // declared last: its caches go before the weights
};

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_DFLASH_DRAFTER_H_
