// Fixed draft passes, the body that a CUDA graph captures (dflash_fixed_pass.cc), run uncaptured
// on the CPU against the general path: the same draft logits through drafts whose new context
// rows number 0 to the block size (padded), more than it (the general path), two block sizes on
// one cache, and the cache's growth.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "tests/common/model/small_config.h"

namespace specdec::model {
namespace {

struct Models {
  std::unique_ptr<Transformer> target;
  std::unique_ptr<DFlashDrafter> drafter;
};

Models MakeModels(at::ScalarType dtype, bool fixed) {
  const ModelConfig tc = SmallTestConfig(Architecture::kQwen3, 512);
  LoadOptions opts;
  opts.dtype = dtype;
  opts.uncaptured_fixed_passes = fixed;
  Models m;
  auto target = Transformer::FromTensors(tc, Transformer::RandomWeights(tc, 3, 0.1), opts);
  EXPECT_TRUE(target.ok()) << target.status();
  if (!target.ok()) return m;
  m.target = *std::move(target);
  DFlashConfig dc;
  dc.layers = tc;
  dc.layers.num_hidden_layers = 2;
  dc.block_size = 8;
  dc.mask_token_id = 96;
  dc.target_layer_ids = {0, 2};
  auto drafter = DFlashDrafter::FromTensors(
      dc, DFlashDrafter::RandomWeights(dc, tc.hidden_size, 7, 0.1), *m.target);
  EXPECT_TRUE(drafter.ok()) << drafter.status();
  if (drafter.ok()) m.drafter = *std::move(drafter);
  return m;
}

// The draft logits of a fixed schedule of drafts: (new context rows, block size) per draft, the
// features drawn after seeding so that both drafters see the same ones.
at::Tensor RunSchedule(const DFlashDrafter& drafter, KvCache* cache, uint64_t seed = 11) {
  const std::vector<std::pair<int64_t, int32_t>> schedule = {
      {30, 8}, {1, 8}, {8, 8}, {0, 8}, {3, 4}, {4, 4}, {2, 8}, {9, 4}, {5, 8}};
  const int64_t width = 2 * drafter.target().config().hidden_size;
  at::manual_seed(seed);  // the same features for every drafter compared
  std::vector<at::Tensor> logits;
  auto draft = [&](int64_t m, int32_t b, int32_t last) {
    DraftInput in;
    in.cache = cache;
    if (m > 0) in.new_features = at::randn({m, width}, at::kFloat);
    in.last_token = last;
    in.block_size = b;
    auto out = drafter.Draft(std::span<const DraftInput>(&in, 1));
    ASSERT_TRUE(out.ok()) << out.status();
    logits.push_back((*out)[0]);
  };
  int32_t last = 5;
  for (const auto& [m, b] : schedule) draft(m, b, last++ % 90);
  // Drafts of 1 to 8 new rows across two reallocations (64 and 128 slots, then more).
  for (int i = 0; i < 40; ++i) draft(1 + (i * 5) % 8, 8, (i * 13 + 5 + seed) % 90);
  EXPECT_GT(cache->capacity(), 128);
  return at::cat(logits, 0);
}

TEST(DFlashFixedPass, UncapturedGivesTheGeneralPathsDraftLogits) {
  // f32 weights, and bf16 weights with float activations and a bf16 cache (the CPU default).
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const Models general = MakeModels(dtype, false), fixed = MakeModels(dtype, true);
    ASSERT_TRUE(general.drafter && fixed.drafter);
    auto general_cache = general.drafter->NewCache(), fixed_cache = fixed.drafter->NewCache();
    const at::Tensor want = RunSchedule(*general.drafter, general_cache.get());
    const at::Tensor got = RunSchedule(*fixed.drafter, fixed_cache.get());
    ASSERT_EQ(want.sizes(), got.sizes());
    const double diff = (want.to(at::kDouble) - got.to(at::kDouble)).abs().max().item<double>();
    // The general path's fused attention kernel against ATen's matmuls over the whole capacity.
    EXPECT_LT(diff, dtype == at::kFloat ? 1e-4 : 0.05);
    EXPECT_GT(want.abs().max().item<double>(), 0.1);  // logits that say something
    // In f32 the drafts themselves agree (no near-ties among random weights' logits).
    if (dtype == at::kFloat) {
      EXPECT_TRUE(at::equal(want.argmax(1), got.argmax(1)));
    }
  }
}

TEST(DFlashFixedPass, NoGraphsAreCapturedWithoutCuda) {
  const Models fixed = MakeModels(at::kFloat, true);
  ASSERT_TRUE(fixed.drafter);
  auto cache = fixed.drafter->NewCache();
  RunSchedule(*fixed.drafter, cache.get());
  EXPECT_EQ(fixed.drafter->captured_graphs(), 0);
  EXPECT_FALSE(fixed.target->captures_graphs());
}

// A drafter cache given back keeps its buffers and passes for the next sequence, whose drafts are
// a fresh cache's.
TEST(DFlashFixedPass, ARecycledCacheKeepsItsPassesAndForgetsItsSequence) {
  const Models fixed = MakeModels(at::kFloat, true), fresh = MakeModels(at::kFloat, true);
  ASSERT_TRUE(fixed.drafter && fresh.drafter);
  auto first = fixed.drafter->NewCache();
  RunSchedule(*fixed.drafter, first.get(), 3);
  const KvCache* kept = first.get();
  fixed.drafter->RecycleCache(std::move(first));
  auto second = fixed.drafter->NewCache();
  ASSERT_EQ(second.get(), kept);
  EXPECT_EQ(second->length(), 0);
  EXPECT_NE(second->attachment(), nullptr);
  auto other = fresh.drafter->NewCache();
  const at::Tensor want = RunSchedule(*fresh.drafter, other.get(), 4);
  const at::Tensor got = RunSchedule(*fixed.drafter, second.get(), 4);
  EXPECT_LT((want - got).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace specdec::model
