#include "common/engine/ar_decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"

namespace specdec::engine {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

absl::StatusOr<ArResult> GenerateAr(const model::Transformer& model,
                                    std::span<const int32_t> prompt, const ArOptions& options,
                                    const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (options.max_new_tokens < 0) {
    return absl::InvalidArgumentError("max_new_tokens must be >= 0");
  }
  RETURN_IF_ERROR(sampling::ValidateSamplingParams(options.sampling));
  if (static_cast<int64_t>(prompt.size()) + options.max_new_tokens > model.max_context()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt.size(), " tokens) + max_new_tokens (", options.max_new_tokens,
        ") exceeds the model's maximum context of ", model.max_context()));
  }
  ArResult result;
  if (options.max_new_tokens == 0) return result;
  sampling::Rng rng(options.sampling.seed);
  auto cache = model.NewCache();
  std::vector<float> logits_buf(model.config().vocab_size);

  auto next_token = [&](const at::Tensor& logits) {
    at::Tensor row = logits.select(0, logits.size(0) - 1).contiguous();
    std::copy_n(row.data_ptr<float>(), logits_buf.size(), logits_buf.begin());
    return sampling::SampleToken(logits_buf, options.sampling, rng);
  };

  auto t0 = std::chrono::steady_clock::now();
  model::SequenceInput in;
  in.cache = cache.get();
  in.tokens = prompt;
  ASSIGN_OR_RETURN(auto out, model.Forward(std::span<const model::SequenceInput>(&in, 1)));
  int32_t token = next_token(out[0].logits);
  result.prefill_ms = MsSince(t0);

  auto t1 = std::chrono::steady_clock::now();
  while (true) {
    result.tokens.push_back(token);
    if (on_token) on_token(token);
    if (std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), token) !=
        options.stop_token_ids.end()) {
      result.stopped = true;
      break;
    }
    if (static_cast<int32_t>(result.tokens.size()) >= options.max_new_tokens) break;
    in.tokens = std::span<const int32_t>(&token, 1);
    ASSIGN_OR_RETURN(out, model.Forward(std::span<const model::SequenceInput>(&in, 1)));
    token = next_token(out[0].logits);
  }
  result.decode_ms = MsSince(t1);
  return result;
}

}  // namespace specdec::engine
