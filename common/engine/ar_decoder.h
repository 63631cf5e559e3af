// Plain autoregressive decoding on one model: the baseline every speculative method must equal.
#ifndef SPECDEC_COMMON_ENGINE_AR_DECODER_H_
#define SPECDEC_COMMON_ENGINE_AR_DECODER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sampling/sampler.h"

namespace specdec::model {
class Transformer;
}

namespace specdec::engine {

struct ArOptions {
  int32_t max_new_tokens = 128;
  sampling::SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one of these
};

struct ArResult {
  std::vector<int32_t> tokens;  // generated tokens (stop token included if hit)
  bool stopped = false;         // true if a stop token ended generation
  double prefill_ms = 0;
  double decode_ms = 0;  // all single-token steps after the first token
};

// Prefills `prompt` (non-empty) then decodes token by token with a fresh KV cache, calling
// `on_token` for each token as it is produced. Thread-compatible: concurrent calls are fine.
absl::StatusOr<ArResult> GenerateAr(const model::Transformer& model,
                                    std::span<const int32_t> prompt, const ArOptions& options,
                                    const std::function<void(int32_t)>& on_token = {});

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_AR_DECODER_H_
