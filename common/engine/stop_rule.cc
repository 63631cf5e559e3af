#include "common/engine/stop_rule.h"

#include <algorithm>

namespace specdec::engine {

StopRule::StopRule(int32_t max_tokens, std::span<const int32_t> stop_token_ids)
    : max_tokens_(max_tokens), stop_token_ids_(stop_token_ids.begin(), stop_token_ids.end()) {}

bool StopRule::IsStop(int32_t token) const {
  return std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token) != stop_token_ids_.end();
}

size_t StopRule::Take(std::span<const int32_t> committed) {
  size_t n = 0;
  for (int32_t t : committed) {
    if (finished()) break;
    if (IsStop(t)) {
      stopped_ = true;
      stop_token_ = t;
      break;
    }
    ++kept_;
    ++n;
  }
  return n;
}

}  // namespace specdec::engine
