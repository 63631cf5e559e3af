// Fixed passes, the body that a CUDA graph captures (captured_pass.cc), run uncaptured on the CPU
// against the general path: the same logits and features through prefills, verifies, tree
// verifies, compaction, truncation, explicit positions and steps across the cache's growth.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <tuple>
#include <vector>

#include "common/model/cuda_graph.h"
#include "common/model/transformer.h"
#include "tests/common/model/small_config.h"

namespace specdec::model {
namespace {

ModelConfig SmallConfig(Architecture arch) { return SmallTestConfig(arch, 512); }

std::unique_ptr<Transformer> MakeModel(const ModelConfig& c, at::ScalarType dtype, bool fixed) {
  LoadOptions opts;
  opts.dtype = dtype;
  opts.uncaptured_fixed_passes = fixed;
  auto m = Transformer::FromTensors(c, Transformer::RandomWeights(c, 3, 0.1), opts);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

struct Trace {
  at::Tensor logits, features;
};

Trace RunTrace(const Transformer& m) {
  auto cache = m.NewCache();
  std::vector<at::Tensor> logits, features;
  auto run = [&](std::vector<int32_t> toks, std::vector<int32_t> parents, LogitsMode mode,
                 std::vector<int32_t> positions = {}) {
    SequenceInput in{cache.get(), toks, positions, parents, mode};
    ForwardOptions fo;
    fo.capture_layers = {2, 0};
    auto out = m.Forward(std::span<const SequenceInput>(&in, 1), fo);
    ASSERT_TRUE(out.ok()) << out.status();
    if ((*out)[0].logits.defined()) logits.push_back((*out)[0].logits);
    features.push_back((*out)[0].features);
  };
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back((i * 37 + 11) % 97);
  run(prompt, {}, LogitsMode::kAll);
  run({10, 20, 30, 40, 50, 60, 70, 80, 90}, {}, LogitsMode::kAll);
  EXPECT_TRUE(cache->Truncate(20).ok());
  run({1, 2, 3, 4, 5, 6, 7, 8}, {-1, 0, 0, 1, 2, 3, -1, 6}, LogitsMode::kAll);
  const std::vector<int64_t> keep = {20, 21, 23, 25};  // nodes 0 -> 1 -> 3 -> 5
  EXPECT_TRUE(cache->KeepRows(20, keep).ok());
  run({9, 19, 29}, {}, LogitsMode::kLast, {24, 25, 26});
  run({33, 44}, {}, LogitsMode::kNone);
  // 1-row steps from 29 cached tokens across two reallocations (64 and 128 slots).
  for (int i = 0; i < 110; ++i) run({(i * 13 + 5) % 97}, {}, LogitsMode::kLast);
  return {at::cat(logits, 0), at::cat(features, 0)};
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

TEST(FixedPass, UncapturedGivesTheGeneralPathsLogitsAndFeatures) {
  for (Architecture arch : {Architecture::kQwen3, Architecture::kLlama}) {
    // f32 weights, and bf16 weights with float activations and a bf16 cache (the CPU default).
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(testing::Message() << "qwen3=" << (arch == Architecture::kQwen3)
                                      << " dtype=" << c10::toString(dtype));
      const ModelConfig c = SmallConfig(arch);
      auto general = MakeModel(c, dtype, false), fixed = MakeModel(c, dtype, true);
      ASSERT_TRUE(general && fixed);
      const Trace want = RunTrace(*general), got = RunTrace(*fixed);
      ASSERT_EQ(want.logits.sizes(), got.logits.sizes());
      ASSERT_EQ(want.features.sizes(), got.features.sizes());
      // The same sums in another order: the general path's fused attention kernel against ATen's
      // matmuls over the whole capacity; with bf16 weights and cache the differences grow.
      const double tolerance = dtype == at::kFloat ? 1e-4 : 0.05;
      EXPECT_LT(MaxAbsDiff(want.logits, got.logits), tolerance);
      EXPECT_LT(MaxAbsDiff(want.features, got.features), tolerance);
      // The same next token, but where the two best logits are closer than the paths differ
      // (with bf16, random weights make near ties: a 0.002 gap against a 0.007 difference).
      const at::Tensor flipped = want.logits.argmax(1).ne(got.logits.argmax(1)).nonzero();
      for (int64_t k = 0; k < flipped.size(0); ++k) {
        const int64_t r = flipped[k][0].item<int64_t>();
        const at::Tensor top = std::get<0>(want.logits[r].topk(2));
        const double margin = (top[0] - top[1]).item<double>();
        EXPECT_LE(margin, 2 * MaxAbsDiff(want.logits[r], got.logits[r]))
            << "row " << r << " changed its argmax with a margin of " << margin;
      }
    }
  }
}

TEST(FixedPass, OnlyPassesOfAtMostTheRowLimitTakeIt) {
  const ModelConfig c = SmallConfig(Architecture::kQwen3);
  auto fixed = MakeModel(c, at::kFloat, true);
  ASSERT_TRUE(fixed);
  auto cache = fixed->NewCache();
  std::vector<int32_t> prompt(Transformer::kMaxCapturedRows + 1, 7);
  SequenceInput in{cache.get(), prompt};
  ASSERT_TRUE(fixed->Forward(std::span<const SequenceInput>(&in, 1)).ok());
  EXPECT_EQ(cache->attachment(), nullptr);  // the general path keeps nothing with the cache
  std::vector<int32_t> step = {5};
  in.tokens = step;
  ASSERT_TRUE(fixed->Forward(std::span<const SequenceInput>(&in, 1)).ok());
  EXPECT_NE(cache->attachment(), nullptr);
  EXPECT_EQ(cache->length(), Transformer::kMaxCapturedRows + 2);
}

TEST(FixedPass, CachesDropTheirPassesWhenTheirBuffersMoveAndStartAsZeros) {
  const ModelConfig c = SmallConfig(Architecture::kLlama);
  auto model = MakeModel(c, at::kFloat, false);
  ASSERT_TRUE(model);
  auto cache = model->NewCache();
  cache->Reserve(10);
  EXPECT_TRUE(at::equal(cache->KeyBuffer(0), at::zeros_like(cache->KeyBuffer(0))));
  cache->set_attachment(std::make_unique<KvCache::Attachment>());
  cache->Reserve(cache->capacity());  // fits: the buffers stay
  EXPECT_NE(cache->attachment(), nullptr);
  cache->Commit(cache->capacity());
  cache->Reserve(1);  // grows: new buffers
  EXPECT_EQ(cache->attachment(), nullptr);
  EXPECT_TRUE(at::equal(cache->ValueBuffer(2), at::zeros_like(cache->ValueBuffer(2))));
}

// A cache given back keeps its buffers and passes for the next sequence, whose logits are a fresh
// cache's: nothing of the first sequence shows through (its keys past the new length are masked).
TEST(FixedPass, ARecycledCacheKeepsItsPassesAndForgetsItsSequence) {
  const ModelConfig c = SmallConfig(Architecture::kQwen3);
  auto fixed = MakeModel(c, at::kFloat, true), fresh = MakeModel(c, at::kFloat, true);
  ASSERT_TRUE(fixed && fresh);
  auto run = [](const Transformer& m, KvCache* cache, int salt) {
    std::vector<at::Tensor> logits;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 12 + salt; ++i) prompt.push_back((i * 31 + salt) % 97);
    for (int step = 0; step < 80; ++step) {
      std::vector<int32_t> tokens =
          step == 0 ? prompt : std::vector<int32_t>{(step * 7 + salt) % 97};
      SequenceInput in{cache, tokens, {}, {}, LogitsMode::kLast};
      auto out = m.Forward(std::span<const SequenceInput>(&in, 1));
      EXPECT_TRUE(out.ok()) << out.status();
      if (out.ok()) logits.push_back((*out)[0].logits);
    }
    return at::cat(logits, 0);
  };
  auto first = fixed->NewCache();
  run(*fixed, first.get(), 1);
  const KvCache* kept = first.get();
  const int64_t capacity = first->capacity();
  fixed->RecycleCache(std::move(first));
  auto second = fixed->NewCache();
  ASSERT_EQ(second.get(), kept);
  EXPECT_EQ(second->length(), 0);
  EXPECT_EQ(second->capacity(), capacity);
  EXPECT_NE(second->attachment(), nullptr);  // its passes came with it
  auto other = fresh->NewCache();
  const at::Tensor want = run(*fresh, other.get(), 5), got = run(*fixed, second.get(), 5);
  EXPECT_LT(MaxAbsDiff(want, got), 1e-5);
}

TEST(FixedPass, GraphsAreCapturedOnlyWhereLibtorchHasCuda) {
  EXPECT_EQ(CudaGraph::Available(), at::hasCUDA() || CudaGraph::Available());
  if (!CudaGraph::Available()) {
    EXPECT_EQ(CudaGraph::Capture(0, [] {}).status().code(), absl::StatusCode::kUnimplemented);
  }
}

}  // namespace
}  // namespace specdec::model
