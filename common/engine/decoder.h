// In-process speculative decoding of one request with any method (DESIGN §2): AR, draft-model
// chains, DySpec token trees, DFlash with a fixed block size, and DFlash with BlockPilot.
#ifndef SPECDEC_COMMON_ENGINE_DECODER_H_
#define SPECDEC_COMMON_ENGINE_DECODER_H_

#include <cstdint>
#include <functional>
#include <span>

#include "absl/status/statusor.h"
#include "common/engine/request.h"

namespace specdec::model {
class Transformer;
class DFlashDrafter;
class BlockPilot;
}  // namespace specdec::model

namespace specdec::engine {

// The models a request may use. Only `target` is required; a method whose model is missing fails
// with FAILED_PRECONDITION (DFLASH_ADAPTIVE without a policy falls back to the training block
// size).
struct EngineModels {
  const model::Transformer* target = nullptr;
  const model::Transformer* draft_lm = nullptr;  // DRAFT_CHAIN, DYSPEC_TREE
  const model::DFlashDrafter* dflash = nullptr;  // DFLASH, DFLASH_ADAPTIVE
  const model::BlockPilot* policy = nullptr;     // DFLASH_ADAPTIVE
};

// What one target step committed: the prefill's first token alone (step 0, nothing drafted), then
// per verify step the accepted draft tokens plus the correction/bonus token.
struct StepInfo {
  int64_t step = 0;        // 0 = prefill, then 1, 2, ... per verify pass
  int32_t drafted = 0;     // draft tokens proposed in this step
  int32_t accepted = 0;    // of which accepted
  int32_t block_size = 0;  // DFLASH*: block size of the step
  double draft_ms = 0;
  double verify_ms = 0;  // prefill time for step 0
};

// Called with each group of tokens as the target commits them.
using CommitCallback = std::function<void(std::span<const int32_t> tokens, const StepInfo& step)>;

// Generates up to options.max_new_tokens tokens after `prompt` (non-empty, ids in the target's
// vocabulary). Greedy output equals AR greedy output; sampled output is distributed as AR
// sampling from the target (seeded by options.sampling.seed). Thread-compatible: concurrent calls
// on the same models are fine.
absl::StatusOr<DecodeResult> Decode(const EngineModels& models, std::span<const int32_t> prompt,
                                    const DecodeOptions& options,
                                    const CommitCallback& on_commit = {});

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_DECODER_H_
