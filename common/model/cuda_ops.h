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
bool CudaRowsLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& residual,
                    at::Tensor* y);

// Attention of a fixed pass's new rows q [n, heads, d] against a cache's whole capacity (keys and
// values [kv_heads, capacity, d]), with `bias` the pass's additive mask prepared per query head of
// a group ([group * n, capacity] of q's dtype, PrepareRecurringMask; undefined: every slot
// visible) into `out` [n, heads * d]: keys split in blocks of 32 across the GPU, then combined,
// in float. A row's result depends on its own q and mask row only.
bool CudaFixedAttention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                        const at::Tensor& bias, double scale, at::Tensor* out);

// The most new rows of a fixed pass whose attention Attention (ops.h) gives to
// CudaFixedAttention: SPECDEC_CUDA_ATTENTION_MAX_ROWS (read once), at most 64, by default 1.
// Each warp walks its query rows one after another: on an H100 the Qwen3-4B shape's 1-row step
// took 5.00 ms with it (5.39-5.49 ms with cuDNN's attention in the runs before), its 17-row
// verify 6.93 ms (5.82-5.96) (docs/results/2026-11-27-cuda-kernels-h100.md): verifies stay with
// cuDNN's.
int64_t CudaFixedAttentionMaxRows();

// The most rows of a product that Linear and AddLinear (ops.h) give to CudaRowsLinear:
// SPECDEC_CUDA_ROWS_LINEAR_MAX_ROWS (read once), at most 64; by default 0, every product on
// cuBLAS. On an H100 the kernel matches cuBLAS at 1 row and takes 1.18x its time at 17 rows on
// the Qwen3-4B shape (docs/results/2026-11-27-cuda-kernels-h100.md): rows that do not depend on
// their neighbours are opt-in until the GPU's attention has that property too.
int64_t CudaRowsLinearMaxRows();

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_CUDA_OPS_H_
