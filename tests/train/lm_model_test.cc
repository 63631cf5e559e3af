// The training forward passes compute the same functions as the serving runtime: LmForward's
// logits and captured features equal Transformer::Forward's, and DFlashForward's block logits
// equal DFlashDrafter::Draft's for the same anchor, context and weights.
#include "train/lm_model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "common/model/weights.h"
#include "common/util/status_matchers.h"

namespace specdec::train {
namespace {

model::ModelConfig Qwen3(int64_t vocab, int64_t hidden, int64_t layers) {
  model::ModelConfig c;
  c.architecture = model::Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = 2 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = hidden / 4;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = true;
  return c;
}

TensorMap Detached(const TensorMap& m) {
  TensorMap out;
  for (const auto& [k, v] : m) out.emplace(k, v.detach());
  return out;
}

TEST(LmModelTest, ForwardMatchesServingTransformer) {
  const auto c = Qwen3(50, 32, 3);
  TensorMap params = InitParams(model::TransformerTensorSpecs(c), 3, 7, 0.2, at::kCPU);
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto served, model::Transformer::FromTensors(c, Detached(params)));
  const std::vector<int32_t> ids = {1, 5, 9, 33, 2, 49, 0, 17, 8, 8, 8, 41};
  at::Tensor tokens = at::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
  LmForwardOptions fo;
  fo.capture_layers = {2, 0};
  at::NoGradGuard no_grad;
  LmForwardResult r = LmForward(c, params, tokens, fo);
  at::Tensor logits = LmLogits(c, params, r.hidden).squeeze(0);

  auto cache = served->NewCache();
  model::SequenceInput in;
  in.cache = cache.get();
  in.tokens = ids;
  in.logits = model::LogitsMode::kAll;
  model::ForwardOptions opts;
  opts.capture_layers = {2, 0};
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto out, served->Forward(std::span(&in, 1), opts));
  EXPECT_LT((logits - out[0].logits).abs().max().item<double>(), 1e-4);
  at::Tensor feats = at::cat({r.captured[0], r.captured[1]}, 2).squeeze(0);
  EXPECT_LT((feats - out[0].features).abs().max().item<double>(), 1e-4);
  // Weights are real (not degenerate): logits vary across positions.
  EXPECT_GT(logits.std().item<double>(), 1e-2);
}

TEST(LmModelTest, LossGradientsReachEveryParameter) {
  const auto c = Qwen3(40, 16, 2);
  TensorMap params = InitParams(model::TransformerTensorSpecs(c), 2, 1, 0.1, at::kCPU);
  at::Tensor tokens = at::randint(0, 40, {3, 9}, at::kLong);
  at::Tensor loss = LmLoss(c, params, tokens, at::kFloat, /*chunk_rows=*/5);
  EXPECT_NEAR(loss.item<double>(), std::log(40.0), 0.7);
  loss.backward();
  for (const auto& [name, p] : params) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(p.grad().abs().sum().item<double>(), 0.0) << name;
  }
}

TEST(LmModelTest, DFlashForwardMatchesServingDrafter) {
  const auto tc = Qwen3(60, 32, 4);
  TensorMap tp = InitParams(model::TransformerTensorSpecs(tc), 4, 3, 0.2, at::kCPU);
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto target, model::Transformer::FromTensors(tc, Detached(tp)));
  model::DFlashConfig dc;
  dc.layers = tc;
  dc.layers.num_hidden_layers = 2;
  dc.block_size = 5;
  dc.mask_token_id = 59;
  dc.target_layer_ids = model::DefaultTargetLayerIds(4, 2);
  TensorMap dp = InitParams(model::DFlashDrafter::WeightShapes(dc, 32), 2, 4, 0.2, at::kCPU);
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto drafter, model::DFlashDrafter::FromTensors(dc, Detached(dp), *target));

  const std::vector<int32_t> ids = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 3, 2, 38};
  at::Tensor tokens = at::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
  at::NoGradGuard no_grad;
  LmForwardOptions fo;
  fo.capture_layers = dc.target_layer_ids;
  LmForwardResult r = LmForward(tc, tp, tokens, fo);
  at::Tensor features = at::cat(r.captured, 2);
  const std::vector<int64_t> anchors = {4, 7, 2};
  DFlashBatch batch{tokens, features, at::tensor(anchors).unsqueeze(0)};
  at::Tensor hidden = DFlashForward(dc, dp, tc, tp, batch, 5, at::kFloat);  // [1, 3, 4, H]
  at::Tensor logits = LmLogits(tc, tp, hidden).squeeze(0);

  for (size_t a = 0; a < anchors.size(); ++a) {
    const int64_t p = anchors[a];
    auto cache = drafter->NewCache();
    model::DraftInput in;
    in.cache = cache.get();
    in.new_features = features.squeeze(0).narrow(0, 0, p);  // context: positions < p
    in.last_token = ids[p];
    in.block_size = 5;
    SPECDEC_ASSERT_OK_AND_ASSIGN(auto drafted, drafter->Draft(std::span(&in, 1)));
    EXPECT_LT((logits[a] - drafted[0]).abs().max().item<double>(), 1e-4) << "anchor " << p;
  }
  // Blocks do not see each other: changing the token at anchor 7 leaves anchor 2's block alone.
  at::Tensor changed = tokens.clone();
  changed[0][7] = 11;
  DFlashBatch batch2{changed, features, batch.anchors};
  at::Tensor logits2 = LmLogits(tc, tp, DFlashForward(dc, dp, tc, tp, batch2, 5, at::kFloat)).squeeze(0);
  EXPECT_LT((logits2[2] - logits[2]).abs().max().item<double>(), 1e-6);
  EXPECT_GT((logits2[1] - logits[1]).abs().max().item<double>(), 1e-4);
}

}  // namespace
}  // namespace specdec::train

namespace specdec::train {
namespace {

TEST(LmModelTest, CachedGenerationEqualsRecomputedGreedy) {
  model::ModelConfig c;
  c.architecture = model::Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = true;
  TensorMap params = InitParams(model::TransformerTensorSpecs(c), 2, 5, 0.3, at::kCPU);
  at::Tensor prompt = at::randint(0, 37, {3, 5}, at::kLong);
  at::Tensor out = LmGenerate(c, params, prompt, 9, at::kFloat, /*greedy_rows=*/3);
  ASSERT_EQ(out.size(1), 14);
  EXPECT_TRUE(at::equal(out.narrow(1, 0, 5), prompt));
  at::NoGradGuard no_grad;
  at::Tensor seq = prompt;
  for (int i = 0; i < 9; ++i) {
    at::Tensor h = LmForward(c, params, seq).hidden.select(1, seq.size(1) - 1);
    seq = at::cat({seq, LmLogits(c, params, h).argmax(-1).unsqueeze(1)}, 1);
  }
  EXPECT_TRUE(at::equal(out, seq));
  // Sampled rows stay in the vocabulary.
  at::Tensor sampled = LmGenerate(c, params, prompt, 9, at::kFloat, /*greedy_rows=*/0);
  EXPECT_GE(sampled.min().item<int64_t>(), 0);
  EXPECT_LT(sampled.max().item<int64_t>(), 37);
}

}  // namespace
}  // namespace specdec::train
