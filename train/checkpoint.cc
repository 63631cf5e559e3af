#include "train/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::train {

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot write"));
    out << text;
    if (!out) return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": rename failed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status AppendJsonLine(const std::string& path, const std::string& json) {
  std::ofstream out(path, std::ios::app);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot append"));
  out << json << "\n";
  return absl::OkStatus();
}

absl::Status SaveTrainCheckpoint(const std::string& dir, const TensorMap& params,
                                 const AdamW& optimizer, int64_t step,
                                 const std::string& options_json) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  RETURN_IF_ERROR(SaveTensorMap(dir + "/params.safetensors", params, at::kFloat));
  RETURN_IF_ERROR(SaveTensorMap(dir + "/optimizer.safetensors", optimizer.State(), at::kFloat));
  nlohmann::json state = {{"step", step},
                          {"options", nlohmann::json::parse(options_json, nullptr, false)}};
  return WriteTextFile(dir + "/state.json", state.dump(2));
}

absl::StatusOr<int64_t> LoadTrainCheckpoint(const std::string& dir, TensorMap* params,
                                            AdamW* optimizer) {
  auto state_text = ReadTextFile(dir + "/state.json");
  if (!state_text.ok()) return absl::NotFoundError(absl::StrCat(dir, ": no checkpoint"));
  auto state = nlohmann::json::parse(*state_text, nullptr, false);
  if (state.is_discarded() || !state.contains("step")) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/state.json: malformed"));
  }
  ASSIGN_OR_RETURN(TensorMap saved, LoadTensorMap(dir + "/params.safetensors"));
  {
    at::NoGradGuard no_grad;
    for (auto& [name, p] : *params) {
      auto it = saved.find(name);
      if (it == saved.end() || !it->second.sizes().equals(p.sizes())) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, ": checkpoint lacks or mis-shapes '", name,
            "' (was it written for another model configuration?)"));
      }
      p.copy_(it->second);
    }
  }
  ASSIGN_OR_RETURN(TensorMap opt, LoadTensorMap(dir + "/optimizer.safetensors"));
  RETURN_IF_ERROR(optimizer->LoadState(opt));
  return state["step"].get<int64_t>();
}

}  // namespace specdec::train
