#include "common/model/row_kernels.h"

#include <array>
#include <cmath>
#include <cstring>

#include "common/model/target_clones.h"
#include "common/model/vec16.h"

namespace specdec::model {
namespace {

// The sum of squares of a row's d elements in float, 16 lanes at a time (a fixed order).
template <typename T>
inline float SumSquares(const T* x, int64_t d) {
  F16 acc{};
  int64_t t = 0;
  for (; t + kLanes <= d; t += kLanes) {
    const F16 v = LoadAny(x + t);
    acc += v * v;
  }
  float s = 0;
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  for (; t < d; ++t) s += ToFloat(x[t]) * ToFloat(x[t]);
  return s;
}

// ATen's silu of every bfloat16 value, by bits: x / (1 + exp(-x)) with each step rounded to
// bfloat16, as its bf16 arithmetic does.
const std::array<uint16_t, 65536>& SiluBf16Table() {
  static const auto* table = [] {
    auto* t = new std::array<uint16_t, 65536>;
    auto round = [](float f) { return Bf16ToFloat(FloatToBf16(f)); };
    for (uint32_t b = 0; b < 65536; ++b) {
      const float x = Bf16ToFloat(static_cast<uint16_t>(b));
      (*t)[b] = FloatToBf16(x / round(1.f + round(std::exp(-x))));
    }
    return t;
  }();
  return *table;
}

}  // namespace

SPECDEC_TARGET_CLONES void RmsNormRows(const RowSet& x, const void* weight, float eps,
                                       KernelDType dt, void* out) {
  const int64_t d = x.dim;
  int64_t r = 0;
  for (int64_t o = 0; o < x.outer; ++o) {
    for (int64_t i = 0; i < x.inner; ++i, ++r) {
      const int64_t at = o * x.outer_stride + i * x.inner_stride;
      if (dt == KernelDType::kF32) {
        const float* src = static_cast<const float*>(x.data) + at;
        const float* w = static_cast<const float*>(weight);
        float* dst = static_cast<float*>(out) + r * d;
        const float scale = 1.f / std::sqrt(SumSquares(src, d) / static_cast<float>(d) + eps);
        for (int64_t t = 0; t < d; ++t) dst[t] = src[t] * scale * w[t];
        continue;
      }
      const uint16_t* src = static_cast<const uint16_t*>(x.data) + at;
      const uint16_t* w = static_cast<const uint16_t*>(weight);
      uint16_t* dst = static_cast<uint16_t*>(out) + r * d;
      const float scale = 1.f / std::sqrt(SumSquares(src, d) / static_cast<float>(d) + eps);
      int64_t t = 0;
      for (; t + kLanes <= d; t += kLanes) {
        const H16 normed = RoundBf16(LoadAny(src + t) * scale);
        const F16 nf = WidenBf16(normed);
        const H16 y = RoundBf16(nf * LoadAny(w + t));
        std::memcpy(dst + t, &y, sizeof(y));
      }
      for (; t < d; ++t) {
        const float normed = Bf16ToFloat(FloatToBf16(Bf16ToFloat(src[t]) * scale));
        dst[t] = FloatToBf16(normed * Bf16ToFloat(w[t]));
      }
    }
  }
}

SPECDEC_TARGET_CLONES void SwiGluRows(const void* gu, int64_t rows, int64_t row_stride,
                                      int64_t inter, KernelDType dt, void* out) {
  if (dt == KernelDType::kF32) {
    // silu(g) * u = g / (1 + exp(-g)) * u, 16 lanes at a time (vec16.h's Exp); a row's last
    // partial vector goes through the same lanes, padded.
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = static_cast<const float*>(gu) + r * row_stride;
      const float* u = g + inter;
      float* dst = static_cast<float*>(out) + r * inter;
      int64_t t = 0;
      for (; t + kLanes <= inter; t += kLanes) {
        const F16 gv = LoadF16(g + t);
        StoreF16(dst + t, gv / (1.f + Exp(-gv)) * LoadF16(u + t));
      }
      if (t < inter) {
        const int64_t n = inter - t;
        F16 gv = Splat(0.f), uv = Splat(0.f);
        std::memcpy(&gv, g + t, n * sizeof(float));
        std::memcpy(&uv, u + t, n * sizeof(float));
        const F16 y = gv / (1.f + Exp(-gv)) * uv;
        std::memcpy(dst + t, &y, n * sizeof(float));
      }
    }
    return;
  }
  const uint16_t* silu = SiluBf16Table().data();
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* g = static_cast<const uint16_t*>(gu) + r * row_stride;
    const uint16_t* u = g + inter;
    uint16_t* dst = static_cast<uint16_t*>(out) + r * inter;
    int64_t t = 0;
    for (; t + kLanes <= inter; t += kLanes) {
      H16 s;
      for (int k = 0; k < kLanes; ++k) s[k] = silu[g[t + k]];
      const F16 sf = WidenBf16(s);
      const H16 y = RoundBf16(sf * LoadAny(u + t));
      std::memcpy(dst + t, &y, sizeof(y));
    }
    for (; t < inter; ++t) dst[t] = FloatToBf16(Bf16ToFloat(silu[g[t]]) * Bf16ToFloat(u[t]));
  }
}

SPECDEC_TARGET_CLONES void RopeRows(const RowSet& x, const float* cos, const float* sin,
                                    KernelDType dt, void* out) {
  const int64_t d = x.dim, half = d / 2;
  int64_t r = 0;
  for (int64_t o = 0; o < x.outer; ++o) {
    const float* c = cos + o * d;
    const float* s = sin + o * d;
    for (int64_t i = 0; i < x.inner; ++i, ++r) {
      const int64_t at = o * x.outer_stride + i * x.inner_stride;
      if (dt == KernelDType::kF32) {
        const float* src = static_cast<const float*>(x.data) + at;
        float* dst = static_cast<float*>(out) + r * d;
        for (int64_t t = 0; t < half; ++t) {
          dst[t] = src[t] * c[t] + -src[t + half] * s[t];
          dst[t + half] = src[t + half] * c[t + half] + src[t] * s[t + half];
        }
        continue;
      }
      const uint16_t* src = static_cast<const uint16_t*>(x.data) + at;
      uint16_t* dst = static_cast<uint16_t*>(out) + r * d;
      auto round = [](float f) { return Bf16ToFloat(FloatToBf16(f)); };
      for (int64_t t = 0; t < half; ++t) {
        const float x1 = Bf16ToFloat(src[t]), x2 = Bf16ToFloat(src[t + half]);
        dst[t] = FloatToBf16(round(x1 * round(c[t])) + round(-x2 * round(s[t])));
        dst[t + half] =
            FloatToBf16(round(x2 * round(c[t + half])) + round(x1 * round(s[t + half])));
      }
    }
  }
}

}  // namespace specdec::model
