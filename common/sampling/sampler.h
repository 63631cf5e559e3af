// Sampling for decoding: logit warping (temperature, top-k, top-p), a deterministic per-request
// RNG, and token selection. Plain C++ over float spans (no torch), so it is cheap to test.
#ifndef SPECDEC_COMMON_SAMPLING_SAMPLER_H_
#define SPECDEC_COMMON_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace specdec::sampling {

// temperature 0 = greedy; top_k 0 = off; top_p 1 = off. `seed` seeds the request's Rng.
struct SamplingParams {
  float temperature = 0.f;
  int32_t top_k = 0;
  float top_p = 1.f;
  uint64_t seed = 0;
};

// INVALID_ARGUMENT naming the field and its allowed range: temperature in [0, 100] (not NaN),
// top_k >= 0, top_p in (0, 1].
absl::Status ValidateSamplingParams(const SamplingParams& params);

// Deterministic, platform-independent random stream (xoshiro256** seeded through splitmix64).
// Not thread-safe: one per request.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double Uniform();  // [0, 1) with 53 random bits

 private:
  uint64_t s_[4];
};

// The target distribution after warping: logits / temperature, then top-k, then top-p (the
// smallest set of most probable tokens whose mass reaches top_p; ties broken by lower id), then
// renormalized. Temperature 0 gives the one-hot of the argmax (lowest id wins ties). The output
// has logits.size() entries summing to 1. -inf logits are allowed (probability 0).
std::vector<float> WarpedProbs(std::span<const float> logits, const SamplingParams& params);
void WarpedProbsInto(std::span<const float> logits, const SamplingParams& params,
                     std::span<float> out);

// Index of the largest value (lowest index among ties).
int32_t Argmax(std::span<const float> values);

// Inverse-CDF sampling with one Uniform() draw; never returns a zero-probability id.
int32_t SampleFromProbs(std::span<const float> probs, Rng& rng);

// Greedy (temperature 0) returns Argmax without consuming randomness; otherwise samples from
// WarpedProbs.
int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng);

}  // namespace specdec::sampling

#endif  // SPECDEC_COMMON_SAMPLING_SAMPLER_H_
