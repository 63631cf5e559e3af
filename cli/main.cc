// `specdec`: the user-facing command line (convert, generate, bench, train).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "train/train_command.h"

int main(int argc, char** argv) {
  CLI::App app{"specdec: lossless speculative decoding for LLMs"};
  app.require_subcommand(1);
  int exit_code = 0;
  specdec::cli::RegisterConvertCommand(app, &exit_code);
#ifndef SPECDEC_CLI_NO_CLIENT  // builds without gRPC (SPECDEC_DEVICE_CHECKS) have no `generate`
  specdec::cli::RegisterGenerateCommand(app, &exit_code);
#endif
  specdec::cli::RegisterBenchCommand(app, &exit_code);
  specdec::train::RegisterTrainSubcommands(
      *app.add_subcommand("train", "Train the models specdec serves (corpus .. policy)"),
      &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
