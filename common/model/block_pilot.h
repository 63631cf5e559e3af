// BlockPilot block-size policy (docs/design.md §2.5): a small MLP over the target's raw last-token
// logits after prefill that picks the DFlash block size for a request from {B-k, ..., B+k}.
#ifndef SPECDEC_COMMON_MODEL_BLOCK_PILOT_H_
#define SPECDEC_COMMON_MODEL_BLOCK_PILOT_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/weights.h"

namespace specdec::model {

struct BlockPilotConfig {
  int64_t vocab_size = 0;            // input width: the target's vocabulary
  int64_t hidden_size = 256;         // MLP width
  int32_t training_block_size = 16;  // B, the drafter's training block size
  std::vector<int32_t> block_sizes;  // candidates, ascending: B-k .. B+k
};

absl::StatusOr<BlockPilotConfig> ParseBlockPilotConfig(std::string_view json,
                                                       const std::string& origin);
std::string BlockPilotConfigToJson(const BlockPilotConfig& config);

struct BlockPilotPrediction {
  int32_t block_size = 0;     // the argmax candidate
  std::vector<float> scores;  // logits over config().block_sizes
};

// Inference-only BlockPilot MLP: Linear(V,H)-ReLU, Linear(H,H)-ReLU with a residual, Linear(H,C).
// Immutable after construction and safe to call concurrently.
class BlockPilot {
 public:
  // Loads `<dir>/config.json` (BlockPilotConfig fields) and `<dir>/model.safetensors` with
  // fc1.{weight,bias}, fc2.{weight,bias}, out.{weight,bias}.
  static absl::StatusOr<std::unique_ptr<BlockPilot>> Load(const std::string& dir);
  static absl::StatusOr<std::unique_ptr<BlockPilot>> FromTensors(
      const BlockPilotConfig& config, const std::map<std::string, at::Tensor>& weights);
  static std::vector<TensorSpec> WeightShapes(const BlockPilotConfig& config);

  // `logits`: the raw last-position logits of the target (vocab_size floats).
  absl::StatusOr<BlockPilotPrediction> Predict(std::span<const float> logits) const;
  // Batched form: one prediction per row, computed in one forward pass.
  absl::StatusOr<std::vector<BlockPilotPrediction>> PredictBatch(
      std::span<const std::span<const float>> rows) const;
  // Batched form over rows of a float32 [n, vocab] tensor; returns [n, candidates] scores.
  absl::StatusOr<at::Tensor> Scores(const at::Tensor& logits) const;

  const BlockPilotConfig& config() const { return config_; }

 private:
  BlockPilot(BlockPilotConfig config, std::map<std::string, at::Tensor> w);
  BlockPilotConfig config_;
  std::map<std::string, at::Tensor> w_;
};

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_BLOCK_PILOT_H_
