// Helpers shared by the torch trainers (batch sampling, devices, exports). Internal to train/.
#ifndef SPECDEC_TRAIN_TRAIN_COMMON_H_
#define SPECDEC_TRAIN_TRAIN_COMMON_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <random>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/model_config.h"
#include "train/tensor_file.h"

namespace specdec::train {

absl::StatusOr<at::Device> ParseDevice(const std::string& name);
absl::StatusOr<at::ScalarType> ParseDType(const std::string& name);

// [batch, len] int64 windows drawn uniformly from `ids` with `rng`, on `device`.
at::Tensor SampleWindows(std::span<const int32_t> ids, int64_t batch, int64_t len,
                         std::mt19937_64& rng, const at::Device& device);
// The i-th of consecutive non-overlapping windows (for deterministic held-out evaluation).
at::Tensor FixedWindows(std::span<const int32_t> ids, int64_t first, int64_t batch, int64_t len,
                        const at::Device& device);

// Copies tokenizer.json / tokenizer_config.json from `tokenizer_dir` into `out_dir` (the ones
// that exist; tokenizer.json must).
absl::Status CopyTokenizer(const std::string& tokenizer_dir, const std::string& out_dir);

// Loads an HF LM directory (config.json + model.safetensors) as f32 tensors on `device`.
absl::StatusOr<TensorMap> LoadLmParams(const std::string& dir, const model::ModelConfig& config,
                                       const at::Device& device);

std::string NowIso8601();

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_TRAIN_COMMON_H_
