// The block choice's warm-up request (docs/design.md §2.8, "Warm-up"): one DFLASH_ADAPTIVE request
// on a made-up code prompt, greedy, run before the first real request so that the cost-aware
// choice starts from this machine's measured pass costs instead of exploring them on the first
// users' requests. The same request in the router (services/router/warmup.h) and in process
// (engine::WarmUp in decoder.h).
#ifndef SPECDEC_COMMON_ENGINE_WARM_UP_H_
#define SPECDEC_COMMON_ENGINE_WARM_UP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/cost_aware_hook.h"
#include "common/engine/request.h"

namespace specdec::tokenizer {
class Tokenizer;
}  // namespace specdec::tokenizer

namespace specdec::engine {

// Enough tokens for the cost model's exploring decisions (CostAwareHook::Options::warmup).
inline constexpr int32_t kDefaultWarmUpTokens = 96;

// The warm-up's prompt: a fixed code prompt through `tokenizer` (with its default BOS) where there
// is one, else the ids 1..16 within `vocab_size`.
absl::StatusOr<std::vector<int32_t>> WarmUpPrompt(const tokenizer::Tokenizer* tokenizer,
                                                  int32_t vocab_size);

// Makes `options` the warm-up's: DFLASH_ADAPTIVE with the cost-aware block choice, greedy, no stop
// token or string, `max_new_tokens` tokens, and no prompt lookups (a lookup step decides nothing,
// and the made-up prompt's repetition is nobody's; the passes lookups take are measured by the
// blocks'). Other fields (the deployment's defaults) stay.
void MakeWarmUp(int32_t max_new_tokens, DecodeOptions& options);

// The warm-up's hook options: its steps feed the shared cost model their pass costs but not their
// acceptance (a prompt nobody sent says nothing of the requests to come).
inline CostAwareHook::Options WarmUpHookOptions() { return {.share_acceptance = false}; }

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_WARM_UP_H_
