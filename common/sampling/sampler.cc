#include "common/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace specdec::sampling {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (std::isnan(p.temperature) || p.temperature < 0.f || p.temperature > 100.f) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be in [0, 100] (0 = greedy), got ", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0 (0 = off), got ", p.top_k));
  }
  if (std::isnan(p.top_p) || p.top_p <= 0.f || p.top_p > 1.f) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p must be in (0, 1] (1 = off), got ", p.top_p));
  }
  return absl::OkStatus();
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = SplitMix64(x);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

int32_t Argmax(std::span<const float> v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

void WarpedProbsInto(std::span<const float> logits, const SamplingParams& p, std::span<float> out) {
  const size_t n = logits.size();
  std::fill(out.begin(), out.end(), 0.f);
  if (n == 0) return;
  if (p.temperature == 0.f) {
    out[Argmax(logits)] = 1.f;
    return;
  }
  // Candidate set: all ids, or the top-k (ties by lower id).
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t k = n;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    k = static_cast<size_t>(p.top_k);
    std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), better);
    idx.resize(k);
  }
  const float max_logit = logits[*std::min_element(idx.begin(), idx.end(), better)];
  if (max_logit == -std::numeric_limits<float>::infinity()) {
    out[Argmax(logits)] = 1.f;  // every logit is -inf: fall back to the first id
    return;
  }
  // Softmax over the candidates in double precision.
  std::vector<double> e(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    e[i] = std::exp((static_cast<double>(logits[idx[i]]) - max_logit) / p.temperature);
    total += e[i];
  }
  if (p.top_p < 1.f) {
    std::vector<size_t> order(k);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return e[a] > e[b] || (e[a] == e[b] && idx[a] < idx[b]); });
    double mass = 0;
    size_t keep = 0;
    const double target = static_cast<double>(p.top_p) * total;
    while (keep < k) {
      mass += e[order[keep]];
      ++keep;
      if (mass >= target) break;
    }
    for (size_t i = keep; i < k; ++i) e[order[i]] = 0;
    total = mass;
  }
  for (size_t i = 0; i < k; ++i) out[idx[i]] = static_cast<float>(e[i] / total);
}

std::vector<float> WarpedProbs(std::span<const float> logits, const SamplingParams& p) {
  std::vector<float> out(logits.size());
  WarpedProbsInto(logits, p, out);
  return out;
}

int32_t SampleFromProbs(std::span<const float> probs, Rng& rng) {
  double total = 0;
  for (float v : probs) total += v;
  const double u = rng.Uniform() * total;
  double acc = 0;
  int32_t last_nonzero = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    acc += probs[i];
    last_nonzero = static_cast<int32_t>(i);
    if (u < acc) return last_nonzero;
  }
  // Rounding left u just above the accumulated mass: the last id with mass.
  return last_nonzero >= 0 ? last_nonzero : 0;
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& p, Rng& rng) {
  if (p.temperature == 0.f) return Argmax(logits);
  std::vector<float> probs = WarpedProbs(logits, p);
  return SampleFromProbs(probs, rng);
}

}  // namespace specdec::sampling
