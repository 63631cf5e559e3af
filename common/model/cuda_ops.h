// ATen bindings of specdec's own CUDA kernels (cuda_kernels.h). Builds whose libtorch has no CUDA
// compile cuda_ops_unavailable.cc, where every function declines. A function that declines (not
// a CUDA tensor, an unsupported layout or dtype, no kernels in this build, or
// SPECDEC_CUDA_KERNELS=0, read once) returns false and writes nothing: the caller composes the
// operator from ATen's instead.
#ifndef SPECDEC_COMMON_MODEL_CUDA_OPS_H_
#define SPECDEC_COMMON_MODEL_CUDA_OPS_H_

#include <ATen/ATen.h>

#include <cstdint>

namespace specdec::model {

// Whether this build has the kernels and SPECDEC_CUDA_KERNELS does not turn them off.
bool CudaKernelsOn();

// q [rows, heads, d] and k [rows, kv_heads, d] of `qkv` [rows, (heads + 2 kv_heads) d] (its
// last dimension contiguous): each head RMS-normalized with `q_norm`/`k_norm` (both undefined:
// none) and rotated by the RoPE tables `cos`/`sin` [rows, d] (float or qkv's dtype).
bool CudaNormRopeQk(const at::Tensor& qkv, int64_t heads, int64_t kv_heads, int64_t d,
                    const at::Tensor& q_norm, const at::Tensor& k_norm, double eps,
                    const at::Tensor& cos, const at::Tensor& sin, at::Tensor* q, at::Tensor* k);

// silu(gate) * up of `gu` [rows, 2 inter] (gate columns first) into `out` [rows, inter].
bool CudaSwiGlu(const at::Tensor& gu, int64_t inter, at::Tensor* out);

// y = x weight^T (+ residual) for bf16 x [m, k] of at most 64 rows and a contiguous bf16 weight
// [n, k] (k a multiple of 32, rows 16-byte aligned): tensor-core products whose every output
// is computed the same way whatever m is, so a row's result is bit-identical alone and among
// others. `residual` (undefined: none) is [m, n] bf16, added before the one rounding, as addmm.
// `shape` picks how a block's warps cut k (0 to 5, for benchmarks and tests; the same shape
// gives a row the same bits at every row count); -1 takes SPECDEC_CUDA_ROWS_LINEAR_SHAPE (read
// once), by default 4.
bool CudaRowsLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& residual,
                    at::Tensor* y, int shape = -1);

// The same product for bf16 x of at most 4 rows (k a multiple of 8), at the memory's pace: warps
// stream whole slices of weight rows, their sums added in a fixed order (cuda_kernels.h,
// VectorLinear), so a row's result does not depend on the other rows either. `shape` picks how
// the work is cut (0 to 7, for benchmarks and tests); -1 takes SPECDEC_CUDA_VECTOR_LINEAR_SHAPE
// (read once), by default the shape measured fastest: on an H100 the Qwen3-4B shape's one-row
// products read 2,400-3,180 GB/s (cuBLAS 1,740-2,860) and its graphed step took 4.37-4.47 ms
// (5.04-5.20 on cuBLAS) (docs/results/2026-11-27-vector-linear-h100.md).
bool CudaVectorLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& residual,
                      at::Tensor* y, int shape = -1);

// Attention of a fixed pass's new rows q [n, heads, d] against a cache's whole capacity (keys and
// values [kv_heads, capacity, d]), with `bias` the pass's additive mask prepared per query head of
// a group ([group * n, capacity] of q's dtype, PrepareRecurringMask; undefined: every slot
// visible) into `out` [n, heads * d]: keys split in blocks of 32 across the GPU, then combined,
// in float. A row's result depends on its own q and mask row only.
bool CudaFixedAttention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                        const at::Tensor& bias, double scale, at::Tensor* out);

// The row-independent mode, SPECDEC_CUDA_ROW_INDEPENDENT=1 (read once; off by default): a
// sequence's rows get the same bits alone and in any pass. Every product goes to CudaRowsLinear,
// in launches of up to 64 rows (ops.cc), and every sequence of up to 64 new rows attends through
// CudaFixedAttention, fixed passes and the general path's alike (the defaults of the two limits
// below become 64; their variables still override them). The price of its parts on an H100
// (products and fixed passes' attention row-independent up to 64 rows) is in
// docs/results/2026-11-28-rows-linear-h100.md; the mode itself has not run on a GPU yet.
bool CudaRowIndependent();

// The most new rows of a fixed pass whose attention Attention (ops.h) gives to
// CudaFixedAttention: SPECDEC_CUDA_ATTENTION_MAX_ROWS (read once), at most 64, by default 1 (64
// in the row-independent mode, where the general path's passes take it too).
// Each warp walks its query rows one after another: on an H100 the Qwen3-4B shape's 1-row step
// took 5.00 ms with it (5.39-5.49 ms with cuDNN's attention in the runs before), its 17-row
// verify 6.93 ms (5.82-5.96) (docs/results/2026-11-27-cuda-kernels-h100.md): verifies stay with
// cuDNN's.
int64_t CudaFixedAttentionMaxRows();

// The most rows of a product that Linear and AddLinear (ops.h) give to CudaRowsLinear:
// SPECDEC_CUDA_ROWS_LINEAR_MAX_ROWS (read once), at most 64; by default 0, every product on
// cuBLAS (64 in the row-independent mode). On an H100, in its default shape, the Qwen3-4B shape's
// 17-row forward took 5.81 ms with it and 5.74 with cuBLAS's, its 1-row step 4.87 ms against 4.35
// with VectorLinear (docs/results/2026-11-28-rows-linear-h100.md): rows that do not depend on their
// neighbours are opt-in until every pass of a few rows attends through a row-independent kernel
// too.
int64_t CudaRowsLinearMaxRows();

// The most rows of a product that Linear and AddLinear give to CudaVectorLinear when
// CudaRowsLinear does not take it: SPECDEC_CUDA_VECTOR_LINEAR_MAX_ROWS (read once), at most 4;
// by default 1, the decoding step's products.
int64_t CudaVectorLinearMaxRows();

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_CUDA_OPS_H_
