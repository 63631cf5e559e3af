// Tensor building blocks shared by the target transformer and the drafters (ATen, inference only).
#ifndef SPECDEC_COMMON_MODEL_OPS_H_
#define SPECDEC_COMMON_MODEL_OPS_H_

#include <ATen/core/Tensor.h>

#include <optional>
#include <span>
#include <vector>

#include "common/model/attention_kernel.h"
#include "common/model/kv_cache.h"
#include "common/model/model_config.h"
#include "common/model/row_layer.h"

namespace specdec::model {

// y = x W^T. A float product on the CPU runs on linear_f32_kernel.h at every row count, each
// output summed in one order whatever the rows beside it (SPECDEC_F32_KERNEL=0 in the environment:
// the BLAS, with a matrix-vector product for a single row; read once). A bf16 product of more than
// 32 rows runs on GemmRows(rows) rows, the extra ones zero and dropped from the result: oneDNN,
// which does ATen's bf16 products, compiles and caches a kernel per distinct row count, and a
// server's ragged batches and prompts would otherwise keep adding cache entries (resident memory
// creeping up for hours, a compile for each new shape). A bf16 product of at most
// LinearKernelMaxRows() rows (a decoding or verification pass) runs on linear_kernel.h instead,
// whose result for a row does not depend on the rows beside it. Float x with a bf16 weight on the
// CPU (float activations, see LoadOptions::activation_dtype) is rounded to bf16 and multiplied on
// linear_kernel.h at every row count, its sums returned in float, unrounded. `weight` may be 2-D or
// in the packed layout of PackLinearWeight. On a CUDA device bf16 products run on cuBLAS, or, up
// to CudaRowsLinearMaxRows() rows (opt-in), on cuda_ops.h's row-independent CudaRowsLinear, or,
// up to CudaVectorLinearMaxRows() rows (the decoding step's), on its CudaVectorLinear.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight);

// `weight` as the CPU's row layers (row_layer.h) multiply by it: a contiguous bf16 matrix (2-D or
// packed) that the linear kernel takes, or a float one that the f32 kernel takes. nullopt for
// anything else, and for every matrix when SPECDEC_ROW_KERNELS=0 (or, for float matrices,
// SPECDEC_F32_KERNEL=0) is in the environment: Linear would not take those kernels either.
std::optional<RowMatrix> RowMatrixOf(const at::Tensor& weight);

// A bf16 CPU matrix [out, in] in linear_kernel.h's packed layout with the block B of this CPU's
// path (LinearPackBlock: 16 with AVX-512 BF16, 4 with AVX2), as a tensor [out / B, in / 32,
// 32 * B], where that path takes every bf16 product (LinearKernelMaxRows unbounded) and the
// widths fit it; otherwise `weight` itself. A one-row product reads a packed matrix as one
// stream: 1.2x faster on a memory-bound shape with AVX2
// (docs/results/2026-11-26-packed-weights.md), 1.4-1.9x with AVX-512 BF16
// (docs/results/2026-11-26-peer-avx512.md). Linear and EmbeddingRows take either layout; other
// uses need UnpackLinearWeight. SPECDEC_PACKED_WEIGHTS=0 in the environment turns packing off
// (read once).
at::Tensor PackLinearWeight(const at::Tensor& weight);
// The 2-D matrix of a packed one (a copy); any other tensor as it is.
at::Tensor UnpackLinearWeight(const at::Tensor& weight);
// A bf16 CPU matrix [out, in] that linear_kernel.h does not take only because `out` is not a
// multiple of its output block (a vocabulary of 101, or 50257), with zero rows appended up to
// one: its products then run on the kernel at every row count, so that a row's result never
// depends on the rows beside it (the library's bf16 product picks its kernel by the row count:
// on a CPU with AMX, oneDNN sums a 16-row product on AMX tiles and a 1-row one on AVX-512, and
// the same row's results differ). The product's first `out` columns are the matrix's own, bit for
// bit. Any other tensor as it is.
at::Tensor PadOutputsForKernel(const at::Tensor& weight);
// Rows `ids` (int64 or int32 token ids) of an embedding matrix, 2-D or packed: [ids, hidden].
at::Tensor EmbeddingRows(const at::Tensor& weight, const at::Tensor& ids);

// The most rows a bf16 product runs on linear_kernel.h: every product on CPUs with AVX-512 BF16,
// where it runs 33- to 256-row passes at 0.68-1.17x oneDNN's time
// (docs/results/2026-11-26-bf16-rows.md), and on CPUs without AVX-512, where ATen's bf16 product
// is a plain loop (docs/results/2026-11-25-avx-kernel.md); 2 on other AVX-512 CPUs, where oneDNN
// runs ATen's bf16 products (timing the pack target's products in a loop on an AVX-512 F
// machine, the kernel's row-at-a-time portable path took 0.26 ms per 1-row pass against oneDNN's
// 0.77, but 2.06 against 0.94 for 8 rows).
// SPECDEC_LINEAR_KERNEL_MAX_ROWS in the environment overrides it (0: never; read once), and
// SPECDEC_ROW_KERNELS=0 turns the kernel off as well.
int64_t LinearKernelMaxRows();

// The row count a bf16 product of `rows` rows runs on: exact up to 32, then rounded up to a
// multiple of 16 up to 256, of 64 up to 1024 and of 128 beyond (at most 6% extra rows past 256,
// and about 80 distinct counts up to 4096). SPECDEC_GEMM_ROW_BUCKETS=0 in the environment turns
// the rounding off (read once).
int64_t GemmRows(int64_t rows);

// HF RMSNorm over the last dim: normalize in f32, cast back to x's dtype, then scale by weight.
// f32 and bf16 tensors of up to three dims whose last dim is contiguous run through
// row_kernels.h (one pass per row); the result is contiguous. SPECDEC_ROW_KERNELS=0 in the
// environment runs RmsNorm and SwiGlu as ATen operators instead (read once).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The SwiGLU gate of gu = [gate | up] ([rows, 2 * inter]): silu(gate) * up, [rows, inter];
// row_kernels.h for f32 and bf16 on the CPU, one kernel of cuda_ops.h on a CUDA device.
at::Tensor SwiGlu(const at::Tensor& gu, int64_t inter);

// RoPE inverse frequencies [head_dim/2] in f32, with the config's scaling applied.
at::Tensor RopeInvFreq(const ModelConfig& config);

// cos/sin tables [n, head_dim] (f32) for int64 positions [n] (rotate-half layout).
void RopeCosSin(const at::Tensor& inv_freq, const at::Tensor& positions, at::Tensor* cos,
                at::Tensor* sin);

// RopeCosSin's rows for every position in [0, positions), computed once when the model loads: a
// CPU pass copies its positions' rows instead of running RopeCosSin's five operators (46 of a
// 100M shape's 4,000 us per 1-token step, its caches cold after the weights' stream). Each
// element is the same elementwise operation either way, so the bits are RopeCosSin's. Holds
// positions * head_dim / 2 floats twice (cos and sin; the rows' halves are equal), for at most
// kMaxPositions positions (16 MiB at head_dim 128); passes past them compute.
class RopeTable {
 public:
  static constexpr int64_t kMaxPositions = 32768;
  RopeTable() = default;
  // An empty table where inv_freq is not on the CPU (CosSin then computes).
  RopeTable(const at::Tensor& inv_freq, int64_t positions);
  // cos/sin [n, head_dim] (f32) for int64 positions [n]: the table's rows where the positions are
  // on the CPU and in the table, else RopeCosSin's.
  void CosSin(const at::Tensor& positions, at::Tensor* cos, at::Tensor* sin) const;
  int64_t positions() const { return positions_; }

 private:
  at::Tensor inv_freq_;
  at::Tensor cos_half_, sin_half_;  // [positions, head_dim / 2]
  int64_t positions_ = 0;
};

// Applies rotate-half RoPE to x [n, heads, head_dim] with cos/sin [n, head_dim] in f32 (or
// already in x's dtype); the tables are cast to x's dtype first, as HF does. Runs through
// row_kernels.h for f32 and bf16 x whose last dim is contiguous (the result is contiguous).
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// q [rows, heads, head_dim] and k [rows, kv_heads, head_dim] of a decoder layer's projected rows
// `qkv` ([rows, (heads + 2 kv_heads) head_dim], q then k then v): each head RMS-normalized by
// `q_norm`/`k_norm` when the config has per-head norms (Qwen3), then rotated by the RoPE tables.
// On a CUDA device one kernel of cuda_ops.h (float inside, rounded once); elsewhere RmsNorm, then
// ApplyRope.
void NormRopeQk(const at::Tensor& qkv, const ModelConfig& config, const at::Tensor& q_norm,
                const at::Tensor& k_norm, const at::Tensor& cos, const at::Tensor& sin,
                at::Tensor* q, at::Tensor* k);

// x + a weight^T ([rows, in] a, [out, in] weight, [rows, out] x): on a CUDA device one kernel, the
// sum taken before rounding (with fused operators (see Attention) one addmm, or specdec's own
// kernel as Linear takes it); elsewhere x + Linear(a, w).
at::Tensor AddLinear(const at::Tensor& x, const at::Tensor& a, const at::Tensor& weight);

// The additive mask [n, capacity] (float, on `slots`' device) of a pass's n new rows written at a
// cache's consecutive `slots` (int64 [n]): every slot before slots[0] visible, the new rows' keys
// as `new_rows` ([n, n] additive; undefined: all of them visible) says, every later slot -inf.
// Device operators throughout, so that a captured pass reads its slots from device memory.
at::Tensor CapacityMask(const at::Tensor& slots, const at::Tensor& new_rows, int64_t capacity);

// A recurring pass's mask made once for all of its layers' Attention calls with `group` query heads
// per KV head: where Attention takes the fused operator, the additive bias in `dtype` repeated per
// group row ([group * n, m]); elsewhere `mask` itself.
at::Tensor PrepareRecurringMask(const at::Tensor& mask, at::ScalarType dtype, int64_t group);

// Grouped-query attention of n query rows against `keys`/`values` ([kv_heads, m, head_dim]).
// q: [n, heads, head_dim]; mask: f32 additive [n, m] (0 or -inf) or undefined for "see all", or
// for recurring shapes the result of PrepareRecurringMask.
// Returns [n, heads * head_dim] in q's dtype; softmax runs in f32.
// `recurring_shape`: the caller runs these shapes again and again (a fixed pass's rows against a
// cache's whole capacity). On a CUDA device with libtorch 2.4 or later such attention is ATen's
// fused scaled_dot_product_attention, whose backends prepare every new shape once, at a cost of
// milliseconds: a pass whose key count grows by one each step would pay it every step
// (docs/results/2026-11-26-cuda-graphs-h100.md). Elsewhere: the matmul composition.
// RmsNorm takes ATen's fused rms_norm on such a device, for any shape. SPECDEC_CUDA_FUSED_OPS=0
// keeps the compositions for both. Recurring passes of at most CudaFixedAttentionMaxRows() rows
// attend through specdec's own kernel instead (cuda_ops.h).
at::Tensor Attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                     const at::Tensor& mask, bool recurring_shape = false);

// One sequence for FusedAttention: its rows [offset, offset + n) of the pass's q, k and v, whose
// keys and values go to `cache` at slots [past, past + n) before it attends to slots [0, past + n).
struct FusedAttentionInput {
  KvCache* cache = nullptr;
  int64_t offset = 0, past = 0, n = 0;
  const int32_t* tree_parents = nullptr;  // null: causal (see AttentionSequence)
  bool bidirectional = false;
};

// The attention of several sequences' new rows through the fused kernel (attention_kernel.h), in
// one call spread over the intra-op thread pool. q: [rows, heads, head_dim]; k, v: [rows,
// kv_heads, head_dim]; `out` receives [rows, heads * head_dim] at each input's rows. The caches
// must have room for past + n slots.
void FusedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t layer,
                    std::span<const FusedAttentionInput> inputs, at::Tensor& out);

// FusedAttention on raw rows of `dtype`: q [rows, heads, head_dim] and k, v [rows, kv_heads,
// head_dim] contiguous; `out` receives [rows, heads * head_dim].
void FusedAttentionRows(const void* q, const void* k, const void* v, void* out, KernelDType dtype,
                        int64_t heads, int64_t kv_heads, int64_t d, int64_t layer,
                        std::span<const FusedAttentionInput> inputs);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_OPS_H_
