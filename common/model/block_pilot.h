// BlockPilot block-size policy (docs/design.md §2.5): a small MLP over the target's raw last-token
// logits after prefill. Its acceptance head predicts the request's acceptance curve (the share of
// steps accepting each draft position), from which the step loop weighs every block size against
// its cost; the older candidates head picks one block size among {B-k, ..., B+k}.
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

enum class BlockPilotHead {
  kCandidates,  // one score per candidate block size; the argmax is the pick
  kAcceptance,  // the acceptance curve over draft positions 0 .. positions-1
};

struct BlockPilotConfig {
  int64_t vocab_size = 0;            // input width: the target's vocabulary
  int64_t hidden_size = 256;         // MLP width
  // The MLP's input: 0 = the raw logits (vocab_size wide); k > 0 = the k largest log-probabilities
  // of the logits' softmax, in descending order (the shape of the target's confidence, whatever
  // the tokens).
  int32_t input_top_k = 0;
  int32_t training_block_size = 16;  // B, the drafter's training block size
  BlockPilotHead head = BlockPilotHead::kCandidates;
  // kCandidates: the candidates, ascending (B-k .. B+k). kAcceptance: 2 .. positions + 1 (derived).
  std::vector<int32_t> block_sizes;
  int32_t positions = 0;  // kAcceptance: draft positions predicted (the largest block drafts
                          // positions + 1 rows)
  // kAcceptance: the pick is the largest block whose last draft position is accepted at least
  // this often (a position accepted less often costs a row and commits almost nothing).
  double min_position_share = 0.01;
  // kAcceptance: the sampling temperature its labels' acceptance was measured at (`specdec train
  // policy-data --temperature`): the curve predicts acceptance at that temperature. 0 where a
  // config does not say.
  double acceptance_temperature = 0;
};

absl::StatusOr<BlockPilotConfig> ParseBlockPilotConfig(std::string_view json,
                                                       const std::string& origin);
std::string BlockPilotConfigToJson(const BlockPilotConfig& config);

struct BlockPilotPrediction {
  int32_t block_size = 0;  // kCandidates: the argmax candidate; kAcceptance: see the config
  // kCandidates: logits over config().block_sizes. kAcceptance: the predicted acceptance length
  // tau(b) = 1 + acceptance[0] + ... + acceptance[b-2] of each block size b in block_sizes.
  std::vector<float> scores;
  // kAcceptance: [i] = the predicted share of steps that accept draft position i (non-increasing
  // in i); empty for kCandidates.
  std::vector<float> acceptance;
};

// Inference-only BlockPilot MLP: Linear(V,H)-ReLU, Linear(H,H)-ReLU with a residual, Linear(H,C)
// with C the candidates or the positions. Immutable after construction and safe to call
// concurrently.
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
  // Batched form: one prediction per row.
  absl::StatusOr<std::vector<BlockPilotPrediction>> PredictBatch(
      std::span<const std::span<const float>> rows) const;
  // Batched form over rows of a float32 [n, vocab] tensor; returns the MLP's [n, C] outputs.
  absl::StatusOr<at::Tensor> Scores(const at::Tensor& logits) const;
  // The acceptance head's curve from its outputs [n, positions]: output i is the logit of
  // accepting position i given that position i-1 was accepted, so the curve is the cumulative
  // product of their sigmoids (non-increasing by construction). Shared with the trainer.
  static at::Tensor AcceptanceCurve(const at::Tensor& outputs);
  // The MLP's input rows from float [n, vocab] logits (input_top_k). Shared with the trainer.
  static at::Tensor Features(const BlockPilotConfig& config, const at::Tensor& logits);

  const BlockPilotConfig& config() const { return config_; }

 private:
  BlockPilot(BlockPilotConfig config, std::map<std::string, at::Tensor> w);
  // The acceptance head's prediction from one row of the curve.
  BlockPilotPrediction FromCurve(std::span<const float> curve) const;
  std::vector<float> FeatureRow(std::span<const float> logits) const;
  BlockPilotPrediction PredictRow(std::span<const float> logits) const;
  BlockPilotConfig config_;
  std::map<std::string, at::Tensor> w_;
};

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_BLOCK_PILOT_H_
