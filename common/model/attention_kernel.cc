#include "common/model/attention_kernel.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/model/target_clones.h"
#include "common/model/vec16.h"

namespace specdec::model {
namespace {

// Converts row `index` (an element offset) of a cache or activation buffer to float.
inline void LoadRow(const void* base, int64_t index, int64_t d, KernelDType dt, float* dst) {
  if (dt == KernelDType::kF32) {
    std::memcpy(dst, static_cast<const float*>(base) + index, d * sizeof(float));
    return;
  }
  const uint16_t* src = static_cast<const uint16_t*>(base) + index;
  int64_t t = 0;
  for (; t + kLanes <= d; t += kLanes) StoreF16(dst + t, LoadAny(src + t));
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

SPECDEC_VECTOR_FN F16 Max(F16 a, F16 b) { return a > b ? a : b; }

SPECDEC_VECTOR_FN float HorizontalMax(F16 v) {
  float m = v[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, v[l]);
  return m;
}

SPECDEC_VECTOR_FN float HorizontalSum(F16 v) {
  float s = 0.f;
  for (int l = 0; l < kLanes; ++l) s += v[l];
  return s;
}

struct Scratch {
  std::vector<float> q, scores, keys, values, compact;
  std::vector<uint16_t> qh, probs;  // the pair path: bf16 queries and probabilities
  std::vector<int64_t> block_keys;
  std::vector<uint8_t> visible;
};

// out[r][col0, col0 + 16 DV) = sum_j p[r][j] * values[j][same columns] for rows [r0, r0 + NR),
// keys [0, m): every element is one float sum over the keys in order, whatever the blocking, so
// blocks of rows and columns are sized for the registers (NR * DV vectors of accumulators).
template <int NR, int DV, typename T>
__attribute__((always_inline)) inline void WeightedValues(const float* p, int64_t mpad,
                                                          const T* values, int64_t dpad, int64_t m,
                                                          int64_t r0, int64_t col0, float* out) {
  F16 acc[NR][DV] = {};
  for (int64_t j = 0; j < m; ++j) {
    const T* vj = values + j * dpad + col0;
    F16 x[DV];
    for (int v = 0; v < DV; ++v) x[v] = LoadAny(vj + v * kLanes);
    for (int r = 0; r < NR; ++r) {
      const float pr = p[(r0 + r) * mpad + j];
      for (int v = 0; v < DV; ++v) acc[r][v] += pr * x[v];
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int v = 0; v < DV; ++v) StoreF16(out + (r0 + r) * dpad + col0 + v * kLanes, acc[r][v]);
  }
}

// Eight elements from `x` as floats (bf16 widens exactly).
__attribute__((target("avx2,fma"), always_inline)) inline __m256 Load8(const float* x) {
  return _mm256_loadu_ps(x);
}
__attribute__((target("avx2,fma"), always_inline)) inline __m256 Load8(const uint16_t* x) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// WeightedValues on AVX2 registers: the same multiply-adds (a probability times a value added to
// the element's sum, fused, key after key), with the accumulators kept in registers, where the
// generic vectors' broadcasts and 64-byte accumulators went through the stack.
template <int NR, int DV, typename T>
__attribute__((target("avx2,fma"))) void WeightedValuesAvx2(const float* p, int64_t mpad,
                                                            const T* values, int64_t dpad,
                                                            int64_t m, int64_t r0, int64_t col0,
                                                            float* out) {
  constexpr int kHalves = 2 * DV;  // 8-float halves of the DV 16-element vectors
  __m256 acc[NR][kHalves];
  for (int r = 0; r < NR; ++r) {
    for (int h = 0; h < kHalves; ++h) acc[r][h] = _mm256_setzero_ps();
  }
  for (int64_t j = 0; j < m; ++j) {
    const T* vj = values + j * dpad + col0;
    __m256 x[kHalves];
    for (int h = 0; h < kHalves; ++h) x[h] = Load8(vj + 8 * h);
    for (int r = 0; r < NR; ++r) {
      const __m256 pr = _mm256_broadcast_ss(p + (r0 + r) * mpad + j);
      for (int h = 0; h < kHalves; ++h) acc[r][h] = _mm256_fmadd_ps(pr, x[h], acc[r][h]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int h = 0; h < kHalves; ++h) {
      _mm256_storeu_ps(out + (r0 + r) * dpad + col0 + 8 * h, acc[r][h]);
    }
  }
}

// RunAttentionAvx2 on this thread: the float path leaves AVX-512 aside.
thread_local bool t_avx2_only = false;

bool UseAvx512() { return CpuHasAvx512F() && !t_avx2_only; }

// Sixteen elements from `x` as floats (bf16 widens exactly).
__attribute__((target("avx512f"), always_inline)) inline __m512 Load16(const float* x) {
  return _mm512_loadu_ps(x);
}
__attribute__((target("avx512f"), always_inline)) inline __m512 Load16(const uint16_t* x) {
  // The zero-masked forms: the plain ones start from an undefined vector, which GCC 12 reports
  // as uninitialized inside a target("avx512f") function.
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512i wide =
      _mm512_maskz_cvtepu16_epi32(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, wide, 16));
}

// WeightedValuesAvx2 on AVX-512 registers: lane for lane the same fused multiply-adds, so the
// same bits, with twice the lanes per instruction and twice the registers, which hold a whole
// head of 64 elements for up to four rows (the values are read once, not once per 16 columns).
template <int NR, int DV, typename T>
__attribute__((target("avx512f"))) void WeightedValuesAvx512(const float* p, int64_t mpad,
                                                             const T* values, int64_t dpad,
                                                             int64_t m, int64_t r0, int64_t col0,
                                                             float* out) {
  __m512 acc[NR][DV];
  for (int r = 0; r < NR; ++r) {
    for (int v = 0; v < DV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < m; ++j) {
    const T* vj = values + j * dpad + col0;
    __m512 x[DV];
    for (int v = 0; v < DV; ++v) x[v] = Load16(vj + v * kLanes);
    for (int r = 0; r < NR; ++r) {
      const __m512 pr = _mm512_set1_ps(p[(r0 + r) * mpad + j]);
      for (int v = 0; v < DV; ++v) acc[r][v] = _mm512_fmadd_ps(pr, x[v], acc[r][v]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int v = 0; v < DV; ++v) {
      _mm512_storeu_ps(out + (r0 + r) * dpad + col0 + v * kLanes, acc[r][v]);
    }
  }
}

// Rows [r0, r0 + NR) over every column. On AVX-512 CPUs, 64 columns at a time (sixteen
// accumulators at most); on AVX2 ones at most four 16-element accumulators (eight AVX2 registers),
// two columns of 16 at a time for one or two rows. Both sum every element alike, and on CPUs
// with AVX2 and FMA every block takes one of them, so all rows of a pass sum alike.
template <int NR, typename T>
__attribute__((always_inline)) inline void WeightedValueRows(const float* p, int64_t mpad,
                                                             const T* values, int64_t dpad,
                                                             int64_t m, int64_t r0, float* out) {
  const int64_t dv = dpad / kLanes;
  int64_t c = 0;
  if (UseAvx512()) {
    for (; c + 4 <= dv; c += 4) {
      WeightedValuesAvx512<NR, 4>(p, mpad, values, dpad, m, r0, c * kLanes, out);
    }
    for (; c < dv; ++c) WeightedValuesAvx512<NR, 1>(p, mpad, values, dpad, m, r0, c * kLanes, out);
    return;
  }
  const bool avx2 = CpuHasAvx2Fma();
  if constexpr (NR <= 2) {
    for (; c + 2 <= dv; c += 2) {
      if (avx2) {
        WeightedValuesAvx2<NR, 2>(p, mpad, values, dpad, m, r0, c * kLanes, out);
      } else {
        WeightedValues<NR, 2>(p, mpad, values, dpad, m, r0, c * kLanes, out);
      }
    }
  }
  for (; c < dv; ++c) {
    if (avx2) {
      WeightedValuesAvx2<NR, 1>(p, mpad, values, dpad, m, r0, c * kLanes, out);
    } else {
      WeightedValues<NR, 1>(p, mpad, values, dpad, m, r0, c * kLanes, out);
    }
  }
}

// The lane sums of BlockedScores on AVX2 registers: for rows [0, nr) of q and keys [0, live) of
// `keys` (rows of 16 DV elements), part[r][jj] lane l = q[l] k[l] rounded, then q[16 v + l]
// k[16 v + l] added by a fused multiply-add for v = 1, ..., DV - 1 (with the generic vectors the
// compiler chooses which of two products to fuse). Every row of every pass takes it on CPUs with
// AVX2 and FMA, and keeps the accumulators in registers.
template <int DV, typename T>
__attribute__((target("avx2,fma"))) void LaneSumsAvx2(const float* q, const T* keys, int64_t live,
                                                      int64_t nr, F16 (*part)[kLanes]) {
  constexpr int64_t dpad = DV * kLanes;
  for (int64_t jj = 0; jj < live; ++jj) {
    __m256 k[2 * DV];
    for (int h = 0; h < 2 * DV; ++h) k[h] = Load8(keys + jj * dpad + 8 * h);
    for (int64_t r = 0; r < nr; ++r) {
      const float* qr = q + r * dpad;
      __m256 lo = _mm256_mul_ps(_mm256_loadu_ps(qr), k[0]);
      __m256 hi = _mm256_mul_ps(_mm256_loadu_ps(qr + 8), k[1]);
      for (int v = 1; v < DV; ++v) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(qr + v * kLanes), k[2 * v], lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(qr + v * kLanes + 8), k[2 * v + 1], hi);
      }
      auto* out = reinterpret_cast<float*>(&part[r][jj]);
      _mm256_storeu_ps(out, lo);
      _mm256_storeu_ps(out + 8, hi);
    }
  }
}

// LaneSumsAvx2 on AVX-512 registers: lane for lane the same products and fused multiply-adds.
template <int DV, typename T>
__attribute__((target("avx512f"))) void LaneSumsAvx512(const float* q, const T* keys, int64_t live,
                                                       int64_t nr, F16 (*part)[kLanes]) {
  constexpr int64_t dpad = DV * kLanes;
  for (int64_t jj = 0; jj < live; ++jj) {
    __m512 k[DV];
    for (int v = 0; v < DV; ++v) k[v] = Load16(keys + jj * dpad + v * kLanes);
    for (int64_t r = 0; r < nr; ++r) {
      const float* qr = q + r * dpad;
      __m512 a = _mm512_mul_ps(_mm512_loadu_ps(qr), k[0]);
      for (int v = 1; v < DV; ++v) a = _mm512_fmadd_ps(_mm512_loadu_ps(qr + v * kLanes), k[v], a);
      _mm512_storeu_ps(reinterpret_cast<float*>(&part[r][jj]), a);
    }
  }
}

// scores[r][j0, j0 + 16) = q[r] . keys[j] for rows [first, rows) and every 16-key chunk j0 whose
// rows attend to it (keys: m rows of dpad elements; past m a chunk's scores are 0). Each key is
// converted once for a block of 4 rows; every score is the same sum in the same order whatever
// the number of rows, so a row's result does not depend on the rows batched with it.
template <int DV, typename T>
__attribute__((always_inline)) inline void BlockedScores(const float* q, const T* keys, int64_t m,
                                                         int64_t mpad, int64_t rows, int64_t past,
                                                         int64_t group, bool bidirectional,
                                                         float* scores) {
  constexpr int64_t dpad = DV * kLanes;
  F16 part[4][kLanes];
  const bool avx512 = UseAvx512(), avx2 = CpuHasAvx2Fma();
  for (int64_t j0 = 0; j0 < mpad; j0 += kLanes) {
    const T* kt = keys + j0 * dpad;
    const int64_t live = std::min(kLanes, m - j0);
    // limit(r) > j0 from this row on (limit grows with r).
    const int64_t first = bidirectional ? 0 : std::max<int64_t>(0, (j0 - past) * group);
    for (int64_t r0 = first; r0 < rows; r0 += 4) {
      const int64_t nr = std::min<int64_t>(4, rows - r0);
      if (avx512) {
        LaneSumsAvx512<DV>(q + r0 * dpad, kt, live, nr, part);
      } else if (avx2) {
        LaneSumsAvx2<DV>(q + r0 * dpad, kt, live, nr, part);
      } else {
        for (int64_t jj = 0; jj < live; ++jj) {
          F16 k[DV];
          for (int v = 0; v < DV; ++v) k[v] = LoadAny(kt + jj * dpad + v * kLanes);
          for (int64_t r = 0; r < 4; ++r) {
            if (r >= nr) break;
            const float* qr = q + (r0 + r) * dpad;
            F16 a = LoadF16(qr) * k[0];
            for (int v = 1; v < DV; ++v) a += LoadF16(qr + v * kLanes) * k[v];
            part[r][jj] = a;
          }
        }
      }
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t jj = live; jj < kLanes; ++jj) part[r][jj] = F16{};
        StoreF16(scores + (r0 + r) * mpad + j0, Reduce16(part[r]));
      }
    }
  }
}

template <typename T>
__attribute__((always_inline)) inline void Scores(const float* q, const T* keys, int64_t m,
                                                  int64_t mpad, int64_t dpad, int64_t rows,
                                                  int64_t past, int64_t group, bool bidirectional,
                                                  float* scores) {
  const int64_t dv = dpad / kLanes;
  if (dv == 4) {
    BlockedScores<4>(q, keys, m, mpad, rows, past, group, bidirectional, scores);
    return;
  }
  if (dv == 8) {
    BlockedScores<8>(q, keys, m, mpad, rows, past, group, bidirectional, scores);
    return;
  }
  F16 part[kLanes];
  for (int64_t j0 = 0; j0 < mpad; j0 += kLanes) {
    const T* kt = keys + j0 * dpad;
    const int64_t live = std::min(kLanes, m - j0);
    const int64_t first = bidirectional ? 0 : std::max<int64_t>(0, (j0 - past) * group);
    for (int64_t r = first; r < rows; ++r) {
      const float* qr = q + r * dpad;
      for (int64_t jj = 0; jj < live; ++jj) {
        F16 a = LoadF16(qr) * LoadAny(kt + jj * dpad);
        for (int64_t v = 1; v < dv; ++v) {
          a += LoadF16(qr + v * kLanes) * LoadAny(kt + jj * dpad + v * kLanes);
        }
        part[jj] = a;
      }
      for (int64_t jj = live; jj < kLanes; ++jj) part[jj] = F16{};
      StoreF16(scores + r * mpad + j0, Reduce16(part));
    }
  }
}

template <typename T>
__attribute__((always_inline)) inline void AllWeightedValues(const float* pr, int64_t mpad,
                                                             const T* vals, int64_t dpad,
                                                             int64_t rows, int64_t m, auto&& limit,
                                                             float* acc) {
  for (int64_t r0 = 0; r0 < rows; r0 += 4) {
    const int64_t nr = std::min<int64_t>(4, rows - r0);
    // Keys up to the block's last row's limit; the earlier rows' probabilities past their own
    // limits are 0 and add nothing.
    const int64_t keys = std::min(m, limit(r0 + nr - 1));
    switch (nr) {
      case 1:
        WeightedValueRows<1>(pr, mpad, vals, dpad, keys, r0, acc);
        break;
      case 2:
        WeightedValueRows<2>(pr, mpad, vals, dpad, keys, r0, acc);
        break;
      case 3:
        WeightedValueRows<3>(pr, mpad, vals, dpad, keys, r0, acc);
        break;
      default:
        WeightedValueRows<4>(pr, mpad, vals, dpad, keys, r0, acc);
    }
  }
}

// The lane sums of tree row i's exponentials `sc` as the causal row holding only the context
// and i's ancestors (the row AR decoding computes at i's position) lays them out: context key j
// in slot j, the k-th ancestor in slot past + k. Summed where they lie in the tree pass, the
// ancestors would fall into other lanes, and the sum, so the row's probabilities, would depend on
// the shape of the tree around it.
// Returns a float, not the F16 lane sums: this function is not inlined, and a 64-byte vector
// crosses a call in a zmm register in the AVX-512 clone of its caller but in memory in its own
// baseline body (the mismatch crashed every tree row on AVX-512 machines).
float CausalLayoutSum(const AttentionSequence& s, int64_t i, const float* sc, Scratch& scratch) {
  const int64_t n = s.n;
  std::vector<float>& row = scratch.compact;
  row.assign(sc, sc + s.past);
  for (int64_t jn = 0; jn <= i; ++jn) {
    if (scratch.visible[i * n + jn]) row.push_back(sc[s.past + jn]);
  }
  row.resize((row.size() + kLanes - 1) / kLanes * kLanes, 0.f);
  F16 sum = {};
  for (size_t j = 0; j < row.size(); j += kLanes) sum += LoadF16(row.data() + j);
  return HorizontalSum(sum);
}

// Scores to probabilities, row by row: masks the keys past each row's limit in its last vector
// (padding, later new rows) and in a tree the earlier new rows that are not its ancestors, then
// a softmax (every row sees at least itself, so the maximum is finite); zero past the limit.
__attribute__((always_inline)) inline void Softmax(const AttentionSequence& s, int64_t rows,
                                                   int64_t mpad, int64_t group, auto&& limit,
                                                   Scratch& scratch) {
  const int64_t n = s.n;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const bool tree = s.tree_parents != nullptr && !s.bidirectional;
  if (tree) {
    scratch.visible.assign(n * n, 0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i; j >= 0; j = s.tree_parents[j]) scratch.visible[i * n + j] = 1;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* sc = &scratch.scores[r * mpad];
    const int64_t i = r / group, lim = limit(r);
    const int64_t lpad = std::min(mpad, (lim + kLanes - 1) / kLanes * kLanes);
    for (int64_t j = lim; j < lpad; ++j) sc[j] = kMasked;
    for (int64_t jn = 0; tree && jn < i; ++jn) {
      if (!scratch.visible[i * n + jn]) sc[s.past + jn] = kMasked;
    }
    F16 mx = LoadF16(sc);
    for (int64_t j = kLanes; j < lpad; j += kLanes) mx = Max(mx, LoadF16(sc + j));
    const F16 top = Splat(HorizontalMax(mx));
    F16 sum = {};
    for (int64_t j = 0; j < lpad; j += kLanes) {
      const F16 e = Exp(LoadF16(sc + j) - top);
      StoreF16(sc + j, e);
      sum += e;
    }
    const float total = tree && i > 0 ? CausalLayoutSum(s, i, sc, scratch) : HorizontalSum(sum);
    const F16 inv = Splat(1.f / total);
    for (int64_t j = 0; j < lpad; j += kLanes) StoreF16(sc + j, LoadF16(sc + j) * inv);
    std::fill(sc + lpad, sc + mpad, 0.f);
  }
}

// ---- The pair path: bf16 heads of a multiple of 32 elements. Every dot product runs over
// 32-element chunks, lane l of a chunk adding element 2l + 1's product and then element 2l's
// (the order of AVX-512 BF16's dot product, which the native functions use; the portable ones
// do the same float operations). Queries and probabilities are bf16, so every product is exact
// in float and a multiply-add rounds like the product and the sum.

// Heads of up to 256 elements take the pair path.
constexpr int64_t kMaxPairChunks = 8;

// What the pair path's score and value functions share. Scores and probabilities are [rows,
// mpad]; queries (bf16) and outputs (float) [rows, d].
struct PairItem {
  const uint16_t* q = nullptr;
  const uint16_t* keys = nullptr;  // [m, d] of this KV head
  const uint16_t* values = nullptr;
  int64_t d = 0, m = 0, mpad = 0, rows = 0, past = 0, group = 1;
  bool bidirectional = false;
  float scale = 1.f;
};

// The first row that sees any of the 16 keys from j0 (as BlockedScores).
inline int64_t FirstRow(const PairItem& it, int64_t j0) {
  return it.bidirectional ? 0 : std::max<int64_t>(0, (j0 - it.past) * it.group);
}

// scores[r][j] = scale * (q[r] . keys[j]), 16 keys and 4 rows at a time: the 16 lane sums of a
// score, then Reduce16.
__attribute__((always_inline)) inline void PairScoresPortable(const PairItem& it, float* scores) {
  const int64_t chunks = it.d / 32;
  F16 qp[4 * kMaxPairChunks * 2];
  F16 part[4][kLanes];
  for (int64_t j0 = 0; j0 < it.mpad; j0 += kLanes) {
    const int64_t live = std::min(kLanes, it.m - j0);
    for (int64_t r0 = FirstRow(it, j0); r0 < it.rows; r0 += 4) {
      const int64_t nr = std::min<int64_t>(4, it.rows - r0);
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t c = 0; c < chunks; ++c) {
          LoadPairs(it.q + (r0 + r) * it.d + c * 32, &qp[(r * chunks + c) * 2],
                    &qp[(r * chunks + c) * 2 + 1]);
        }
      }
      for (int64_t jj = 0; jj < live; ++jj) {
        const uint16_t* k = it.keys + (j0 + jj) * it.d;
        for (int64_t r = 0; r < nr; ++r) {
          F16 a{};
          for (int64_t c = 0; c < chunks; ++c) {
            F16 ko, ke;
            LoadPairs(k + c * 32, &ko, &ke);
            a += qp[(r * chunks + c) * 2] * ko;
            a += qp[(r * chunks + c) * 2 + 1] * ke;
          }
          part[r][jj] = a;
        }
      }
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t jj = live; jj < kLanes; ++jj) part[r][jj] = F16{};
        StoreF16(scores + (r0 + r) * it.mpad + j0, Reduce16(part[r]) * it.scale);
      }
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void PairScoresNative(
    const PairItem& it, float* scores) {
  const int64_t chunks = it.d / 32;
  F16 part[4][kLanes];
  for (int64_t j0 = 0; j0 < it.mpad; j0 += kLanes) {
    const int64_t live = std::min(kLanes, it.m - j0);
    for (int64_t r0 = FirstRow(it, j0); r0 < it.rows; r0 += 4) {
      const int64_t nr = std::min<int64_t>(4, it.rows - r0);
      const uint16_t* q = it.q + r0 * it.d;
      for (int64_t jj = 0; jj < live; ++jj) {
        const uint16_t* k = it.keys + (j0 + jj) * it.d;
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                       _mm512_setzero_ps()};
        for (int64_t c = 0; c < chunks; ++c) {
          const __m512bh kv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(k + c * 32));
          for (int64_t r = 0; r < 4; ++r) {
            if (r >= nr) break;
            const __m512bh qv =
                reinterpret_cast<__m512bh>(_mm512_loadu_si512(q + r * it.d + c * 32));
            a[r] = _mm512_dpbf16_ps(a[r], qv, kv);
          }
        }
        for (int64_t r = 0; r < nr; ++r) part[r][jj] = std::bit_cast<F16>(a[r]);
      }
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t jj = live; jj < kLanes; ++jj) part[r][jj] = F16{};
        StoreF16(scores + (r0 + r) * it.mpad + j0, Reduce16(part[r]) * it.scale);
      }
    }
  }
}

// out[r] = sum_j probs[r][j] * values[j] over keys [0, block_keys[r / 4]) (what the last row of
// r's block of 4 attends to; past its own limit a row's probabilities are 0); key pairs (j, j + 1)
// from 0, a key past the end paired with zeros (its probability is 0). Each output element adds the
// pair's odd key then its even key.
__attribute__((always_inline)) inline void PairValuesPortable(const PairItem& it,
                                                              const uint16_t* probs,
                                                              const int64_t* block_keys,
                                                              float* out) {
  const int64_t dv = it.d / kLanes;
  for (int64_t r0 = 0; r0 < it.rows; r0 += 4) {
    const int64_t nr = std::min<int64_t>(4, it.rows - r0);
    const int64_t keys = block_keys[r0 / 4];
    for (int64_t r = r0; r < r0 + nr; ++r) {
      const uint16_t* pr = probs + r * it.mpad;
      for (int64_t v = 0; v < dv; ++v) {
        F16 acc{};
        for (int64_t j = 0; j < keys; j += 2) {
          const F16 odd = j + 1 < keys ? LoadAny(it.values + (j + 1) * it.d + v * kLanes) : F16{};
          acc += Bf16ToFloat(pr[j + 1]) * odd;
          acc += Bf16ToFloat(pr[j]) * LoadAny(it.values + j * it.d + v * kLanes);
        }
        StoreF16(out + r * it.d + v * kLanes, acc);
      }
    }
  }
}

// The same sums with AVX-512 BF16: two keys' 32-element chunks interleaved by element (per
// 128-bit lane, so the lanes of the sums are a fixed permutation of the elements, undone when
// stored), each row's probability pair broadcast. Two chunks at a time share the key loop (more
// independent sums in flight; each sum's order is unchanged).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void PairValuesNative(
    const PairItem& it, const uint16_t* probs, const int64_t* block_keys, float* out) {
  const int64_t chunks = it.d / 32;
  for (int64_t r0 = 0; r0 < it.rows; r0 += 4) {
    const int64_t nr = std::min<int64_t>(4, it.rows - r0);
    const int64_t keys = block_keys[r0 / 4];
    for (int64_t c0 = 0; c0 < chunks; c0 += 2) {
      const int64_t nc = std::min<int64_t>(2, chunks - c0);
      __m512 lo[4][2], hi[4][2];
      for (int r = 0; r < 4; ++r) {
        for (int c = 0; c < 2; ++c) lo[r][c] = hi[r][c] = _mm512_setzero_ps();
      }
      const uint16_t* v = it.values + c0 * 32;
      for (int64_t j = 0; j < keys; j += 2) {
        __m512bh l[2], h[2];
        for (int64_t c = 0; c < 2; ++c) {
          if (c >= nc) break;
          const __m512i even = _mm512_loadu_si512(v + j * it.d + c * 32);
          const __m512i odd = j + 1 < keys ? _mm512_loadu_si512(v + (j + 1) * it.d + c * 32)
                                           : _mm512_setzero_si512();
          l[c] = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi16(even, odd));
          h[c] = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi16(even, odd));
        }
        for (int64_t r = 0; r < 4; ++r) {
          if (r >= nr) break;
          uint32_t pair;
          std::memcpy(&pair, probs + (r0 + r) * it.mpad + j, sizeof(pair));
          const __m512bh pp = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
          for (int64_t c = 0; c < 2; ++c) {
            if (c >= nc) break;
            lo[r][c] = _mm512_dpbf16_ps(lo[r][c], l[c], pp);
            hi[r][c] = _mm512_dpbf16_ps(hi[r][c], h[c], pp);
          }
        }
      }
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t c = 0; c < nc; ++c) {
          alignas(64) float a[kLanes], b[kLanes];
          _mm512_store_ps(a, lo[r][c]);
          _mm512_store_ps(b, hi[r][c]);
          float* o = out + (r0 + r) * it.d + (c0 + c) * 32;
          // Lane 4q + i of the low half is element 8q + i, of the high half element 8q + 4 + i.
          for (int e = 0; e < kLanes; ++e) {
            o[8 * (e / 4) + e % 4] = a[e];
            o[8 * (e / 4) + 4 + e % 4] = b[e];
          }
        }
      }
    }
  }
}

}  // namespace

int64_t AttentionWorkItems(const AttentionProblem& p) {
  return static_cast<int64_t>(p.sequences.size()) * p.kv_heads;
}

namespace {

// How bf16 heads of a multiple of 32 elements are computed.
enum class Pairs { kOff, kPortable, kNative };

// One work item: KV head `g` of sequence `s`, with its query group's rows.
struct WorkItem {
  const AttentionSequence& s;
  int64_t g = 0;
  int64_t d = 0, dpad = 0, group = 1;  // head_dim, padded to whole vectors; query heads per KV head
  int64_t n = 0, m = 0, rows = 0;      // new rows, keys (past + n), query rows (n * group)
  int64_t mpad = 0;                    // m padded to whole vectors
  int64_t kv_offset = 0;               // element offset of this KV head in the cache
};

KernelDType CacheDType(const AttentionProblem& p) { return p.cache_dtype.value_or(p.dtype); }

// Copies the item's new keys and values into cache slots [past, past + n), rounded to bf16 when
// the rows are float and the cache bf16.
__attribute__((always_inline)) inline void CopyNewRowsToCache(const AttentionProblem& p,
                                                              const WorkItem& w) {
  const AttentionSequence& s = w.s;
  const int64_t d = w.d, g = w.g;
  if (CacheDType(p) != p.dtype) {  // float rows into a bf16 cache
    for (int64_t i = 0; i < w.n; ++i) {
      const int64_t from = (i * p.kv_heads + g) * d, to = w.kv_offset + (s.past + i) * d;
      StoreRow(static_cast<const float*>(s.new_keys) + from, d, KernelDType::kBF16, s.keys, to);
      StoreRow(static_cast<const float*>(s.new_values) + from, d, KernelDType::kBF16, s.values, to);
    }
    return;
  }
  const size_t elem = p.dtype == KernelDType::kF32 ? sizeof(float) : sizeof(uint16_t);
  for (int64_t i = 0; i < w.n; ++i) {
    const int64_t from = (i * p.kv_heads + g) * d, to = w.kv_offset + (s.past + i) * d;
    std::memcpy(static_cast<char*>(s.keys) + to * elem,
                static_cast<const char*>(s.new_keys) + from * elem, d * elem);
    std::memcpy(static_cast<char*>(s.values) + to * elem,
                static_cast<const char*>(s.new_values) + from * elem, d * elem);
  }
}

// The item on the pair path (native: AVX-512 BF16); its scores and float outputs also into
// `trace` when given.
__attribute__((always_inline)) inline void RunPairItem(const AttentionProblem& p, const WorkItem& w,
                                                       bool native, auto&& limit, Scratch& scratch,
                                                       AttentionPairTrace* trace) {
  const AttentionSequence& s = w.s;
  const int64_t d = w.d, g = w.g, group = w.group, n = w.n, m = w.m, rows = w.rows, mpad = w.mpad;
  PairItem it;
  scratch.qh.resize(rows * d);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < group; ++h) {
      std::memcpy(&scratch.qh[(i * group + h) * d],
                  static_cast<const uint16_t*>(s.q) + i * s.q_row_stride + (g * group + h) * d,
                  d * sizeof(uint16_t));
    }
  }
  it.q = scratch.qh.data();
  it.keys = static_cast<const uint16_t*>(s.keys) + w.kv_offset;
  it.values = static_cast<const uint16_t*>(s.values) + w.kv_offset;
  it.d = d;
  it.m = m;
  it.mpad = mpad;
  it.rows = rows;
  it.past = s.past;
  it.group = group;
  it.bidirectional = s.bidirectional;
  it.scale = p.scale;
  scratch.scores.resize(rows * mpad);
  if (native) {
    PairScoresNative(it, scratch.scores.data());
  } else {
    PairScoresPortable(it, scratch.scores.data());
  }
  if (trace != nullptr) {
    trace->scores.assign(rows * m, 0.f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < std::min(m, limit(r)); ++j) {
        trace->scores[r * m + j] = scratch.scores[r * mpad + j];
      }
    }
  }
  Softmax(s, rows, mpad, group, limit, scratch);
  // Probabilities in bf16 (as ATen's bf16 attention rounds them before its second matmul).
  scratch.probs.resize(rows * mpad);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < mpad; j += kLanes) {
      const H16 h = RoundBf16(LoadF16(&scratch.scores[r * mpad + j]));
      std::memcpy(&scratch.probs[r * mpad + j], &h, sizeof(h));
    }
  }
  scratch.block_keys.resize((rows + 3) / 4);
  for (int64_t r0 = 0; r0 < rows; r0 += 4) {
    scratch.block_keys[r0 / 4] = std::min(m, limit(std::min(rows, r0 + 4) - 1));
  }
  scratch.q.resize(rows * d);
  if (native) {
    PairValuesNative(it, scratch.probs.data(), scratch.block_keys.data(), scratch.q.data());
  } else {
    PairValuesPortable(it, scratch.probs.data(), scratch.block_keys.data(), scratch.q.data());
  }
  if (trace != nullptr) trace->outputs.assign(scratch.q.begin(), scratch.q.end());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r / group, h = r % group;
    StoreRow(&scratch.q[r * d], d, p.dtype, s.out, i * s.out_row_stride + (g * group + h) * d);
  }
}

// The item on the float path: queries, scores and probabilities in float.
__attribute__((always_inline)) inline void RunFloatItem(const AttentionProblem& p,
                                                        const WorkItem& w, auto&& limit,
                                                        Scratch& scratch) {
  const AttentionSequence& s = w.s;
  const int64_t d = w.d, dpad = w.dpad, g = w.g, group = w.group, n = w.n, m = w.m, rows = w.rows,
                mpad = w.mpad, kv_offset = w.kv_offset;
  // Query vectors of this KV head's group, scaled: row r = i * group + h.
  scratch.q.assign(rows * dpad, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < group; ++h) {
      float* q = &scratch.q[(i * group + h) * dpad];
      LoadRow(s.q, i * s.q_row_stride + (g * group + h) * d, d, p.dtype, q);
      for (int64_t t = 0; t < d; ++t) q[t] *= p.scale;
    }
  }
  // Keys and values are read where they are when their rows are whole vectors (head_dim a
  // multiple of 16); otherwise as float copies padded to dpad.
  const bool in_place = dpad == d;
  if (!in_place) {
    scratch.keys.assign(m * dpad, 0.f);
    scratch.values.assign(m * dpad, 0.f);
    for (int64_t j = 0; j < m; ++j) {
      LoadRow(s.keys, kv_offset + j * d, d, CacheDType(p), &scratch.keys[j * dpad]);
      LoadRow(s.values, kv_offset + j * d, d, CacheDType(p), &scratch.values[j * dpad]);
    }
  }
  const bool bf16 = CacheDType(p) == KernelDType::kBF16;
  const float* keys_f = in_place ? (bf16 ? nullptr : static_cast<const float*>(s.keys) + kv_offset)
                                 : scratch.keys.data();
  const float* values_f = in_place
                              ? (bf16 ? nullptr : static_cast<const float*>(s.values) + kv_offset)
                              : scratch.values.data();
  const uint16_t* keys_h = static_cast<const uint16_t*>(s.keys) + kv_offset;
  const uint16_t* values_h = static_cast<const uint16_t*>(s.values) + kv_offset;
  const bool read_bf16 = in_place && bf16;
  // Scores [rows, mpad], 16 keys at a time: one vector of partial sums per key, reduced
  // together.
  scratch.scores.resize(rows * mpad);
  if (read_bf16) {
    Scores(scratch.q.data(), keys_h, m, mpad, dpad, rows, s.past, group, s.bidirectional,
           scratch.scores.data());
  } else {
    Scores(scratch.q.data(), keys_f, m, mpad, dpad, rows, s.past, group, s.bidirectional,
           scratch.scores.data());
  }
  Softmax(s, rows, mpad, group, limit, scratch);
  // Weighted values, into the q scratch (no longer needed); a block of rows needs the keys up
  // to its last row's limit.
  float* acc = scratch.q.data();
  if (read_bf16) {
    AllWeightedValues(scratch.scores.data(), mpad, values_h, dpad, rows, m, limit, acc);
  } else {
    AllWeightedValues(scratch.scores.data(), mpad, values_f, dpad, rows, m, limit, acc);
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < group; ++h) {
      StoreRow(&acc[(i * group + h) * dpad], d, p.dtype, s.out,
               i * s.out_row_stride + (g * group + h) * d);
    }
  }
}

// Items [begin, end); the pair path's scores and float outputs of the last item also into
// `trace` when given.
SPECDEC_TARGET_CLONES void RunItems(const AttentionProblem& p, int64_t begin, int64_t end,
                                    Pairs mode, AttentionPairTrace* trace) {
  thread_local Scratch scratch;
  const int64_t d = p.head_dim, group = p.heads / p.kv_heads;
  // Rows of head_dim floats are padded with zeros to whole vectors.
  const int64_t dpad = (d + kLanes - 1) / kLanes * kLanes;
  for (int64_t item = begin; item < end; ++item) {
    const AttentionSequence& s = p.sequences[item / p.kv_heads];
    const int64_t g = item % p.kv_heads;
    const int64_t n = s.n, m = s.past + s.n, rows = n * group;
    const int64_t mpad = (m + kLanes - 1) / kLanes * kLanes;
    const int64_t kv_offset = g * s.capacity * d;
    const WorkItem w{s, g, d, dpad, group, n, m, rows, mpad, kv_offset};
    CopyNewRowsToCache(p, w);
    // Row r (new row i = r / group) attends to keys [0, limit(r)): the context and the new rows
    // up to itself (causal, or a tree, whose ancestors come first), or every key (bidirectional).
    // Keys past the limit are never scored, which halves a prefill's work.
    auto limit = [&](int64_t r) { return s.bidirectional ? m : s.past + r / group + 1; };
    const bool pairs = mode != Pairs::kOff && p.pair_path && p.dtype == KernelDType::kBF16 &&
                       CacheDType(p) == KernelDType::kBF16 && d % 32 == 0 &&
                       d <= 32 * kMaxPairChunks;
    if (pairs) {
      RunPairItem(p, w, mode == Pairs::kNative, limit, scratch, trace);
    } else {
      RunFloatItem(p, w, limit, scratch);
    }
  }
}

}  // namespace

bool AttentionKernelNative() { return CpuHasAvx512Bf16(); }

// The pair path's portable loops do more work than the float path (every bf16 pair is split
// into two float vectors), so without AVX-512 BF16 bf16 heads take the float path.
void RunAttention(const AttentionProblem& p, int64_t begin, int64_t end) {
  RunItems(p, begin, end, AttentionKernelNative() ? Pairs::kNative : Pairs::kOff, nullptr);
}

void RunAttentionAvx2(const AttentionProblem& p, int64_t begin, int64_t end) {
  t_avx2_only = true;
  RunAttention(p, begin, end);
  t_avx2_only = false;
}

void RunAttentionPortable(const AttentionProblem& p, int64_t begin, int64_t end) {
  RunItems(p, begin, end, Pairs::kPortable, nullptr);
}

AttentionPairTrace TraceAttentionPairs(const AttentionProblem& p, int64_t item, bool native) {
  AttentionPairTrace trace;
  RunItems(p, item, item + 1, native && AttentionKernelNative() ? Pairs::kNative : Pairs::kPortable,
           &trace);
  return trace;
}

}  // namespace specdec::model
