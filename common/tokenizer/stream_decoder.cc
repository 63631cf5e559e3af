#include "common/tokenizer/stream_decoder.h"

#include "common/tokenizer/utf8.h"

namespace specdec::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::Push(int32_t id) {
  window_.push_back(id);
  const std::string text = tokenizer_.Decode(window_, skip_special_tokens_);
  const size_t done = context_text_size_ + emitted_;
  if (text.size() < done) return {};  // Cannot happen for the supported decoders; stay safe.
  const std::string_view fresh = std::string_view(text).substr(done);
  const size_t complete = Utf8CompletePrefixLength(fresh);
  std::string out(fresh.substr(0, complete));
  emitted_ += complete;
  if (complete < fresh.size()) return out;  // Keep the window until the character completes.

  // Everything is out: keep, as context, the window from its last token that produces text
  // (skipped special tokens produce none, and a context made only of them would make the next
  // token look like the first one to decoders such as Strip or Metaspace).
  size_t keep_from = window_.size();
  for (size_t i = window_.size(); i-- > 0;) {
    const int32_t tok = window_[i];
    if (!(skip_special_tokens_ && tokenizer_.IsSpecial(tok)) &&
        !tokenizer_.IdToPiece(tok).empty()) {
      keep_from = i;
      break;
    }
  }
  if (keep_from == window_.size()) {
    // Nothing in the window produces text. If no text was ever produced before it either
    // (context_ == 0), the stream is still at its start and the window can go; otherwise keep it.
    if (context_ == 0) {
      window_.clear();
      context_text_size_ = 0;
      emitted_ = 0;
    }
    return out;
  }
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(keep_from));
  context_ = window_.size();
  context_text_size_ = tokenizer_.Decode(window_, skip_special_tokens_).size();
  emitted_ = 0;
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out;
  if (!window_.empty()) {
    const std::string text = tokenizer_.Decode(window_, skip_special_tokens_);
    const size_t done = context_text_size_ + emitted_;
    if (text.size() > done) out = text.substr(done);
  }
  window_.clear();
  context_ = 0;
  context_text_size_ = 0;
  emitted_ = 0;
  return out;
}

}  // namespace specdec::tokenizer
