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
                  "auto keeps each tensor's dtype (to GGUF: norms F32; from GGUF: quantized "
                  "tensors F32); to GGUF, f32 writes every tensor as F32; from GGUF, bf16 writes "
                  "every tensor as BF16 (rounded to nearest even, half the bytes of F32)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  cmd->callback([args, exit_code] {
    const bool to_gguf = std::filesystem::is_directory(args->input);
    absl::Status status;
    if (args->outtype != "auto" && (args->outtype == "bf16") == to_gguf) {
      status = absl::InvalidArgumentError(
          to_gguf ? "--outtype bf16 is for GGUF inputs; to GGUF, use auto or f32"
                  : "--outtype f32 is for checkpoint directories; from GGUF, use auto or bf16");
    } else if (to_gguf) {
      io::GgufExportOptions options;
      options.f32 = args->outtype == "f32";
      status = io::ConvertHfToGguf(args->input, args->output, options);
    } else {
      io::GgufImportOptions options;
      options.bf16 = args->outtype == "bf16";
      status = io::ConvertGgufToHf(args->input, args->output, options);
    }
    if (!status.ok()) {
      std::cerr << "specdec convert: " << status << "\n";
      *exit_code = 1;
      return;
    }
    std::cerr << "wrote " << args->output << "\n";
  });
}

}  // namespace specdec::cli
