// Consistency of the ATen decoder: incremental decoding, multi-token forwards, tree masks, cache
// truncation/compaction and batching must all give the logits of a plain causal forward.
#include "common/model/transformer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <optional>

#include "common/io/gguf_to_hf.h"
#include "common/model/runtime.h"
#include "common/util/status_matchers.h"
#include "tests/common/model/small_config.h"
#include "tests/common/remove_tree.h"

namespace specdec::model {
namespace {

// f32 tolerance: the same math in a different association order (GEMM blocking, mv vs mm).
constexpr double kF32Tol = 2e-4;
// bf16 rounds to 8 mantissa bits; logits of a small random model stay within this.
constexpr double kBf16Tol = 0.1;

ModelConfig SmallConfig(Architecture arch) { return SmallTestConfig(arch); }

// `act`: the activations' dtype; unset for the default (float on the CPU).
std::unique_ptr<Transformer> MakeModel(Architecture arch, at::ScalarType dt, uint64_t seed = 1,
                                       std::optional<at::ScalarType> act = std::nullopt) {
  ModelConfig c = SmallConfig(arch);
  LoadOptions opts;
  opts.dtype = dt;
  opts.activation_dtype = act;
  auto m = Transformer::FromTensors(c, Transformer::RandomWeights(c, seed, 0.1), opts);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

std::vector<int32_t> Tokens(int n, int seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (seed * 31 + i * 17 + i * i * 7) % 97;
  return t;
}

at::Tensor RunAll(const Transformer& m, KvCache* cache, std::span<const int32_t> tokens,
                  std::span<const int32_t> parents = {}, std::span<const int32_t> pos = {}) {
  SequenceInput in;
  in.cache = cache;
  in.tokens = tokens;
  in.tree_parents = parents;
  in.positions = pos;
  in.logits = LogitsMode::kAll;
  auto out = m.Forward(std::span<const SequenceInput>(&in, 1));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0].logits : at::Tensor();
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// (architecture, weights' dtype, activations' dtype).
using ModelParam = std::tuple<Architecture, at::ScalarType, at::ScalarType>;

class TransformerTest : public ::testing::TestWithParam<ModelParam> {
 protected:
  void SetUp() override {
    ConfigureComputeThreads(0);
    model_ =
        MakeModel(std::get<0>(GetParam()), std::get<1>(GetParam()), 1, std::get<2>(GetParam()));
    ASSERT_NE(model_, nullptr);
    tol_ = std::get<1>(GetParam()) == at::kFloat ? kF32Tol : kBf16Tol;
  }
  std::unique_ptr<Transformer> model_;
  double tol_ = 0;
};

TEST_P(TransformerTest, PrefillThenDecodeEqualsFullPrefill) {
  const auto toks = Tokens(24, 3);
  auto full_cache = model_->NewCache();
  at::Tensor full = RunAll(*model_, full_cache.get(), toks);
  ASSERT_EQ(full.size(0), 24);
  auto cache = model_->NewCache();
  at::Tensor pre = RunAll(*model_, cache.get(), std::span(toks).first(16));
  EXPECT_LT(MaxDiff(pre, full.narrow(0, 0, 16)), tol_);
  for (int i = 16; i < 24; ++i) {
    at::Tensor step = RunAll(*model_, cache.get(), std::span(toks).subspan(i, 1));
    double diff = MaxDiff(step, full.narrow(0, i, 1));
    EXPECT_LT(diff, tol_) << "decode step " << i;
  }
  EXPECT_EQ(cache->length(), 24);
}

TEST_P(TransformerTest, KTokenForwardEqualsKSingleSteps) {
  const auto toks = Tokens(20, 5);
  for (int k : {1, 2, 4, 8}) {
    auto a = model_->NewCache();
    auto b = model_->NewCache();
    RunAll(*model_, a.get(), std::span(toks).first(12));
    RunAll(*model_, b.get(), std::span(toks).first(12));
    at::Tensor block = RunAll(*model_, a.get(), std::span(toks).subspan(12, k));
    for (int i = 0; i < k; ++i) {
      at::Tensor step = RunAll(*model_, b.get(), std::span(toks).subspan(12 + i, 1));
      EXPECT_LT(MaxDiff(block.narrow(0, i, 1), step), tol_) << "k=" << k << " row " << i;
    }
  }
}

TEST_P(TransformerTest, TreeMaskGivesEachPathsLogits) {
  const auto ctx = Tokens(10, 7);
  // Tree over 7 nodes: 0 and 1 are children of the context; 2,3 children of 0; 4 child of 1;
  // 5 child of 3; 6 child of 5.
  const std::vector<int32_t> nodes = {11, 12, 13, 14, 15, 16, 17};
  const std::vector<int32_t> parents = {-1, -1, 0, 0, 1, 3, 5};
  std::vector<int32_t> depth(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) depth[i] = parents[i] < 0 ? 0 : depth[parents[i]] + 1;
  std::vector<int32_t> pos(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) pos[i] = 10 + depth[i];

  auto tree_cache = model_->NewCache();
  RunAll(*model_, tree_cache.get(), ctx);
  at::Tensor tree = RunAll(*model_, tree_cache.get(), nodes, parents, pos);
  ASSERT_EQ(tree.size(0), 7);
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::vector<int32_t> path;
    for (int j = static_cast<int>(i); j >= 0; j = parents[j]) path.insert(path.begin(), nodes[j]);
    std::vector<int32_t> seq = ctx;
    seq.insert(seq.end(), path.begin(), path.end());
    auto c = model_->NewCache();
    at::Tensor ref = RunAll(*model_, c.get(), seq);
    EXPECT_LT(MaxDiff(tree.narrow(0, i, 1), ref.narrow(0, seq.size() - 1, 1)), tol_)
        << "node " << i;
  }
}

TEST_P(TransformerTest, KeepRowsCompactsAcceptedPath) {
  const auto ctx = Tokens(9, 11);
  const std::vector<int32_t> nodes = {20, 21, 22, 23};
  const std::vector<int32_t> parents = {-1, -1, 1, 2};  // path 1 -> 2 -> 3 accepted
  const std::vector<int32_t> pos = {9, 9, 10, 11};
  auto cache = model_->NewCache();
  RunAll(*model_, cache.get(), ctx);
  RunAll(*model_, cache.get(), nodes, parents, pos);
  std::vector<int64_t> keep = {9 + 1, 9 + 2, 9 + 3};
  SPECDEC_ASSERT_OK(cache->KeepRows(9, keep));
  EXPECT_EQ(cache->length(), 12);
  std::vector<int32_t> next = {30, 31};
  at::Tensor after = RunAll(*model_, cache.get(), next);

  std::vector<int32_t> seq = ctx;
  for (int32_t t : {21, 22, 23, 30, 31}) seq.push_back(t);
  auto ref_cache = model_->NewCache();
  at::Tensor ref = RunAll(*model_, ref_cache.get(), seq);
  EXPECT_LT(MaxDiff(after, ref.narrow(0, 12, 2)), tol_);
}

TEST_P(TransformerTest, TruncateThenReappendReproducesLogits) {
  const auto toks = Tokens(18, 13);
  auto cache = model_->NewCache();
  at::Tensor first = RunAll(*model_, cache.get(), toks);
  SPECDEC_ASSERT_OK(cache->Truncate(10));
  // Append different tokens, then truncate again and re-append the originals.
  std::vector<int32_t> other = {1, 2, 3};
  RunAll(*model_, cache.get(), other);
  SPECDEC_ASSERT_OK(cache->Truncate(10));
  at::Tensor again = RunAll(*model_, cache.get(), std::span(toks).subspan(10));
  EXPECT_LT(MaxDiff(again, first.narrow(0, 10, 8)), tol_);
  EXPECT_FALSE(cache->Truncate(19).ok());
}

TEST_P(TransformerTest, RaggedBatchEqualsSeparateRuns) {
  const auto a = Tokens(13, 1), b = Tokens(5, 2), c = Tokens(1, 3);
  auto ca = model_->NewCache(), cb = model_->NewCache(), cc = model_->NewCache();
  RunAll(*model_, cb.get(), Tokens(7, 9));  // b continues an existing context
  auto cb_ref = model_->NewCache();
  RunAll(*model_, cb_ref.get(), Tokens(7, 9));
  std::vector<SequenceInput> batch(3);
  batch[0] = {ca.get(), a, {}, {}, LogitsMode::kAll};
  batch[1] = {cb.get(), b, {}, {}, LogitsMode::kAll};
  batch[2] = {cc.get(), c, {}, {}, LogitsMode::kLast};
  ForwardOptions fo;
  fo.capture_layers = {2, 0};
  auto out = model_->Forward(batch, fo);
  ASSERT_TRUE(out.ok()) << out.status();
  auto r0 = model_->NewCache(), r2 = model_->NewCache();
  EXPECT_LT(MaxDiff((*out)[0].logits, RunAll(*model_, r0.get(), a)), tol_);
  EXPECT_LT(MaxDiff((*out)[1].logits, RunAll(*model_, cb_ref.get(), b)), tol_);
  EXPECT_LT(MaxDiff((*out)[2].logits, RunAll(*model_, r2.get(), c)), tol_);
  ASSERT_TRUE((*out)[0].features.defined());
  EXPECT_EQ((*out)[0].features.size(0), 13);
  EXPECT_EQ((*out)[0].features.size(1), 2 * model_->config().hidden_size);
  EXPECT_EQ((*out)[1].features.size(0), 5);
}

// Batches of short sequences attend through the fused kernel (attention_kernel.h), including
// tree masks and depth positions; one long sequence sends the batch through the ATen path.
TEST_P(TransformerTest, RaggedTreeBatchEqualsSeparateRuns) {
  const std::vector<int32_t> parents = {-1, -1, 0, 0, 1, 2, 2};
  const std::vector<int32_t> depth = {0, 0, 1, 1, 1, 2, 2};
  const auto ctx_a = Tokens(9, 4), ctx_b = Tokens(3, 6), tree = Tokens(7, 8), chain = Tokens(4, 2);
  for (int long_rows : {0, 40}) {
    auto ca = model_->NewCache(), cb = model_->NewCache(), cl = model_->NewCache();
    auto ra = model_->NewCache(), rb = model_->NewCache(), rl = model_->NewCache();
    for (auto [c, r, ctx] : {std::tuple{&ca, &ra, &ctx_a}, std::tuple{&cb, &rb, &ctx_b}}) {
      RunAll(*model_, c->get(), *ctx);
      RunAll(*model_, r->get(), *ctx);
    }
    std::vector<int32_t> pos_a(7);
    for (int i = 0; i < 7; ++i) pos_a[i] = 9 + depth[i];
    const auto long_seq = Tokens(std::max(long_rows, 1), 5);
    std::vector<SequenceInput> batch = {{ca.get(), tree, pos_a, parents, LogitsMode::kAll},
                                        {cb.get(), chain, {}, {}, LogitsMode::kAll}};
    if (long_rows > 0) batch.push_back({cl.get(), long_seq, {}, {}, LogitsMode::kAll});
    auto out = model_->Forward(batch);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_LT(MaxDiff((*out)[0].logits, RunAll(*model_, ra.get(), tree, parents, pos_a)), tol_)
        << "tree, long_rows " << long_rows;
    EXPECT_LT(MaxDiff((*out)[1].logits, RunAll(*model_, rb.get(), chain)), tol_)
        << "chain, long_rows " << long_rows;
    if (long_rows > 0) {
      EXPECT_LT(MaxDiff((*out)[2].logits, RunAll(*model_, rl.get(), long_seq)), tol_);
    }
    // The caches hold the new rows: the next decode step matches the reference's.
    const std::vector<int32_t> next = {11};
    EXPECT_LT(MaxDiff(RunAll(*model_, cb.get(), next), RunAll(*model_, rb.get(), next)), tol_);
  }
}

TEST_P(TransformerTest, CapturedLastLayerFeedsTheHead) {
  const auto toks = Tokens(6, 4);
  auto cache = model_->NewCache();
  SequenceInput in{cache.get(), toks, {}, {}, LogitsMode::kAll};
  ForwardOptions fo;
  fo.capture_layers = {model_->config().num_hidden_layers - 1};
  auto out = model_->Forward(std::span<const SequenceInput>(&in, 1), fo);
  ASSERT_TRUE(out.ok()) << out.status();
  at::Tensor via_features = model_->LmHead(model_->FinalNorm((*out)[0].features));
  EXPECT_LT(MaxDiff(via_features, (*out)[0].logits), 1e-5);
}

TEST_P(TransformerTest, BadInputIsRejectedAndCacheUntouched) {
  auto cache = model_->NewCache();
  const auto toks = Tokens(4, 1);
  RunAll(*model_, cache.get(), toks);
  auto expect_bad = [&](SequenceInput in, const char* what) {
    auto out = model_->Forward(std::span<const SequenceInput>(&in, 1));
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_FALSE(out.status().message().empty());
    EXPECT_EQ(cache->length(), 4) << what;
  };
  std::vector<int32_t> bad_tok = {5, 97};
  expect_bad({cache.get(), bad_tok}, "token id == vocab");
  std::vector<int32_t> neg_tok = {-1};
  expect_bad({cache.get(), neg_tok}, "negative token id");
  std::vector<int32_t> empty;
  expect_bad({cache.get(), empty}, "no tokens");
  std::vector<int32_t> two = {1, 2}, bad_parent = {-1, 1};
  expect_bad({cache.get(), two, {}, bad_parent}, "self parent");
  std::vector<int32_t> one_pos = {3};
  expect_bad({cache.get(), two, one_pos}, "position count");
  std::vector<int32_t> too_long(260, 1);
  expect_bad({cache.get(), too_long}, "context overflow");
  auto other =
      MakeModel(std::get<0>(GetParam()), std::get<1>(GetParam()), 2, std::get<2>(GetParam()));
  auto foreign = other->NewCache();
  SequenceInput in{foreign.get(), two};
  EXPECT_EQ(model_->Forward(std::span<const SequenceInput>(&in, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TransformerTest,
    ::testing::Values(ModelParam{Architecture::kQwen3, at::kFloat, at::kFloat},
                      ModelParam{Architecture::kLlama, at::kFloat, at::kFloat},
                      ModelParam{Architecture::kQwen3, at::kBFloat16, at::kFloat},
                      ModelParam{Architecture::kQwen3, at::kBFloat16, at::kBFloat16}),
    [](const auto& info) {
      auto name = [](at::ScalarType t) { return t == at::kFloat ? "f32" : "bf16"; };
      return std::string(ArchitectureName(std::get<0>(info.param))) + "_" +
             name(std::get<1>(info.param)) + "_act_" + name(std::get<2>(info.param));
    });

// bf16 weights on the CPU keep float activations by default (the residual stream, norms,
// attention), rounding only what a product consumes, with a bf16 KV cache (attention's products
// consume its keys and values); their logits land closer to the float32 model's than those of
// Transformers' all-bf16 arithmetic, and closer still with a float KV cache.
TEST(TransformerBf16, FloatActivationsByDefaultAndCloserToFloat32) {
  for (Architecture arch : {Architecture::kQwen3, Architecture::kLlama}) {
    SCOPED_TRACE(ArchitectureName(arch));
    auto f32 = MakeModel(arch, at::kFloat);
    auto mixed = MakeModel(arch, at::kBFloat16);
    auto all_bf16 = MakeModel(arch, at::kBFloat16, 1, at::kBFloat16);
    ModelConfig c = SmallConfig(arch);
    LoadOptions opts;
    opts.dtype = at::kBFloat16;
    opts.kv_dtype = at::kFloat;
    auto float_kv = Transformer::FromTensors(c, Transformer::RandomWeights(c, 1, 0.1), opts);
    ASSERT_TRUE(f32 && mixed && all_bf16 && float_kv.ok());
    EXPECT_EQ(mixed->dtype(), at::kBFloat16);
    EXPECT_EQ(mixed->activation_dtype(), at::kFloat);
    EXPECT_EQ(mixed->kv_dtype(), at::kBFloat16);
    EXPECT_EQ(all_bf16->activation_dtype(), at::kBFloat16);
    EXPECT_EQ((*float_kv)->activation_dtype(), at::kFloat);
    EXPECT_EQ(mixed->kv_bytes_per_token(), all_bf16->kv_bytes_per_token());
    EXPECT_EQ((*float_kv)->kv_bytes_per_token(), 2 * mixed->kv_bytes_per_token());
    const std::vector<int32_t> tokens = Tokens(48, 3);
    auto logits = [&](const Transformer& m) {
      auto cache = m.NewCache();
      return RunAll(m, cache.get(), tokens);
    };
    const at::Tensor want = logits(*f32);
    auto rms = [&](const at::Tensor& got) {
      return (got - want).pow(2).mean().sqrt().item<double>();
    };
    const double mixed_err = rms(logits(*mixed)), float_kv_err = rms(logits(**float_kv)),
                 bf16_err = rms(logits(*all_bf16));
    EXPECT_GT(float_kv_err, 0) << "bf16 weights must differ from the float32 ones somewhere";
    EXPECT_LT(float_kv_err, mixed_err);
    EXPECT_LT(mixed_err * 1.2, bf16_err) << mixed_err << " vs " << bf16_err;
    EXPECT_LT(float_kv_err * 1.5, bf16_err) << float_kv_err << " vs " << bf16_err;
  }
}

TEST(TransformerBf16, ActivationAndKvDtypesAreFloatOrTheWeights) {
  ModelConfig c = SmallConfig(Architecture::kQwen3);
  LoadOptions opts;
  opts.dtype = at::kFloat;
  opts.activation_dtype = at::kBFloat16;
  auto m = Transformer::FromTensors(c, Transformer::RandomWeights(c, 1, 0.1), opts);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  opts.dtype = at::kBFloat16;
  opts.activation_dtype = std::nullopt;
  opts.kv_dtype = at::kHalf;
  m = Transformer::FromTensors(c, Transformer::RandomWeights(c, 1, 0.1), opts);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
}

// --device at the boundary: the CPU always; a CUDA device only where this libtorch has one (a
// clear FAILED_PRECONDITION elsewhere, before anything loads); anything else is refused.
TEST(TransformerLoad, PackedWeightsGiveTheSameLogits) {
  // Where the CPU's linear kernel reads packed matrices (AVX2 without AVX-512), bf16 matrices
  // load packed by default; a vocabulary of 128 packs the embedding too (tied for Llama).
  for (Architecture arch : {Architecture::kQwen3, Architecture::kLlama}) {
    for (at::ScalarType act : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(testing::Message()
                   << ArchitectureName(arch) << ", activations " << c10::toString(act));
      ModelConfig c = SmallConfig(arch);
      c.vocab_size = 128;
      const auto weights = Transformer::RandomWeights(c, 5, 0.1);
      LoadOptions opts;
      opts.dtype = at::kBFloat16;
      opts.activation_dtype = act;
      auto packed = Transformer::FromTensors(c, weights, opts);
      opts.pack_weights = false;
      auto plain = Transformer::FromTensors(c, weights, opts);
      ASSERT_TRUE(packed.ok() && plain.ok());
      EXPECT_TRUE((*packed)->pack_weights());
      EXPECT_FALSE((*plain)->pack_weights());
      auto passes = [&](const Transformer& m) {
        auto cache = m.NewCache();
        const std::vector<int32_t> prompt = Tokens(21, 4), step = {7}, chain = Tokens(5, 9);
        return at::cat({RunAll(m, cache.get(), prompt), RunAll(m, cache.get(), step),
                        RunAll(m, cache.get(), chain)});
      };
      EXPECT_TRUE(at::equal(passes(**packed), passes(**plain)));
    }
  }
}

TEST(TransformerLoad, WeightsOnHugePagesGiveTheSameLogits) {
  // The weights move into one huge-page buffer after loading (common/model/huge_pages.h); where
  // they live changes no value. SPECDEC_HUGE_PAGES=0 keeps them where ATen put them.
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dt));
    ModelConfig c = SmallConfig(Architecture::kLlama);  // tied: embedding and LM head shared
    const auto weights = Transformer::RandomWeights(c, 6, 0.1);
    LoadOptions opts;
    opts.dtype = dt;
    auto moved = Transformer::FromTensors(c, weights, opts);
    setenv("SPECDEC_HUGE_PAGES", "0", 1);
    auto kept = Transformer::FromTensors(c, weights, opts);
    unsetenv("SPECDEC_HUGE_PAGES");
    ASSERT_TRUE(moved.ok() && kept.ok());
    auto passes = [&](const Transformer& m) {
      auto cache = m.NewCache();
      const std::vector<int32_t> prompt = Tokens(19, 2), step = {5}, chain = Tokens(4, 8);
      return at::cat({RunAll(m, cache.get(), prompt), RunAll(m, cache.get(), step),
                      RunAll(m, cache.get(), chain)});
    };
    EXPECT_TRUE(at::equal(passes(**moved), passes(**kept)));
  }
}

TEST(TransformerLoad, RowLayersGiveTheSameLogitsAndFeatures) {
  // CPU passes whose every row attends through the fused kernel run the decoder layers on raw
  // buffers (row_layer.h): the same kernels in the same order as ATen's composition, so the same
  // values, bit for bit, for prompts, steps, chains, trees, batches and captured features.
  for (Architecture arch : {Architecture::kQwen3, Architecture::kLlama}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(testing::Message() << ArchitectureName(arch) << ", " << c10::toString(dt));
      ModelConfig c = SmallConfig(arch);
      const auto weights = Transformer::RandomWeights(c, 8, 0.1);
      LoadOptions opts;
      opts.dtype = dt;
      auto rows = Transformer::FromTensors(c, weights, opts);
      opts.row_layers = false;
      auto aten = Transformer::FromTensors(c, weights, opts);
      ASSERT_TRUE(rows.ok() && aten.ok());
      ASSERT_TRUE((*rows)->row_layers());
      ASSERT_FALSE((*aten)->row_layers());
      auto passes = [&](const Transformer& m) {
        auto a = m.NewCache(), b = m.NewCache();
        const std::vector<int32_t> prompt = Tokens(23, 3), step = {9}, chain = Tokens(6, 5);
        const std::vector<int32_t> tree = Tokens(5, 7), parents = {-1, 0, 0, 1, -1};
        std::vector<at::Tensor> out = {RunAll(m, a.get(), prompt), RunAll(m, a.get(), step),
                                       RunAll(m, a.get(), tree, parents),
                                       RunAll(m, b.get(), Tokens(11, 6))};
        SequenceInput batch[2];
        batch[0].cache = a.get();
        batch[0].tokens = chain;
        batch[1].cache = b.get();
        batch[1].tokens = step;
        for (SequenceInput& in : batch) in.logits = LogitsMode::kAll;
        ForwardOptions capture;
        capture.capture_layers = {2, 0};
        auto both = m.Forward(batch, capture);
        EXPECT_TRUE(both.ok()) << both.status();
        for (const SequenceOutput& o : *both) {
          out.push_back(o.logits);
          out.push_back(o.features);
        }
        for (at::Tensor& t : out) t = t.flatten();
        return at::cat(out);
      };
      EXPECT_TRUE(at::equal(passes(**rows), passes(**aten)));
    }
  }
}

TEST(TransformerLoad, RowLayersTakeOnlyFloatActivations) {
  ModelConfig c = SmallConfig(Architecture::kQwen3);
  LoadOptions opts;
  opts.dtype = at::kBFloat16;
  opts.activation_dtype = at::kBFloat16;
  auto m = Transformer::FromTensors(c, Transformer::RandomWeights(c, 8, 0.1), opts);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE((*m)->row_layers());
}

TEST(TransformerLoad, DevicesAreCheckedBeforeAnythingLoads) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(c10::Device cpu, LoadOptions::ParseDevice("cpu"));
  EXPECT_TRUE(cpu.is_cpu());
  SPECDEC_EXPECT_STATUS(LoadOptions::ParseDevice("tpu"), absl::StatusCode::kInvalidArgument,
                        "cpu, cuda or cuda:N");
  SPECDEC_EXPECT_STATUS(LoadOptions::ParseDevice("cuda:x"), absl::StatusCode::kInvalidArgument,
                        "cpu, cuda or cuda:N");
  ModelConfig c;
  c.architecture = Architecture::kLlama;
  c.vocab_size = 16;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  LoadOptions o;
  o.device = c10::Device(c10::kCUDA, 0);
  if (at::hasCUDA()) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(c10::Device gpu, LoadOptions::ParseDevice("cuda"));
    EXPECT_EQ(gpu.str(), "cuda:0");
  } else {
    SPECDEC_EXPECT_STATUS(LoadOptions::ParseDevice("cuda"), absl::StatusCode::kFailedPrecondition,
                          "no CUDA");
    SPECDEC_EXPECT_STATUS(Transformer::FromTensors(c, Transformer::RandomWeights(c, 1), o),
                          absl::StatusCode::kFailedPrecondition, "CUDA");
  }
}

TEST(TransformerLoad, MissingAndMisshapenTensorsAreNamed) {
  ModelConfig c = SmallConfig(Architecture::kQwen3);
  auto w = Transformer::RandomWeights(c, 1);
  w.erase("model.layers.1.self_attn.k_norm.weight");
  auto m = Transformer::FromTensors(c, w);
  SPECDEC_EXPECT_STATUS(m, absl::StatusCode::kInvalidArgument,
                        "model.layers.1.self_attn.k_norm.weight");
  w = Transformer::RandomWeights(c, 1);
  w["model.layers.0.mlp.up_proj.weight"] = at::zeros({128, 63});
  m = Transformer::FromTensors(c, w);
  SPECDEC_EXPECT_STATUS(m, absl::StatusCode::kInvalidArgument, "[128, 63]");
}

// The real pretrained stories260K (Llama-2 architecture, GQA) converted from GGUF.
class Stories260KTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string gguf =
        std::string(SPECDEC_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
    if (!std::filesystem::exists(gguf)) return;
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("specdec_stories_" + std::to_string(::getpid())));
    auto s = io::ConvertGgufToHf(gguf, *dir_);
    ASSERT_TRUE(s.ok()) << s;
  }
  static void TearDownTestSuite() {
    if (dir_) testing_util::RemoveTree(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (dir_ == nullptr) GTEST_SKIP() << "../shared/models/stories260K is absent";
  }
  static std::string* dir_;
};
std::string* Stories260KTest::dir_ = nullptr;

TEST_F(Stories260KTest, IncrementalAndTreeForwardsMatchFullForward) {
  auto m = Transformer::Load(*dir_);
  ASSERT_TRUE(m.ok()) << m.status();
  const Transformer& model = **m;
  EXPECT_EQ(model.config().num_key_value_heads, 4);
  std::vector<int32_t> toks = {1, 403, 407, 261, 378, 429, 271, 262, 281, 280, 285, 302};
  auto full_cache = model.NewCache();
  at::Tensor full = RunAll(model, full_cache.get(), toks);
  auto cache = model.NewCache();
  RunAll(model, cache.get(), std::span(toks).first(5));
  for (size_t i = 5; i < toks.size(); ++i) {
    at::Tensor step = RunAll(model, cache.get(), std::span(toks).subspan(i, 1));
    EXPECT_LT(MaxDiff(step, full.narrow(0, i, 1)), kF32Tol) << "step " << i;
  }
  // A two-branch tree after 6 context tokens: branch A = toks[6..8], branch B = {300, 301}.
  auto tc = model.NewCache();
  RunAll(model, tc.get(), std::span(toks).first(6));
  std::vector<int32_t> nodes = {toks[6], 300, toks[7], 301, toks[8]};
  std::vector<int32_t> parents = {-1, -1, 0, 1, 2};
  std::vector<int32_t> pos = {6, 6, 7, 7, 8};
  at::Tensor tree = RunAll(model, tc.get(), nodes, parents, pos);
  EXPECT_LT(MaxDiff(tree.narrow(0, 4, 1), full.narrow(0, 8, 1)), kF32Tol);
  EXPECT_LT(MaxDiff(tree.narrow(0, 2, 1), full.narrow(0, 7, 1)), kF32Tol);
}

}  // namespace
}  // namespace specdec::model
