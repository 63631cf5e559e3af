// Tensor building blocks shared by the target transformer and the drafters (ATen, inference only).
#ifndef SPECDEC_COMMON_MODEL_OPS_H_
#define SPECDEC_COMMON_MODEL_OPS_H_

#include <ATen/core/Tensor.h>

#include "common/model/model_config.h"

namespace specdec::model {

// y = x W^T. Uses a matrix-vector product for a single f32 row (the 1-row GEMM path of the CPU
// BLAS is several times slower).
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight);

// HF RMSNorm over the last dim: normalize in f32, cast back to x's dtype, then scale by weight.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// RoPE inverse frequencies [head_dim/2] in f32, with the config's scaling applied.
at::Tensor RopeInvFreq(const ModelConfig& config);

// cos/sin tables [n, head_dim] (f32) for int64 positions [n] (rotate-half layout).
void RopeCosSin(const at::Tensor& inv_freq, const at::Tensor& positions, at::Tensor* cos,
                at::Tensor* sin);

// Applies rotate-half RoPE to x [n, heads, head_dim] with cos/sin [n, head_dim] in f32; the
// tables are cast to x's dtype first, as HF does.
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Grouped-query attention of n query rows against `keys`/`values` ([kv_heads, m, head_dim]).
// q: [n, heads, head_dim]; mask: f32 additive [n, m] (0 or -inf) or undefined for "see all".
// Returns [n, heads * head_dim] in q's dtype; softmax runs in f32.
at::Tensor Attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                     const at::Tensor& mask);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_OPS_H_
