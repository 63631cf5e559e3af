#include "services/router/warmup.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/engine/cost_aware_hook.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_macros.h"
#include "services/router/cancel_signal.h"
#include "services/router/remote_sides.h"

namespace specdec::services {
namespace {

constexpr char kWarmUpPrompt[] =
    "def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n";

v1::GenerateRequest WarmUpRequest(const tokenizer::Tokenizer* tokenizer, int32_t vocab_size,
                                  int32_t max_new_tokens) {
  v1::GenerateRequest request;
  if (tokenizer != nullptr) {
    request.set_text(kWarmUpPrompt);
  } else {
    for (int32_t id = 1; id <= 16; ++id) {
      request.mutable_token_ids()->add_ids(id % std::max<int32_t>(1, vocab_size));
    }
  }
  request.set_method(v1::DFLASH_ADAPTIVE);
  request.mutable_sampling()->set_temperature(0);
  request.set_max_new_tokens(max_new_tokens);
  request.set_ignore_eos(true);
  return request;
}

}  // namespace

absl::StatusOr<engine::DecodeResult> WarmUp(Backends& backends, engine::BlockCostModel& model,
                                            const tokenizer::Tokenizer* tokenizer,
                                            const RequestDefaults& defaults,
                                            const WarmUpOptions& options) {
  if (backends.DefaultMethod() != v1::DFLASH_ADAPTIVE) {
    return absl::FailedPreconditionError(
        "no DFlash drafter is served: there is no block to choose");
  }
  const v1::GenerateRequest request = WarmUpRequest(
      tokenizer, static_cast<int32_t>(backends.target_info().vocab_size()), options.max_new_tokens);
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptTokens(request, tokenizer));
  ASSIGN_OR_RETURN(engine::DecodeOptions decode, ConvertRequest(request, prompt, defaults));
  // Its decisions, not lookups, measure the candidates: a lookup step decides nothing, and the
  // made-up prompt's repetition is nobody's (the passes lookups take are measured by the blocks').
  decode.adaptive_lookup = false;
  CancelSignal cancel;
  const CallScope scope{std::chrono::system_clock::now() + options.timeout, &cancel};
  RemoteSides sides = ConnectSides(backends, scope, decode);
  engine::CostAwareHook hook(model, {.share_acceptance = false});
  engine::LoopParts parts = sides.Parts(backends);
  parts.hook = &hook;
  parts.cancelled = [&cancel] { return cancel.cancelled(); };
  return engine::RunStepLoop(parts, prompt, decode);
}

}  // namespace specdec::services
