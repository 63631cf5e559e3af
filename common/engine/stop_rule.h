// Where generation ends: a length, stop tokens and stop strings. Written once for a request (the
// step loop, in process and in the router) and for a server-side run on the target (ids only).
#ifndef SPECDEC_COMMON_ENGINE_STOP_RULE_H_
#define SPECDEC_COMMON_ENGINE_STOP_RULE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/tokenizer/stream_decoder.h"

namespace specdec::engine {

// The completion's text as it becomes final, cut before the first stop string: each token's
// text is released once no stop string can begin in it any more (a suffix that is a prefix of a
// stop string is held back). Not thread-safe.
class TextStop {
 public:
  // `tokenizer` must outlive this; special tokens are not part of the text.
  TextStop(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop_strings);
  // Adds the next generated token; returns the text released now. Once a stop string has
  // completed, matched() is true and nothing more is released.
  std::string Push(int32_t token);
  // At the end of generation: the text still held back (empty after a match).
  std::string Flush();
  bool matched() const { return !matched_.empty(); }
  const std::string& stop_string() const { return matched_; }

 private:
  size_t HeldBack() const;

  tokenizer::StreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::string held_;     // decoded text not released yet
  std::string matched_;  // the stop string that ended the text
};

// Takes the tokens each step commits, in order, and keeps them up to `max_tokens` in all and
// before the first stop token (which is not kept: the output ends before it, as OpenAI-style
// servers end text before a stop sequence). With a TextStop, a stop string ends generation too:
// the token that completes it is kept, the text ends before the match. Not thread-safe.
class StopRule {
 public:
  StopRule(int32_t max_tokens, std::span<const int32_t> stop_token_ids,
           std::unique_ptr<TextStop> text = nullptr);
  ~StopRule();

  // The number of leading `committed` tokens kept; after it, finished() says whether generation
  // is over. With a TextStop, the kept tokens' released text is appended to `text` (when given).
  size_t Take(std::span<const int32_t> committed, std::string* text = nullptr);
  // At the end: the text a TextStop still holds (empty without one).
  std::string FlushText();

  int32_t tokens_left() const { return max_tokens_ - kept_; }
  bool finished() const { return stopped_ || kept_ >= max_tokens_; }
  bool stopped() const { return stopped_; }
  int32_t stop_token() const { return stop_token_; }  // -1 unless a stop token ended it
  std::string stop_string() const { return text_ ? text_->stop_string() : std::string(); }

 private:
  bool IsStop(int32_t token) const;

  int32_t max_tokens_;
  std::vector<int32_t> stop_token_ids_;
  std::unique_ptr<TextStop> text_;
  int32_t kept_ = 0;
  bool stopped_ = false;
  int32_t stop_token_ = -1;
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_STOP_RULE_H_
