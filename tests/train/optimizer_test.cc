// AdamW, the learning-rate schedule, gradient clipping and checkpoints: an LM overfits a tiny
// sequence, and a resumed run continues from the exact saved state.
#include "train/optimizer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "common/model/weights.h"
#include "common/util/status_matchers.h"
#include "train/checkpoint.h"
#include "train/lm_model.h"

namespace specdec::train {
namespace {

model::ModelConfig Tiny() {
  model::ModelConfig c;
  c.architecture = model::Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 30;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = true;
  return c;
}

TEST(OptimizerTest, WarmupCosineSchedule) {
  EXPECT_DOUBLE_EQ(WarmupCosineLr(0, 100, 10, 1.0), 0.1);
  EXPECT_DOUBLE_EQ(WarmupCosineLr(9, 100, 10, 1.0), 1.0);
  EXPECT_NEAR(WarmupCosineLr(10, 100, 10, 1.0), 1.0, 1e-12);
  EXPECT_NEAR(WarmupCosineLr(55, 100, 10, 1.0), 0.55, 1e-12);
  EXPECT_NEAR(WarmupCosineLr(100, 100, 10, 1.0, 0.1), 0.1, 1e-12);
}

TEST(OptimizerTest, ClipScalesToMaxNorm) {
  TensorMap p = {{"a", at::zeros({2}).requires_grad_(true)}};
  AdamW opt(&p, {});
  (p["a"] * at::tensor({3.0f, 4.0f})).sum().backward();
  EXPECT_NEAR(opt.ClipGradNorm(1.0), 5.0, 1e-5);
  EXPECT_NEAR(p["a"].grad().norm().item<double>(), 1.0, 1e-4);
}

TEST(OptimizerTest, LmOverfitsTinySequenceAndResumesExactly) {
  const auto c = Tiny();
  TensorMap params = InitParams(model::TransformerTensorSpecs(c), 2, 0, 0.02, at::kCPU);
  AdamW opt(&params, {});
  at::Tensor x = at::tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
                     .unsqueeze(0)
                     .repeat({2, 1});
  const double first = LmLoss(c, params, x, at::kFloat).item<double>();
  for (int step = 0; step < 60; ++step) {
    LmLoss(c, params, x, at::kFloat).backward();
    opt.ClipGradNorm(1.0);
    opt.Step(WarmupCosineLr(step, 80, 5, 1e-2));
  }
  const double trained = LmLoss(c, params, x, at::kFloat).item<double>();
  EXPECT_GT(first, 3.0);
  EXPECT_LT(trained, 0.5);

  const std::string dir = testing::TempDir() + "/opt_ckpt";
  std::filesystem::remove_all(dir);
  SPECDEC_ASSERT_OK(SaveTrainCheckpoint(dir, params, opt, 60, "{}"));
  TensorMap fresh = InitParams(model::TransformerTensorSpecs(c), 2, 99, 0.02, at::kCPU);
  AdamW opt2(&fresh, {});
  SPECDEC_ASSERT_OK_AND_ASSIGN(int64_t step, LoadTrainCheckpoint(dir, &fresh, &opt2));
  EXPECT_EQ(step, 60);
  EXPECT_EQ(opt2.steps(), 60);
  // One more identical step on both gives identical parameters.
  LmLoss(c, params, x, at::kFloat).backward();
  opt.Step(1e-3);
  LmLoss(c, fresh, x, at::kFloat).backward();
  opt2.Step(1e-3);
  for (const auto& [name, t] : params) {
    EXPECT_TRUE(at::allclose(t, fresh.at(name), 1e-6, 1e-7)) << name;
  }
  // A checkpoint for another shape is rejected with a message.
  auto other = Tiny();
  other.hidden_size = 16;
  other.head_dim = 4;
  TensorMap wrong = InitParams(model::TransformerTensorSpecs(other), 2, 0, 0.02, at::kCPU);
  AdamW opt3(&wrong, {});
  EXPECT_EQ(LoadTrainCheckpoint(dir, &wrong, &opt3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadTrainCheckpoint(dir + "/none", &wrong, &opt3).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace specdec::train
