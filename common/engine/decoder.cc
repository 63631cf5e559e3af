#include "common/engine/decoder.h"

#include <c10/core/InferenceMode.h>

#include <map>
#include <memory>
#include <mutex>

#include "common/engine/cost_aware_hook.h"
#include "common/engine/request_limits.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"

namespace specdec::engine {
namespace {

// The cost model DFLASH_ADAPTIVE requests on `models` share: theirs, or the process's for their
// target model.
BlockCostModel& CostModelFor(const EngineModels& models) {
  if (models.block_model != nullptr) return *models.block_model;
  static std::mutex mu;
  static std::map<const model::Transformer*, std::unique_ptr<BlockCostModel>> per_target;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<BlockCostModel>& m = per_target[models.target];
  if (!m) m = std::make_unique<BlockCostModel>();
  return *m;
}

}  // namespace

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
  CostAwareHook cost_aware(CostModelFor(models));
  if (options.method == Method::kDflashAdaptive && options.block_size == 0) {
    parts.hook = &cost_aware;
  }
  return RunStepLoop(parts, prompt, options);
}

}  // namespace specdec::engine
