// Distribution tests (label `slow`): for DRAFT_CHAIN, DYSPEC_TREE and DFLASH (one-hot
// proposals), the first three generated tokens over 20,000 seeded requests on a small-vocabulary
// model follow the exact AR sampling distribution of the target (chi-square, reject below
// p = 1e-4), at T=1 and at T=0.7 with top-p 0.9. The same harness run with a deliberately biased
// verifier (no residual after a rejection) must fail.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "common/engine/decoder.h"
#include "common/engine/verify.h"
#include "common/model/dflash_drafter.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/sampling/stats.h"

namespace specdec::engine {
namespace {

using model::Transformer;

constexpr double kPValue = 1e-4;
constexpr int kSamples = 20000;
constexpr int kTokens = 3;
constexpr int64_t kVocab = 8;

model::ModelConfig Config(int64_t hidden, int64_t layers) {
  model::ModelConfig c;
  c.architecture = model::Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = kVocab;
  c.hidden_size = hidden;
  c.intermediate_size = 2 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = hidden / 2;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = true;
  return c;
}

class DistributionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model::ConfigureComputeThreads(1);
    auto tc = Config(32, 2);
    target_ = Transformer::FromTensors(tc, Transformer::RandomWeights(tc, 21, 0.15))->release();
    auto dc = Config(16, 1);
    draft_ = Transformer::FromTensors(dc, Transformer::RandomWeights(dc, 22, 0.3))->release();
    model::DFlashConfig fc;
    fc.layers = Config(32, 1);
    fc.block_size = 4;
    fc.mask_token_id = 7;
    fc.target_layer_ids = {0, 1};
    dflash_ = model::DFlashDrafter::FromTensors(
                  fc, model::DFlashDrafter::RandomWeights(fc, 32, 23, 0.3), *target_)
                  ->release();
  }
  static void TearDownTestSuite() {
    delete dflash_;
    delete draft_;
    delete target_;
  }

  static std::vector<float> Probs(const std::vector<int32_t>& prefix,
                                  const sampling::SamplingParams& sp) {
    auto cache = target_->NewCache();
    model::SequenceInput in{cache.get(), prefix};
    auto out = target_->Forward(std::span<const model::SequenceInput>(&in, 1));
    at::Tensor row = (*out)[0].logits.select(0, 0).contiguous();
    std::vector<float> logits(row.data_ptr<float>(), row.data_ptr<float>() + kVocab);
    return sampling::WarpedProbs(logits, sp);
  }

  // Exact AR distribution of the first kTokens tokens, by enumeration.
  static std::vector<double> Expected(const std::vector<int32_t>& prompt,
                                      const sampling::SamplingParams& sp) {
    std::vector<double> e(kVocab * kVocab * kVocab, 0.0);
    auto p1 = Probs(prompt, sp);
    for (int a = 0; a < kVocab; ++a) {
      if (p1[a] == 0) continue;
      auto pa = prompt;
      pa.push_back(a);
      auto p2 = Probs(pa, sp);
      for (int b = 0; b < kVocab; ++b) {
        if (p2[b] == 0) continue;
        auto pb = pa;
        pb.push_back(b);
        auto p3 = Probs(pb, sp);
        for (int c = 0; c < kVocab; ++c) e[(a * kVocab + b) * kVocab + c] = p1[a] * p2[b] * p3[c];
      }
    }
    return e;
  }

  // Runs `generate(seed)` kSamples times and returns the chi-square p-value against AR.
  static double PValue(const std::function<std::vector<int32_t>(uint64_t)>& generate,
                       const std::vector<int32_t>& prompt, const sampling::SamplingParams& sp,
                       const std::string& what) {
    std::vector<int64_t> counts(kVocab * kVocab * kVocab, 0);
    for (int s = 0; s < kSamples; ++s) {
      std::vector<int32_t> t = generate(1000003ull * (s + 1));
      EXPECT_EQ(t.size(), static_cast<size_t>(kTokens));
      if (t.size() != kTokens) return 0;
      ++counts[(t[0] * kVocab + t[1]) * kVocab + t[2]];
    }
    const std::vector<double> expected = Expected(prompt, sp);
    // The test only means something if many outcomes are likely: count the cells it really uses.
    int cells = 0;
    for (double e : expected) cells += e * kSamples >= 5;
    EXPECT_GE(cells, 20) << what << ": the distribution is too peaked for a meaningful test";
    const double p = sampling::ChiSquarePValue(counts, expected);
    std::printf("[chi-square] %-44s p-value %.4g (%d samples, %d cells, threshold %.0e)\n",
                what.c_str(), p, kSamples, cells, kPValue);
    return p;
  }

  // `block_size` 0: DFLASH_ADAPTIVE's cost-aware blocks (AR runs and every block size in turn
  // while the process's cost model explores).
  void CheckMethod(Method m, float temperature, float top_p, int32_t block_size = 4) {
    const std::vector<int32_t> prompt = {1, 5, 2, 6};
    sampling::SamplingParams sp{temperature, 0, top_p, 0};
    EngineModels em{target_, draft_, dflash_};
    auto gen = [&](uint64_t seed) {
      DecodeOptions o;
      o.method = m;
      o.max_new_tokens = kTokens;
      o.sampling = sp;
      o.sampling.seed = seed;
      o.draft_length = 3;
      o.tree_budget = 6;
      o.block_size = block_size;
      auto r = Decode(em, prompt, o);
      EXPECT_TRUE(r.ok()) << r.status();
      return r.ok() ? r->tokens : std::vector<int32_t>();
    };
    const std::string what = std::string(MethodName(m)) + " T=" + std::to_string(temperature) +
                             " top_p=" + std::to_string(top_p);
    EXPECT_GT(PValue(gen, prompt, sp, what), kPValue) << what;
  }

  static Transformer* target_;
  static Transformer* draft_;
  static model::DFlashDrafter* dflash_;
};
Transformer* DistributionTest::target_ = nullptr;
Transformer* DistributionTest::draft_ = nullptr;
model::DFlashDrafter* DistributionTest::dflash_ = nullptr;

TEST_F(DistributionTest, ChainT1) { CheckMethod(Method::kDraftChain, 1.0f, 1.0f); }
TEST_F(DistributionTest, ChainT07TopP09) { CheckMethod(Method::kDraftChain, 0.7f, 0.9f); }
TEST_F(DistributionTest, TreeT1) { CheckMethod(Method::kDyspecTree, 1.0f, 1.0f); }
TEST_F(DistributionTest, TreeT07TopP09) { CheckMethod(Method::kDyspecTree, 0.7f, 0.9f); }
TEST_F(DistributionTest, DflashT1) { CheckMethod(Method::kDflash, 1.0f, 1.0f); }
TEST_F(DistributionTest, DflashT07TopP09) { CheckMethod(Method::kDflash, 0.7f, 0.9f); }
TEST_F(DistributionTest, DflashAdaptiveCostAwareT1) {
  CheckMethod(Method::kDflashAdaptive, 1.0f, 1.0f, 0);
}
TEST_F(DistributionTest, NgramT1) { CheckMethod(Method::kNgram, 1.0f, 1.0f); }
TEST_F(DistributionTest, NgramT07TopP09) { CheckMethod(Method::kNgram, 0.7f, 0.9f); }

// The harness has power: a chain verifier that resamples from p after a rejection (instead of
// the residual max(0, p - q)) over the same models is rejected by the same test.
TEST_F(DistributionTest, BiasedChainVerifierFails) {
  const std::vector<int32_t> prompt = {1, 5, 2, 6};
  sampling::SamplingParams sp{1.0f, 0, 1.0f, 0};
  auto gen = [&](uint64_t seed) {
    sampling::Rng rng(seed);
    std::vector<int32_t> out;
    // First token: AR from the target.
    auto p0 = Probs(prompt, sp);
    out.push_back(sampling::SampleFromProbs(p0, rng));
    // Draft 2 tokens with the draft model, verify with the biased rule.
    std::vector<int32_t> ctx = prompt;
    ctx.push_back(out[0]);
    std::vector<int32_t> draft;
    std::vector<std::vector<float>> qs;
    std::vector<int32_t> dctx = ctx;
    for (int i = 0; i < 2; ++i) {
      auto cache = draft_->NewCache();
      model::SequenceInput in{cache.get(), dctx};
      auto o = draft_->Forward(std::span<const model::SequenceInput>(&in, 1));
      at::Tensor row = (*o)[0].logits.select(0, 0).contiguous();
      std::vector<float> logits(row.data_ptr<float>(), row.data_ptr<float>() + kVocab);
      qs.push_back(sampling::WarpedProbs(logits, sp));
      draft.push_back(sampling::SampleFromProbs(qs.back(), rng));
      dctx.push_back(draft.back());
    }
    for (int i = 0; i < 2 && static_cast<int>(out.size()) < kTokens; ++i) {
      auto p = Probs(ctx, sp);
      const int32_t x = draft[i];
      if (rng.Uniform() < std::min(1.0, static_cast<double>(p[x]) / qs[i][x])) {
        out.push_back(x);
        ctx.push_back(x);
        continue;
      }
      const int32_t y = sampling::SampleFromProbs(p, rng);  // BUG on purpose: not the residual
      out.push_back(y);
      ctx.push_back(y);
      break;
    }
    while (static_cast<int>(out.size()) < kTokens) {
      out.push_back(sampling::SampleFromProbs(Probs(ctx, sp), rng));
      ctx.push_back(out.back());
    }
    return out;
  };
  EXPECT_LT(PValue(gen, prompt, sp, "BIASED chain verifier (must fail)"), kPValue);
}

}  // namespace
}  // namespace specdec::engine
