#include "common/model/linear_f32_kernel.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace specdec::model {
namespace {

// Outputs whose weights stay in the caches while every block of rows passes over them.
constexpr int64_t kOutBlock = 64;

// The fixed tree over 16 partial sums.
float TreeSum(const float* s) {
  float t8[8], t4[4];
  for (int l = 0; l < 8; ++l) t8[l] = s[l] + s[l + 8];
  for (int l = 0; l < 4; ++l) t4[l] = t8[l] + t8[l + 4];
  const float t2a = t4[0] + t4[2], t2b = t4[1] + t4[3];
  return t2a + t2b;
}

// Elements past `in` count as zeros: fma(0, 0, s) leaves s as the vector paths' masked lanes do.
void PortableRowOutput(const LinearF32Problem& p, int64_t r, int64_t o) {
  float s[16] = {};
  const float* x = p.x + r * p.x_stride;
  const float* w = p.w + o * p.in;
  for (int64_t c = 0; c < p.in; c += 16) {
    for (int l = 0; l < 16; ++l) {
      const int64_t i = c + l;
      s[l] = i < p.in ? std::fma(x[i], w[i], s[l]) : std::fma(0.0f, 0.0f, s[l]);
    }
  }
  p.y[r * p.y_stride + o] = TreeSum(s);
}

// ---- AVX-512: a tile of R rows by J outputs, each sum one zmm of 16 partial sums.

// The 16 partial sums stored and added by the portable tree: one order for every path.
__attribute__((target("avx512f"))) inline float Reduce512(__m512 v) {
  alignas(64) float s[16];
  _mm512_store_ps(s, v);
  return TreeSum(s);
}

template <int R, int J>
__attribute__((target("avx512f"))) void Tile512(const LinearF32Problem& p, int64_t r0, int64_t o0) {
  __m512 acc[R][J];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < J; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  const float* w = p.w + o0 * p.in;
  const float* x = p.x + r0 * p.x_stride;
  const int64_t full = p.in / 16 * 16;
  for (int64_t c = 0; c < full; c += 16) {
    __m512 wv[J];
    for (int j = 0; j < J; ++j) wv[j] = _mm512_loadu_ps(w + j * p.in + c);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * p.x_stride + c);
      for (int j = 0; j < J; ++j) acc[r][j] = _mm512_fmadd_ps(xv, wv[j], acc[r][j]);
    }
  }
  if (full < p.in) {  // the last chunk, its lanes past `in` zeros
    const __mmask16 m = static_cast<__mmask16>((1u << (p.in - full)) - 1);
    __m512 wv[J];
    for (int j = 0; j < J; ++j) wv[j] = _mm512_maskz_loadu_ps(m, w + j * p.in + full);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + r * p.x_stride + full);
      for (int j = 0; j < J; ++j) acc[r][j] = _mm512_fmadd_ps(xv, wv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < J; ++j) p.y[(r0 + r) * p.y_stride + o0 + j] = Reduce512(acc[r][j]);
  }
}

// A lone row reads its outputs' weights one after another, a single sequential stream: reading
// four rows of weights side by side ran at a third to two thirds of that stream's speed on an
// AVX-512 CPU (a 1-token step is memory-bound, and the out-of-order core overlaps one output's
// chain of sums with the next's). Blocks of rows share each loaded vector among four outputs.
template <int R>
__attribute__((target("avx512f"))) void Rows512(const LinearF32Problem& p, int64_t r0,
                                                int64_t o_begin, int64_t o_end) {
  int64_t o = o_begin;
  if constexpr (R > 1) {
    for (; o + 4 <= o_end; o += 4) Tile512<R, 4>(p, r0, o);
  }
  for (; o < o_end; ++o) Tile512<R, 1>(p, r0, o);
}

// The first row of each block of outputs runs alone, streaming the block's weights into the
// caches; the other rows then read them from there, four at a time, the last one to three
// together. Which tile computes a row changes none of its sums.
__attribute__((target("avx512f"))) void RunAvx512(const LinearF32Problem& p) {
  if (p.rows == 0) return;
  for (int64_t ob = 0; ob < p.out; ob += kOutBlock) {
    const int64_t oe = std::min(p.out, ob + kOutBlock);
    Rows512<1>(p, 0, ob, oe);
    int64_t r = 1;
    for (; r + 4 <= p.rows; r += 4) Rows512<4>(p, r, ob, oe);
    switch (p.rows - r) {
      case 3:
        Rows512<3>(p, r, ob, oe);
        break;
      case 2:
        Rows512<2>(p, r, ob, oe);
        break;
      case 1:
        Rows512<1>(p, r, ob, oe);
        break;
      default:
        break;
    }
  }
}

// ---- AVX2: a tile of R rows by J outputs, each sum two ymm (lanes 0-7, lanes 8-15).

__attribute__((target("avx2,fma"))) inline float Reduce256(__m256 lo, __m256 hi) {
  alignas(32) float s[16];
  _mm256_store_ps(s, lo);
  _mm256_store_ps(s + 8, hi);
  return TreeSum(s);
}

// The mask of the first `n` of 8 lanes (n may be negative or above 8).
__attribute__((target("avx2,fma"))) inline __m256i Mask8(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int k = static_cast<int>(std::clamp<int64_t>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), lanes);
}

template <int R, int J>
__attribute__((target("avx2,fma"))) void Tile256(const LinearF32Problem& p, int64_t r0,
                                                 int64_t o0) {
  __m256 lo[R][J], hi[R][J];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < J; ++j) lo[r][j] = hi[r][j] = _mm256_setzero_ps();
  }
  const float* w = p.w + o0 * p.in;
  const float* x = p.x + r0 * p.x_stride;
  const int64_t full = p.in / 16 * 16;
  for (int64_t c = 0; c < full; c += 16) {
    __m256 w_lo[J], w_hi[J];
    for (int j = 0; j < J; ++j) {
      w_lo[j] = _mm256_loadu_ps(w + j * p.in + c);
      w_hi[j] = _mm256_loadu_ps(w + j * p.in + c + 8);
    }
    for (int r = 0; r < R; ++r) {
      const __m256 x_lo = _mm256_loadu_ps(x + r * p.x_stride + c);
      const __m256 x_hi = _mm256_loadu_ps(x + r * p.x_stride + c + 8);
      for (int j = 0; j < J; ++j) {
        lo[r][j] = _mm256_fmadd_ps(x_lo, w_lo[j], lo[r][j]);
        hi[r][j] = _mm256_fmadd_ps(x_hi, w_hi[j], hi[r][j]);
      }
    }
  }
  if (full < p.in) {  // the last chunk, its lanes past `in` zeros
    const int64_t left = p.in - full;
    const __m256i m_lo = Mask8(left), m_hi = Mask8(left - 8);
    __m256 w_lo[J], w_hi[J];
    for (int j = 0; j < J; ++j) {
      w_lo[j] = _mm256_maskload_ps(w + j * p.in + full, m_lo);
      w_hi[j] = _mm256_maskload_ps(w + j * p.in + full + 8, m_hi);
    }
    for (int r = 0; r < R; ++r) {
      const __m256 x_lo = _mm256_maskload_ps(x + r * p.x_stride + full, m_lo);
      const __m256 x_hi = _mm256_maskload_ps(x + r * p.x_stride + full + 8, m_hi);
      for (int j = 0; j < J; ++j) {
        lo[r][j] = _mm256_fmadd_ps(x_lo, w_lo[j], lo[r][j]);
        hi[r][j] = _mm256_fmadd_ps(x_hi, w_hi[j], hi[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < J; ++j) p.y[(r0 + r) * p.y_stride + o0 + j] = Reduce256(lo[r][j], hi[r][j]);
  }
}

template <int R>
__attribute__((target("avx2,fma"))) void Rows256(const LinearF32Problem& p, int64_t r0,
                                                 int64_t o_begin, int64_t o_end) {
  int64_t o = o_begin;
  if constexpr (R > 1) {
    for (; o + 2 <= o_end; o += 2) Tile256<R, 2>(p, r0, o);
  }
  for (; o < o_end; ++o) Tile256<R, 1>(p, r0, o);
}

// As RunAvx512: a lone first row streams each block of outputs, then pairs of rows.
__attribute__((target("avx2,fma"))) void RunAvx2(const LinearF32Problem& p) {
  if (p.rows == 0) return;
  for (int64_t ob = 0; ob < p.out; ob += kOutBlock) {
    const int64_t oe = std::min(p.out, ob + kOutBlock);
    Rows256<1>(p, 0, ob, oe);
    int64_t r = 1;
    for (; r + 2 <= p.rows; r += 2) Rows256<2>(p, r, ob, oe);
    if (r < p.rows) Rows256<1>(p, r, ob, oe);
  }
}

enum class Path { kAvx512, kAvx2, kPortable };

Path ThisCpusPath() {
  static const Path path = [] {
    if (__builtin_cpu_supports("avx512f")) return Path::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Path::kAvx2;
    return Path::kPortable;
  }();
  return path;
}

}  // namespace

bool LinearF32KernelFits(int64_t in, int64_t out) { return in > 0 && out > 0; }

void RunLinearF32Portable(const LinearF32Problem& p) {
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t o = 0; o < p.out; ++o) PortableRowOutput(p, r, o);
  }
}

bool RunLinearF32Avx2(const LinearF32Problem& p) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
  RunAvx2(p);
  return true;
}

void RunLinearF32(const LinearF32Problem& p) {
  switch (ThisCpusPath()) {
    case Path::kAvx512:
      RunAvx512(p);
      return;
    case Path::kAvx2:
      RunAvx2(p);
      return;
    case Path::kPortable:
      RunLinearF32Portable(p);
      return;
  }
}

}  // namespace specdec::model
