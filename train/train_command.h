// The `train` subcommands (corpus, tokenizer, tokenize, lm, dflash, policy-data, policy), added to
// a CLI11 app: `specdec train ...` and the standalone `specdec-train ...` share them.
#ifndef SPECDEC_TRAIN_TRAIN_COMMAND_H_
#define SPECDEC_TRAIN_TRAIN_COMMAND_H_

#include <CLI/CLI.hpp>

namespace specdec::train {

void RegisterTrainSubcommands(CLI::App& parent, int* exit_code);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_TRAIN_COMMAND_H_
