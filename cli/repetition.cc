#include "cli/repetition.h"

#include <set>
#include <vector>

namespace specdec::cli {

NgramRepetition CountRepeatedNgrams(std::span<const int32_t> tokens, int n) {
  NgramRepetition r;
  if (n < 1 || static_cast<int64_t>(tokens.size()) < n) return r;
  std::set<std::vector<int32_t>> seen;
  for (size_t i = 0; i + n <= tokens.size(); ++i) {
    ++r.ngrams;
    if (!seen.emplace(tokens.begin() + i, tokens.begin() + i + n).second) ++r.repeated;
  }
  return r;
}

}  // namespace specdec::cli
