#include "common/engine/prompt_lookup.h"

#include <algorithm>

#include "common/engine/request_limits.h"

namespace specdec::engine {

LookupHistory::Gram LookupHistory::GramAt(int64_t start, int32_t n) const {
  Gram g;
  g.fill(-1);
  std::copy_n(tokens_.begin() + start, n, g.begin());
  return g;
}

void LookupHistory::Assign(std::span<const int32_t> tokens) {
  tokens_.assign(tokens.begin(), tokens.end());
  indexed_ = 0;
  for (auto& m : latest_) m.clear();
  for (auto& e : earlier_) e.clear();
}

void LookupHistory::Append(std::span<const int32_t> tokens) {
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

void LookupHistory::CatchUp() {
  if (indexed_ == 0) {  // the prompt: room for all of it at once (later tokens grow the index
                        // as vectors and maps grow, not by exact reservations at every step)
    for (int32_t n = 1; n <= kLookupMaxMatch; ++n) {
      latest_[n - 1].reserve(static_cast<size_t>(size()));
      earlier_[n - 1].reserve(static_cast<size_t>(size()));
    }
  }
  for (; indexed_ < size(); ++indexed_) {
    const int64_t end = indexed_ + 1;  // the n-grams ending with token indexed_
    for (int32_t n = 1; n <= kLookupMaxMatch && n <= end; ++n) {
      const int32_t start = static_cast<int32_t>(end - n);
      auto [it, inserted] = latest_[n - 1].try_emplace(GramAt(start, n), start);
      earlier_[n - 1].push_back(inserted ? -1 : it->second);
      it->second = start;
    }
  }
}

void LookupHistory::PopBack() {
  if (indexed_ == size()) {
    for (int32_t n = 1; n <= kLookupMaxMatch && n <= size(); ++n) {
      const int32_t start = static_cast<int32_t>(size() - n);
      const int32_t before = earlier_[n - 1].back();
      earlier_[n - 1].pop_back();
      if (before < 0) {
        latest_[n - 1].erase(GramAt(start, n));
      } else {
        latest_[n - 1][GramAt(start, n)] = before;
      }
    }
    --indexed_;
  }
  tokens_.pop_back();
}

std::vector<int32_t> LookupHistory::Lookup(int32_t max_n, int32_t min_n, int32_t length,
                                           int32_t min_length, int32_t* match) {
  return LookupIn(nullptr, max_n, min_n, length, min_length, match);
}

std::vector<int32_t> LookupHistory::LookupIn(const int32_t* row0, int32_t max_n, int32_t min_n,
                                             int32_t length, int32_t min_length, int32_t* match) {
  if (match != nullptr) *match = 0;
  if (length < 1) return {};
  CatchUp();
  // The searched sequence: the kept tokens, then row 0 where given (never in the index, so that
  // the suffix's own occurrence is not either; without it, the suffix's is, and is skipped).
  const int64_t n_size = size() + (row0 != nullptr ? 1 : 0);
  const auto at = [&](int64_t i) { return i < size() ? tokens_[static_cast<size_t>(i)] : *row0; };
  for (int64_t n = std::min<int64_t>({max_n, kLookupMaxMatch, n_size - 1}); n >= std::max(1, min_n);
       --n) {
    // The latest earlier occurrence with at least min_length tokens after it (the suffix itself,
    // and occurrences overlapping its end, have fewer).
    const int64_t last_start = n_size - n - std::max(1, min_length);
    Gram suffix;
    suffix.fill(-1);
    for (int64_t k = 0; k < n; ++k) suffix[static_cast<size_t>(k)] = at(n_size - n + k);
    const auto it = latest_[n - 1].find(suffix);
    int64_t start = it == latest_[n - 1].end() ? -1 : it->second;
    while (start >= 0 && start > last_start) start = earlier_[n - 1][start];
    if (start < 0) continue;
    const int64_t from = start + n;
    const int64_t take = std::min<int64_t>(length, n_size - from);
    if (match != nullptr) *match = static_cast<int32_t>(n);
    std::vector<int32_t> out(static_cast<size_t>(take));
    for (int64_t k = 0; k < take; ++k) out[static_cast<size_t>(k)] = at(from + k);
    return out;
  }
  return {};
}

std::vector<int32_t> LookupHistory::Draft(const LookupShape& shape, int32_t tokens_left,
                                          int64_t max_context, int32_t* match) {
  if (tokens_.empty()) {
    if (match != nullptr) *match = 0;
    return {};
  }
  return DraftIn(nullptr, shape, tokens_left, max_context, match);
}

std::vector<int32_t> LookupHistory::DraftAfter(int32_t row0, const LookupShape& shape,
                                               int32_t tokens_left, int64_t max_context,
                                               int32_t* match) {
  return DraftIn(&row0, shape, tokens_left, max_context, match);
}

std::vector<int32_t> LookupHistory::DraftIn(const int32_t* row0, const LookupShape& shape,
                                            int32_t tokens_left, int64_t max_context,
                                            int32_t* match) {
  if (match != nullptr) *match = 0;
  if (shape.max_tokens < 1) return {};
  // The step's row 0 is the sequence's last token: the rows before it are cached.
  const int64_t cached = size() + (row0 != nullptr ? 1 : 0) - 1;
  const int32_t rows = BlockRows(shape.max_tokens + 1, tokens_left, cached, max_context);
  if (rows - 1 < std::max(1, shape.min_tokens)) return {};
  std::vector<int32_t> draft = LookupIn(row0, kLookupMaxMatch, std::max(1, shape.min_match),
                                        rows - 1, shape.min_tokens, match);
  if (static_cast<int32_t>(draft.size()) < shape.min_tokens) {
    draft.clear();
    if (match != nullptr) *match = 0;
  }
  return draft;
}

std::vector<int32_t> PromptLookup(std::span<const int32_t> tokens, int32_t max_n, int32_t min_n,
                                  int32_t length, int32_t min_length) {
  LookupHistory h(tokens);
  return h.Lookup(max_n, min_n, length, min_length);
}

std::vector<int32_t> LookupDraft(std::span<const int32_t> sequence, const LookupShape& shape,
                                 int32_t tokens_left, int64_t max_context) {
  LookupHistory h(sequence);
  return h.Draft(shape, tokens_left, max_context);
}

}  // namespace specdec::engine
