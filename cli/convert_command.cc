#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/io/gguf_to_hf.h"

namespace specdec::cli {

void RegisterConvertCommand(CLI::App& app, int* exit_code) {
  struct Args {
    std::string input;
    std::string output;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Convert a GGUF file (F32/F16 weights, llama architecture) into a Hugging Face "
      "checkpoint directory (config.json, model.safetensors, tokenizer.json)");
  cmd->add_option("input", args->input, "GGUF file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", args->output, "output directory (created if missing)")->required();
  cmd->callback([args, exit_code] {
    absl::Status status = io::ConvertGgufToHf(args->input, args->output);
    if (!status.ok()) {
      std::cerr << "specdec convert: " << status << "\n";
      *exit_code = 1;
      return;
    }
    std::cerr << "wrote " << args->output << "\n";
  });
}

}  // namespace specdec::cli
