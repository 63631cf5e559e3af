// What dflash_drafter.cc and dflash_fixed_pass.cc share: the drafter's weights and its forward
// pass up to the final norm. Internal to the model runtime (includes ATen).
#ifndef SPECDEC_COMMON_MODEL_DFLASH_INTERNAL_H_
#define SPECDEC_COMMON_MODEL_DFLASH_INTERNAL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "common/model/dflash_drafter.h"
#include "common/model/model_config.h"
#include "common/model/ops.h"

namespace specdec::model {

// One drafter layer's weights (DFlashDrafter::Weights::Layer).
struct DraftLayerWeights {
  at::Tensor input_norm, post_norm, q_norm, k_norm;
  at::Tensor q;        // [heads * d, hidden]
  at::Tensor kv;       // [2 * kv_heads * d, hidden]
  at::Tensor o;        // [hidden, heads * d]
  at::Tensor gate_up;  // [2 * intermediate, hidden]
  at::Tensor down;
};

struct DFlashDrafter::Weights {
  using Layer = DraftLayerWeights;
  at::Tensor fc;           // [hidden, n_ids * target_hidden]
  at::Tensor hidden_norm;  // [hidden]
  at::Tensor norm;         // [hidden]
  at::Tensor inv_freq;
  RopeTable rope;  // RoPE's cos/sin rows of every position below the target's maximum context
  std::vector<Layer> layers;
};

// Layer `l`'s attention of the block rows: q [n_blk, heads, d]; the block rows' keys and values
// k_b, v_b [n_blk, kv_heads, d]; the context rows' k_c, v_c [n_ctx, kv_heads, d] (undefined when
// there are none); RoPE applied. Stores the keys and values in the caches and returns
// [n_blk, heads * d].
using DraftAttend =
    std::function<at::Tensor(int64_t l, const at::Tensor& q, const at::Tensor& k_b,
                             const at::Tensor& v_b, const at::Tensor& k_c, const at::Tensor& v_c)>;

// The rows of one drafter pass: the new context rows' target features and positions, and the
// block rows' tokens and positions (int64, on the drafter's device).
struct DraftPassRows {
  at::Tensor features;  // [n_ctx, F] in the activations' dtype; undefined when n_ctx = 0
  at::Tensor ctx_pos;   // [n_ctx]
  at::Tensor blk_tok;   // [n_blk]
  at::Tensor blk_pos;   // [n_blk]
};

// The drafter's pass from its rows to the block rows' final-normed hidden states [n_blk, hidden].
at::Tensor RunDraftPass(const DFlashDrafter::Weights& w, const ModelConfig& c,
                        const Transformer& target, const DraftPassRows& rows,
                        const DraftAttend& attend);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_DFLASH_INTERNAL_H_
