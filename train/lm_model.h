// Differentiable batched forward passes for training: the Qwen3/Llama decoder LM and the DFlash
// drafter, over HF-named parameter maps. They use the same building blocks (common/model/ops.h)
// as the inference runtime, so a trained checkpoint computes the same function when served.
#ifndef SPECDEC_TRAIN_LM_MODEL_H_
#define SPECDEC_TRAIN_LM_MODEL_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "common/model/dflash_drafter.h"
#include "common/model/model_config.h"
#include "train/tensor_file.h"

namespace specdec::train {

// Fresh f32 parameters for `specs` on `device`: N(0, std^2) for matrices (output projections
// o_proj/down_proj scaled by 1/sqrt(2 * layers)), ones for norm weights. Deterministic per seed.
TensorMap InitParams(const std::vector<model::TensorSpec>& specs, int64_t num_layers, uint64_t seed,
                     double std, const at::Device& device);

struct LmForwardOptions {
  at::ScalarType compute = at::kFloat;  // matrices are cast to this dtype for the pass
  std::vector<int64_t> capture_layers;  // residual outputs to return (DFlash target features)
};

struct LmForwardResult {
  at::Tensor hidden;                 // [B, T, H] after the final norm, compute dtype
  std::vector<at::Tensor> captured;  // per capture layer: [B, T, H]
};

// Causal forward over tokens [B, T] (int64, positions 0..T-1) on the parameters' device.
LmForwardResult LmForward(const model::ModelConfig& config, const TensorMap& params,
                          const at::Tensor& tokens, const LmForwardOptions& options = {});

// float32 logits [..., vocab] from final-normed hidden states (lm_head or the tied embedding).
at::Tensor LmLogits(const model::ModelConfig& config, const TensorMap& params,
                    const at::Tensor& hidden);

// Mean next-token cross-entropy of tokens [B, T] (predicting t+1 from <= t), computed in chunks
// of rows so the f32 logits never exceed `chunk_rows` x vocab.
at::Tensor LmLoss(const model::ModelConfig& config, const TensorMap& params,
                  const at::Tensor& tokens, at::ScalarType compute, int64_t chunk_rows = 8192);

// Continues prompt [B, P] by `new_tokens` tokens with a KV cache (no autograd): rows below
// `greedy_rows` greedily, the rest sampled at T=1 from the default generator of the device.
// Returns [B, P + new_tokens].
at::Tensor LmGenerate(const model::ModelConfig& config, const TensorMap& params,
                      const at::Tensor& prompt, int64_t new_tokens, at::ScalarType compute,
                      int64_t greedy_rows);

// DFlash training batch (docs/design.md §2.4): `anchors` [B, A] int64 positions p (1 <= p <= T -
// b); the block of an anchor is [token@p, MASK x (b-1)] at positions p..p+b-1, sees the fused
// target features of positions < p and its own block (bidirectionally), nothing else.
struct DFlashBatch {
  at::Tensor tokens;    // [B, T] int64
  at::Tensor features;  // [B, T, len(target_layer_ids) * H] target features (no grad)
  at::Tensor anchors;   // [B, A] int64
};

// Final-normed hidden states of block rows 1..b-1: [B, A, b-1, H] (compute dtype).
at::Tensor DFlashForward(const model::DFlashConfig& config, const TensorMap& drafter_params,
                         const model::ModelConfig& target_config, const TensorMap& target_params,
                         const DFlashBatch& batch, int32_t block_size, at::ScalarType compute);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_LM_MODEL_H_
