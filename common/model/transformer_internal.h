// What transformer.cc and captured_pass.cc share: the weights' layout and one decoder layer.
// Internal to the model runtime (includes ATen).
#ifndef SPECDEC_COMMON_MODEL_TRANSFORMER_INTERNAL_H_
#define SPECDEC_COMMON_MODEL_TRANSFORMER_INTERNAL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "common/model/model_config.h"
#include "common/model/ops.h"
#include "common/model/row_layer.h"
#include "common/model/transformer.h"

namespace specdec::model {

// One decoder layer's weights (Transformer::Weights::Layer).
struct DecoderLayerWeights {
  at::Tensor input_norm, post_norm, q_norm, k_norm;
  at::Tensor qkv;      // [q + 2 kv, hidden]
  at::Tensor o;        // [hidden, q]
  at::Tensor gate_up;  // [2 * intermediate, hidden]
  at::Tensor down;     // [hidden, intermediate]
};

struct Transformer::Weights {
  using Layer = DecoderLayerWeights;
  at::Tensor embed;    // [vocab, hidden]
  at::Tensor lm_head;  // [vocab, hidden]; aliases embed when tied
  at::Tensor final_norm;
  at::Tensor inv_freq;  // f32 [head_dim/2]
  RopeTable rope;       // RoPE's cos/sin rows of every position below the maximum context
  std::vector<Layer> layers;
  // The layers as the row layers read them (row_layer.h); empty where they take ATen's operators.
  std::vector<RowLayerWeights> row_layers;
  // lm_head as the products read it (where the row layers run), which their last layer reads
  // ahead.
  std::optional<RowMatrix> row_lm_head;
};

// Layer `l`'s attention of the pass's new rows: q [rows, heads, d], k and v [rows, kv_heads, d]
// (RoPE applied) -> [rows, heads * d]. It stores k and v in the caches first.
using LayerAttend = std::function<at::Tensor(int64_t l, const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v)>;

// Decoder layer `l` over every new row: `x` (the residual stream, [rows, hidden]) becomes the
// layer's output. `cos` and `sin` are the RoPE tables of the rows' positions.
void RunDecoderLayer(const DecoderLayerWeights& w, const ModelConfig& c, int64_t l,
                     const at::Tensor& cos, const at::Tensor& sin, const LayerAttend& attend,
                     at::Tensor& x);

// The captured layers' outputs side by side, in the order asked for; undefined if none.
at::Tensor CapturedFeatures(const std::vector<at::Tensor>& layer_out,
                            const std::vector<int64_t>& capture_layers);

// The additive mask of `in`'s n new rows over [past + n] keys: the cache is always visible; among
// the new rows, the earlier ones and itself (causal) or its ancestors and itself (tree).
at::Tensor NewRowsMask(const SequenceInput& in, int64_t past, int64_t n);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_TRANSFORMER_INTERNAL_H_
