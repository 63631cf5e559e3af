// Sampling for decoding: logit warping (temperature, top-k, top-p), a deterministic per-request
// RNG, and token selection. Plain C++ over float spans (no torch), so it is cheap to build and
// test. The same warping defines the target's p and the drafter's q (docs/design.md §2.1), so every
// component that samples or verifies goes through these functions.
#ifndef SPECDEC_COMMON_SAMPLING_SAMPLER_H_
#define SPECDEC_COMMON_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace specdec::sampling {

// temperature 0 = greedy; top_k 0 = off; top_p 1 = off. `seed` seeds the request's Rng.
// Mirrors specdec.v1.SamplingParams (whose unset top_p 0 the services map to 1).
struct SamplingParams {
  float temperature = 0.f;
  int32_t top_k = 0;
  float top_p = 1.f;
  uint64_t seed = 0;
};

// True when `params` selects greedy decoding (temperature exactly 0).
inline bool IsGreedy(const SamplingParams& params) { return params.temperature == 0.f; }

// OK, or INVALID_ARGUMENT naming the field and its allowed range: temperature in [0, 100] (not
// NaN), top_k >= 0, top_p in (0, 1] (not NaN).
absl::Status ValidateSamplingParams(const SamplingParams& params);

// Deterministic, platform-independent random stream: xoshiro256** whose state is filled by
// splitmix64 from the seed; Uniform() uses the top 53 bits, so the doubles are the same on every
// IEEE-754 platform. Not thread-safe: one per request (or per stream of one request).
class Rng {
 public:
  explicit Rng(uint64_t seed);

  // An independent stream for one consumer of a request's seed (e.g. the target and the drafter
  // of one request both seeded by `seed`, with different `stream` ids). ForStream(s, 0) differs
  // from Rng(s).
  static Rng ForStream(uint64_t seed, uint64_t stream);

  // The next 64 random bits.
  uint64_t Next();
  // Uniform double in [0, 1) with 53 random bits (one Next() call).
  double Uniform();

 private:
  uint64_t s_[4];
};

// The warped distribution: logits / temperature, then top-k (the k largest logits, ties broken
// by lower id), then top-p (the smallest set of most probable remaining tokens whose mass
// reaches top_p, ties broken by lower id), renormalized. Temperature 0 gives the one-hot of
// Argmax(logits). The output has logits.size() entries summing to 1 (up to float rounding), zero
// outside the kept set. -inf logits are allowed and get probability 0; NaN logits are treated as
// -inf; if every candidate is -inf/NaN the result is the one-hot of Argmax(logits). If some
// candidates are +inf, the mass is shared equally among them. Params are assumed valid
// (ValidateSamplingParams). Cost: O(V) plus O(k log k) for the kept set; never a full sort of the
// vocabulary.
std::vector<float> WarpedProbs(std::span<const float> logits, const SamplingParams& params);

// WarpedProbs into `out`, which must have logits.size() entries (only min(sizes) are touched
// otherwise). Allocation-free after the calling thread's first calls (thread-local scratch).
void WarpedProbsInto(std::span<const float> logits, const SamplingParams& params,
                     std::span<float> out);

// Index of the largest value, the lowest index among ties; NaN never wins (an all-NaN span gives
// 0). -1 for an empty span.
int32_t Argmax(std::span<const float> values);

// Inverse-CDF sampling with exactly one Uniform() draw. `probs` need not be normalized (the draw
// is scaled by their sum); entries <= 0 or NaN are never returned. Precondition: at least one
// entry > 0 (otherwise returns 0 after the draw).
int32_t SampleFromProbs(std::span<const float> probs, Rng& rng);

// Greedy (temperature 0) returns Argmax(logits) without consuming randomness; otherwise
// SampleFromProbs(WarpedProbs(logits, params)) with one draw. Allocation-free after warm-up.
int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng);

}  // namespace specdec::sampling

#endif  // SPECDEC_COMMON_SAMPLING_SAMPLER_H_
