// Row-wise kernels of the decoder layers: RMSNorm, RoPE and the SwiGLU gate, one pass per row.
//
// The ATen formulation of these (ops.h) chains elementwise operators (RMSNorm alone is seven
// dispatches, temporaries and sweeps over memory; in bf16 each converts to float and back).
// On a CPU decode pass of a small model they cost as much as the matrix products. These kernels
// compute in float and round exactly where the ATen formulation does, so a model's outputs do
// not depend on which of the two ran (up to the order of a float sum). Torch-free, like
// attention_kernel.h.
#ifndef SPECDEC_COMMON_MODEL_ROW_KERNELS_H_
#define SPECDEC_COMMON_MODEL_ROW_KERNELS_H_

#include <cstdint>

#include "common/model/attention_kernel.h"

namespace specdec::model {

// A set of rows of `dim` contiguous elements: row (o, i), o < outer, i < inner, starts at element
// o * outer_stride + i * inner_stride of `data` (a [outer, inner, dim] view of any strides but
// the last; inner = 1 for a matrix).
struct RowSet {
  const void* data = nullptr;
  int64_t outer = 0, inner = 1;
  int64_t outer_stride = 0, inner_stride = 0;
  int64_t dim = 0;
};

// HF's RMSNorm of every row: y = round(round(x * rsqrt(mean(x^2) + eps)) * weight), where round
// is to the dtype (nothing for f32) and the mean is taken in float. `weight` has `dim` elements;
// `out` receives the rows contiguously, in (o, i) order.
void RmsNormRows(const RowSet& x, const void* weight, float eps, KernelDType dt, void* out);

// The SwiGLU gate of `rows` rows of gu = [gate | up] (2 * inter elements each, rows
// `row_stride` elements apart): out = silu(gate) * up with the roundings of ATen's
// formulation (in bf16 its silu rounds exp, the sum and the quotient; then the product is
// rounded). `out` receives [rows, inter] contiguously.
void SwiGluRows(const void* gu, int64_t rows, int64_t row_stride, int64_t inter, KernelDType dt,
                void* out);

// Rotate-half RoPE of every row of x ([n, heads, dim] as outer = n, inner = heads) with the f32
// tables cos and sin ([n, dim] contiguous): out = round(round(x * c) + round(rotated * s)), where
// c and s are the tables rounded to the dtype and rotated = [-x2, x1] (x = [x1, x2]): the
// roundings of ATen's x * c + rotated * s. `dim` is even; `out` receives the rows contiguously.
void RopeRows(const RowSet& x, const float* cos, const float* sin, KernelDType dt, void* out);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_ROW_KERNELS_H_
