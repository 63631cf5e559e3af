#include "common/model/block_pilot.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::model {

namespace {

// The acceptance head's fields: `head`, `positions`, `min_position_share`,
// `acceptance_temperature`; block_sizes derived.
absl::Status ParseAcceptanceHead(const nlohmann::json& j, const std::string& origin,
                                 BlockPilotConfig* c) {
  c->head = BlockPilotHead::kAcceptance;
  try {
    c->positions = j.at("positions").get<int32_t>();
    if (j.contains("min_position_share")) {
      c->min_position_share = j.at("min_position_share").get<double>();
    }
    if (j.contains("acceptance_temperature")) {
      c->acceptance_temperature = j.at("acceptance_temperature").get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": the acceptance head needs an integer positions and numbers min_position_share ",
        "and acceptance_temperature where given (", e.what(), ")"));
  }
  if (!(c->acceptance_temperature >= 0 && std::isfinite(c->acceptance_temperature))) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": acceptance_temperature must be a finite number >= 0"));
  }
  if (c->positions < 1 || c->positions > 255) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": positions must be in 1..255"));
  }
  if (!(c->min_position_share >= 0 && c->min_position_share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": min_position_share must be in [0, 1]"));
  }
  c->block_sizes.clear();
  for (int32_t b = 2; b <= c->positions + 1; ++b) c->block_sizes.push_back(b);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BlockPilotConfig> ParseBlockPilotConfig(std::string_view json,
                                                       const std::string& origin) {
  auto j = nlohmann::json::parse(json.begin(), json.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": not a valid JSON object"));
  }
  BlockPilotConfig c;
  std::string head = "candidates";
  try {
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.hidden_size = j.at("hidden_size").get<int64_t>();
    c.training_block_size = j.at("training_block_size").get<int32_t>();
    if (j.contains("head")) head = j.at("head").get<std::string>();
    if (j.contains("input_top_k")) c.input_top_k = j.at("input_top_k").get<int32_t>();
    if (head == "candidates") c.block_sizes = j.at("block_sizes").get<std::vector<int32_t>>();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin,
                     ": needs integer vocab_size, hidden_size, training_block_size, a string head "
                     "and, for the candidates head, an integer array block_sizes (",
                     e.what(), ")"));
  }
  if (head == "acceptance") {
    RETURN_IF_ERROR(ParseAcceptanceHead(j, origin, &c));
  } else if (head != "candidates") {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": head must be \"candidates\" or \"acceptance\", got \"", head, "\""));
  }
  if (c.input_top_k < 0 || c.input_top_k > c.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": input_top_k must be in 0..vocab_size"));
  }
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.block_sizes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": vocab_size and hidden_size must be > 0, block_sizes non-empty"));
  }
  for (size_t i = 0; i < c.block_sizes.size(); ++i) {
    if (c.block_sizes[i] < 2 || (i > 0 && c.block_sizes[i] <= c.block_sizes[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": block_sizes must be ascending and >= 2"));
    }
  }
  return c;
}

std::string BlockPilotConfigToJson(const BlockPilotConfig& c) {
  nlohmann::json j = {{"architecture", "BlockPilot"},
                      {"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"training_block_size", c.training_block_size},
                      {"input_top_k", c.input_top_k}};
  if (c.head == BlockPilotHead::kAcceptance) {
    j["head"] = "acceptance";
    j["positions"] = c.positions;
    j["min_position_share"] = c.min_position_share;
    j["acceptance_temperature"] = c.acceptance_temperature;
  } else {
    j["head"] = "candidates";
    j["block_sizes"] = c.block_sizes;
  }
  return j.dump(2);
}

std::vector<TensorSpec> BlockPilot::WeightShapes(const BlockPilotConfig& c) {
  const int64_t n = c.head == BlockPilotHead::kAcceptance
                        ? c.positions
                        : static_cast<int64_t>(c.block_sizes.size());
  return {{"fc1.weight", {c.hidden_size, c.input_top_k > 0 ? c.input_top_k : c.vocab_size}},
          {"fc1.bias", {c.hidden_size}},
          {"fc2.weight", {c.hidden_size, c.hidden_size}},
          {"fc2.bias", {c.hidden_size}},
          {"out.weight", {n, c.hidden_size}},
          {"out.bias", {n}}};
}

BlockPilot::BlockPilot(BlockPilotConfig config, std::map<std::string, at::Tensor> w)
    : config_(std::move(config)), w_(std::move(w)) {}

absl::StatusOr<std::unique_ptr<BlockPilot>> BlockPilot::FromTensors(
    const BlockPilotConfig& config, const std::map<std::string, at::Tensor>& weights) {
  RETURN_IF_ERROR(CheckTensors(weights, WeightShapes(config)));
  std::map<std::string, at::Tensor> w;
  for (const auto& spec : WeightShapes(config)) {
    w[spec.name] = weights.at(spec.name).to(at::kFloat).contiguous();
  }
  auto pilot = std::unique_ptr<BlockPilot>(new BlockPilot(config, std::move(w)));
  return pilot;
}

absl::StatusOr<std::unique_ptr<BlockPilot>> BlockPilot::Load(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open policy config"));
  std::stringstream ss;
  ss << in.rdbuf();
  ASSIGN_OR_RETURN(BlockPilotConfig config, ParseBlockPilotConfig(ss.str(), path));
  ASSIGN_OR_RETURN(auto tensors, LoadTensors(dir, WeightShapes(config)));
  return FromTensors(config, tensors);
}

absl::StatusOr<at::Tensor> BlockPilot::Scores(const at::Tensor& logits) const {
  if (logits.dim() != 2 || logits.size(1) != config_.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("policy input must be [n, ", config_.vocab_size,
                                                   "] logits, got ", ShapeString(logits.sizes())));
  }
  try {
    at::Tensor x = Features(config_, logits.to(at::kFloat));
    at::Tensor h1 = at::relu(at::linear(x, w_.at("fc1.weight"), w_.at("fc1.bias")));
    at::Tensor h2 = h1 + at::relu(at::linear(h1, w_.at("fc2.weight"), w_.at("fc2.bias")));
    return at::linear(h2, w_.at("out.weight"), w_.at("out.bias"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("policy forward failed: ", e.what()));
  }
}

absl::StatusOr<BlockPilotPrediction> BlockPilot::Predict(std::span<const float> logits) const {
  std::span<const float> row = logits;
  ASSIGN_OR_RETURN(auto preds, PredictBatch(std::span<const std::span<const float>>(&row, 1)));
  return std::move(preds[0]);
}

absl::StatusOr<std::vector<BlockPilotPrediction>> BlockPilot::PredictBatch(
    std::span<const std::span<const float>> rows) const {
  const int64_t v = config_.vocab_size;
  std::vector<BlockPilotPrediction> out;
  out.reserve(rows.size());
  for (std::span<const float> row : rows) {
    if (static_cast<int64_t>(row.size()) != v) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy expects ", v, " logits, got ", row.size()));
    }
    for (float f : row) {
      if (std::isnan(f)) return absl::InvalidArgumentError("policy input logits contain NaN");
    }
    out.push_back(PredictRow(row));
  }
  return out;
}

namespace {

// y = W x + b for a float32 row-major [out, in] W.
std::vector<float> Affine(const at::Tensor& w, const at::Tensor& b, std::span<const float> x) {
  const int64_t out = w.size(0), in = w.size(1);
  const float* wp = w.data_ptr<float>();
  const float* bp = b.data_ptr<float>();
  std::vector<float> y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const float* row = wp + o * in;
    float sum = 0;
    for (int64_t i = 0; i < in; ++i) sum += row[i] * x[static_cast<size_t>(i)];
    y[static_cast<size_t>(o)] = sum + bp[o];
  }
  return y;
}

}  // namespace

// The MLP's input row: the logits, or with input_top_k their k largest log-probabilities in
// descending order (Features).
std::vector<float> BlockPilot::FeatureRow(std::span<const float> logits) const {
  const size_t k = static_cast<size_t>(config_.input_top_k);
  if (k == 0) return std::vector<float>(logits.begin(), logits.end());
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(x - max);
  const float log_norm = max + static_cast<float>(std::log(sum));
  std::vector<float> top(std::min(k, logits.size()));
  std::partial_sort_copy(logits.begin(), logits.end(), top.begin(), top.end(),
                         std::greater<float>());
  for (float& x : top) x -= log_norm;
  return top;
}

// One row through the MLP without ATen's operators: a request's prediction costs microseconds,
// where ten operator calls cost 0.1-0.2 ms. Scores is the same network in ATen, for training;
// BlockPilot tests hold the two together.
BlockPilotPrediction BlockPilot::PredictRow(std::span<const float> logits) const {
  const std::vector<float> x = FeatureRow(logits);
  std::vector<float> h1 = Affine(w_.at("fc1.weight"), w_.at("fc1.bias"), x);
  for (float& h : h1) h = std::max(h, 0.f);
  std::vector<float> h2 = Affine(w_.at("fc2.weight"), w_.at("fc2.bias"), h1);
  for (size_t i = 0; i < h2.size(); ++i) h2[i] = h1[i] + std::max(h2[i], 0.f);
  const std::vector<float> scores = Affine(w_.at("out.weight"), w_.at("out.bias"), h2);
  if (config_.head == BlockPilotHead::kAcceptance) {
    std::vector<float> curve(scores.size());
    float share = 1;
    for (size_t i = 0; i < scores.size(); ++i) {
      share *= 1 / (1 + std::exp(-scores[i]));
      curve[i] = share;
    }
    return FromCurve(curve);
  }
  BlockPilotPrediction pred;
  pred.scores = scores;
  const size_t best =
      static_cast<size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
  pred.block_size = config_.block_sizes[best];
  return pred;
}

at::Tensor BlockPilot::Features(const BlockPilotConfig& config, const at::Tensor& logits) {
  if (config.input_top_k == 0) return logits;
  return std::get<0>(at::log_softmax(logits, 1).topk(config.input_top_k, 1));
}

at::Tensor BlockPilot::AcceptanceCurve(const at::Tensor& outputs) {
  return at::cumprod(at::sigmoid(outputs), 1);
}

BlockPilotPrediction BlockPilot::FromCurve(std::span<const float> curve) const {
  BlockPilotPrediction pred;
  pred.acceptance.assign(curve.begin(), curve.end());
  pred.block_size = 2;
  float tau = 1;
  for (size_t i = 0; i < curve.size(); ++i) {
    tau += curve[i];
    pred.scores.push_back(tau);  // block i + 2 drafts positions 0 .. i
    if (curve[i] >= config_.min_position_share) pred.block_size = static_cast<int32_t>(i) + 2;
  }
  return pred;
}

}  // namespace specdec::model
