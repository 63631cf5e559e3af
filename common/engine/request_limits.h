// The limits of one generation request, checked once for the in-process engine and the router.
#ifndef SPECDEC_COMMON_ENGINE_REQUEST_LIMITS_H_
#define SPECDEC_COMMON_ENGINE_REQUEST_LIMITS_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "common/engine/request.h"

namespace specdec::engine {

inline constexpr int32_t kMaxDraftLength = 64;  // DRAFT_CHAIN: K
inline constexpr int32_t kMaxTreeBudget = 512;  // DYSPEC_TREE: nodes per step
inline constexpr int32_t kMaxTreeDepth = 64;    // DYSPEC_TREE: deepest node
inline constexpr int32_t kMinBlockSize = 2;     // DFLASH*: rows of a block, row 0 included
inline constexpr int32_t kMaxBlockSize = 256;
inline constexpr int32_t kMaxRunTokens = 4096;  // tokens one server-side run may commit
inline constexpr int32_t kMaxStopStrings = 16;
inline constexpr int32_t kMaxStopStringBytes = 256;

// What the target model allows.
struct ModelLimits {
  int64_t vocab_size = 0;
  int64_t max_context = 0;  // prompt + generated tokens
};

// OK, or INVALID_ARGUMENT naming the field, its allowed range and the value sent: the prompt
// (non-empty, ids in the vocabulary), max_new_tokens (>= 0, prompt + max_new_tokens within the
// context), sampling, stop_token_ids, stop_strings (at most 16, each 1..256 bytes of UTF-8), and
// the method parameters (draft_length, tree_budget, tree_max_depth, tree_threshold, block_size).
absl::Status ValidateDecodeRequest(std::span<const int32_t> prompt, const DecodeOptions& options,
                                   const ModelLimits& limits);

// The rows of a DFlash block of `block` rows (row 0 included) cut so that its step commits at
// most `tokens_left` tokens and writes no row past `max_context` after `cache_length` cached
// tokens. Below kMinBlockSize there is nothing to draft: the step is a plain AR step.
int32_t BlockRows(int32_t block, int32_t tokens_left, int64_t cache_length, int64_t max_context);

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_REQUEST_LIMITS_H_
