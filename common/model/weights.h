// Loading named weight tensors from a Hugging Face checkpoint directory into ATen tensors.
#ifndef SPECDEC_COMMON_MODEL_WEIGHTS_H_
#define SPECDEC_COMMON_MODEL_WEIGHTS_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_config.h"

namespace specdec::model {

// A tensor a model requires: its name in the checkpoint and its exact shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Reads every tensor of `specs` from the safetensors checkpoint in `dir` (F32, F16 or BF16),
// copying it out of the mapping. When `prefix_fallback` is non-empty, a tensor missing under its
// name is also looked up as prefix_fallback + name. Errors name the directory, the tensor and the
// expected vs found shape or dtype.
absl::StatusOr<std::map<std::string, at::Tensor>> LoadTensors(
    const std::string& dir, const std::vector<TensorSpec>& specs,
    const std::string& prefix_fallback = "");

// Checks that `tensors` holds every spec with the exact shape and a floating dtype.
absl::Status CheckTensors(const std::map<std::string, at::Tensor>& tensors,
                          const std::vector<TensorSpec>& specs);

std::string ShapeString(at::IntArrayRef shape);

// Appends the tensors of one Qwen3/Llama decoder layer named under `prefix` (e.g.
// "model.layers.3."): norms, q/k/v/o projections (+ q/k norms when `qk_norm`), SwiGLU MLP.
void AppendDecoderLayerSpecs(const ModelConfig& config, const std::string& prefix, bool qk_norm,
                             std::vector<TensorSpec>* out);

// Every tensor of a decoder-only LM (Qwen3/Llama) with HF names: embedding, layers, final norm,
// and lm_head unless the embedding is tied.
std::vector<TensorSpec> TransformerTensorSpecs(const ModelConfig& config);

// Seeded random tensors for `specs`: N(0, std^2), with weights whose name contains "norm"
// centred on 1. For tests and benchmarks.
std::map<std::string, at::Tensor> RandomTensors(const std::vector<TensorSpec>& specs, uint64_t seed,
                                                double std);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_WEIGHTS_H_
