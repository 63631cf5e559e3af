// The next-token logits of every position of a prompt, as specdec's runtime computes them: for
// comparing dtypes and activation modes with each other and with a peer (bench/llama_cpp/
// bf16_error.py).
//
//   specdec-logits-probe -m MODEL_DIR --ids 1,2,3 --out LOGITS.bin
//                        [--dtype auto|f32|bf16] [--activations auto|f32|bf16] [--threads N]
//
// Writes float32 logits [rows = prompt length, vocab] to --out (one prefill pass) and prints
// {"rows": R, "vocab": V, "dtype": ..., "activations": ...} to stdout.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"

namespace {

using specdec::model::LoadOptions;
using specdec::model::Transformer;

const char* DtypeName(at::ScalarType t) { return t == at::kBFloat16 ? "bf16" : "f32"; }

int Run(const std::string& model_dir, const std::string& ids_arg, const std::string& dtype,
        const std::string& activations, const std::string& out_path) {
  absl::StatusOr<LoadOptions> options = LoadOptions::ForDtype(dtype);
  if (!options.ok()) {
    std::cerr << options.status() << "\n";
    return 2;
  }
  if (activations == "f32") {
    options->activation_dtype = at::kFloat;
  } else if (activations == "bf16") {
    options->activation_dtype = at::kBFloat16;
  } else if (activations != "auto") {
    std::cerr << "--activations must be auto, f32 or bf16\n";
    return 2;
  }
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(ids_arg, ',', absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      std::cerr << "--ids: '" << part << "' is not a token id\n";
      return 2;
    }
    ids.push_back(id);
  }
  auto model = Transformer::Load(model_dir, *options);
  if (!model.ok()) {
    std::cerr << model.status() << "\n";
    return 1;
  }
  auto cache = (*model)->NewCache();
  specdec::model::SequenceInput in;
  in.cache = cache.get();
  in.tokens = ids;
  in.logits = specdec::model::LogitsMode::kAll;
  auto out = (*model)->Forward(std::span<const specdec::model::SequenceInput>(&in, 1));
  if (!out.ok()) {
    std::cerr << out.status() << "\n";
    return 1;
  }
  const at::Tensor logits = (*out)[0].logits.contiguous();
  FILE* f = std::fopen(out_path.c_str(), "wb");
  const size_t n = static_cast<size_t>(logits.numel());
  if (f == nullptr || std::fwrite(logits.data_ptr<float>(), sizeof(float), n, f) != n ||
      std::fclose(f) != 0) {
    std::cerr << out_path << ": cannot write the logits\n";
    return 1;
  }
  std::cout << "{\"rows\": " << logits.size(0) << ", \"vocab\": " << logits.size(1)
            << ", \"dtype\": \"" << DtypeName((*model)->dtype()) << "\", \"activations\": \""
            << DtypeName((*model)->activation_dtype()) << "\"}\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"specdec-logits-probe: every position's next-token logits of a prompt"};
  std::string model_dir, ids, dtype = "auto", activations = "auto", out;
  int threads = 1;
  app.add_option("-m,--model", model_dir, "HF model directory")->required();
  app.add_option("--ids", ids, "prompt as comma-separated token ids")->required();
  app.add_option("--out", out, "float32 logits [rows, vocab] are written here")->required();
  app.add_option("--dtype", dtype, "weights: auto, f32 or bf16");
  app.add_option("--activations", activations, "activations: auto, f32 or bf16");
  app.add_option("--threads", threads, "compute threads");
  CLI11_PARSE(app, argc, argv);
  specdec::model::ConfigureComputeThreads(threads);
  return Run(model_dir, ids, dtype, activations, out);
}
