// Resumable training state: parameters, optimizer moments, step and a JSON sidecar per run.
#ifndef SPECDEC_TRAIN_CHECKPOINT_H_
#define SPECDEC_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "train/optimizer.h"
#include "train/tensor_file.h"

namespace specdec::train {

// Writes `<dir>/params.safetensors` (f32), `<dir>/optimizer.safetensors` and `<dir>/state.json`
// ({"step": step, "options": options_json}); each file is replaced atomically.
absl::Status SaveTrainCheckpoint(const std::string& dir, const TensorMap& params,
                                 const AdamW& optimizer, int64_t step,
                                 const std::string& options_json);

// Restores a checkpoint written by SaveTrainCheckpoint into `params` (copied in place, so the
// tensors keep their device and autograd state) and `optimizer`; returns its step. NOT_FOUND
// when `dir` holds no checkpoint; INVALID_ARGUMENT when it does not match the parameters.
absl::StatusOr<int64_t> LoadTrainCheckpoint(const std::string& dir, TensorMap* params,
                                            AdamW* optimizer);

// Appends one JSON line to `path`.
absl::Status AppendJsonLine(const std::string& path, const std::string& json);
// Writes `text` to `path` (atomically, creating parent directories).
absl::Status WriteTextFile(const std::string& path, const std::string& text);
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_CHECKPOINT_H_
