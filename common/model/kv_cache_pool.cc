#include "common/model/kv_cache_pool.h"

#include <c10/core/InferenceMode.h>

#include <utility>

namespace specdec::model {

KvCachePool::KvCachePool(const KvCacheShape& shape, size_t max_kept, int64_t max_kept_bytes)
    : shape_(shape), max_kept_(max_kept), max_kept_bytes_(max_kept_bytes) {}

KvCachePool::~KvCachePool() = default;

std::unique_ptr<KvCache> KvCachePool::Take() {
  std::unique_ptr<KvCache> cache;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& kept = kept_[c10::InferenceMode::is_enabled() ? 1 : 0];
    if (!kept.empty()) {
      cache = std::move(kept.back());
      kept.pop_back();
      kept_bytes_ -= cache->allocated_bytes();
    }
  }
  if (cache == nullptr) return std::make_unique<KvCache>(shape_);
  (void)cache->Truncate(0);  // always valid
  return cache;
}

void KvCachePool::Give(std::unique_ptr<KvCache> cache) {
  if (cache == nullptr || cache->shape().owner_id != shape_.owner_id || cache->capacity() == 0) {
    return;
  }
  const bool inference = cache->KeyBuffer(0).is_inference();
  std::unique_ptr<KvCache> freed;  // freed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t bytes = cache->allocated_bytes();
  if (kept_[0].size() + kept_[1].size() < max_kept_ && kept_bytes_ + bytes <= max_kept_bytes_) {
    kept_bytes_ += bytes;
    kept_[inference ? 1 : 0].push_back(std::move(cache));
  } else {
    freed = std::move(cache);
  }
}

int64_t KvCachePool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_bytes_;
}

size_t KvCachePool::kept() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_[0].size() + kept_[1].size();
}

}  // namespace specdec::model
