#include "common/sampling/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/model/target_clones.h"
#include "common/model/vec16.h"

namespace specdec::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// The ordering key of a logit: NaN ranks with -inf.
inline float Key(float x) { return std::isnan(x) ? kNegInf : x; }

// A candidate token: its (sanitized) logit and id.
struct Cand {
  float key;
  int32_t id;
};

// Larger logit first, lower id first among equal logits: the tie rule of top-k and top-p.
inline bool Better(const Cand& a, const Cand& b) {
  return a.key > b.key || (a.key == b.key && a.id < b.id);
}

// Per-thread buffers so that warping and sampling do not allocate in steady state.
constexpr int kBuckets = 4096;         // top-p histogram buckets over -log(weight)
constexpr double kBucketRange = 64.0;  // -log(weight) beyond this shares the last bucket
constexpr size_t kSortDirectly = 512;  // top-p over fewer candidates just sorts them

struct Scratch {
  std::vector<Cand> cands;
  std::vector<float> probs;
  std::vector<float> weights;      // top-p over the vocabulary: every token's float weight
  std::vector<double> chunk_mass;  // SampleFromProbs: the mass of each 16 ids
  std::array<double, kBuckets> bucket_mass;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Unnormalized weight of a candidate given the maximum key `max_key` (finite or +inf).
inline double Weight(float key, float max_key, double inv_temperature) {
  if (max_key == kPosInf) return key == kPosInf ? 1.0 : 0.0;
  if (key == kNegInf) return 0.0;
  return std::exp((static_cast<double>(key) - max_key) * inv_temperature);
}

using model::F16;
using model::kLanes;

// Sixteen weights exp((key - max_key) * inv_temperature) from logits [i, i + live), in float with
// the kernels' vector exponential (about 1 ulp; exactly 0 below e^-87, a share of the mass no
// float sum can see). NaN ranks with -inf (weight 0); lanes past `live` get 0.
SPECDEC_VECTOR_FN F16 DenseWeights(const float* logits, size_t live, float max_key,
                                   float inv_temperature) {
  F16 v;
  if (live == static_cast<size_t>(kLanes)) {
    v = model::LoadF16(logits);
  } else {
    alignas(64) float x[kLanes];
    for (size_t l = 0; l < static_cast<size_t>(kLanes); ++l) x[l] = l < live ? logits[l] : kNegInf;
    v = model::LoadF16(x);
  }
  const F16 key = v == v ? v : model::Splat(kNegInf);
  return model::Exp((key - max_key) * inv_temperature);
}

// The largest key of `logits` (-inf when every logit is -inf or NaN), 16 at a time.
SPECDEC_TARGET_CLONES float MaxKey(std::span<const float> logits) {
  const size_t n = logits.size();
  F16 top = model::Splat(kNegInf);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const F16 v = model::LoadF16(logits.data() + i);
    top = v > top ? v : top;  // NaN compares false: never the maximum
  }
  float max_key = kNegInf;
  for (int l = 0; l < kLanes; ++l) max_key = std::max(max_key, top[l]);
  for (; i < n; ++i) max_key = std::max(max_key, Key(logits[i]));
  return max_key;
}

// The candidate search of top-k and top-p over a large vocabulary: nested levels of keys, level j
// holding the keys at or above max_key - kLevelLog2[j] * ln 2 * temperature (a weight of at
// least 2^-kLevelLog2[j] of the top one's), level kLevels every key above -inf. Each level is a
// prefix of the vocabulary in Better order, so the k best keys, or a nucleus, lie inside the first
// level that holds k keys, or the mass the nucleus needs.
constexpr int kLevels = 8;
constexpr float kLevelLog2[kLevels] = {2, 4, 8, 12, 16, 24, 32, 64};

typedef double D8 __attribute__((vector_size(8 * sizeof(double))));

struct LevelScan {
  float threshold[kLevels];
  int64_t count[kLevels] = {};
  double mass[kLevels] = {};  // float weights summed in float lanes: a guide, verified later
  double total = 0;           // every weight, summed in double lanes (when weighed)
};

LevelScan LevelsBelow(float max_key, double temperature) {
  LevelScan scan;
  for (int j = 0; j < kLevels; ++j) {
    scan.threshold[j] =
        static_cast<float>(max_key - kLevelLog2[j] * std::numbers::ln2 * temperature);
  }
  return scan;
}

// Counts every level's keys and, with `weights`, writes each token's float weight (DenseWeights)
// there and sums them, per level and in all.
SPECDEC_TARGET_CLONES void ScanLevels(std::span<const float> logits, float max_key,
                                      float inv_temperature, float* weights, LevelScan& scan) {
  const size_t n = logits.size();
  F16 threshold[kLevels], mass[kLevels];
  model::I16 count[kLevels];
  for (int j = 0; j < kLevels; ++j) {
    threshold[j] = model::Splat(scan.threshold[j]);
    mass[j] = model::Splat(0.f);
    count[j] = model::I16{};
  }
  D8 low_lanes = {}, high_lanes = {};  // lanes 0-7 and 8-15 of the total, in double
  for (size_t i = 0; i < n; i += kLanes) {
    const size_t live = std::min<size_t>(kLanes, n - i);
    F16 key;
    if (live == static_cast<size_t>(kLanes)) {
      key = model::LoadF16(logits.data() + i);
    } else {
      alignas(64) float x[kLanes];
      for (size_t l = 0; l < static_cast<size_t>(kLanes); ++l)
        x[l] = l < live ? logits[i + l] : kNegInf;
      key = model::LoadF16(x);
    }
    key = key == key ? key : model::Splat(kNegInf);
    F16 w = model::Splat(0.f);
    if (weights != nullptr) {
      w = model::Exp((key - max_key) * inv_temperature);
      if (live == static_cast<size_t>(kLanes)) {
        model::StoreF16(weights + i, w);
      } else {
        alignas(64) float stored[kLanes];
        model::StoreF16(stored, w);
        std::copy(stored, stored + live, weights + i);
      }
      low_lanes +=
          __builtin_convertvector(__builtin_shufflevector(w, w, 0, 1, 2, 3, 4, 5, 6, 7), D8);
      high_lanes +=
          __builtin_convertvector(__builtin_shufflevector(w, w, 8, 9, 10, 11, 12, 13, 14, 15), D8);
    }
    for (int j = 0; j < kLevels; ++j) {
      const model::I16 in = key >= threshold[j];
      count[j] -= in;
      mass[j] += in ? w : model::Splat(0.f);
    }
  }
  for (int j = 0; j < kLevels; ++j) {
    for (int l = 0; l < kLanes; ++l) {
      scan.count[j] += count[j][l];
      scan.mass[j] += mass[j][l];
    }
  }
  for (int l = 0; l < kLanes / 2; ++l) scan.total += low_lanes[l];
  for (int l = 0; l < kLanes / 2; ++l) scan.total += high_lanes[l];
}

// Softmax over the whole vocabulary (no top-k, no top-p), written into `out`: 16 weights at a
// time, their total summed in double over 16 lanes, then scaled in float.
SPECDEC_TARGET_CLONES void DenseSoftmax(std::span<const float> logits, double inv_temperature,
                                        std::span<float> out) {
  const size_t n = logits.size();
  const float max_key = MaxKey(logits);
  size_t i = 0;
  if (max_key == kNegInf) {
    out[Argmax(logits)] = 1.f;
    return;
  }
  if (max_key == kPosInf) {  // the +inf logits share the mass
    double total = 0;
    for (size_t i = 0; i < logits.size(); ++i) total += out[i] = Key(logits[i]) == kPosInf;
    for (float& v : out) v = static_cast<float>(v / total);
    return;
  }
  const float inv_t = static_cast<float>(inv_temperature);
  double lanes[kLanes] = {};
  for (i = 0; i < n; i += kLanes) {
    const size_t live = std::min<size_t>(kLanes, n - i);
    alignas(64) float w[kLanes];
    model::StoreF16(w, DenseWeights(logits.data() + i, live, max_key, inv_t));
    std::copy(w, w + live, out.begin() + static_cast<std::ptrdiff_t>(i));
    for (int l = 0; l < kLanes; ++l) lanes[l] += w[l];
  }
  double total = 0;
  for (double t : lanes) total += t;
  const F16 scale = model::Splat(static_cast<float>(1.0 / total));
  for (i = 0; i + kLanes <= n; i += kLanes) {
    model::StoreF16(out.data() + i, model::LoadF16(out.data() + i) * scale);
  }
  for (; i < n; ++i) out[i] *= scale[0];
}

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

Rng Rng::ForStream(uint64_t seed, uint64_t stream) {
  // The stream's seed must depend non-linearly on `seed`: xoshiro is linear over GF(2), so
  // XOR-ing a fixed pattern into the state of Rng(seed) would give streams whose outputs are
  // correlated with Rng(seed)'s in the same way for every seed (the engine's distribution tests
  // catch exactly that).
  uint64_t x = seed;
  const uint64_t mixed_seed = SplitMix64(x);
  uint64_t y = stream ^ 0x6a09e667f3bcc909ull;
  return Rng(mixed_seed ^ SplitMix64(y));
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

int32_t Argmax(std::span<const float> values) {
  if (values.empty()) return -1;
  int32_t best = 0;
  float best_key = Key(values[0]);
  for (size_t i = 1; i < values.size(); ++i) {
    const float k = Key(values[i]);
    if (k > best_key) {
      best = static_cast<int32_t>(i);
      best_key = k;
    }
  }
  return best;
}

namespace {

// The keys at or above `threshold` (above -inf when it is -inf), in id order.
void GatherCandidates(std::span<const float> logits, float threshold, std::vector<Cand>& cands) {
  cands.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float k = Key(logits[i]);
    if (k >= threshold && k > kNegInf) cands.push_back({k, static_cast<int32_t>(i)});
  }
}

// The top_k candidates (by key, ties by lower id; fewer when fewer keys are above -inf): those of
// the first level holding top_k keys, cut by a partial sort.
void TopKCandidates(std::span<const float> logits, float max_key, double temperature, size_t top_k,
                    std::vector<Cand>& cands) {
  LevelScan scan = LevelsBelow(max_key, temperature);
  ScanLevels(logits, max_key, 0.f, nullptr, scan);
  int level = 0;
  while (level < kLevels && scan.count[level] < static_cast<int64_t>(top_k)) ++level;
  GatherCandidates(logits, level < kLevels ? scan.threshold[level] : kNegInf, cands);
  if (cands.size() > top_k) {
    std::nth_element(cands.begin(), cands.begin() + (top_k - 1), cands.end(), Better);
    cands.resize(top_k);
  }
}

// The softmax over `cands` alone into `out`.
void CandidateSoftmax(std::span<const Cand> cands, float max_key, double inv_temperature,
                      std::span<float> out) {
  double total = 0;
  for (const Cand& c : cands) {
    const double w = Weight(c.key, max_key, inv_temperature);
    out[c.id] = static_cast<float>(w);
    total += w;
  }
  const double scale = 1.0 / total;
  for (const Cand& c : cands) out[c.id] = static_cast<float>(out[c.id] * scale);
}

// Top-p over `cands` into `out`: the smallest prefix of the candidates in Better order whose
// mass reaches top_p of the total, renormalized. One pass computes the candidates' mass and a
// histogram of it over buckets of -log(weight); the bucket where the cumulative mass reaches
// top_p bounds the nucleus, so only the candidates up to that bucket are sorted (O(m) plus
// O(s log s) for a nucleus of s). `outside_mass`: the weight of the tokens that are not
// candidates (a level's candidates, NucleusOverVocabulary), part of the total. Returns false,
// writing nothing, when the candidates cannot reach top_p of it; with no outside mass they are
// all kept then. `weights` (by id; may be null): the candidates' float weights, which then sort
// them into buckets, the front's weights alone being computed exactly (in double) for the total.
bool NucleusSoftmax(std::vector<Cand>& cands, float max_key, double inv_temperature, float top_p,
                    double outside_mass, const float* weights, std::span<float> out) {
  auto guide = [&](const Cand& c) {
    return weights != nullptr ? static_cast<double>(weights[c.id])
                              : Weight(c.key, max_key, inv_temperature);
  };
  auto bucket_of = [&](float key) -> int {
    if (max_key == kPosInf) return key == kPosInf ? 0 : kBuckets - 1;
    const double neg_log_w = (static_cast<double>(max_key) - key) * inv_temperature;
    return neg_log_w < kBucketRange ? static_cast<int>(neg_log_w * (kBuckets / kBucketRange))
                                    : kBuckets - 1;
  };
  double total = outside_mass;
  auto front_end = cands.end();
  if (cands.size() <= kSortDirectly) {
    for (const Cand& c : cands) total += guide(c);
  } else {
    std::array<double, kBuckets>& bucket_mass = ThreadScratch().bucket_mass;
    bucket_mass.fill(0.0);
    for (const Cand& c : cands) {
      const double w = guide(c);
      total += w;
      bucket_mass[bucket_of(c.key)] += w;
    }
    const double bucket_target = static_cast<double>(top_p) * total;
    int last_bucket = kBuckets - 1;
    double cumulative = 0;
    for (int b = 0; b < kBuckets; ++b) {
      cumulative += bucket_mass[b];
      if (cumulative >= bucket_target) {
        last_bucket = b;
        break;
      }
    }
    front_end = std::partition(cands.begin(), cands.end(),
                               [&](const Cand& c) { return bucket_of(c.key) <= last_bucket; });
  }
  if (weights != nullptr) {
    for (auto c = cands.begin(); c != front_end; ++c) {
      total += Weight(c->key, max_key, inv_temperature) - weights[c->id];
    }
  }
  const double target = static_cast<double>(top_p) * total;
  std::sort(cands.begin(), front_end, Better);
  size_t keep = 0;
  double mass = 0;
  bool reached = false;
  for (size_t i = 0; i < cands.size() && !reached; ++i) {
    if (cands.begin() + i == front_end) {
      // Summation order left the bucketed front just short of the target: order the rest too.
      std::sort(front_end, cands.end(), Better);
    }
    mass += Weight(cands[i].key, max_key, inv_temperature);
    keep = i + 1;
    reached = mass >= target;
  }
  if (!reached && outside_mass > 0) return false;
  const double kept_mass = reached ? mass : total;
  if (!reached) keep = cands.size();
  const double scale = 1.0 / kept_mass;
  for (size_t i = 0; i < keep; ++i) {
    const Cand& c = cands[i];
    out[c.id] = static_cast<float>(Weight(c.key, max_key, inv_temperature) * scale);
  }
  return true;
}

// Top-p over the whole vocabulary (no top-k): every token's weight once in float (ScanLevels),
// then the nucleus among the candidates of the first level whose float mass reaches top_p of the
// total, or of the next ones where rounding left it short. The candidates' weights are exact
// (double); the other tokens count with their float weights, each within about 1 ulp.
void NucleusOverVocabulary(std::span<const float> logits, float max_key, double temperature,
                           float top_p, std::span<float> out) {
  const double inv_temperature = 1.0 / temperature;
  std::vector<Cand>& cands = ThreadScratch().cands;
  if (max_key == kPosInf) {  // the +inf keys share the mass
    GatherCandidates(logits, kNegInf, cands);
    NucleusSoftmax(cands, max_key, inv_temperature, top_p, 0.0, nullptr, out);
    return;
  }
  std::vector<float>& weights = ThreadScratch().weights;
  weights.resize(logits.size());
  LevelScan scan = LevelsBelow(max_key, temperature);
  ScanLevels(logits, max_key, static_cast<float>(inv_temperature), weights.data(), scan);
  const double guide = static_cast<double>(top_p) * scan.total * (1 + 1e-3);
  int level = 0;
  while (level < kLevels && scan.mass[level] < guide) ++level;
  for (;; ++level) {
    const bool all = level >= kLevels;
    GatherCandidates(logits, all ? kNegInf : scan.threshold[level], cands);
    double inside = 0;
    for (const Cand& c : cands) inside += weights[c.id];
    const double outside = all ? 0.0 : std::max(0.0, scan.total - inside);
    if (NucleusSoftmax(cands, max_key, inv_temperature, top_p, outside, weights.data(), out)) {
      return;
    }
  }
}

}  // namespace

void WarpedProbsInto(std::span<const float> logits, const SamplingParams& p, std::span<float> out) {
  const size_t n = std::min(logits.size(), out.size());
  logits = logits.first(n);
  out = out.first(n);
  std::fill(out.begin(), out.end(), 0.f);
  if (n == 0) return;
  if (IsGreedy(p)) {
    out[Argmax(logits)] = 1.f;
    return;
  }
  const double inv_temperature = 1.0 / static_cast<double>(p.temperature);
  const bool use_top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < n;
  const bool use_top_p = p.top_p < 1.f;
  if (!use_top_k && !use_top_p) {
    DenseSoftmax(logits, inv_temperature, out);
    return;
  }
  const float max_key = MaxKey(logits);
  if (max_key == kNegInf) {  // nothing has a chance: fall back to the greedy token
    out[Argmax(logits)] = 1.f;
    return;
  }
  if (!use_top_k) {
    NucleusOverVocabulary(logits, max_key, p.temperature, p.top_p, out);
    return;
  }
  std::vector<Cand>& cands = ThreadScratch().cands;
  TopKCandidates(logits, max_key, p.temperature, static_cast<size_t>(p.top_k), cands);
  if (use_top_p) {
    NucleusSoftmax(cands, max_key, inv_temperature, p.top_p, 0.0, nullptr, out);
  } else {
    CandidateSoftmax(cands, max_key, inv_temperature, out);
  }
}

std::vector<float> WarpedProbs(std::span<const float> logits, const SamplingParams& p) {
  std::vector<float> out(logits.size());
  WarpedProbsInto(logits, p, out);
  return out;
}

namespace {

// The mass of probs [i, i + 16): its positive entries (zero, negative or NaN ones count 0), each
// lane's sum in double, the lanes added in order.
SPECDEC_VECTOR_FN double ChunkMass(const float* p) {
  double lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = p[l] > 0 ? p[l] : 0.0;
  double sum = 0;
  for (double v : lanes) sum += v;
  return sum;
}

}  // namespace

// Chunks of 16 ids: the total, then the chunk where the running mass passes u, then the id
// inside it (a vocabulary of 151,936 took a sequential double sum of every id twice).
SPECDEC_TARGET_CLONES int32_t SampleFromProbs(std::span<const float> probs, Rng& rng) {
  const size_t n = probs.size(), full = n / kLanes * kLanes;
  std::vector<double>& chunks = ThreadScratch().chunk_mass;
  chunks.resize(full / kLanes);
  double total = 0;
  for (size_t c = 0; c < chunks.size(); ++c)
    total += chunks[c] = ChunkMass(probs.data() + c * kLanes);
  for (size_t i = full; i < n; ++i) {
    if (probs[i] > 0) total += probs[i];
  }
  const double u = rng.Uniform() * total;
  double acc = 0;
  size_t from = full;  // where the id-by-id scan starts: the chunk that passes u, or the tail
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (u < acc + chunks[c]) {
      from = c * kLanes;
      break;
    }
    acc += chunks[c];
  }
  int32_t last_positive = -1;
  for (size_t i = from; i < n; ++i) {
    if (!(probs[i] > 0)) continue;  // zero, negative or NaN: never sampled
    acc += probs[i];
    last_positive = static_cast<int32_t>(i);
    if (u < acc) return last_positive;
  }
  // Rounding left u at or just above the accumulated mass: the last id with mass.
  for (size_t i = n; last_positive < 0 && i > 0; --i) {
    if (probs[i - 1] > 0) last_positive = static_cast<int32_t>(i - 1);
  }
  return last_positive >= 0 ? last_positive : 0;
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& p, Rng& rng) {
  if (IsGreedy(p)) return Argmax(logits);
  std::vector<float>& probs = ThreadScratch().probs;
  probs.resize(logits.size());
  WarpedProbsInto(logits, p, probs);
  return SampleFromProbs(probs, rng);
}

}  // namespace specdec::sampling
