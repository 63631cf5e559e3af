#include "common/engine/prompt_lookup.h"

#include <algorithm>

#include "common/engine/request_limits.h"

namespace specdec::engine {

std::vector<int32_t> PromptLookup(std::span<const int32_t> tokens, int32_t max_n, int32_t min_n,
                                  int32_t length, int32_t min_length) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(max_n, size - 1); n >= min_n; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(size - n);
    // The latest earlier occurrence with at least min_length tokens (and one) after it.
    for (int64_t start = size - n - std::max(1, min_length); start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t take = std::min<int64_t>(length, size - from);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + take);
    }
  }
  return {};
}

std::vector<int32_t> LookupDraft(std::span<const int32_t> sequence, const LookupShape& shape,
                                 int32_t tokens_left, int64_t max_context) {
  if (sequence.empty() || shape.max_tokens < 1) return {};
  const int64_t cached = static_cast<int64_t>(sequence.size()) - 1;
  const int32_t rows = BlockRows(shape.max_tokens + 1, tokens_left, cached, max_context);
  if (rows - 1 < std::max(1, shape.min_tokens)) return {};
  std::vector<int32_t> draft = PromptLookup(sequence, kLookupMaxMatch, std::max(1, shape.min_match),
                                            rows - 1, shape.min_tokens);
  if (static_cast<int32_t>(draft.size()) < shape.min_tokens) draft.clear();
  return draft;
}

}  // namespace specdec::engine
