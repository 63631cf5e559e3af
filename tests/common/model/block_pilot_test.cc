#include "common/model/block_pilot.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/io/safetensors.h"
#include "common/util/status_matchers.h"
#include "tests/common/remove_tree.h"

namespace specdec::model {
namespace {

BlockPilotConfig SmallConfig() {
  BlockPilotConfig c;
  c.vocab_size = 40;
  c.hidden_size = 12;
  c.training_block_size = 8;
  c.block_sizes = {6, 7, 8, 9, 10};
  return c;
}

std::map<std::string, at::Tensor> RandomWeights(const BlockPilotConfig& c, int seed) {
  at::manual_seed(seed);
  std::map<std::string, at::Tensor> w;
  for (const auto& s : BlockPilot::WeightShapes(c)) w[s.name] = at::randn(s.shape);
  return w;
}

// Independent float64 MLP: relu(W1 x + b1) = h1; h2 = h1 + relu(W2 h1 + b2); out = W3 h2 + b3.
std::vector<double> RefScores(const std::map<std::string, at::Tensor>& w, const at::Tensor& x) {
  auto d = [&](const char* n) { return w.at(n).to(at::kDouble); };
  at::Tensor xd = x.to(at::kDouble);
  at::Tensor h1 = at::relu(at::mv(d("fc1.weight"), xd) + d("fc1.bias"));
  at::Tensor h2 = h1 + at::relu(at::mv(d("fc2.weight"), h1) + d("fc2.bias"));
  at::Tensor o = at::mv(d("out.weight"), h2) + d("out.bias");
  return std::vector<double>(o.data_ptr<double>(), o.data_ptr<double>() + o.numel());
}

TEST(BlockPilot, PredictsArgmaxCandidateFromLoadedCheckpoint) {
  BlockPilotConfig c = SmallConfig();
  auto w = RandomWeights(c, 3);
  const std::string dir =
      std::filesystem::temp_directory_path() / ("specdec_policy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << BlockPilotConfigToJson(c);
  std::vector<io::TensorToWrite> tw;
  for (const auto& [n, t] : w) {
    tw.push_back(
        {n, io::DType::kF32, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
         std::span<const std::byte>(reinterpret_cast<const std::byte*>(t.data_ptr()), t.nbytes())});
  }
  SPECDEC_ASSERT_OK(io::WriteSafetensors(dir + "/model.safetensors", tw));
  auto policy = BlockPilot::Load(dir);
  ASSERT_TRUE(policy.ok()) << policy.status();
  std::map<int, int> chosen;
  for (int i = 0; i < 50; ++i) {
    at::Tensor x = at::randn({40}) * 3;
    auto pred = (*policy)->Predict(std::span<const float>(x.data_ptr<float>(), 40));
    ASSERT_TRUE(pred.ok());
    auto ref = RefScores(w, x);
    size_t best = std::max_element(ref.begin(), ref.end()) - ref.begin();
    EXPECT_EQ(pred->block_size, c.block_sizes[best]);
    for (size_t k = 0; k < ref.size(); ++k) EXPECT_NEAR(pred->scores[k], ref[k], 1e-3);
    ++chosen[pred->block_size];
  }
  testing_util::RemoveTree(dir);
}

TEST(BlockPilot, RejectsBadInputAndConfigs) {
  auto policy = BlockPilot::FromTensors(SmallConfig(), RandomWeights(SmallConfig(), 1));
  ASSERT_TRUE(policy.ok());
  std::vector<float> short_logits(39, 0.f);
  SPECDEC_EXPECT_STATUS((*policy)->Predict(short_logits), absl::StatusCode::kInvalidArgument,
                        "expects 40 logits");
  std::vector<float> nan_logits(40, std::nanf(""));
  SPECDEC_EXPECT_STATUS((*policy)->Predict(nan_logits), absl::StatusCode::kInvalidArgument, "NaN");
  SPECDEC_EXPECT_STATUS(ParseBlockPilotConfig(R"({"vocab_size":4})", "p/config.json"),
                        absl::StatusCode::kInvalidArgument, "p/config.json");
  SPECDEC_EXPECT_STATUS(
      ParseBlockPilotConfig(
          R"({"vocab_size":4,"hidden_size":2,"training_block_size":8,"block_sizes":[8,7]})", "p"),
      absl::StatusCode::kInvalidArgument, "ascending");
  auto w = RandomWeights(SmallConfig(), 1);
  w["fc2.weight"] = at::zeros({12, 11});
  SPECDEC_EXPECT_STATUS(BlockPilot::FromTensors(SmallConfig(), w),
                        absl::StatusCode::kInvalidArgument, "fc2.weight");
}

}  // namespace
}  // namespace specdec::model
