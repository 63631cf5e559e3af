// Caches of one model kept after their requests end, for the requests after them. Where a model's
// passes replay CUDA graphs, a cache's graphs address its buffers (design.md §2.9): a kept cache
// brings its captured passes to the next request, which then replays from its first step instead
// of capturing again.
#ifndef SPECDEC_COMMON_MODEL_KV_CACHE_POOL_H_
#define SPECDEC_COMMON_MODEL_KV_CACHE_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/model/kv_cache.h"

namespace specdec::model {

// Thread-safe.
class KvCachePool {
 public:
  // Keeps at most `max_kept` caches of `shape` holding at most `max_kept_bytes` of buffers
  // together (0: none; every cache is new, and freed when given back).
  KvCachePool(const KvCacheShape& shape, size_t max_kept, int64_t max_kept_bytes);
  ~KvCachePool();

  // The cache given back last whose tensors were made in the caller's autograd mode (ATen refuses
  // to update an inference-mode tensor outside inference mode, c10::InferenceMode), emptied
  // (length 0; its buffers and attachment kept); else a new one.
  std::unique_ptr<KvCache> Take();
  // Keeps `cache` for a later Take when there is room for it (count and bytes), else frees it; a
  // cache that never allocated its buffers is freed too.
  void Give(std::unique_ptr<KvCache> cache);
  size_t kept() const;
  int64_t kept_bytes() const;

 private:
  const KvCacheShape shape_;
  const size_t max_kept_;
  const int64_t max_kept_bytes_;
  int64_t kept_bytes_ = 0;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<KvCache>> kept_[2];  // [made in inference mode]
};

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_KV_CACHE_POOL_H_
