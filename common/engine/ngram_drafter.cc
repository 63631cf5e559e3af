#include "common/engine/ngram_drafter.h"

#include <algorithm>

namespace specdec::engine {

std::vector<int32_t> NgramDrafter::Lookup(std::span<const int32_t> tokens, int32_t max_n,
                                          int32_t min_n, int32_t length) {
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

absl::Status NgramDrafter::Open(std::span<const int32_t> prompt) {
  history_.assign(prompt.begin(), prompt.end());
  return absl::OkStatus();
}

absl::StatusOr<Draft> NgramDrafter::Propose(int32_t last, const DraftShape& shape) {
  root_ = last;
  history_.push_back(last);
  Draft d;
  d.tokens = Lookup(history_, max_n_, min_n_, shape.length);
  history_.pop_back();
  d.proposal = Proposal::kOneHot;
  d.positions = static_cast<int32_t>(d.tokens.size());
  return d;
}

absl::Status NgramDrafter::Accept(const StepResult& step) {
  history_.push_back(root_);
  history_.insert(history_.end(), step.committed.begin(), step.committed.end() - 1);
  return absl::OkStatus();
}

}  // namespace specdec::engine
