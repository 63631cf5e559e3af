// A KV cache's fixed passes by shape (design.md §2.9), shared by the target's passes
// (captured_pass.cc) and the DFlash drafter's (dflash_fixed_pass.cc). Kept as the cache's
// attachment: dropped when its buffers move, freed with it, kept with it in a cache pool.
#ifndef SPECDEC_COMMON_MODEL_FIXED_PASS_SET_H_
#define SPECDEC_COMMON_MODEL_FIXED_PASS_SET_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "common/model/kv_cache.h"

namespace specdec::model {

// `Pass` is default-constructible and is made ready by the caller when `Use` says it is new.
template <typename Key, typename Pass>
class FixedPassSet : public KvCache::Attachment {
 public:
  // Shapes a cache keeps; a new shape beyond them replaces the least recently used one.
  static constexpr size_t kMaxShapes = 16;

  // The set attached to `cache`, attached first if it has none.
  static FixedPassSet& Of(KvCache& cache) {
    auto* set = dynamic_cast<FixedPassSet*>(cache.attachment());
    if (set != nullptr) return *set;
    auto fresh = std::make_unique<FixedPassSet>();
    set = fresh.get();
    cache.set_attachment(std::move(fresh));
    return *set;
  }

  // The pass of `key`, marked as used now; `*is_new` says whether it was just made.
  Pass& Use(const Key& key, bool* is_new) {
    auto it = passes_.find(key);
    *is_new = it == passes_.end();
    if (*is_new) {
      if (passes_.size() >= kMaxShapes) EvictLeastRecentlyUsed();
      it = passes_.try_emplace(key).first;
    }
    it->second.first = ++clock_;
    return it->second.second;
  }

  size_t size() const { return passes_.size(); }

 private:
  void EvictLeastRecentlyUsed() {
    auto oldest = passes_.begin();
    for (auto it = passes_.begin(); it != passes_.end(); ++it) {
      if (it->second.first < oldest->second.first) oldest = it;
    }
    passes_.erase(oldest);
  }

  std::map<Key, std::pair<uint64_t, Pass>> passes_;  // last use, pass
  uint64_t clock_ = 0;
};

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_FIXED_PASS_SET_H_
