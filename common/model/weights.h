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

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_WEIGHTS_H_
