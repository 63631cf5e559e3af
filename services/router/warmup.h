// The router's warm-up: before it serves, the warm-up request (common/engine/warm_up.h) runs
// through the real target, drafter and policy, so that the block choice starts from this
// machine's measured pass costs instead of exploring them on the first users' requests
// (docs/design.md §2.8, "Warm-up").
#ifndef SPECDEC_SERVICES_ROUTER_WARMUP_H_
#define SPECDEC_SERVICES_ROUTER_WARMUP_H_

#include <chrono>
#include <cstdint>

#include "absl/status/statusor.h"
#include "common/engine/block_cost_model.h"
#include "common/engine/step_loop.h"
#include "common/engine/warm_up.h"
#include "services/router/backends.h"
#include "services/router/request_conversion.h"

namespace specdec::tokenizer {
class Tokenizer;
}  // namespace specdec::tokenizer

namespace specdec::services {

struct WarmUpOptions {
  int32_t max_new_tokens = engine::kDefaultWarmUpTokens;
  std::chrono::milliseconds timeout{10000};  // the whole request's deadline
};

// Runs the warm-up request (engine::WarmUpPrompt through `tokenizer` where there is one, under the
// deployment's `defaults`, made the warm-up's by engine::MakeWarmUp) with CostAwareHook on `model`,
// whose warm-up decisions take every candidate block in turn. Its pass costs go into `model`; its
// acceptance does not (engine::WarmUpHookOptions). FAILED_PRECONDITION where the
// deployment serves no DFlash drafter (nothing to choose); otherwise the request's own status.
absl::StatusOr<engine::DecodeResult> WarmUp(Backends& backends, engine::BlockCostModel& model,
                                            const tokenizer::Tokenizer* tokenizer,
                                            const RequestDefaults& defaults,
                                            const WarmUpOptions& options);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_WARMUP_H_
