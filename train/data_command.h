// The torch-free `train` subcommands: corpus, tokenizer, tokenize.
#ifndef SPECDEC_TRAIN_DATA_COMMAND_H_
#define SPECDEC_TRAIN_DATA_COMMAND_H_

#include <CLI/CLI.hpp>

namespace specdec::train {

void RegisterDataSubcommands(CLI::App& parent, int* exit_code);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_DATA_COMMAND_H_
