#include "common/engine/prompt_lookup.h"

#include <algorithm>

#include "common/engine/request_limits.h"

namespace specdec::engine {

std::vector<int32_t> PromptLookup(std::span<const int32_t> tokens, int32_t max_n, int32_t min_n,
                                  int32_t length) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(max_n, size - 1); n >= min_n; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(size - n);
    // The latest earlier occurrence that has at least one token after it.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t take = std::min<int64_t>(length, size - from);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + take);
    }
  }
  return {};
}

std::vector<int32_t> LookupRunDraft(std::span<const int32_t> sequence, int32_t lookup_tokens,
                                    int32_t tokens_left, int64_t max_context) {
  if (sequence.empty() || lookup_tokens < 1) return {};
  const int64_t cached = static_cast<int64_t>(sequence.size()) - 1;
  const int32_t rows = BlockRows(lookup_tokens + 1, tokens_left, cached, max_context);
  if (rows < kMinBlockSize) return {};
  return PromptLookup(sequence, kNgramMaxN, kNgramMinN, rows - 1);
}

}  // namespace specdec::engine
