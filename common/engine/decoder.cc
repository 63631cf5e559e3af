#include "common/engine/decoder.h"

#include <c10/core/InferenceMode.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/engine/cost_aware_hook.h"
#include "common/engine/request_limits.h"
#include "common/engine/warm_up.h"
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

// Runs one request on `models`; DFLASH_ADAPTIVE without a fixed block chooses its blocks by
// CostAwareHook on the models' shared cost model, with `hook_options`.
absl::StatusOr<DecodeResult> RunRequest(const EngineModels& models, std::span<const int32_t> prompt,
                                        const DecodeOptions& options,
                                        const CommitCallback& on_commit,
                                        const CostAwareHook::Options& hook_options) {
  // Inference only: skip autograd bookkeeping on every op (tensors made here never leave).
  c10::InferenceMode inference;
  RETURN_IF_ERROR(CheckModelsServe(models, options.method));
  RETURN_IF_ERROR(ValidateDecodeRequest(
      prompt, options,
      ModelLimits{models.target->config().vocab_size, models.target->max_context()}));
  LocalSides sides(models, options);
  LoopParts parts = sides.Parts();
  parts.on_commit = on_commit;
  CostAwareHook cost_aware(CostModelFor(models), hook_options);
  if (options.method == Method::kDflashAdaptive && options.block_size == 0) {
    parts.hook = &cost_aware;
  }
  return RunStepLoop(parts, prompt, options);
}

}  // namespace

absl::StatusOr<DecodeResult> Decode(const EngineModels& models, std::span<const int32_t> prompt,
                                    const DecodeOptions& options, const CommitCallback& on_commit) {
  return RunRequest(models, prompt, options, on_commit, CostAwareHook::Options{});
}

absl::StatusOr<DecodeResult> WarmUp(const EngineModels& models,
                                    const tokenizer::Tokenizer* tokenizer, int32_t max_new_tokens) {
  if (models.target == nullptr) return absl::FailedPreconditionError("no target model loaded");
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                   WarmUpPrompt(tokenizer, models.target->config().vocab_size));
  DecodeOptions options;
  MakeWarmUp(max_new_tokens, options);
  return RunRequest(models, prompt, options, {}, WarmUpHookOptions());
}

}  // namespace specdec::engine
