// Subcommands of the `specdec` CLI. Each Register* adds one subcommand to the app; the callback it
// installs runs the command and stores the process exit code in *exit_code.
#ifndef SPECDEC_CLI_COMMANDS_H_
#define SPECDEC_CLI_COMMANDS_H_

#include <CLI/CLI.hpp>

namespace specdec::cli {

void RegisterConvertCommand(CLI::App& app, int* exit_code);
void RegisterGenerateCommand(CLI::App& app, int* exit_code);
void RegisterBenchCommand(CLI::App& app, int* exit_code);

}  // namespace specdec::cli

#endif  // SPECDEC_CLI_COMMANDS_H_
