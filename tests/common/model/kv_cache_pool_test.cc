// The cache pool keeps what it is given up to its bound, hands back the last one emptied, and
// refuses caches of another model.
#include "common/model/kv_cache_pool.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace specdec::model {
namespace {

KvCacheShape Shape(uint64_t owner) {
  KvCacheShape s;
  s.num_layers = 2;
  s.num_kv_heads = 1;
  s.head_dim = 4;
  s.owner_id = owner;
  return s;
}

TEST(KvCachePool, HandsBackTheLastCacheGivenEmptiedWithItsBuffers) {
  KvCachePool pool(Shape(7), 2, 1 << 20);
  auto a = pool.Take();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape().owner_id, 7u);
  a->Reserve(20);
  a->Commit(15);
  a->set_attachment(std::make_unique<KvCache::Attachment>());
  const KvCache* kept = a.get();
  pool.Give(std::move(a));
  EXPECT_EQ(pool.kept(), 1u);
  auto b = pool.Take();
  EXPECT_EQ(b.get(), kept);
  EXPECT_EQ(b->length(), 0);
  EXPECT_GE(b->capacity(), 20);
  EXPECT_NE(b->attachment(), nullptr);
  EXPECT_EQ(pool.kept(), 0u);
}

TEST(KvCachePool, KeepsAtMostItsBoundAndNothingForeign) {
  KvCachePool pool(Shape(7), 2, 1 << 20);
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int i = 0; i < 3; ++i) {
    caches.push_back(pool.Take());
    caches.back()->Reserve(4);
  }
  const int64_t caches_bytes = caches[0]->allocated_bytes();
  for (auto& c : caches) pool.Give(std::move(c));
  EXPECT_EQ(pool.kept(), 2u);
  EXPECT_EQ(pool.kept_bytes(), 2 * caches_bytes);
  pool.Give(std::make_unique<KvCache>(Shape(8)));  // another model's
  EXPECT_EQ(pool.kept(), 2u);
  pool.Give(nullptr);
  EXPECT_EQ(pool.kept(), 2u);
  pool.Give(std::make_unique<KvCache>(Shape(7)));  // never allocated: nothing worth keeping
  EXPECT_EQ(pool.kept(), 2u);
  KvCachePool none(Shape(7), 0, 0);
  auto c = none.Take();
  c->Reserve(4);
  none.Give(std::move(c));
  EXPECT_EQ(none.kept(), 0u);
}

TEST(KvCachePool, KeepsNoMoreThanItsBytes) {
  auto big = std::make_unique<KvCache>(Shape(7));
  big->Reserve(1000);
  const int64_t bytes = big->allocated_bytes();
  KvCachePool pool(Shape(7), 8, bytes + bytes / 2);
  pool.Give(std::move(big));
  EXPECT_EQ(pool.kept_bytes(), bytes);
  auto second = std::make_unique<KvCache>(Shape(7));
  second->Reserve(1000);
  pool.Give(std::move(second));  // would pass the bound: freed
  EXPECT_EQ(pool.kept(), 1u);
  pool.Take();
  EXPECT_EQ(pool.kept_bytes(), 0);
}

// ATen refuses in-place updates of inference-mode tensors outside inference mode: a cache made in
// one mode goes only to a sequence running in that mode.
TEST(KvCachePool, ACacheGoesOnlyToASequenceInTheModeItsTensorsWereMadeIn) {
  KvCachePool pool(Shape(7), 4, 1 << 20);
  const KvCache* inference_cache = nullptr;
  {
    c10::InferenceMode inference;
    auto c = pool.Take();
    c->Reserve(4);
    inference_cache = c.get();
    pool.Give(std::move(c));
  }
  auto normal = pool.Take();  // outside inference mode: not the inference-mode cache
  EXPECT_NE(normal.get(), inference_cache);
  normal->Reserve(4);
  normal->WriteAt(0, 0, at::ones({2, 1, 4}), at::ones({2, 1, 4}));  // an in-place update works
  c10::InferenceMode inference;
  EXPECT_EQ(pool.Take().get(), inference_cache);
}

}  // namespace
}  // namespace specdec::model
