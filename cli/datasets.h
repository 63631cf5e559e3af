// Prompt sets for benchmarks: JSON-lines datasets (plain or .gz) and plain text files.
#ifndef SPECDEC_CLI_DATASETS_H_
#define SPECDEC_CLI_DATASETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace specdec::cli {

struct Prompt {
  std::string dataset;  // file stem, e.g. "HumanEval", "test" -> directory name when generic
  std::string id;
  std::string text;
};

// Reads up to `limit` prompts (0 = all). `.jsonl` / `.jsonl.gz`: the first present of the fields
// "prompt" (HumanEval), "question" (GSM8K), "text" (MBPP), "turns"[0] (MT-Bench). Other files:
// prompts separated by blank lines. The dataset name is the parent directory's name.
absl::StatusOr<std::vector<Prompt>> LoadPrompts(const std::string& path, int limit);

}  // namespace specdec::cli

#endif  // SPECDEC_CLI_DATASETS_H_
