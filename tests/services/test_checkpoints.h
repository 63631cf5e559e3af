// Writing small random checkpoints for service tests (each test process gets its own folder,
// removed when the process exits).
#ifndef SPECDEC_TESTS_SERVICES_TEST_CHECKPOINTS_H_
#define SPECDEC_TESTS_SERVICES_TEST_CHECKPOINTS_H_

#include <ATen/ATen.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/io/safetensors.h"
#include "tests/common/remove_tree.h"

namespace specdec::testing_util {

// The folders WriteCheckpoint made in this process.
inline std::vector<std::string>& CheckpointDirs() {
  static auto* dirs = new std::vector<std::string>;
  return *dirs;
}

// Removes `dir` when the process exits (the services load the weights into memory at start).
inline void RemoveAtExit(const std::string& dir) {
  static const bool registered = [] {
    std::atexit([] {
      for (const std::string& d : CheckpointDirs()) RemoveTree(d);
    });
    return true;
  }();
  (void)registered;
  CheckpointDirs().push_back(dir);
}

// Writes `tensors` (f32) as model.safetensors and `config_json` as config.json into
// <tmp>/specdec_<name>_<pid>; returns the folder, which goes when the process exits.
inline std::string WriteCheckpoint(const std::string& name,
                                   std::map<std::string, at::Tensor> tensors,
                                   const std::string& config_json) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("specdec_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  RemoveAtExit(dir);
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
