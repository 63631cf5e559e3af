// Writing small random checkpoints for service tests (each test process gets its own folder).
#ifndef SPECDEC_TESTS_SERVICES_TEST_CHECKPOINTS_H_
#define SPECDEC_TESTS_SERVICES_TEST_CHECKPOINTS_H_

#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "common/io/safetensors.h"

namespace specdec::testing_util {

// Writes `tensors` (f32) as model.safetensors and `config_json` as config.json into
// <tmp>/specdec_<name>_<pid>; returns the folder.
inline std::string WriteCheckpoint(const std::string& name,
                                   std::map<std::string, at::Tensor> tensors,
                                   const std::string& config_json) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("specdec_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<io::TensorToWrite> tw;
  for (auto& [n, t] : tensors) {
    t = t.to(at::kFloat).contiguous();
    tw.push_back(
        {n, io::DType::kF32, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
         std::span<const std::byte>(reinterpret_cast<const std::byte*>(t.data_ptr()), t.nbytes())});
  }
  if (!io::WriteSafetensors(dir + "/model.safetensors", tw).ok()) return "";
  std::ofstream(dir + "/config.json") << config_json;
  return dir;
}

}  // namespace specdec::testing_util

#endif  // SPECDEC_TESTS_SERVICES_TEST_CHECKPOINTS_H_
