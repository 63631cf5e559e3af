// Conversion of a SentencePiece-BPE vocabulary (as stored in GGUF or llama2.c files) into an
// equivalent Hugging Face `tokenizer.json`.
#ifndef SPECDEC_COMMON_TOKENIZER_SPM_CONVERT_H_
#define SPECDEC_COMMON_TOKENIZER_SPM_CONVERT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace specdec::tokenizer {

// One vocabulary entry. `type` uses SentencePiece's piece types, which GGUF stores in
// `tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
struct SpmVocabEntry {
  std::string piece;
  float score = 0.0f;
  int32_t type = 1;
};

// Returns the text of a `tokenizer.json` (model BPE with byte_fallback, Metaspace-style
// normalization with a dummy prefix, decoder turning U+2581 back into spaces and <0xXX> pieces into
// bytes) whose encoding equals SentencePiece BPE encoding of `vocab`: merges are derived from the
// vocabulary and ranked by the score of the merged piece. Fails with INVALID_ARGUMENT on an empty
// vocabulary, duplicate pieces or ids out of range.
absl::StatusOr<std::string> SentencePieceVocabToTokenizerJson(
    const std::vector<SpmVocabEntry>& vocab, int32_t bos_id, int32_t eos_id, int32_t unk_id);

}  // namespace specdec::tokenizer

#endif  // SPECDEC_COMMON_TOKENIZER_SPM_CONVERT_H_
