#include "common/model/linear_kernel.h"

#include <immintrin.h>

#include <bit>
#include <cstring>

#include "common/model/vec16.h"

namespace specdec::model {
namespace {

// Rounds the 16 sums of `sums` and stores sum k at y[(k / nb) * y_stride + k % nb].
inline void StoreSums(F16 sums, int nb, uint16_t* y, int64_t y_stride) {
  const H16 h = RoundBf16(sums);
  for (int k = 0; k < kLanes; ++k) y[(k / nb) * y_stride + k % nb] = h[k];
}

// Rows [r0, r0 + MB) and outputs [o0, o0 + NB) (MB * NB = 16) on the AVX-512 BF16 path: each
// weight chunk is loaded once for the block's rows. Meanwhile it prefetches `pf_bytes` from `pf`
// (weights a later block reads), a few lines per chunk.
template <int MB, int NB>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"), always_inline)) inline void
NativeBlock(const LinearProblem& p, int64_t r0, int64_t o0, const char* pf, int64_t pf_bytes) {
  static_assert(MB * NB == kLanes);
  __m512 acc[MB * NB];
  for (int k = 0; k < MB * NB; ++k) acc[k] = _mm512_setzero_ps();
  const uint16_t* x = p.x + r0 * p.x_stride;
  const uint16_t* w = p.w + o0 * p.in;
  const int64_t lines = pf_bytes / 64, chunks = p.in / 32;
  const int64_t per_chunk = (lines + chunks - 1) / chunks;
  int64_t line = 0;
  for (int64_t c = 0; c < p.in; c += 32) {
    for (int64_t k = 0; k < per_chunk && line < lines; ++k, ++line) {
      _mm_prefetch(pf + line * 64, _MM_HINT_T0);
    }
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

// Rows [r0, r0 + MB) and the 16 outputs from o0, NB at a time; each block prefetches its share
// of `pf_bytes` from `pf`.
template <int MB, int NB>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void NativeGroup(
    const LinearProblem& p, int64_t r0, int64_t o0, const char* pf, int64_t pf_bytes) {
  constexpr int kBlocks = kLanes / NB;
  const int64_t share = pf_bytes / kBlocks;
  for (int b = 0; b < kBlocks; ++b) {
    NativeBlock<MB, NB>(p, r0, o0 + b * NB, pf + b * share, share);
  }
}

// 16 outputs at a time (16 weight rows), every row of them by blocks of 4, 2 and 1 rows (4, 8
// and 16 outputs at a time): the group's weights come from memory once, for its first block of
// rows, which meanwhile prefetches the next group's; the other blocks find them in L1.
void RunNative(const LinearProblem& p) {
  const int64_t group_bytes = kLanes * p.in * static_cast<int64_t>(sizeof(uint16_t));
  for (int64_t o0 = 0; o0 < p.out; o0 += kLanes) {
    const char* next = reinterpret_cast<const char*>(p.w + (o0 + kLanes) * p.in);
    int64_t pf_bytes = o0 + kLanes < p.out ? group_bytes : 0;
    int64_t r = 0;
    for (; r + 4 <= p.rows; r += 4) {
      NativeGroup<4, 4>(p, r, o0, next, pf_bytes);
      pf_bytes = 0;
    }
    if (r + 2 <= p.rows) {
      NativeGroup<2, 8>(p, r, o0, next, pf_bytes);
      pf_bytes = 0;
      r += 2;
    }
    if (r < p.rows) NativeGroup<1, 16>(p, r, o0, next, pf_bytes);
  }
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
