// Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's last
// n tokens, from the prompt and the output so far. No model, almost no cost; its proposals are
// point masses (verified one-hot, lossless at any temperature). The target drafts this way inside
// its runs (RunPlan::lookup, TargetRun.lookup), in process and in the target service alike: every
// step of an NGRAM run, and DFLASH_ADAPTIVE's steps where the sequence repeats. Torch-free.
#ifndef SPECDEC_COMMON_ENGINE_PROMPT_LOOKUP_H_
#define SPECDEC_COMMON_ENGINE_PROMPT_LOOKUP_H_

#include <cstdint>
#include <span>
#include <vector>

namespace specdec::engine {

// The longest suffix tried: 3 tokens.
inline constexpr int32_t kLookupMaxMatch = 3;

// Which lookup drafts a step: the continuation of a suffix of at least `min_match` tokens, at
// most `max_tokens` long, drafted only when at least `min_tokens` long. max_tokens 0: none.
struct LookupShape {
  int32_t max_tokens = 0;
  int32_t min_match = 1;
  int32_t min_tokens = 1;
};
// NGRAM's: suffixes down to 1 token, any continuation.
inline LookupShape NgramLookup(int32_t max_tokens) { return {max_tokens, 1, 1}; }
// DFLASH_ADAPTIVE's: suffixes of 3 or 2 tokens, continuations of 2 tokens or more (a 1-token
// match or draft is right too rarely to pay for its rows). Under 2 tokens: no lookup at all.
inline LookupShape AdaptiveLookup(int32_t max_tokens) {
  return max_tokens < 2 ? LookupShape{} : LookupShape{max_tokens, 2, 2};
}

// The continuation of `tokens`' longest matching suffix (n in [min_n, max_n]) at its latest
// earlier occurrence followed by at least `min_length` tokens (in a run of one repeated token
// the latest occurrence is followed by one), at most `length` tokens; empty when nothing matches.
std::vector<int32_t> PromptLookup(std::span<const int32_t> tokens, int32_t max_n, int32_t min_n,
                                  int32_t length, int32_t min_length = 1);

// The lookup draft of a step of `shape` after `sequence` (everything before the step's draft:
// the cached tokens, then the step's row 0), cut so that the step commits at most `tokens_left`
// tokens and writes no row past `max_context`; empty when nothing of at least shape.min_tokens
// matches.
std::vector<int32_t> LookupDraft(std::span<const int32_t> sequence, const LookupShape& shape,
                                 int32_t tokens_left, int64_t max_context);

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_PROMPT_LOOKUP_H_
