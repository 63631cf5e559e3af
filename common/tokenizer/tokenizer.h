// BPE tokenizer loaded from a Hugging Face `tokenizer.json` (byte-level BPE as in GPT-2, Qwen2/3
// and Llama-3, and SentencePiece-style BPE with byte fallback as in Llama-2).
#ifndef SPECDEC_COMMON_TOKENIZER_TOKENIZER_H_
#define SPECDEC_COMMON_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specdec::tokenizer {

// Encodes text to token ids and back exactly as Hugging Face `tokenizers` does for the supported
// pipelines; immutable after construction (its internal word cache is mutex-guarded), so every
// const method may be called from any number of threads at once.
//
// Supported `tokenizer.json` components (anything else is rejected with INVALID_ARGUMENT):
//   model:         BPE (vocab, merges as "a b" strings or [a, b] pairs, byte_fallback,
//                  ignore_merges, unk_token, fuse_unk).
//   normalizer:    null, NFC (treated as identity: input is assumed to be NFC already), Prepend,
//                  Replace (String or Regex pattern), Sequence of these.
//   pre_tokenizer: null, ByteLevel (add_prefix_space, use_regex = GPT-2 regex), Split (String or
//                  Regex pattern; behavior Isolated or Removed; invert false), Metaspace
//                  (replacement, prepend_scheme / add_prefix_space, split), Sequence of these.
//   decoder:       null (pieces joined by " "), ByteLevel, Replace, ByteFallback, Fuse, Strip,
//                  Metaspace, Sequence of these.
//   post_processor: only read to find the BOS token and whether BOS is added by default.
// Deliberate differences from HF: bytes that do not form valid UTF-8 are returned as raw bytes by
// Decode (HF substitutes U+FFFD), so invalid UTF-8 input round-trips; added tokens are matched on
// the raw text (HF matches `normalized: true` tokens after normalization) and `single_word` is
// ignored.
class Tokenizer {
 public:
  // Reads `tokenizer_json_path` and, when present next to it, `tokenizer_config.json` (bos_token,
  // eos_token, pad_token, unk_token as strings or {"content": ...}; add_bos_token). Fails with
  // NOT_FOUND when the file cannot be read and INVALID_ARGUMENT when it is malformed or uses an
  // unsupported component.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(
      const std::string& tokenizer_json_path);

  // Parses `tokenizer_json` (and optionally the text of a `tokenizer_config.json`); error
  // messages start with `origin_for_errors` and name the JSON path at fault.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view tokenizer_json, std::string_view origin_for_errors,
      std::string_view tokenizer_config_json = "");

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Encodes `text` (any bytes; invalid UTF-8 is encoded through byte-level symbols or byte
  // fallback, or becomes unk). With `add_bos` the BOS id comes first; FAILED_PRECONDITION when
  // `add_bos` is set and the tokenizer has no BOS token.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const;

  // Decodes `ids` through the decoder pipeline. Ids outside [0, vocab_size()) or without a piece
  // are skipped (check with ValidateIds first when that matters); special added tokens are
  // skipped when `skip_special_tokens`.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  // OK when every id is in [0, vocab_size()); otherwise INVALID_ARGUMENT naming the first bad id,
  // its position and the vocabulary size.
  absl::Status ValidateIds(std::span<const int32_t> ids) const;

  // Largest id of the model vocabulary and the added tokens, plus one.
  int32_t vocab_size() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  std::optional<int32_t> unk_id() const;
  // Whether callers should add BOS when encoding a prompt (tokenizer_config's add_bos_token, else
  // whether the post_processor template starts with a special token).
  bool add_bos_by_default() const;

  // Id of an added token or model piece with exactly this text (added tokens win).
  std::optional<int32_t> TokenToId(std::string_view piece) const;
  // Text of the added token or model piece with this id (in the model's own form, e.g. "Ġthe" or
  // "▁the"); empty for ids out of range or without a piece.
  std::string_view IdToPiece(int32_t id) const;
  // True for added tokens marked `special`.
  bool IsSpecial(int32_t id) const;

  // Implementation detail (defined in tokenizer.cc); public only so its helpers can name it.
  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace specdec::tokenizer

#endif  // SPECDEC_COMMON_TOKENIZER_TOKENIZER_H_
