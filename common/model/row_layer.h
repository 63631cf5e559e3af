// The decoder layer of a CPU pass on raw float rows: transformer_internal.h's RunDecoderLayer
// computed by the same kernels in the same order (row_kernels.h, parallel_linear.h and the fused
// attention), so with the same values, but with no ATen operator between them. On a decoding step
// of a small model those operators (views, allocations, elementwise adds, each a dispatch) cost
// as much as the layer's arithmetic, and the other threads wait while they run. Torch-free.
#ifndef SPECDEC_COMMON_MODEL_ROW_LAYER_H_
#define SPECDEC_COMMON_MODEL_ROW_LAYER_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"

namespace specdec::model {

// A matrix [out, in] as the row layers multiply by it: bf16 (row-major, or packed for the linear
// kernel in blocks of `block` outputs) or float row-major.
struct RowMatrix {
  const void* data = nullptr;
  int64_t out = 0, in = 0;
  bool bf16 = false;
  int32_t block = 0;  // 0: row-major
};

// One decoder layer's weights; the norms' weights are float.
struct RowLayerWeights {
  const float* input_norm = nullptr;
  const float* post_norm = nullptr;
  const float* q_norm = nullptr;  // null (with k_norm): the layer has no q/k norms
  const float* k_norm = nullptr;
  RowMatrix qkv, o, gate_up, down;
};

struct RowLayerShape {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  float eps = 0;
};

// Layer `layer`'s attention of the pass's rows: q [rows, heads, head_dim], k and v [rows,
// kv_heads, head_dim], contiguous; writes [rows, heads * head_dim] to `out`. It stores k and v in
// the caches first.
using RowAttend = absl::FunctionRef<void(int64_t layer, const float* q, const float* k,
                                         const float* v, float* out)>;

// One pass's rows through the layers, with the buffers every layer reuses.
class RowLayerPass {
 public:
  // `cos` and `sin`: the rows' RoPE tables, [rows, head_dim] each; they must outlive the pass.
  // `read_ahead`: whether each product's threads read the next matrix ahead as they finish
  // (parallel_linear.h).
  RowLayerPass(const RowLayerShape& shape, int64_t rows, const float* cos, const float* sin,
               bool read_ahead = true);

  // Layer `layer` over the rows: x, the residual stream [rows, hidden], becomes its output.
  // `after`: the matrix the pass multiplies by next (the next layer's qkv), read ahead while
  // threads wait; may be null.
  void Run(const RowLayerWeights& w, int64_t layer, RowAttend attend, float* x,
           const RowMatrix* after = nullptr);

 private:
  // y [rows, m.out] = x [rows, m.in] times m^T; bf16 matrices take x rounded to bf16. The
  // threads read `next` (the pass's next matrix, or null) ahead as they finish.
  void Product(const RowMatrix& m, const float* x, float* y, const RowMatrix* next);
  // q_ and k_: the heads of qkv_ normed (where the layer has norms) and rotated.
  void NormRopeQk(const RowLayerWeights& w);

  RowLayerShape shape_;
  int64_t rows_;
  const float* cos_;
  const float* sin_;
  bool read_ahead_;
  std::vector<float> h_, qkv_, q_, k_, v_, normed_, attn_, sums_, gu_, act_;
  std::vector<uint16_t> x_bf16_;
};

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_ROW_LAYER_H_
