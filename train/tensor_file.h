// Named tensor maps on disk (safetensors) for trainers: parameters, optimizer state, datasets.
#ifndef SPECDEC_TRAIN_TENSOR_FILE_H_
#define SPECDEC_TRAIN_TENSOR_FILE_H_

#include <ATen/core/Tensor.h>

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specdec::train {

using TensorMap = std::map<std::string, at::Tensor>;

// Writes every tensor (moved to the CPU, made contiguous, and cast to `dtype` when it is set and
// the tensor is floating point) to a safetensors file, atomically. Supports f32, bf16, f16, i64,
// i32 tensors.
absl::Status SaveTensorMap(const std::string& path, const TensorMap& tensors,
                           std::optional<at::ScalarType> dtype = std::nullopt,
                           const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of a safetensors file into owned CPU tensors of their stored dtype.
absl::StatusOr<TensorMap> LoadTensorMap(const std::string& path);

// Sum of numel over the map.
int64_t CountElements(const TensorMap& tensors);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_TENSOR_FILE_H_
