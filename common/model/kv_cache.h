// Per-sequence key/value cache of a decoder: one K and one V buffer per layer, grown on demand.
#ifndef SPECDEC_COMMON_MODEL_KV_CACHE_H_
#define SPECDEC_COMMON_MODEL_KV_CACHE_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace specdec::model {

// Shape of a cache, fixed by the model that owns it.
struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::kCPU;  // where the buffers live: the model's device
  uint64_t owner_id = 0;  // the model instance that created it; Forward rejects foreign caches
};

// KV cache of one sequence. Slot i holds the keys/values of the i-th token the model committed
// (tree-verify rows are appended speculatively and then compacted by KeepRows or Truncate).
// Not thread-safe: one scheduler thread owns a cache at a time.
class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  const KvCacheShape& shape() const { return shape_; }

  // Makes room for `extra` more slots (amortized doubling). Existing contents are kept.
  void Reserve(int64_t extra);
  // Writes `k`/`v` ([n, kv_heads, head_dim]) of `layer` into slots [length, length+n). The length
  // only advances through Commit, after every layer has written.
  void Write(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
    WriteAt(layer, length_, k, v);
  }
  // The same into slots [slot, slot+n), which must lie within the capacity: scratch rows past the
  // length (a DFlash block's keys) that Commit never counts.
  void WriteAt(int64_t layer, int64_t slot, const at::Tensor& k, const at::Tensor& v);
  void Commit(int64_t n) { length_ += n; }
  // Views of the first `n` slots of a layer: [kv_heads, n, head_dim].
  at::Tensor Keys(int64_t layer, int64_t n) const;
  at::Tensor Values(int64_t layer, int64_t n) const;
  // The whole buffers of a layer, [kv_heads, capacity, head_dim] contiguous, for kernels that
  // write slots [length, capacity) themselves (see attention_kernel.h).
  void* KeyData(int64_t layer) const;
  void* ValueData(int64_t layer) const;

  // The whole buffers of a layer as tensors, [kv_heads, capacity, head_dim]: for passes that
  // write and read slots by a slot index held on the device (a captured pass, see
  // transformer.h). Slots never written hold zeros.
  const at::Tensor& KeyBuffer(int64_t layer) const { return keys_[layer]; }
  const at::Tensor& ValueBuffer(int64_t layer) const { return values_[layer]; }

  // State a model keeps with this cache and drops when the buffers move: the captured passes
  // that read and write these buffers by address. Reserve discards it when it reallocates.
  struct Attachment {
    virtual ~Attachment() = default;
  };
  Attachment* attachment() const { return attachment_.get(); }
  void set_attachment(std::unique_ptr<Attachment> attachment) {
    attachment_ = std::move(attachment);
  }

  // Drops every slot at or after `new_length`. INVALID_ARGUMENT if new_length > length().
  absl::Status Truncate(int64_t new_length);
  // Keeps slots [0, base) plus the listed slots (absolute indices >= base, strictly increasing),
  // moved down to be contiguous after `base`: the tree-verify compaction of an accepted path.
  absl::Status KeepRows(int64_t base, std::span<const int64_t> rows);

  // Bytes allocated (capacity) and bytes holding live tokens (length).
  int64_t allocated_bytes() const;
  int64_t used_bytes() const;

 private:
  KvCacheShape shape_;
  int64_t length_ = 0;
  int64_t capacity_ = 0;
  std::vector<at::Tensor> keys_;    // per layer [kv_heads, capacity, head_dim]
  std::vector<at::Tensor> values_;  // per layer [kv_heads, capacity, head_dim]
  std::unique_ptr<Attachment> attachment_;
};

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_KV_CACHE_H_
