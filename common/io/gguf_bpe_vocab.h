// Byte-level BPE tokenizers (GPT-2 style: Qwen, Llama 3, the embedded pack) in the terms GGUF
// stores them (tokenizer.ggml.model = "gpt2"), and back to a Hugging Face tokenizer.json.
#ifndef SPECDEC_COMMON_IO_GGUF_BPE_VOCAB_H_
#define SPECDEC_COMMON_IO_GGUF_BPE_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace specdec::io {

// llama.cpp's token types (tokenizer.ggml.token_type).
inline constexpr int32_t kTokenNormal = 1;
inline constexpr int32_t kTokenControl = 3;
inline constexpr int32_t kTokenUserDefined = 4;
inline constexpr int32_t kTokenUnused = 5;

struct GgufBpeVocab {
  std::vector<std::string> tokens;  // by id, byte-level strings as in tokenizer.json
  std::vector<int32_t> types;       // one of the kToken* types per token
  std::vector<std::string> merges;  // "left right", by rank
  std::string pre;                  // llama.cpp's pre-tokenizer name: "gpt-2", "llama-bpe", "qwen2"
  int64_t bos = -1, eos = -1, pad = -1;  // -1: none
  bool add_bos = false;
  std::string chat_template;  // "" if none
};

// Reads `dir`/tokenizer.json (a BPE model with a ByteLevel pre-tokenizer, alone or after a Split
// whose regex is one llama.cpp knows) and `dir`/tokenizer_config.json (add_bos_token, the special
// tokens, chat_template). Ids missing from the vocabulary become "[PAD<id>]", type unused.
// NOT_FOUND for a missing tokenizer.json; INVALID_ARGUMENT for malformed JSON; UNIMPLEMENTED for
// other models (SentencePiece-style byte fallback, WordPiece, ...), normalizers, or a split regex
// without a llama.cpp name (the message quotes it).
absl::StatusOr<GgufBpeVocab> ReadHfBpeTokenizer(const std::string& dir);

// The regex of a llama.cpp pre-tokenizer name; UNIMPLEMENTED for names not listed above.
absl::StatusOr<std::string> PreTokenizerRegex(const std::string& pre);

// tokenizer.json of `v`: the BPE model, its Split + ByteLevel pre-tokenizer, ByteLevel decoder,
// control and user-defined tokens as added tokens. `v.pre` must have a regex (checked by the
// caller through PreTokenizerRegex).
std::string BpeVocabToTokenizerJson(const GgufBpeVocab& v, const std::string& regex);

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_GGUF_BPE_VOCAB_H_
