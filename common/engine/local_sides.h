// The step loop's sides in process: the target and drafter sessions of one request over models
// loaded in this process (the in-process engine, benchmarks, training-data labelling).
#ifndef SPECDEC_COMMON_ENGINE_LOCAL_SIDES_H_
#define SPECDEC_COMMON_ENGINE_LOCAL_SIDES_H_

#include <memory>

#include "common/engine/block_cost_model.h"
#include "common/engine/request.h"
#include "common/engine/step_loop.h"

namespace specdec::model {
class Transformer;
class DFlashDrafter;
class BlockPilot;
}  // namespace specdec::model

namespace specdec::tokenizer {
class Tokenizer;
}

namespace specdec::engine {

// The models a request may use. Only `target` is required; a method whose model is missing fails
// with FAILED_PRECONDITION (DFLASH_ADAPTIVE without a policy falls back to the training block
// size).
struct EngineModels {
  const model::Transformer* target = nullptr;
  const model::Transformer* draft_lm = nullptr;     // DRAFT_CHAIN, DYSPEC_TREE
  const model::DFlashDrafter* dflash = nullptr;     // DFLASH, DFLASH_ADAPTIVE
  const model::BlockPilot* policy = nullptr;        // DFLASH_ADAPTIVE
  const tokenizer::Tokenizer* tokenizer = nullptr;  // stop strings, decoded text
  // DFLASH_ADAPTIVE's cost-aware block choice (cost_aware_hook.h): the model its requests share;
  // null: the process keeps one per target model.
  BlockCostModel* block_model = nullptr;
};

// FAILED_PRECONDITION when `method` needs a model `models` lacks (or a draft model whose
// vocabulary differs from the target's).
absl::Status CheckModelsServe(const EngineModels& models, Method method);

// The sides of one in-process request, with the sessions they own. Not thread-safe.
class LocalSides {
 public:
  LocalSides(const EngineModels& models, const DecodeOptions& options);
  ~LocalSides();
  // The parts for RunStepLoop (the caller adds hooks and callbacks); valid while this lives.
  LoopParts Parts() const;

 private:
  struct Sessions;
  std::unique_ptr<Sessions> sessions_;
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_LOCAL_SIDES_H_
