#include "common/model/block_pilot.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
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

BlockPilotConfig AcceptanceConfig() {
  auto c = ParseBlockPilotConfig(
      R"({"vocab_size":40,"hidden_size":12,"training_block_size":8,"head":"acceptance",
          "positions":7,"min_position_share":0.2,"acceptance_temperature":0.8})",
      "acceptance");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// The acceptance head: output i is the logit of accepting position i after position i-1, so the
// curve is the running product of sigmoids; scores are tau(b) for b = 2..8, and the pick is the
// largest block whose last position is accepted at least min_position_share of the time.
TEST(BlockPilot, AcceptanceHeadPredictsANonIncreasingCurveAndTheLargestPayingBlock) {
  const BlockPilotConfig c = AcceptanceConfig();
  EXPECT_EQ(c.head, BlockPilotHead::kAcceptance);
  EXPECT_EQ(c.block_sizes, (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8}));
  auto again = ParseBlockPilotConfig(BlockPilotConfigToJson(c), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->positions, 7);
  EXPECT_DOUBLE_EQ(again->min_position_share, 0.2);
  EXPECT_DOUBLE_EQ(again->acceptance_temperature, 0.8);
  auto w = RandomWeights(c, 5);
  auto policy = BlockPilot::FromTensors(c, w);
  ASSERT_TRUE(policy.ok()) << policy.status();
  std::map<int32_t, int> picks;
  for (int i = 0; i < 60; ++i) {
    at::Tensor x = at::randn({40}) * 3;
    auto pred = (*policy)->Predict(std::span<const float>(x.data_ptr<float>(), 40));
    ASSERT_TRUE(pred.ok()) << pred.status();
    const std::vector<double> out = RefScores(w, x);
    ASSERT_EQ(pred->acceptance.size(), 7u);
    ASSERT_EQ(pred->scores.size(), 7u);
    double share = 1, tau = 1;
    int32_t expected_block = 2;
    for (size_t k = 0; k < 7; ++k) {
      share *= 1 / (1 + std::exp(-out[k]));
      tau += share;
      EXPECT_NEAR(pred->acceptance[k], share, 1e-4) << k;
      EXPECT_NEAR(pred->scores[k], tau, 1e-3) << k;
      if (k > 0) {
        EXPECT_LE(pred->acceptance[k], pred->acceptance[k - 1]);
      }
      if (share >= 0.2) expected_block = static_cast<int32_t>(k) + 2;
    }
    EXPECT_EQ(pred->block_size, expected_block);
    ++picks[pred->block_size];
  }
  EXPECT_GE(picks.size(), 2u);  // the pick follows the input
}

// Predict computes a row without ATen's operators; Scores is the same network in ATen (the
// trainer's). With the top-k input (the pack's policy reads its 16 largest log-probabilities),
// both heads agree with it.
TEST(BlockPilot, PredictAgreesWithTheTrainersScoresOnTopKInput) {
  for (const BlockPilotHead head : {BlockPilotHead::kAcceptance, BlockPilotHead::kCandidates}) {
    BlockPilotConfig c = head == BlockPilotHead::kAcceptance ? AcceptanceConfig() : SmallConfig();
    c.input_top_k = 8;
    auto w = RandomWeights(c, 7);
    auto policy = BlockPilot::FromTensors(c, w);
    ASSERT_TRUE(policy.ok()) << policy.status();
    for (int i = 0; i < 40; ++i) {
      at::Tensor x = at::randn({1, 40}) * 4;
      if (i == 0) x.fill_(0.5f);  // every logit tied
      auto pred = (*policy)->Predict(std::span<const float>(x.data_ptr<float>(), 40));
      ASSERT_TRUE(pred.ok()) << pred.status();
      auto scores = (*policy)->Scores(x);
      ASSERT_TRUE(scores.ok()) << scores.status();
      if (head == BlockPilotHead::kAcceptance) {
        at::Tensor curve = BlockPilot::AcceptanceCurve(*scores).contiguous();
        ASSERT_EQ(pred->acceptance.size(), static_cast<size_t>(curve.size(1)));
        for (size_t k = 0; k < pred->acceptance.size(); ++k) {
          EXPECT_NEAR(pred->acceptance[k], curve[0][static_cast<int64_t>(k)].item<float>(), 1e-5)
              << k;
        }
      } else {
        ASSERT_EQ(pred->scores.size(), static_cast<size_t>(scores->size(1)));
        for (size_t k = 0; k < pred->scores.size(); ++k) {
          EXPECT_NEAR(pred->scores[k], (*scores)[0][static_cast<int64_t>(k)].item<float>(), 1e-4)
              << k;
        }
        EXPECT_EQ(pred->block_size, c.block_sizes[scores->argmax(1).item<int64_t>()]);
      }
    }
  }
}

TEST(BlockPilot, ConfigsWithoutAHeadAreCandidatesAndBadHeadsAreRefused) {
  auto old = ParseBlockPilotConfig(
      R"({"vocab_size":4,"hidden_size":2,"training_block_size":8,"block_sizes":[7,8,9]})", "old");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->head, BlockPilotHead::kCandidates);
  EXPECT_EQ(BlockPilot::WeightShapes(*old).back().shape, (std::vector<int64_t>{3}));
  SPECDEC_EXPECT_STATUS(
      ParseBlockPilotConfig(
          R"({"vocab_size":4,"hidden_size":2,"training_block_size":8,"head":"curve"})", "p"),
      absl::StatusCode::kInvalidArgument, "head must be");
  SPECDEC_EXPECT_STATUS(
      ParseBlockPilotConfig(
          R"({"vocab_size":4,"hidden_size":2,"training_block_size":8,"head":"acceptance"})", "p"),
      absl::StatusCode::kInvalidArgument, "positions");
  SPECDEC_EXPECT_STATUS(
      ParseBlockPilotConfig(R"({"vocab_size":4,"hidden_size":2,"training_block_size":8,
                                "head":"acceptance","positions":0})",
                            "p"),
      absl::StatusCode::kInvalidArgument, "1..255");
  SPECDEC_EXPECT_STATUS(
      ParseBlockPilotConfig(R"({"vocab_size":4,"hidden_size":2,"training_block_size":8,
                                "head":"acceptance","positions":3,"min_position_share":2})",
                            "p"),
      absl::StatusCode::kInvalidArgument, "min_position_share");
  for (const char* t : {"-1", "\"hot\""}) {
    SPECDEC_EXPECT_STATUS(ParseBlockPilotConfig(absl::StrCat(R"({"vocab_size":4,"hidden_size":2,
            "training_block_size":8,"head":"acceptance","positions":3,"acceptance_temperature":)",
                                                             t, "}"),
                                                "p"),
                          absl::StatusCode::kInvalidArgument, "acceptance_temperature");
  }
  // Acceptance configs that predate the field were labelled greedily.
  auto greedy = ParseBlockPilotConfig(
      R"({"vocab_size":4,"hidden_size":2,"training_block_size":8,"head":"acceptance",
          "positions":3})",
      "p");
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_EQ(greedy->acceptance_temperature, 0);
  // An acceptance checkpoint's out layer has one row per position.
  auto w = RandomWeights(AcceptanceConfig(), 2);
  w["out.weight"] = at::zeros({5, 12});
  SPECDEC_EXPECT_STATUS(BlockPilot::FromTensors(AcceptanceConfig(), w),
                        absl::StatusCode::kInvalidArgument, "out.weight");
}

}  // namespace
}  // namespace specdec::model
