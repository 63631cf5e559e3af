#include "services/router/warmup.h"

#include <string>
#include <vector>

#include "common/engine/cost_aware_hook.h"
#include "common/engine/warm_up.h"
#include "common/util/status_macros.h"
#include "services/router/cancel_signal.h"
#include "services/router/remote_sides.h"

namespace specdec::services {

absl::StatusOr<engine::DecodeResult> WarmUp(Backends& backends, engine::BlockCostModel& model,
                                            const tokenizer::Tokenizer* tokenizer,
                                            const RequestDefaults& defaults,
                                            const WarmUpOptions& options) {
  if (backends.DefaultMethod() != v1::DFLASH_ADAPTIVE) {
    return absl::FailedPreconditionError(
        "no DFlash drafter is served: there is no block to choose");
  }
  ASSIGN_OR_RETURN(
      std::vector<int32_t> prompt,
      engine::WarmUpPrompt(tokenizer, static_cast<int32_t>(backends.target_info().vocab_size())));
  // Through the request conversion, so that the deployment's defaults and limits apply.
  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  request.set_method(v1::DFLASH_ADAPTIVE);
  request.set_max_new_tokens(options.max_new_tokens);
  request.set_ignore_eos(true);
  ASSIGN_OR_RETURN(engine::DecodeOptions decode, ConvertRequest(request, prompt, defaults));
  engine::MakeWarmUp(options.max_new_tokens, decode);
  CancelSignal cancel;
  const CallScope scope{std::chrono::system_clock::now() + options.timeout, &cancel};
  RemoteSides sides = ConnectSides(backends, scope, decode);
  engine::CostAwareHook hook(model, engine::WarmUpHookOptions());
  engine::LoopParts parts = sides.Parts(backends);
  parts.hook = &hook;
  parts.cancelled = [&cancel] { return cancel.cancelled(); };
  return engine::RunStepLoop(parts, prompt, decode);
}

}  // namespace specdec::services
