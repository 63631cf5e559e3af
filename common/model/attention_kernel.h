// Fused attention over the new rows of many sequences at once, each against its own KV cache.
//
// The ATen formulation (ops.h Attention) costs a dozen operator dispatches and temporaries per
// sequence and layer, which dominates a continuous-batching pass of many short sequences (eight
// decoding sessions spend more time dispatching attention than multiplying). This kernel does
// the whole batch in one call, splits it into (sequence, KV head) work items for the caller's
// thread pool, and computes in float with vectorizable loops. Torch-free on purpose.
#ifndef SPECDEC_COMMON_MODEL_ATTENTION_KERNEL_H_
#define SPECDEC_COMMON_MODEL_ATTENTION_KERNEL_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace specdec::model {

enum class KernelDType { kF32, kBF16 };

// One sequence's part of the batch. Element pointers are of the problem's dtype.
struct AttentionSequence {
  const void* q = nullptr;  // [n, heads, head_dim], rows `q_row_stride` elements apart
  int64_t q_row_stride = 0;
  void* out = nullptr;  // [n, heads * head_dim], rows `out_row_stride` elements apart
  int64_t out_row_stride = 0;
  // The new rows' keys and values, [n, kv_heads, head_dim] contiguous: copied into cache slots
  // [past, past + n) before attending.
  const void* new_keys = nullptr;
  const void* new_values = nullptr;
  void* keys = nullptr;  // [kv_heads, capacity, head_dim]: the cache of this layer
  void* values = nullptr;
  int64_t capacity = 0;  // >= past + n
  int64_t past = 0;      // cached tokens before the new rows
  int64_t n = 0;         // new rows
  // Tree attention: n parents among the new rows (-1: child of the context). Null: causal.
  const int32_t* tree_parents = nullptr;
  // Every new row sees every new row (a DFlash block); overrides tree_parents.
  bool bidirectional = false;
};

struct AttentionProblem {
  std::span<const AttentionSequence> sequences;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;  // heads is a multiple of kv_heads
  KernelDType dtype = KernelDType::kF32;
  float scale = 1.f;  // applied to q.k, usually 1/sqrt(head_dim)
  // bf16 heads of a multiple of 32 elements take the pair path where RunAttention offers it
  // (below); false: always the float path (to compare the two).
  bool pair_path = true;
  // The caches' dtype (keys, values), when it is not `dtype`: float queries and outputs over a
  // bf16 cache (the new rows are rounded to bf16 as they are stored). Unset: `dtype`.
  std::optional<KernelDType> cache_dtype;
};

// Independent work items: one per (sequence, KV head).
int64_t AttentionWorkItems(const AttentionProblem& p);
// Computes items [begin, end); different ranges may run on different threads.
//
// On CPUs with AVX-512 BF16, bf16 heads of a multiple of 32 elements (up to 256) take the pair
// path: scores are dot products of the bf16 queries and keys, summed in float in the order of
// AVX-512 BF16's dot product (16 lane sums over 32-element chunks, lane l adding element 2l + 1
// then 2l, then a fixed tree) and scaled; the probabilities are rounded to bf16 (as ATen's bf16
// attention does) and the values summed over key pairs in the same order. Other heads, and every
// head on other CPUs, take the float path: queries, scores and probabilities in float. Either
// way every row's result is one fixed sequence of float operations, whatever rows share its
// call.
void RunAttention(const AttentionProblem& p, int64_t begin, int64_t end);
// Whether RunAttention takes the pair path on this CPU (it has AVX-512 BF16).
bool AttentionKernelNative();
// RunAttention with the pair path on portable loops: the same float operations without AVX-512
// BF16 (denormal products aside, which AVX-512 BF16 flushes to zero), slower than the float
// path; for tests and benchmarks.
void RunAttentionPortable(const AttentionProblem& p, int64_t begin, int64_t end);
// RunAttention with the float path's loops on AVX2 registers even where the CPU has AVX-512
// (which sums every element lane for lane alike, so the bits are the same); for tests.
void RunAttentionAvx2(const AttentionProblem& p, int64_t begin, int64_t end);
// For tests: what the pair path computes for one item before rounding. Row r = i * group + h is
// new row i, query head h of the KV head's group; m = past + n keys.
struct AttentionPairTrace {
  std::vector<float> scores;   // [rows, m] scaled scores, 0 where a row does not attend
  std::vector<float> outputs;  // [rows, head_dim]
};
// Item `item` on the pair path (on AVX-512 BF16 when `native` and the CPU has it); empty when
// the problem takes the float path. Like RunAttention, it writes the item's new rows into the
// cache and its outputs.
AttentionPairTrace TraceAttentionPairs(const AttentionProblem& p, int64_t item, bool native);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_ATTENTION_KERNEL_H_
