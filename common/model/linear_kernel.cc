#include "common/model/linear_kernel.h"

#include <immintrin.h>

#include <bit>
#include <cstring>

#include "common/model/vec16.h"

namespace specdec::model {
namespace {

// The 32 bf16 elements at p as two float vectors: lane l of `odd` is element 2l + 1, of `even`
// element 2l (a little-endian pair of bf16 is one 32-bit word: high half odd, low half even).
inline void LoadPairs(const uint16_t* p, F16* odd, F16* even) {
  U16 u;
  std::memcpy(&u, p, sizeof(u));
  const U16 hi = u & 0xFFFF0000u, lo = u << 16;
  std::memcpy(odd, &hi, sizeof(hi));
  std::memcpy(even, &lo, sizeof(lo));
}

// Rounds the 16 sums of `sums` and stores sum k at y[(k / nb) * y_stride + k % nb].
inline void StoreSums(F16 sums, int nb, uint16_t* y, int64_t y_stride) {
  const H16 h = RoundBf16(sums);
  for (int k = 0; k < kLanes; ++k) y[(k / nb) * y_stride + k % nb] = h[k];
}

// Rows [r0, r0 + MB) and outputs [o0, o0 + NB) (MB * NB = 16) on the AVX-512 BF16 path: each
// weight chunk is loaded once for the block's rows.
template <int MB, int NB>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"), always_inline)) inline void
NativeBlock(const LinearProblem& p, int64_t r0, int64_t o0) {
  static_assert(MB * NB == kLanes);
  __m512 acc[MB * NB];
  for (int k = 0; k < MB * NB; ++k) acc[k] = _mm512_setzero_ps();
  const uint16_t* x = p.x + r0 * p.x_stride;
  const uint16_t* w = p.w + o0 * p.in;
  for (int64_t c = 0; c < p.in; c += 32) {
    __m512bh xv[MB];
    for (int m = 0; m < MB; ++m) {
      xv[m] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + m * p.x_stride + c));
    }
    for (int n = 0; n < NB; ++n) {
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + n * p.in + c));
      for (int m = 0; m < MB; ++m) acc[m * NB + n] = _mm512_dpbf16_ps(acc[m * NB + n], xv[m], wv);
    }
  }
  F16 v[kLanes];
  for (int k = 0; k < kLanes; ++k) v[k] = std::bit_cast<F16>(acc[k]);
  StoreSums(Reduce16(v), NB, p.y + r0 * p.y_stride + o0, p.y_stride);
}

template <int MB, int NB>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void NativeRows(
    const LinearProblem& p, int64_t r0) {
  for (int64_t o0 = 0; o0 < p.out; o0 += NB) NativeBlock<MB, NB>(p, r0, o0);
}

// Rows by blocks of 4, 2 and 1 (4, 8 and 16 outputs at a time).
void RunNative(const LinearProblem& p) {
  int64_t r = 0;
  for (; r + 4 <= p.rows; r += 4) NativeRows<4, 4>(p, r);
  if (r + 2 <= p.rows) {
    NativeRows<2, 8>(p, r);
    r += 2;
  }
  if (r < p.rows) NativeRows<1, 16>(p, r);
}

}  // namespace

bool LinearKernelFits(int64_t in, int64_t out) {
  return in > 0 && out > 0 && in % 32 == 0 && out % kLanes == 0;
}

bool LinearKernelNative() { return CpuHasAvx512Bf16(); }

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
RunLinearPortable(const LinearProblem& p) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const uint16_t* x = p.x + r * p.x_stride;
    for (int64_t o0 = 0; o0 < p.out; o0 += kLanes) {
      F16 acc[kLanes] = {};
      for (int64_t c = 0; c < p.in; c += 32) {
        F16 xo, xe;
        LoadPairs(x + c, &xo, &xe);
        for (int n = 0; n < kLanes; ++n) {
          F16 wo, we;
          LoadPairs(p.w + (o0 + n) * p.in + c, &wo, &we);
          // Each product of two bf16 values is exact in float, so a contracted multiply-add
          // rounds exactly like the product and the sum.
          acc[n] += xo * wo;
          acc[n] += xe * we;
        }
      }
      StoreSums(Reduce16(acc), kLanes, p.y + r * p.y_stride + o0, p.y_stride);
    }
  }
}

void RunLinear(const LinearProblem& p) {
  if (LinearKernelNative()) {
    RunNative(p);
  } else {
    RunLinearPortable(p);
  }
}

}  // namespace specdec::model
