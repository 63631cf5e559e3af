#include "common/engine/decoder.h"

#include <c10/core/InferenceMode.h>

#include "common/engine/request_limits.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"

namespace specdec::engine {

absl::StatusOr<DecodeResult> Decode(const EngineModels& models, std::span<const int32_t> prompt,
                                    const DecodeOptions& options, const CommitCallback& on_commit) {
  // Inference only: skip autograd bookkeeping on every op (tensors made here never leave).
  c10::InferenceMode inference;
  RETURN_IF_ERROR(CheckModelsServe(models, options.method));
  RETURN_IF_ERROR(ValidateDecodeRequest(
      prompt, options,
      ModelLimits{models.target->config().vocab_size, models.target->max_context()}));
  LocalSides sides(models, options);
  LoopParts parts = sides.Parts();
  parts.on_commit = on_commit;
  return RunStepLoop(parts, prompt, options);
}

}  // namespace specdec::engine
