// In-process speculative decoding of one request with any method (docs/design.md §2): AR,
// draft-model chains, DySpec token trees, DFlash with a fixed block size, and DFlash with
// BlockPilot. The step loop (step_loop.h) over the in-process sides (local_sides.h).
#ifndef SPECDEC_COMMON_ENGINE_DECODER_H_
#define SPECDEC_COMMON_ENGINE_DECODER_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "common/engine/local_sides.h"
#include "common/engine/request.h"
#include "common/engine/step_loop.h"

namespace specdec::engine {

// Generates up to options.max_new_tokens tokens after `prompt` (non-empty, ids in the target's
// vocabulary). Greedy output equals AR greedy output; sampled output is distributed as AR
// sampling from the target (seeded by options.sampling.seed). Thread-compatible: concurrent calls
// on the same models are fine.
absl::StatusOr<DecodeResult> Decode(const EngineModels& models, std::span<const int32_t> prompt,
                                    const DecodeOptions& options,
                                    const CommitCallback& on_commit = {});

// DFLASH_ADAPTIVE's warm-up in process, as the router runs it before serving: the warm-up request
// (warm_up.h; its prompt through `tokenizer` where there is one) on `models`, its blocks chosen on
// the cost model that the models' DFLASH_ADAPTIVE requests share, so that theirs start from this
// machine's measured pass costs. FAILED_PRECONDITION where `models` have no DFlash drafter.
absl::StatusOr<DecodeResult> WarmUp(const EngineModels& models,
                                    const tokenizer::Tokenizer* tokenizer, int32_t max_new_tokens);

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_DECODER_H_
