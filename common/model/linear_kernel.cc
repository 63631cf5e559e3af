#include "common/model/linear_kernel.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "common/model/target_clones.h"
#include "common/model/vec16.h"

namespace specdec::model {
namespace {

// Stores the 16 sums of `sums` of rows [r, ...) and outputs [o, ...): sum k goes to output
// o + k % nb of row r + k / nb, rounded to bf16 in p.y, or as it is in p.y_f32.
SPECDEC_VECTOR_FN void StoreSums(F16 sums, int nb, const LinearProblem& p, int64_t r, int64_t o) {
  if (p.y_f32 != nullptr) {
    float* y = p.y_f32 + r * p.y_stride + o;
    for (int k = 0; k < kLanes; ++k) y[(k / nb) * p.y_stride + k % nb] = sums[k];
    return;
  }
  const H16 h = RoundBf16(sums);
  uint16_t* y = p.y + r * p.y_stride + o;
  for (int k = 0; k < kLanes; ++k) y[(k / nb) * p.y_stride + k % nb] = h[k];
}

// One chunk of 32 inputs: MB rows of x (x_stride elements apart) against NB outputs' weights
// (n_step elements apart from w), added into acc (MB * NB sums of 16 lanes, row-major).
template <int MB, int NB>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"), always_inline)) inline void
DotChunk(const uint16_t* x, int64_t x_stride, const uint16_t* w, int64_t n_step, __m512* acc) {
  __m512bh xv[MB];
  for (int m = 0; m < MB; ++m) {
    xv[m] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + m * x_stride));
  }
  for (int n = 0; n < NB; ++n) {
    const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + n * n_step));
    for (int m = 0; m < MB; ++m) acc[m * NB + n] = _mm512_dpbf16_ps(acc[m * NB + n], xv[m], wv);
  }
}

// Rows [r0, r0 + MB) and outputs [o0, o0 + NB) (MB * NB = 16) on the AVX-512 BF16 path, the
// matrix row-major or packed in blocks of 16: each weight chunk is loaded once for the block's
// rows. Packed, the block reads each chunk at fixed offsets from one pointer, at every row count:
// with a register per output (as the row-major loop needs) the compiler ran out of registers, and
// 1-row products of the 100M shape's matrices read 0.83-0.90 of a plain read of the same bytes,
// against 0.93-1.0 this way (docs/results/2026-11-27-fixed-offsets.md). Row-major, the block
// prefetches `pf_bytes` from `pf` meanwhile (weights a later block reads), a few lines per chunk.
template <int MB, int NB>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"), always_inline)) inline void
NativeBlock(const LinearProblem& p, int64_t r0, int64_t o0, const char* pf, int64_t pf_bytes) {
  static_assert(MB * NB == kLanes);
  __m512 acc[MB * NB];
  for (int k = 0; k < MB * NB; ++k) acc[k] = _mm512_setzero_ps();
  const uint16_t* x = p.x + r0 * p.x_stride;
  if (p.w_block == kLanes) {
    const uint16_t* w = p.w + (o0 & ~int64_t{kLanes - 1}) * p.in + (o0 & (kLanes - 1)) * 32;
    for (int64_t c = 0; c < p.in; c += 32, w += 32 * kLanes) {
      DotChunk<MB, NB>(x + c, p.x_stride, w, 32, acc);
    }
  } else {
    const uint16_t* w = p.w + o0 * p.in;
    const int64_t lines = pf_bytes / 64, chunks = p.in / 32;
    const int64_t per_chunk = (lines + chunks - 1) / chunks;
    int64_t line = 0;
    for (int64_t c = 0; c < p.in; c += 32) {
      for (int64_t k = 0; k < per_chunk && line < lines; ++k, ++line) {
        _mm_prefetch(pf + line * 64, _MM_HINT_T0);
      }
      DotChunk<MB, NB>(x + c, p.x_stride, w + c, p.in, acc);
    }
  }
  F16 v[kLanes];
  for (int k = 0; k < kLanes; ++k) v[k] = std::bit_cast<F16>(acc[k]);
  StoreSums(Reduce16(v), NB, p, r0, o0);
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

// 16 outputs at a time (16 weight rows, the same 16 * in elements in either layout), every row of
// them by blocks of 4, 2 and 1 rows (4, 8 and 16 outputs at a time): the group's weights come
// from memory once, for its first block of rows; the other blocks find them in cache. Packed, the
// first block is one row, which reads the group as one sequential stream (a block of 4 rows
// reads a quarter of each chunk) that the hardware prefetches alone: software prefetch of the
// next group in that block made products of 2-17 rows of a memory-bound shape 6-13% slower
// (docs/results/2026-11-27-verify-rows.md). Row-major, the first block prefetches the next group.
void RunNative(const LinearProblem& p) {
  const int64_t group_bytes = kLanes * p.in * static_cast<int64_t>(sizeof(uint16_t));
  const bool packed = p.w_block == kLanes;
  const bool prefetch = !packed;
  const int64_t lead = packed && p.rows > 0 ? 1 : 0;  // rows [0, lead) first, one at a time
  const int64_t fours = lead + (p.rows - lead) / 4 * 4;
  for (int64_t o0 = 0; o0 < p.out; o0 += kLanes) {
    const char* next = reinterpret_cast<const char*>(p.w + (o0 + kLanes) * p.in);
    int64_t pf_bytes = prefetch && o0 + kLanes < p.out ? group_bytes : 0;
    int64_t r = 0;
    for (; r < lead; ++r) {
      NativeGroup<1, 16>(p, r, o0, next, pf_bytes);
      pf_bytes = 0;
    }
    for (; r < fours; r += 4) {
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

namespace {

// Rows are taken 64 at a time (a panel), widened to floats once.
constexpr int64_t kPanelRows = 64;

// Rows [r0, r0 + rows) as LoadPairs leaves them: per row, per chunk of 32 elements, the 16 odd
// elements then the 16 even ones, as floats (bf16 widens exactly).
void WidenPanel(const LinearProblem& p, int64_t r0, int64_t rows, float* panel) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* x = p.x + (r0 + r) * p.x_stride;
    for (int64_t c = 0; c < p.in; c += 32) {
      F16 odd, even;
      LoadPairs(x + c, &odd, &even);
      StoreF16(panel + r * p.in + c, odd);
      StoreF16(panel + r * p.in + c + kLanes, even);
    }
  }
}

// A panel's rows [0, rows) (rows r0 + r of the problem) against every output.
using PanelFn = void (*)(const LinearProblem& p, const float* panel, int64_t r0, int64_t rows);

// Blocks of MB rows of a panel against the 16 outputs from o0, NB outputs at a time (MB * NB = 4
// independent sums per lane keep the multiply-adds from waiting on each other): each weight
// chunk is widened once for the MB rows. `Block` is the instruction set's block type, with
// Run(p, panel, row, r_out, o0, prefetch); every (row, output) sum is taken in the order of the
// contract. The group's first block reads its weights from memory and prefetches ahead; the
// others find them in cache.
template <template <int, int> class Block>
__attribute__((always_inline)) inline void RunPanelBlocks(const LinearProblem& p,
                                                          const float* panel, int64_t r0,
                                                          int64_t rows) {
  for (int64_t o0 = 0; o0 < p.out; o0 += kLanes) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) Block<4, 1>::Run(p, panel, r, r0 + r, o0, r == 0);
    if (r + 2 <= rows) {
      Block<2, 2>::Run(p, panel, r, r0 + r, o0, r == 0);
      r += 2;
    }
    if (r < rows) Block<1, 4>::Run(p, panel, r, r0 + r, o0, r == 0);
  }
}

// The block on GCC vectors, for any instruction set.
template <int MB, int NB>
struct PortableBlock {
  static_assert(MB * NB == 4 && kLanes % NB == 0);
  __attribute__((always_inline)) static void Run(const LinearProblem& p, const float* panel,
                                                 int64_t row, int64_t r_out, int64_t o0,
                                                 bool /*prefetch*/) {
    F16 acc[MB][kLanes];
    for (int n0 = 0; n0 < kLanes; n0 += NB) {
      F16 a[MB][NB] = {};
      for (int64_t c = 0; c < p.in; c += 32) {
        for (int n = 0; n < NB; ++n) {
          F16 wo, we;
          LoadPairs(p.w + (o0 + n0 + n) * p.in + c, &wo, &we);
          for (int m = 0; m < MB; ++m) {
            const float* xr = panel + (row + m) * p.in + c;
            // Each product of two bf16 values is exact in float, so a contracted multiply-add
            // rounds exactly like the product and the sum.
            a[m][n] += LoadF16(xr) * wo;
            a[m][n] += LoadF16(xr + kLanes) * we;
          }
        }
      }
      for (int m = 0; m < MB; ++m) {
        for (int n = 0; n < NB; ++n) acc[m][n0 + n] = a[m][n];
      }
    }
    for (int m = 0; m < MB; ++m) {
      StoreSums(Reduce16(acc[m]), kLanes, p, r_out + m, o0);
    }
  }
};

SPECDEC_TARGET_CLONES void RunPanelPortable(const LinearProblem& p, const float* panel, int64_t r0,
                                            int64_t rows) {
  RunPanelBlocks<PortableBlock>(p, panel, r0, rows);
}

// Where the chunk of 32 weights from input c of output o starts, in either layout.
template <bool Packed>
__attribute__((always_inline)) inline const uint16_t* WeightChunk(const LinearProblem& p, int64_t o,
                                                                  int64_t c) {
  if constexpr (Packed) return p.w + (o & ~int64_t{3}) * p.in + c * 4 + (o & 3) * 32;
  return p.w + o * p.in + c;
}

// How far ahead of its reads the AVX2 path prefetches weights: in the packed layout 1 KiB of the
// stream; in the row-major one, the same chunk of the next group of 16 outputs. On the model
// bench's 100M shape a 1-token step read 15-17 GB/s packed against 12-13 row-major on one core
// (a triad of 16.5-16.8), 21-26 against 18-21 on two (docs/results/2026-11-26-packed-weights.md).
constexpr int64_t kPackedPrefetchBytes = 1024;

// In the packed layout, a block of rows goes through a block of 4 outputs by segments of this
// many inputs (the 4 outputs' 8 KiB of weights and at most 16 KiB of rows stay in L1), every pass
// over a segment finding the weights that the first pass brought in.
constexpr int64_t kPackedSegment = 1024;

// The block on AVX2 and FMA registers: a lane sum is two 8-float registers (lanes 0-7, 8-15),
// the same sums as PortableBlock's in the same order, kept in registers within a segment.
template <bool Packed>
struct Avx2Blocks {
  template <int MB, int NB>
  struct Block {
    static_assert(MB * NB == 4 && kLanes % NB == 0);
    __attribute__((target("avx2,fma"))) static void Run(const LinearProblem& p, const float* panel,
                                                        int64_t row, int64_t r_out, int64_t o0,
                                                        bool prefetch) {
      F16 acc[MB][kLanes];
      const int64_t segment = Packed && MB > 1 ? kPackedSegment : p.in;
      for (int q0 = 0; q0 < kLanes; q0 += 4) {
        for (int64_t s0 = 0; s0 < p.in; s0 += segment) {
          const int64_t s1 = std::min(p.in, s0 + segment);
          for (int n0 = q0; n0 < q0 + 4; n0 += NB) {
            Pass(p, panel, row, o0, n0, s0, s1, prefetch && n0 == q0, acc);
          }
        }
      }
      for (int m = 0; m < MB; ++m) {
        StoreSums(Reduce16(acc[m]), kLanes, p, r_out + m, o0);
      }
    }

    // Outputs o0 + n0 .. + NB of rows `row` .. + MB over inputs [s0, s1), their sums carried in
    // acc from earlier segments. Prefetches ahead when `prefetch` is set (the first pass over
    // weights not yet read).
    __attribute__((target("avx2,fma"), always_inline)) static inline void Pass(
        const LinearProblem& p, const float* panel, int64_t row, int64_t o0, int n0, int64_t s0,
        int64_t s1, bool prefetch, F16 (&acc)[MB][kLanes]) {
      const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
      const int64_t ahead = Packed ? kPackedPrefetchBytes : kLanes * p.in * 2;
      __m256 lo[MB][NB], hi[MB][NB];
      for (int m = 0; m < MB; ++m) {
        for (int n = 0; n < NB; ++n) {
          const auto* sums = reinterpret_cast<const float*>(&acc[m][n0 + n]);
          lo[m][n] = s0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(sums);
          hi[m][n] = s0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(sums + 8);
        }
      }
      for (int64_t c = s0; c < s1; c += 32) {
        if (Packed && prefetch) {
          // The 4 lines of this chunk's block of 4 outputs, `ahead` bytes on.
          const char* line = reinterpret_cast<const char*>(WeightChunk<true>(p, o0 + n0, c));
          for (int k = 0; k < 4; ++k) _mm_prefetch(line + ahead + 64 * k, _MM_HINT_T0);
        }
        for (int n = 0; n < NB; ++n) {
          const uint16_t* w = WeightChunk<Packed>(p, o0 + n0 + n, c);
          if (!Packed && prefetch) {
            _mm_prefetch(reinterpret_cast<const char*>(w) + ahead, _MM_HINT_T0);
          }
          const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
          const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
          const __m256 odd0 = _mm256_castsi256_ps(_mm256_and_si256(w0, high));
          const __m256 odd1 = _mm256_castsi256_ps(_mm256_and_si256(w1, high));
          const __m256 even0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
          const __m256 even1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
          for (int m = 0; m < MB; ++m) {
            const float* xr = panel + (row + m) * p.in + c;
            lo[m][n] = _mm256_fmadd_ps(_mm256_loadu_ps(xr), odd0, lo[m][n]);
            hi[m][n] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), odd1, hi[m][n]);
            lo[m][n] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 16), even0, lo[m][n]);
            hi[m][n] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 24), even1, hi[m][n]);
          }
        }
      }
      for (int m = 0; m < MB; ++m) {
        for (int n = 0; n < NB; ++n) {
          auto* sums = reinterpret_cast<float*>(&acc[m][n0 + n]);
          _mm256_storeu_ps(sums, lo[m][n]);
          _mm256_storeu_ps(sums + 8, hi[m][n]);
        }
      }
    }
  };
};

__attribute__((target("avx2,fma"))) void RunPanelAvx2(const LinearProblem& p, const float* panel,
                                                      int64_t r0, int64_t rows) {
  if (p.w_block == 4) {
    RunPanelBlocks<Avx2Blocks<true>::Block>(p, panel, r0, rows);
  } else {
    RunPanelBlocks<Avx2Blocks<false>::Block>(p, panel, r0, rows);
  }
}

// The problem's rows a panel at a time: widened, then run by `run`.
void RunPanels(const LinearProblem& p, PanelFn run) {
  const int64_t panel_rows = std::min(p.rows, kPanelRows);
  std::vector<float> panel(static_cast<size_t>(panel_rows * p.in));
  for (int64_t r0 = 0; r0 < p.rows; r0 += kPanelRows) {
    const int64_t rows = std::min(kPanelRows, p.rows - r0);
    WidenPanel(p, r0, rows, panel.data());
    run(p, panel.data(), r0, rows);
  }
}

// `p` with its packed matrix unpacked into `scratch`: a path reading another layout.
LinearProblem Unpacked(const LinearProblem& p, std::vector<uint16_t>* scratch) {
  if (p.w_block == 0) return p;
  scratch->resize(static_cast<size_t>(p.in * p.out));
  UnpackLinearWeights(p.w, p.in, p.out, p.w_block, scratch->data());
  LinearProblem q = p;
  q.w = scratch->data();
  q.w_block = 0;
  return q;
}

}  // namespace

void PackLinearWeights(const uint16_t* w, int64_t in, int64_t out, int32_t block,
                       uint16_t* packed) {
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t c = 0; c < in; c += 32) {
      std::memcpy(packed + (o / block) * block * in + c * block + (o % block) * 32, w + o * in + c,
                  32 * sizeof(uint16_t));
    }
  }
}

void UnpackLinearWeights(const uint16_t* packed, int64_t in, int64_t out, int32_t block,
                         uint16_t* w) {
  for (int64_t o = 0; o < out; ++o) CopyPackedRow(packed, in, o, block, w + o * in);
}

void CopyPackedRow(const uint16_t* packed, int64_t in, int64_t o, int32_t block, uint16_t* dst) {
  for (int64_t c = 0; c < in; c += 32) {
    std::memcpy(dst + c, packed + (o / block) * block * in + c * block + (o % block) * 32,
                32 * sizeof(uint16_t));
  }
}

int32_t LinearPackBlock() {
  if (LinearKernelNative()) return kLanes;
  return CpuHasAvx2Fma() ? 4 : 0;
}

void RunLinearPortable(const LinearProblem& p) {
  std::vector<uint16_t> scratch;
  RunPanels(Unpacked(p, &scratch), RunPanelPortable);
}

void RoundRowsToBf16(const float* x, int64_t rows, int64_t in, int64_t x_stride, uint16_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < in; ++i) out[r * in + i] = FloatToBf16(x[r * x_stride + i]);
  }
}

void RunLinear(const LinearProblem& p) {
  std::vector<uint16_t> scratch;
  if (LinearKernelNative()) {
    RunNative(p.w_block == kLanes ? p : Unpacked(p, &scratch));
  } else if (CpuHasAvx2Fma()) {
    RunPanels(p.w_block == kLanes ? Unpacked(p, &scratch) : p, RunPanelAvx2);
  } else {
    RunLinearPortable(p);
  }
}

}  // namespace specdec::model
