// Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's last
// n tokens, from the prompt and the output so far. No model, almost no cost; its proposals are
// point masses (verified one-hot, lossless at any temperature). The target drafts this way inside
// its runs (RunPlan::lookup, TargetRun.lookup), in process and in the target service alike: every
// step of an NGRAM run, and DFLASH_ADAPTIVE's steps where the sequence repeats. Torch-free.
#ifndef SPECDEC_COMMON_ENGINE_PROMPT_LOOKUP_H_
#define SPECDEC_COMMON_ENGINE_PROMPT_LOOKUP_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace specdec::engine {

// The longest suffix tried: 3 tokens.
inline constexpr int32_t kLookupMaxMatch = 3;

// A reported match length as an index into per-length tables: 1 .. kLookupMaxMatch, 0 for
// unknown (what a target that does not report it sends).
inline size_t LookupMatchIndex(int32_t match) {
  return static_cast<size_t>(match < 0 || match > kLookupMaxMatch ? 0 : match);
}

// Which lookup drafts a step: the continuation of a suffix of at least `min_match` tokens, at
// most `max_tokens` long, drafted only when at least `min_tokens` long. max_tokens 0: none.
struct LookupShape {
  int32_t max_tokens = 0;
  int32_t min_match = 1;
  int32_t min_tokens = 1;
};
// NGRAM's: suffixes down to 1 token, any continuation.
inline LookupShape NgramLookup(int32_t max_tokens) { return {max_tokens, 1, 1}; }
// DFLASH_ADAPTIVE's without a cost model to weigh each lookup (CostAwareHook weighs them by the
// matched suffix's length): suffixes of 3 or 2 tokens, continuations of 2 tokens or more (a
// 1-token match or draft is right too rarely to pay for its rows on its own). Under 2 tokens: no
// lookup at all.
inline LookupShape AdaptiveLookup(int32_t max_tokens) {
  return max_tokens < 2 ? LookupShape{} : LookupShape{max_tokens, 2, 2};
}
// How many of a lookup draft of `available` tokens, found by a suffix of `match` tokens,
// AdaptiveLookup's shape verifies: all of them or none.
inline int32_t AdaptiveLookupTokens(int32_t available, int32_t match) {
  return available >= 2 && match >= 2 ? available : 0;
}

// A token sequence (the prompt and what the request committed) with the index of its n-grams
// (n = 1 .. kLookupMaxMatch) that prompt lookup searches: a lookup costs a few hash probes
// however long the sequence, where a scan costs a pass over it per suffix length (on the 2-core
// CPU of docs/results/2026-11-28-lookup-index.md, 5-8 us a step at 300 tokens and 140-155 us at
// 30,000, against 0.3-1.5 us). The index is built on the first lookup (a sequence that never
// looks up costs a vector), then kept as tokens come and go.
class LookupHistory {
 public:
  LookupHistory() = default;
  explicit LookupHistory(std::span<const int32_t> tokens) { Append(tokens); }

  void Assign(std::span<const int32_t> tokens);
  void Append(int32_t token) { tokens_.push_back(token); }
  void Append(std::span<const int32_t> tokens);
  void PopBack();  // the sequence must not be empty
  std::span<const int32_t> tokens() const { return tokens_; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }

  // The continuation of the sequence's longest matching suffix (n in [min_n, max_n], max_n at
  // most kLookupMaxMatch) at its latest earlier occurrence followed by at least `min_length`
  // tokens (in a run of one repeated token the latest occurrence is followed by one), at most
  // `length` tokens; empty when nothing matches or `length` < 1. `match`, when given, receives
  // the matched suffix's length n (0: none).
  std::vector<int32_t> Lookup(int32_t max_n, int32_t min_n, int32_t length, int32_t min_length = 1,
                              int32_t* match = nullptr);
  // The lookup draft of a step of `shape` after the sequence (everything before the step's draft:
  // the cached tokens, then the step's row 0), cut so that the step commits at most `tokens_left`
  // tokens and writes no row past `max_context`; empty when nothing of at least shape.min_tokens
  // matches. `match` as in Lookup.
  std::vector<int32_t> Draft(const LookupShape& shape, int32_t tokens_left, int64_t max_context,
                             int32_t* match = nullptr);
  // Draft on the sequence followed by `row0` (the step's row 0, not kept yet), without adding
  // it: a run's step asks this before every pass, and the index then changes only as tokens are
  // kept (appending row 0 and taking it back cost six hash updates a step).
  std::vector<int32_t> DraftAfter(int32_t row0, const LookupShape& shape, int32_t tokens_left,
                                  int64_t max_context, int32_t* match = nullptr);

 private:
  using Gram = std::array<int32_t, kLookupMaxMatch>;
  Gram GramAt(int64_t start, int32_t n) const;
  // Lookup on the sequence followed by `*row0` where given (the index holds the sequence only).
  std::vector<int32_t> LookupIn(const int32_t* row0, int32_t max_n, int32_t min_n, int32_t length,
                                int32_t min_length, int32_t* match);
  std::vector<int32_t> DraftIn(const int32_t* row0, const LookupShape& shape, int32_t tokens_left,
                               int64_t max_context, int32_t* match);
  // Indexes tokens [indexed_, size): each n-gram that ends at one of them.
  void CatchUp();

  std::vector<int32_t> tokens_;
  int64_t indexed_ = 0;  // tokens [0, indexed_) are in the index
  // For n = i + 1: latest_[i] maps each n-gram to the latest start of it, and earlier_[i][s] is
  // the start of the same n-gram before s (-1: none).
  std::array<absl::flat_hash_map<Gram, int32_t>, kLookupMaxMatch> latest_;
  std::array<std::vector<int32_t>, kLookupMaxMatch> earlier_;
};

// LookupHistory::Lookup and LookupHistory::Draft on a sequence given whole (for tests and
// one-off lookups: each call indexes the sequence).
std::vector<int32_t> PromptLookup(std::span<const int32_t> tokens, int32_t max_n, int32_t min_n,
                                  int32_t length, int32_t min_length = 1);
std::vector<int32_t> LookupDraft(std::span<const int32_t> sequence, const LookupShape& shape,
                                 int32_t tokens_left, int64_t max_context);

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_PROMPT_LOOKUP_H_
