#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/io/gguf_to_hf.h"
#include "common/io/hf_to_gguf.h"

namespace specdec::cli {

void RegisterConvertCommand(CLI::App& app, int* exit_code) {
  struct Args {
    std::string input;
    std::string output;
    std::string outtype = "auto";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Convert between GGUF and Hugging Face checkpoints (llama and qwen3 layouts; F32/F16/BF16, "
      "and from GGUF Q8_0, Q6_K, Q5_K, Q5_0/1, Q4_K and Q4_0/1 too): "
      "a GGUF file becomes a checkpoint directory (config.json, model.safetensors, "
      "tokenizer.json); a checkpoint directory becomes a GGUF file that llama.cpp loads");
  cmd->add_option("input", args->input, "GGUF file, or Hugging Face checkpoint directory")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("-o,--output", args->output,
                  "output: a directory (created if missing) for a GGUF input, a .gguf file for a "
                  "directory input")
      ->required();
  cmd->add_option("--outtype", args->outtype,
                  "to GGUF: auto keeps each tensor's dtype (norms F32); f32 writes every tensor "
                  "as F32")
      ->check(CLI::IsMember({"auto", "f32"}));
  cmd->callback([args, exit_code] {
    const bool to_gguf = std::filesystem::is_directory(args->input);
    io::GgufExportOptions options;
    options.f32 = args->outtype == "f32";
    absl::Status status = to_gguf ? io::ConvertHfToGguf(args->input, args->output, options)
                                  : io::ConvertGgufToHf(args->input, args->output);
    if (!status.ok()) {
      std::cerr << "specdec convert: " << status << "\n";
      *exit_code = 1;
      return;
    }
    std::cerr << "wrote " << args->output << "\n";
  });
}

}  // namespace specdec::cli
