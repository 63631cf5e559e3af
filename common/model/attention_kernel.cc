#include "common/model/attention_kernel.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace specdec::model {
namespace {

// Rows are processed in chunks of 16 floats with GCC vector types: one AVX-512 register, two AVX2
// or four SSE ones, depending on the clone RunAttention was resolved to. The fixed chunk order
// makes results independent of the instruction set.
constexpr int64_t kLanes = 16;
typedef float F16 __attribute__((vector_size(kLanes * sizeof(float))));
typedef uint16_t H16 __attribute__((vector_size(kLanes * sizeof(uint16_t))));
typedef uint32_t U16 __attribute__((vector_size(kLanes * sizeof(uint32_t))));

inline float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return 0x7FC0;
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);  // round to nearest even
}

inline F16 LoadF16(const float* p) {
  F16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void StoreF16(float* p, F16 v) { std::memcpy(p, &v, sizeof(v)); }

// Converts row `index` (an element offset) of a cache or activation buffer to float.
inline void LoadRow(const void* base, int64_t index, int64_t d, KernelDType dt, float* dst) {
  if (dt == KernelDType::kF32) {
    std::memcpy(dst, static_cast<const float*>(base) + index, d * sizeof(float));
    return;
  }
  const uint16_t* src = static_cast<const uint16_t*>(base) + index;
  int64_t t = 0;
  for (; t + kLanes <= d; t += kLanes) {
    H16 h;
    std::memcpy(&h, src + t, sizeof(h));
    const U16 u = __builtin_convertvector(h, U16) << 16;
    std::memcpy(dst + t, &u, sizeof(u));
  }
  for (; t < d; ++t) dst[t] = Bf16ToFloat(src[t]);
}

inline void StoreRow(const float* src, int64_t d, KernelDType dt, void* base, int64_t index) {
  if (dt == KernelDType::kF32) {
    std::memcpy(static_cast<float*>(base) + index, src, d * sizeof(float));
  } else {
    uint16_t* dst = static_cast<uint16_t*>(base) + index;
    for (int64_t t = 0; t < d; ++t) dst[t] = FloatToBf16(src[t]);
  }
}

inline float Dot(const float* a, const float* b, int64_t d) {
  F16 acc = {};
  int64_t t = 0;
  for (; t + kLanes <= d; t += kLanes) acc += LoadF16(a + t) * LoadF16(b + t);
  float s = 0.f;
  for (int64_t l = 0; l < kLanes; ++l) s += acc[l];
  for (; t < d; ++t) s += a[t] * b[t];
  return s;
}

inline void Axpy(float alpha, const float* x, float* y, int64_t d) {
  int64_t t = 0;
  for (; t + kLanes <= d; t += kLanes) StoreF16(y + t, LoadF16(y + t) + alpha * LoadF16(x + t));
  for (; t < d; ++t) y[t] += alpha * x[t];
}

struct Scratch {
  std::vector<float> q, scores, acc, row;
  std::vector<uint8_t> visible;
};

}  // namespace

int64_t AttentionWorkItems(const AttentionProblem& p) {
  return static_cast<int64_t>(p.sequences.size()) * p.kv_heads;
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void RunAttention(
    const AttentionProblem& p, int64_t begin, int64_t end) {
  thread_local Scratch scratch;
  const int64_t d = p.head_dim, group = p.heads / p.kv_heads;
  for (int64_t item = begin; item < end; ++item) {
    const AttentionSequence& s = p.sequences[item / p.kv_heads];
    const int64_t g = item % p.kv_heads;
    const int64_t n = s.n, m = s.past + s.n, rows = n * group;
    const int64_t kv_offset = g * s.capacity * d;
    const size_t elem = p.dtype == KernelDType::kF32 ? sizeof(float) : sizeof(uint16_t);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t from = (i * p.kv_heads + g) * d, to = kv_offset + (s.past + i) * d;
      std::memcpy(static_cast<char*>(s.keys) + to * elem,
                  static_cast<const char*>(s.new_keys) + from * elem, d * elem);
      std::memcpy(static_cast<char*>(s.values) + to * elem,
                  static_cast<const char*>(s.new_values) + from * elem, d * elem);
    }
    // Query vectors of this KV head's group, scaled: row r = i * group + h.
    scratch.q.resize(rows * d);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < group; ++h) {
        float* q = &scratch.q[(i * group + h) * d];
        LoadRow(s.q, i * s.q_row_stride + (g * group + h) * d, d, p.dtype, q);
        for (int64_t t = 0; t < d; ++t) q[t] *= p.scale;
      }
    }
    // visible[i * n + j]: new row i attends to new row j (causal, or j an ancestor-or-self).
    scratch.visible.assign(n * n, s.bidirectional ? 1 : 0);
    for (int64_t i = 0; i < n && !s.bidirectional; ++i) {
      if (s.tree_parents == nullptr) {
        std::fill(scratch.visible.begin() + i * n, scratch.visible.begin() + i * n + i + 1, 1);
      } else {
        for (int64_t j = i; j >= 0; j = s.tree_parents[j]) scratch.visible[i * n + j] = 1;
      }
    }
    // Scores, one key row at a time shared by every query row.
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    scratch.scores.resize(rows * m);
    scratch.row.resize(d);
    float* kf = scratch.row.data();
    for (int64_t j = 0; j < m; ++j) {
      LoadRow(s.keys, kv_offset + j * d, d, p.dtype, kf);
      const int64_t jn = j - s.past;  // index among the new rows, if >= 0
      for (int64_t i = 0; i < n; ++i) {
        const bool vis = jn < 0 || scratch.visible[i * n + jn];
        for (int64_t h = 0; h < group; ++h) {
          const int64_t r = i * group + h;
          scratch.scores[r * m + j] = vis ? Dot(&scratch.q[r * d], kf, d) : kMasked;
        }
      }
    }
    // Softmax per query row (every row sees at least itself, so the max is finite).
    for (int64_t r = 0; r < rows; ++r) {
      float* sc = &scratch.scores[r * m];
      const float mx = *std::max_element(sc, sc + m);
      float sum = 0.f;
      for (int64_t j = 0; j < m; ++j) {
        sc[j] = sc[j] == kMasked ? 0.f : std::exp(sc[j] - mx);
        sum += sc[j];
      }
      const float inv = 1.f / sum;
      for (int64_t j = 0; j < m; ++j) sc[j] *= inv;
    }
    // Weighted values.
    scratch.acc.assign(rows * d, 0.f);
    for (int64_t j = 0; j < m; ++j) {
      LoadRow(s.values, kv_offset + j * d, d, p.dtype, kf);
      for (int64_t r = 0; r < rows; ++r) {
        const float w = scratch.scores[r * m + j];
        if (w != 0.f) Axpy(w, kf, &scratch.acc[r * d], d);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < group; ++h) {
        StoreRow(&scratch.acc[(i * group + h) * d], d, p.dtype, s.out,
                 i * s.out_row_stride + (g * group + h) * d);
      }
    }
  }
}

}  // namespace specdec::model
