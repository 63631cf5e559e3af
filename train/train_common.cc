#include "train/train_common.h"

#include <ATen/ATen.h>

#include <ctime>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/model/weights.h"
#include "common/util/status_macros.h"

namespace specdec::train {

absl::StatusOr<at::Device> ParseDevice(const std::string& name) {
  try {
    at::Device d(name);
    if (d.is_cuda() && !at::hasCUDA()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device '", name, "' requested but this libtorch has no CUDA device"));
    }
    return d;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("unknown device '", name, "' (cpu, cuda, cuda:N)"));
  }
}

absl::StatusOr<at::ScalarType> ParseDType(const std::string& name) {
  if (name == "f32" || name == "float32") return at::kFloat;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  return absl::InvalidArgumentError(absl::StrCat("dtype must be f32 or bf16, got '", name, "'"));
}

at::Tensor SampleWindows(std::span<const int32_t> ids, int64_t batch, int64_t len,
                         std::mt19937_64& rng, const at::Device& device) {
  at::Tensor out = at::empty({batch, len}, at::kLong);
  auto acc = out.accessor<int64_t, 2>();
  std::uniform_int_distribution<int64_t> pick(0, static_cast<int64_t>(ids.size()) - len);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = pick(rng);
    for (int64_t i = 0; i < len; ++i) acc[b][i] = ids[start + i];
  }
  return out.to(device);
}

at::Tensor FixedWindows(std::span<const int32_t> ids, int64_t first, int64_t batch, int64_t len,
                        const at::Device& device) {
  at::Tensor out = at::empty({batch, len}, at::kLong);
  auto acc = out.accessor<int64_t, 2>();
  const int64_t windows = static_cast<int64_t>(ids.size()) / len;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = ((first + b) % std::max<int64_t>(1, windows)) * len;
    for (int64_t i = 0; i < len; ++i) acc[b][i] = ids[start + i];
  }
  return out.to(device);
}

absl::Status CopyTokenizer(const std::string& tokenizer_dir, const std::string& out_dir) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    const auto from = std::filesystem::path(tokenizer_dir) / name;
    if (!std::filesystem::exists(from)) {
      if (std::string(name) == "tokenizer.json") {
        return absl::NotFoundError(absl::StrCat(from.string(), ": missing"));
      }
      continue;
    }
    std::filesystem::copy_file(from, std::filesystem::path(out_dir) / name,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError(absl::StrCat(from.string(), ": copy failed: ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorMap> LoadLmParams(const std::string& dir, const model::ModelConfig& config,
                                       const at::Device& device) {
  ASSIGN_OR_RETURN(auto tensors, model::LoadTensors(dir, model::TransformerTensorSpecs(config)));
  TensorMap out;
  for (auto& [name, t] : tensors) out.emplace(name, t.to(at::kFloat).to(device));
  return out;
}

std::string NowIso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace specdec::train
