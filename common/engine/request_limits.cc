#include "common/engine/request_limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"
#include "common/util/status_macros.h"

namespace specdec::engine {
namespace {

absl::Status CheckRange(const char* field, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be in [", lo, ", ", hi, "], got ", value));
}

absl::Status CheckTokens(const char* field, std::span<const int32_t> ids, int64_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "] = ", ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckStopStrings(const std::vector<std::string>& stops) {
  if (stops.size() > static_cast<size_t>(kMaxStopStrings)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stop: at most ", kMaxStopStrings, " stop strings, got ", stops.size()));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty() || stops[i].size() > static_cast<size_t>(kMaxStopStringBytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stop[", i, "] must be 1..", kMaxStopStringBytes, " bytes, got ", stops[i].size()));
    }
    if (!tokenizer::IsValidUtf8(stops[i])) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is not valid UTF-8"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMethodParameters(const DecodeOptions& o) {
  RETURN_IF_ERROR(CheckRange("draft_length", o.draft_length, 1, kMaxDraftLength));
  RETURN_IF_ERROR(CheckRange("tree_budget", o.tree_budget, 1, kMaxTreeBudget));
  RETURN_IF_ERROR(CheckRange("tree_max_depth", o.tree_max_depth, 1, kMaxTreeDepth));
  // Written so that NaN fails too.
  if (!(o.tree_threshold >= 0.f && o.tree_threshold < 1.f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tree_threshold must be in [0, 1) (0: greedy expansion), got ", o.tree_threshold));
  }
  if (o.block_size != 0) {
    RETURN_IF_ERROR(
        CheckRange("block_size (0: the default)", o.block_size, kMinBlockSize, kMaxBlockSize));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateDecodeRequest(std::span<const int32_t> prompt, const DecodeOptions& options,
                                   const ModelLimits& limits) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  RETURN_IF_ERROR(CheckTokens("prompt", prompt, limits.vocab_size));
  if (options.max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 0, got ", options.max_new_tokens));
  }
  if (static_cast<int64_t>(prompt.size()) + options.max_new_tokens > limits.max_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt (", prompt.size(), " tokens) + max_new_tokens (", options.max_new_tokens,
        ") exceeds the maximum context of ", limits.max_context));
  }
  RETURN_IF_ERROR(sampling::ValidateSamplingParams(options.sampling));
  RETURN_IF_ERROR(CheckTokens("stop_token_ids", options.stop_token_ids, limits.vocab_size));
  RETURN_IF_ERROR(CheckStopStrings(options.stop_strings));
  return CheckMethodParameters(options);
}

int32_t BlockRows(int32_t block, int32_t tokens_left, int64_t cache_length, int64_t max_context) {
  const int64_t rows = std::min<int64_t>({block, tokens_left, max_context - cache_length});
  return static_cast<int32_t>(std::max<int64_t>(rows, 0));
}

}  // namespace specdec::engine
