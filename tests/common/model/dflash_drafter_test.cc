// The DFlash drafter loads a checkpoint in the public z-lab layout and its block logits match an
// independent, straightforward float64 reimplementation written here (attention over [context
// K/V, block K/V], no causal mask, context rows contributing keys/values only).
#include "common/model/dflash_drafter.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/io/safetensors.h"
#include "common/model/runtime.h"
#include "common/util/status_matchers.h"
#include "tests/common/remove_tree.h"

namespace specdec::model {
namespace {

ModelConfig Qwen3(int64_t vocab, int64_t hidden, int64_t layers, int64_t heads, int64_t kv) {
  ModelConfig c;
  c.architecture = Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = 3 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv;
  c.head_dim = 8;
  c.rope_theta = 10000;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = true;
  return c;
}

using W = std::map<std::string, at::Tensor>;

at::Tensor D(const at::Tensor& t) { return t.to(at::kDouble); }

at::Tensor RefRms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x / at::sqrt(x.pow(2).mean(-1, true) + eps) * D(w);
}

// Rotate-half RoPE for rows x [n, heads, d] at positions pos, written pair by pair.
at::Tensor RefRope(const at::Tensor& x, const std::vector<int64_t>& pos, double theta) {
  at::Tensor y = x.clone();
  const int64_t d = x.size(2), half = d / 2;
  auto xa = x.accessor<double, 3>();
  auto ya = y.accessor<double, 3>();
  for (int64_t n = 0; n < x.size(0); ++n) {
    for (int64_t h = 0; h < x.size(1); ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / d);
        const double a = static_cast<double>(pos[n]) * freq;
        const double x1 = xa[n][h][i], x2 = xa[n][h][i + half];
        ya[n][h][i] = x1 * std::cos(a) - x2 * std::sin(a);
        ya[n][h][i + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  }
  return y;
}

// Reference drafter forward for one sequence: `feats` = all context features so far [M, F],
// block = [last, mask...] at positions M..M+b-1.
at::Tensor RefDraft(const DFlashConfig& cfg, const W& dw, const at::Tensor& embed,
                    const at::Tensor& feats, int32_t last, int32_t b) {
  const ModelConfig& c = cfg.layers;
  const int64_t M = feats.size(0), nh = c.num_attention_heads, nkv = c.num_key_value_heads,
                d = c.head_dim;
  at::Tensor ctx = RefRms(at::matmul(D(feats), D(dw.at("fc.weight")).t()),
                          dw.at("hidden_norm.weight"), c.rms_norm_eps);
  std::vector<int64_t> blk_tok = {last};
  for (int i = 1; i < b; ++i) blk_tok.push_back(cfg.mask_token_id);
  at::Tensor h = D(embed).index_select(0, at::tensor(blk_tok, at::kLong));
  std::vector<int64_t> pos_ctx, pos_blk;
  for (int64_t i = 0; i < M; ++i) pos_ctx.push_back(i);
  for (int64_t i = 0; i < b; ++i) pos_blk.push_back(M + i);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    auto g = [&](const std::string& n) {
      return D(dw.at("layers." + std::to_string(l) + "." + n));
    };
    at::Tensor hn = RefRms(h, g("input_layernorm.weight"), c.rms_norm_eps);
    at::Tensor q = RefRms(at::matmul(hn, g("self_attn.q_proj.weight").t()).view({b, nh, d}),
                          g("self_attn.q_norm.weight"), c.rms_norm_eps);
    q = RefRope(q, pos_blk, c.rope_theta);
    auto kproj = [&](const at::Tensor& x, const std::vector<int64_t>& pos) {
      at::Tensor k = at::matmul(x, g("self_attn.k_proj.weight").t()).view({x.size(0), nkv, d});
      return RefRope(RefRms(k, g("self_attn.k_norm.weight"), c.rms_norm_eps), pos, c.rope_theta);
    };
    at::Tensor K = at::cat({kproj(ctx, pos_ctx), kproj(hn, pos_blk)}, 0);  // [M+b, nkv, d]
    at::Tensor V = at::cat({at::matmul(ctx, g("self_attn.v_proj.weight").t()),
                            at::matmul(hn, g("self_attn.v_proj.weight").t())},
                           0)
                       .view({M + b, nkv, d});
    at::Tensor attn = at::zeros({b, nh * d}, at::kDouble);
    for (int64_t hh = 0; hh < nh; ++hh) {
      const int64_t kvh = hh / (nh / nkv);
      at::Tensor s = at::matmul(q.select(1, hh), K.select(1, kvh).t()) / std::sqrt(double(d));
      at::Tensor p = at::softmax(s, -1);  // every block row sees every context and block row
      attn.narrow(1, hh * d, d).copy_(at::matmul(p, V.select(1, kvh)));
    }
    h = h + at::matmul(attn, g("self_attn.o_proj.weight").t());
    at::Tensor hn2 = RefRms(h, g("post_attention_layernorm.weight"), c.rms_norm_eps);
    at::Tensor gate = at::matmul(hn2, g("mlp.gate_proj.weight").t());
    at::Tensor up = at::matmul(hn2, g("mlp.up_proj.weight").t());
    h = h + at::matmul(gate * at::sigmoid(gate) * up, g("mlp.down_proj.weight").t());
  }
  at::Tensor out = RefRms(h, dw.at("norm.weight"), c.rms_norm_eps).narrow(0, 1, b - 1);
  return at::matmul(out, D(embed).t());  // the target's (tied) LM head
}

TEST(DFlashDrafter, LoadsZLabLayoutAndMatchesReference) {
  ConfigureComputeThreads(0);
  ModelConfig tc = Qwen3(50, 32, 4, 4, 2);
  auto tw = Transformer::RandomWeights(tc, 1, 0.2);
  auto target = Transformer::FromTensors(tc, tw);
  ASSERT_TRUE(target.ok()) << target.status();

  DFlashConfig cfg;
  cfg.layers = Qwen3(50, 32, 2, 4, 2);
  cfg.block_size = 4;
  cfg.mask_token_id = 49;
  cfg.target_layer_ids = {1, 3};
  auto dw = DFlashDrafter::RandomWeights(cfg, 32, 5, 0.2);

  // Write the checkpoint as the reference does: config.json + model.safetensors with bare names.
  const std::string dir =
      std::filesystem::temp_directory_path() / ("specdec_dflash_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << DFlashConfigToJson(cfg);
  std::vector<io::TensorToWrite> tensors;
  std::vector<at::Tensor> keep;
  for (const auto& [name, t] : dw) {
    keep.push_back(t.contiguous());
    tensors.push_back(
        {name, io::DType::kF32, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
         std::span<const std::byte>(reinterpret_cast<const std::byte*>(keep.back().data_ptr()),
                                    keep.back().nbytes())});
  }
  SPECDEC_ASSERT_OK(io::WriteSafetensors(dir + "/model.safetensors", tensors));
  auto drafter = DFlashDrafter::Load(dir, **target);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  EXPECT_EQ((*drafter)->config().block_size, 4);
  EXPECT_EQ((*drafter)->config().target_layer_ids, (std::vector<int64_t>{1, 3}));

  // Target features for a 7-token prompt, then 2 more committed tokens.
  std::vector<int32_t> toks = {3, 14, 15, 9, 26, 5, 35, 8, 9};
  auto tcache = (*target)->NewCache();
  SequenceInput in{tcache.get(), toks};
  ForwardOptions fo;
  fo.capture_layers = {1, 3};
  auto tout = (*target)->Forward(std::span<const SequenceInput>(&in, 1), fo);
  ASSERT_TRUE(tout.ok());
  at::Tensor feats = (*tout)[0].features;  // [9, 64]
  ASSERT_EQ(feats.size(1), 64);

  auto dcache = (*drafter)->NewCache();
  DraftInput step1{dcache.get(), feats.narrow(0, 0, 7), 42, 4};
  auto l1 = (*drafter)->Draft(std::span<const DraftInput>(&step1, 1));
  ASSERT_TRUE(l1.ok()) << l1.status();
  ASSERT_EQ((*l1)[0].size(0), 3);
  EXPECT_EQ(dcache->length(), 7);  // context K/V only; block K/V dropped
  at::Tensor ref1 =
      RefDraft(cfg, dw, tw.at("model.embed_tokens.weight"), feats.narrow(0, 0, 7), 42, 4);
  EXPECT_LT(((*l1)[0].to(at::kDouble) - ref1).abs().max().item<double>(), 1e-4);

  // Second step: 2 new context rows, a larger block (any b works, not only the training size).
  DraftInput step2{dcache.get(), feats.narrow(0, 7, 2), 17, 6};
  auto l2 = (*drafter)->Draft(std::span<const DraftInput>(&step2, 1));
  ASSERT_TRUE(l2.ok()) << l2.status();
  ASSERT_EQ((*l2)[0].size(0), 5);
  at::Tensor ref2 = RefDraft(cfg, dw, tw.at("model.embed_tokens.weight"), feats, 17, 6);
  EXPECT_LT(((*l2)[0].to(at::kDouble) - ref2).abs().max().item<double>(), 1e-4);
  EXPECT_EQ(dcache->length(), 9);

  // Batched drafting of two sequences equals drafting them alone.
  auto c1 = (*drafter)->NewCache(), c2 = (*drafter)->NewCache();
  std::vector<DraftInput> batch = {{c1.get(), feats.narrow(0, 0, 7), 42, 4},
                                   {c2.get(), feats.narrow(0, 0, 3), 11, 5}};
  auto lb = (*drafter)->Draft(batch);
  ASSERT_TRUE(lb.ok());
  EXPECT_LT(((*lb)[0] - (*l1)[0]).abs().max().item<double>(), 1e-4);
  at::Tensor ref3 =
      RefDraft(cfg, dw, tw.at("model.embed_tokens.weight"), feats.narrow(0, 0, 3), 11, 5);
  EXPECT_LT(((*lb)[1].to(at::kDouble) - ref3).abs().max().item<double>(), 1e-4);
  // A second batched step: new context rows for one sequence, none for the other (the previous
  // step's block rows must not linger in either cache).
  std::vector<DraftInput> batch2 = {{c1.get(), feats.narrow(0, 7, 2), 17, 6},
                                    {c2.get(), at::Tensor(), 23, 3}};
  auto lb2 = (*drafter)->Draft(batch2);
  ASSERT_TRUE(lb2.ok()) << lb2.status();
  EXPECT_LT(((*lb2)[0].to(at::kDouble) - ref2).abs().max().item<double>(), 1e-4);
  at::Tensor ref4 =
      RefDraft(cfg, dw, tw.at("model.embed_tokens.weight"), feats.narrow(0, 0, 3), 23, 3);
  EXPECT_LT(((*lb2)[1].to(at::kDouble) - ref4).abs().max().item<double>(), 1e-4);
  EXPECT_EQ(c1->length(), 9);
  EXPECT_EQ(c2->length(), 3);

  // Bad inputs: wrong feature width, block size 1, foreign cache.
  DraftInput bad{dcache.get(), at::zeros({2, 63}), 1, 4};
  EXPECT_EQ((*drafter)->Draft(std::span<const DraftInput>(&bad, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  DraftInput bad_b{dcache.get(), at::Tensor(), 1, 1};
  EXPECT_EQ((*drafter)->Draft(std::span<const DraftInput>(&bad_b, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto foreign = (*target)->NewCache();
  DraftInput bad_c{foreign.get(), at::Tensor(), 1, 4};
  EXPECT_EQ((*drafter)->Draft(std::span<const DraftInput>(&bad_c, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dcache->length(), 9);

  // A checkpoint missing a layer tensor is rejected with its name.
  testing_util::RemoveTree(dir);
}

TEST(DFlashDrafter, DefaultTargetLayersSpreadFromOneToLMinus3) {
  EXPECT_EQ(DefaultTargetLayerIds(36, 5), (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(DefaultTargetLayerIds(8, 1), (std::vector<int64_t>{4}));
}

TEST(DFlashDrafter, ConfigErrorsAreClear) {
  SPECDEC_EXPECT_STATUS(ParseDFlashConfig(R"({"model_type":"qwen3","vocab_size":10,"hidden_size":8,
        "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"block_size":16})",
                                          "d/config.json", 4),
                        absl::StatusCode::kInvalidArgument, "mask_token_id is required");
  SPECDEC_EXPECT_STATUS(ParseDFlashConfig(R"({"model_type":"qwen3","vocab_size":10,"hidden_size":8,
        "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"block_size":16,
        "dflash_config":{"mask_token_id":9,"target_layer_ids":[7]}})",
                                          "d/config.json", 4),
                        absl::StatusCode::kInvalidArgument, "target layer id 7");
}

}  // namespace
}  // namespace specdec::model
