// Where generation ends: a length and stop tokens. Written once for a request (the step loop,
// in process and in the router) and for a server-side run on the target.
#ifndef SPECDEC_COMMON_ENGINE_STOP_RULE_H_
#define SPECDEC_COMMON_ENGINE_STOP_RULE_H_

#include <cstdint>
#include <span>
#include <vector>

namespace specdec::engine {

// Takes the tokens each step commits, in order, and keeps them up to `max_tokens` in all and
// before the first stop token (which is not kept: the output ends before it, as OpenAI-style
// servers end text before a stop sequence). Not thread-safe.
class StopRule {
 public:
  StopRule(int32_t max_tokens, std::span<const int32_t> stop_token_ids);

  // The number of leading `committed` tokens kept; after it, finished() says whether generation
  // is over.
  size_t Take(std::span<const int32_t> committed);

  int32_t tokens_left() const { return max_tokens_ - kept_; }
  bool finished() const { return stopped_ || kept_ >= max_tokens_; }
  bool stopped() const { return stopped_; }
  int32_t stop_token() const { return stop_token_; }  // -1 unless stopped

 private:
  bool IsStop(int32_t token) const;

  int32_t max_tokens_;
  std::vector<int32_t> stop_token_ids_;
  int32_t kept_ = 0;
  bool stopped_ = false;
  int32_t stop_token_ = -1;
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_STOP_RULE_H_
