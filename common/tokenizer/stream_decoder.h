// Incremental detokenization for streaming generated tokens to clients.
#ifndef SPECDEC_COMMON_TOKENIZER_STREAM_DECODER_H_
#define SPECDEC_COMMON_TOKENIZER_STREAM_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace specdec::tokenizer {

// Turns a stream of token ids into text pieces such that the concatenation of every Push result
// and the final Flush equals `tokenizer.Decode(all ids, skip_special_tokens)`, and no Push result
// ends inside a UTF-8 character (a character spread over several byte-fallback tokens is
// released by the push that completes it). One instance per stream; not thread-safe. The
// tokenizer must outlive it. Work per push is proportional to the few tokens still pending.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true);

  // Appends `id` and returns the text that became final (possibly empty).
  std::string Push(int32_t id);

  // Returns whatever is still held back (e.g. an incomplete UTF-8 sequence at the end of the
  // stream) and resets the decoder for a new stream.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  const bool skip_special_tokens_;
  // Window of recent ids: the first `context_` ones were fully emitted and only serve as left
  // context (so that decoders that treat the first token specially behave as on the whole text).
  std::vector<int32_t> window_;
  size_t context_ = 0;
  size_t context_text_size_ = 0;  // Size of Decode(window_[0, context_)).
  size_t emitted_ = 0;            // Bytes after the context text already returned.
};

}  // namespace specdec::tokenizer

#endif  // SPECDEC_COMMON_TOKENIZER_STREAM_DECODER_H_
