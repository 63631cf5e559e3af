// `specdec-train`: the training commands alone (the same as `specdec train`), for machines that
// build only the model runtime (SPECDEC_TRAIN_ONLY, e.g. a GPU box without gRPC).
#include <CLI/CLI.hpp>

#include "train/train_command.h"

int main(int argc, char** argv) {
  CLI::App app{"specdec-train: train the models specdec serves"};
  int exit_code = 0;
  specdec::train::RegisterTrainSubcommands(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
