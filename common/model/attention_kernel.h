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
#include <span>

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
};

// Independent work items: one per (sequence, KV head).
int64_t AttentionWorkItems(const AttentionProblem& p);
// Computes items [begin, end); different ranges may run on different threads.
void RunAttention(const AttentionProblem& p, int64_t begin, int64_t end);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_ATTENTION_KERNEL_H_
