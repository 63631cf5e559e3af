#include "services/target/server_run.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "absl/strings/str_cat.h"
#include "common/engine/prompt_lookup.h"
#include "common/engine/request_limits.h"
#include "common/engine/stop_rule.h"
#include "common/util/status_macros.h"
#include "services/common/lookup_weighing_proto.h"

namespace specdec::services {

absl::Status ValidateLookup(const v1::PromptLookup& l) {
  if (l.max_tokens() < 0 || l.max_tokens() > engine::kMaxDraftLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("run.lookup.max_tokens must be 0 (no lookup) or in [1, ",
                     engine::kMaxDraftLength, "], got ", l.max_tokens()));
  }
  if (l.min_match() < 0 || l.min_match() > engine::kLookupMaxMatch) {
    return absl::InvalidArgumentError(absl::StrCat("run.lookup.min_match must be in [1, ",
                                                   engine::kLookupMaxMatch, "] (0: 1), got ",
                                                   l.min_match()));
  }
  if (l.min_tokens() < 0 || (l.max_tokens() > 0 && l.min_tokens() > l.max_tokens())) {
    return absl::InvalidArgumentError(
        absl::StrCat("run.lookup.min_tokens must be in [1, max_tokens = ", l.max_tokens(),
                     "] (0: 1), got ", l.min_tokens()));
  }
  if (l.has_weighing()) RETURN_IF_ERROR(WeighingFromProto(l.weighing()).status());
  return absl::OkStatus();
}

absl::Status ValidateRun(const v1::TargetRun& run) {
  if (run.max_tokens() < 1 || run.max_tokens() > engine::kMaxRunTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "run.max_tokens must be in [1, ", engine::kMaxRunTokens, "], got ", run.max_tokens()));
  }
  if (run.draft_block_size() != 0 && (run.draft_block_size() < engine::kMinBlockSize ||
                                      run.draft_block_size() > engine::kMaxBlockSize)) {
    return absl::InvalidArgumentError(
        absl::StrCat("run.draft_block_size must be 0 (AR steps) or in [", engine::kMinBlockSize,
                     ", ", engine::kMaxBlockSize, "], got ", run.draft_block_size()));
  }
  RETURN_IF_ERROR(ValidateLookup(run.lookup()));
  if (!std::isfinite(run.max_ms()) || run.max_ms() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "run.max_ms must be a finite number of milliseconds >= 0 (0: no time bound), got ",
        run.max_ms()));
  }
  return absl::OkStatus();
}

std::optional<v1::TargetRequest> NextRunStep(const v1::TargetRun& run,
                                             const v1::TargetVerifyResult& result,
                                             double elapsed_ms, int64_t max_context,
                                             int32_t* run_left) {
  *run_left = 0;
  const auto& stops = run.stop_token_ids();
  const auto& committed = result.committed();
  engine::StopRule stop(run.max_tokens(), std::span<const int32_t>(stops.data(), stops.size()));
  stop.Take(std::span<const int32_t>(committed.data(), committed.size()));
  if (stop.finished() || result.length() + 1 > max_context) return std::nullopt;
  float max_ms = 0;
  if (run.max_ms() > 0) {
    max_ms = run.max_ms() - static_cast<float>(elapsed_ms);
    if (max_ms <= 0) return std::nullopt;
  }
  v1::TargetRequest next;
  v1::TargetRun* n = next.mutable_run();
  *n = run;
  n->set_last_token(result.next_token());
  n->set_max_tokens(stop.tokens_left());
  n->set_max_ms(max_ms);
  if (run.lookup().has_weighing()) {
    // The run's weighing takes this step (its odds decay, and take the step's lookup).
    absl::StatusOr<engine::LookupWeighing> weighing = WeighingFromProto(run.lookup().weighing());
    if (weighing.ok()) {
      weighing->AfterStep(result.looked_up(), std::max(0, result.rows_verified() - 1),
                          result.num_accepted(), result.lookup_match());
      WeighingToProto(*weighing, n->mutable_lookup()->mutable_weighing());
    }
  }
  *run_left = stop.tokens_left();
  return next;
}

}  // namespace specdec::services
