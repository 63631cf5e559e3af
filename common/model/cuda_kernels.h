// specdec's own CUDA kernels for the small per-row operators of a decoder layer, on raw device
// pointers. Neither torch nor CUDA headers: cuda_ops.cc binds them to ATen tensors and streams.
// Each launch replaces a chain of ATen kernels; a decoding step on a GPU is bound by launches,
// not by these operators' bytes (design.md §2.9).
#ifndef SPECDEC_COMMON_MODEL_CUDA_KERNELS_H_
#define SPECDEC_COMMON_MODEL_CUDA_KERNELS_H_

#include <cstdint>

namespace specdec::model::cuda {

enum class ElementType { kF32, kBF16, kF16 };

// q and k of a layer's projected rows, each head RMS-normalized (when its norm weight is given)
// and rotated (RoPE, rotate-half), in float, rounded once to the rows' type.
struct NormRopeQkArgs {
  const void* qkv = nullptr;  // [rows, row_stride] of `type`: `heads` q heads, then `kv_heads` k
  int64_t rows = 0, row_stride = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;  // head_dim even
  const void* q_norm = nullptr;               // [head_dim] of `type`, or null for no per-head norm
  const void* k_norm = nullptr;
  float eps = 1e-6f;
  const void* cos = nullptr;  // [rows, head_dim], of `type`, or float when tables_f32
  const void* sin = nullptr;
  bool tables_f32 = false;
  void* q_out = nullptr;  // [rows, heads, head_dim], contiguous
  void* k_out = nullptr;  // [rows, kv_heads, head_dim], contiguous
  ElementType type = ElementType::kF32;
};

// silu(gate) * up of [gate | up] rows, in float, rounded once.
struct SwiGluArgs {
  const void* gate_up = nullptr;  // [rows, row_stride] of `type`: inter gate columns, inter up
  int64_t rows = 0, row_stride = 0, inter = 0;
  void* out = nullptr;  // [rows, inter], contiguous
  ElementType type = ElementType::kF32;
};

// y = x w^T (+ residual) for a few rows: x [m, k] and w [n, k] bf16, m at most kRowsLinearMaxRows,
// k a multiple of 32, every row 16-byte aligned. Each output is the same sequence of operations
// whatever m is (tensor-core products over fixed slices of k, summed in a fixed order, the
// residual added before the one rounding), so a row's result does not depend on the rows beside it.
// `shape` (0 to kRowsLinearShapes - 1) picks how a block's warps cut k (cuda_kernels.cu); the
// same shape gives a row the same bits at every m, different shapes need not. Shape 4 (16 warps,
// 2 chunks in flight, k interleaved) was the fastest at 17 rows on an H100
// (docs/results/2026-11-28-rows-linear-h100.md).
constexpr int64_t kRowsLinearMaxRows = 64;
constexpr int kRowsLinearShapes = 6;
constexpr int kRowsLinearDefaultShape = 4;
struct RowsLinearArgs {
  const void* x = nullptr;  // [m, k] bf16, rows x_stride apart
  int64_t m = 0, x_stride = 0;
  const void* w = nullptr;  // [n, k] bf16, contiguous
  int64_t n = 0, k = 0;
  const void* residual = nullptr;  // [m, n] bf16, rows residual_stride apart, or null
  int64_t residual_stride = 0;
  void* y = nullptr;  // [m, n] bf16, rows y_stride apart
  int64_t y_stride = 0;
};

// y = x w^T (+ residual) for one to four rows, read at the memory's pace: x [m, k] and w [n, k]
// bf16, k a multiple of 8, every row 16-byte aligned. Warps stream whole slices of weight rows,
// 512 contiguous bytes per load, every lane's loads of a step in flight before its first product;
// lanes sum in float, a warp adds its lanes' sums by one butterfly and a row's warps in order, and
// the residual is added before the one rounding. A row's result does not depend on the other rows.
// `shape` (0 to kVectorLinearShapes - 1) picks how the work is cut (outputs per group of warps,
// loads in flight, warps per output; cuda_kernels.cu); each computes every output the same way
// whatever m is, but shapes differ from one another in the order of the sums.
constexpr int64_t kVectorLinearMaxRows = 4;
constexpr int kVectorLinearShapes = 8;
constexpr int kVectorLinearDefaultShape = 2;
using VectorLinearArgs = RowsLinearArgs;

// Attention of a fixed pass's n new rows against a cache's whole capacity, split over the keys:
// blocks of 32 keys per (KV head, split), then one combine per query row. A query row's result
// depends only on its own q, mask row and the keys and values (fixed splits, combined in order).
// q [n, heads, d], keys/values [kv_heads, capacity, d], bias [group * n, capacity] (additive,
// 0 or -inf; row gi * n + r for query head gi of a group and new row r; or null), out
// [n, heads * d]; all of `type`, contiguous. Scores and softmax in float, out rounded once.
struct FixedAttentionArgs {
  const void* q = nullptr;
  const void* keys = nullptr;
  const void* values = nullptr;
  const void* bias = nullptr;
  void* out = nullptr;
  float* scratch = nullptr;  // FixedAttentionScratchFloats(...) floats of device memory
  int64_t n = 0, capacity = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;  // see FixedAttentionTakes
  float scale = 1.f;
  ElementType type = ElementType::kF32;
};
constexpr int kFixedAttentionMaxHeadDim = 256;
int64_t FixedAttentionScratchFloats(int64_t n, int64_t capacity, int heads, int head_dim);
// Whether the kernel takes heads of `head_dim` in `type`: a multiple of 32, at most 256, and its
// staged keys and values within 48 KiB of shared memory (f32 up to 128).
bool FixedAttentionTakes(ElementType type, int head_dim);

// Each queues its kernel on `stream` (a cudaStream_t) and returns the launch's cudaError_t
// (0 is success).
int LaunchNormRopeQk(const NormRopeQkArgs& args, void* stream);
int LaunchSwiGlu(const SwiGluArgs& args, void* stream);
int LaunchRowsLinear(const RowsLinearArgs& args, void* stream, int shape = kRowsLinearDefaultShape);
int LaunchVectorLinear(const VectorLinearArgs& args, void* stream,
                       int shape = kVectorLinearDefaultShape);
int LaunchFixedAttention(const FixedAttentionArgs& args, void* stream);

}  // namespace specdec::model::cuda

#endif  // SPECDEC_COMMON_MODEL_CUDA_KERNELS_H_
