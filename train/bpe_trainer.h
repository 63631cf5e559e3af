// `specdec train tokenizer`: trains a byte-level BPE and writes a Hugging Face tokenizer.json that
// common/tokenizer loads (Qwen2-style split regex, so indentation runs become single pieces).
#ifndef SPECDEC_TRAIN_BPE_TRAINER_H_
#define SPECDEC_TRAIN_BPE_TRAINER_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace specdec::train {

// Qwen2's pre-tokenization regex: letters with one leading non-letter, single digits,
// punctuation runs, newlines, and whitespace runs not followed by a non-space.
inline constexpr char kQwen2SplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct BpeTrainerOptions {
  int32_t vocab_size = 4096;  // total: special tokens + 256 byte symbols + merges
  std::vector<std::string> special_tokens = {"<|bos|>", "<|eos|>", "<|pad|>", "<|mask|>"};
  int64_t min_pair_frequency = 2;
};

struct BpeTokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  int32_t num_merges = 0;
};

// Ids: the special tokens first (in order), then the 256 byte symbols, then one per merge. Merges
// pick the most frequent adjacent pair, ties broken by the smaller (left bytes, right bytes).
absl::StatusOr<BpeTokenizerFiles> TrainByteLevelBpe(std::span<const std::string> texts,
                                                    const BpeTrainerOptions& options);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_BPE_TRAINER_H_
