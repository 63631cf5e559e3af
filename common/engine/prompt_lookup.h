// Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's last
// n tokens, from the prompt and the output so far. No model, almost no cost; its proposals are
// point masses (verified one-hot, lossless at any temperature). NGRAM drafts this way inside the
// target's runs (RunPlan::lookup_tokens, TargetRun.lookup_tokens), in process and in the target
// service alike; DFLASH_ADAPTIVE takes a lookup draft where one exists and pays (step_loop.cc).
// Torch-free.
#ifndef SPECDEC_COMMON_ENGINE_PROMPT_LOOKUP_H_
#define SPECDEC_COMMON_ENGINE_PROMPT_LOOKUP_H_

#include <cstdint>
#include <span>
#include <vector>

namespace specdec::engine {

// NGRAM's suffixes: 3 tokens down to 1.
inline constexpr int32_t kNgramMaxN = 3, kNgramMinN = 1;

// The continuation of `tokens`' longest matching suffix (n in [min_n, max_n]) at its latest
// earlier occurrence, at most `length` tokens; empty when nothing matches.
std::vector<int32_t> PromptLookup(std::span<const int32_t> tokens, int32_t max_n, int32_t min_n,
                                  int32_t length);

// The draft of one step of a lookup run: `sequence` is the cached tokens, then the step's row 0
// (the last committed token). NGRAM's lookup, at most `lookup_tokens` tokens, cut so that the
// step commits at most `tokens_left` tokens and writes no row past `max_context`; empty when
// nothing matches (the step is a plain AR step).
std::vector<int32_t> LookupRunDraft(std::span<const int32_t> sequence, int32_t lookup_tokens,
                                    int32_t tokens_left, int64_t max_context);

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_PROMPT_LOOKUP_H_
