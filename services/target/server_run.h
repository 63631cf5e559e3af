// Server-side runs on the target (TargetRun): the checks of a run request and the rule that
// turns one committed step into the run's next step. Torch-free.
#ifndef SPECDEC_SERVICES_TARGET_SERVER_RUN_H_
#define SPECDEC_SERVICES_TARGET_SERVER_RUN_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "specdec/v1/target.pb.h"

namespace specdec::services {

// OK, or INVALID_ARGUMENT naming the field: max_tokens in [1, 4096], draft_block_size 0 or in
// [2, 256], max_ms finite and >= 0, lookup as ValidateLookup checks it.
absl::Status ValidateRun(const v1::TargetRun& run);
// OK, or INVALID_ARGUMENT naming the field: the ranges of PromptLookup's fields, its weighing's
// included (target.proto).
absl::Status ValidateLookup(const v1::PromptLookup& lookup);

// The run's next step after a step that committed `result` (the stop rule of
// common/engine/stop_rule.h over the run's tokens), or nullopt when the run is over: it has
// committed max_tokens tokens or a stop token, the cache is full, or its time bound has passed
// (`elapsed_ms`: since the step was queued; the next step carries what is left). A weighing
// run's next step carries its weighing after this step (LookupWeighing::AfterStep). Sets
// `run_left`: the tokens the run may still commit (0 when it is over).
std::optional<v1::TargetRequest> NextRunStep(const v1::TargetRun& run,
                                             const v1::TargetVerifyResult& result,
                                             double elapsed_ms, int64_t max_context,
                                             int32_t* run_left);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_TARGET_SERVER_RUN_H_
