#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/model/cuda_kernels.h"

namespace specdec::model::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kBlockThreads = 256;

template <typename T>
__device__ __forceinline__ float ToFloat(T v);
template <>
__device__ __forceinline__ float ToFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float ToFloat<__half>(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v);  // round to nearest even
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

template <typename T>
__device__ __forceinline__ float TableAt(const void* table, bool f32, int64_t i) {
  return f32 ? static_cast<const float*>(table)[i] : ToFloat(static_cast<const T*>(table)[i]);
}

// Two consecutive 2-byte elements read as one word: the first in the low half.
template <typename T>
__device__ __forceinline__ float2 PairToFloat2(uint32_t v);
template <>
__device__ __forceinline__ float2 PairToFloat2<__nv_bfloat16>(uint32_t v) {
  return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}
template <>
__device__ __forceinline__ float2 PairToFloat2<__half>(uint32_t v) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One warp per (row, head): the sum of squares over the head, then each lane rotates the pairs
// (j, j + half) it owns.
template <typename T>
__global__ void NormRopeQkKernel(NormRopeQkArgs a) {
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int per_row = a.heads + a.kv_heads;
  if (item >= a.rows * per_row) return;  // uniform across the warp
  const int64_t row = item / per_row;
  const int head = static_cast<int>(item % per_row);
  const bool is_q = head < a.heads;
  const int d = a.head_dim, half = d / 2;
  const T* x = static_cast<const T*>(a.qkv) + row * a.row_stride + static_cast<int64_t>(head) * d;
  const T* w = static_cast<const T*>(is_q ? a.q_norm : a.k_norm);
  T* out = is_q ? static_cast<T*>(a.q_out) + (row * a.heads + head) * d
                : static_cast<T*>(a.k_out) + (row * a.kv_heads + (head - a.heads)) * d;
  float scale = 1.f;
  if (w != nullptr) {
    float squares = 0.f;
    for (int j = lane; j < d; j += kWarp) {
      const float v = ToFloat(x[j]);
      squares += v * v;
    }
    scale = rsqrtf(WarpSum(squares) / static_cast<float>(d) + a.eps);
  }
  const int64_t t = row * d;
  for (int j = lane; j < half; j += kWarp) {
    float x1 = ToFloat(x[j]) * scale, x2 = ToFloat(x[j + half]) * scale;
    if (w != nullptr) {
      x1 *= ToFloat(w[j]);
      x2 *= ToFloat(w[j + half]);
    }
    const float c1 = TableAt<T>(a.cos, a.tables_f32, t + j);
    const float c2 = TableAt<T>(a.cos, a.tables_f32, t + j + half);
    const float s1 = TableAt<T>(a.sin, a.tables_f32, t + j);
    const float s2 = TableAt<T>(a.sin, a.tables_f32, t + j + half);
    out[j] = FromFloat<T>(x1 * c1 - x2 * s1);
    out[j + half] = FromFloat<T>(x2 * c2 + x1 * s2);
  }
}

template <typename T>
__global__ void SwiGluKernel(SwiGluArgs a) {
  const int64_t total = a.rows * a.inter;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    const int64_t row = i / a.inter, col = i % a.inter;
    const T* in = static_cast<const T*>(a.gate_up) + row * a.row_stride;
    const float g = ToFloat(in[col]), u = ToFloat(in[a.inter + col]);
    static_cast<T*>(a.out)[i] = FromFloat<T>(g / (1.f + expf(-g)) * u);
  }
}

template <typename T>
cudaError_t LaunchNormRopeQkAs(const NormRopeQkArgs& a, cudaStream_t stream) {
  const int64_t warps = a.rows * (a.heads + a.kv_heads);
  const int64_t blocks = (warps * kWarp + kBlockThreads - 1) / kBlockThreads;
  NormRopeQkKernel<T><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchSwiGluAs(const SwiGluArgs& a, cudaStream_t stream) {
  const int64_t total = a.rows * a.inter;
  const int64_t blocks = std::min<int64_t>((total + kBlockThreads - 1) / kBlockThreads, 4096);
  SwiGluKernel<T><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

// ---- RowsLinear: tensor-core products of a few rows.
//
// A block computes 16 outputs (one mma.m16n8k16's A rows) for every x row, 8 x rows per tile
// (the mma's B columns). Its kWarps warps split k into 32-wide chunks: warp w takes chunks w,
// w + kWarps, ... (interleaved) or a contiguous run of them (kContiguous). A lane (group
// g = lane / 4, t = lane % 4) loads 16 bytes of weight rows g and g + 8 and of x row g at
// elements [32 c + 8 t, 32 c + 8 t + 8). A dot product may visit k in any order, so these 8
// elements fill the lane's A and B fragment slots of two mmas, the same slots in A and in B: no
// shuffles, and every load 16 bytes wide. The warps' partial sums meet in shared memory: the
// upper 8 warps' are added to the lower 8's, then those in warp order. Nothing of this depends
// on the row count, so neither does an output's value.
constexpr int kLinearFoldWarps = 8;

__device__ __forceinline__ void MmaBf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int kTiles, int kWarps, int kUnroll, bool kContiguous>
__global__ void __launch_bounds__(kWarps* kWarp) RowsLinearKernel(RowsLinearArgs a) {
  static_assert(kWarps == kLinearFoldWarps || kWarps == 2 * kLinearFoldWarps);
  __shared__ float partial[kLinearFoldWarps][kTiles][16][8];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int64_t k16 = a.k / 8;  // 16-byte vectors per row
  const auto* w = static_cast<const uint4*>(a.w);
  const uint4* w_lo = n0 + g < a.n ? w + (n0 + g) * k16 : nullptr;
  const uint4* w_hi = n0 + g + 8 < a.n ? w + (n0 + g + 8) * k16 : nullptr;
  const uint4* x_row[kTiles];
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
    const int64_t m = g + 8 * tile;
    x_row[tile] = m < a.m ? reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) +
                                                           m * a.x_stride)
                          : nullptr;
  }
  float acc[kTiles][4];
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile)
    acc[tile][0] = acc[tile][1] = acc[tile][2] = acc[tile][3] = 0.f;
  const int64_t chunks = a.k / 32;
  // Chunk u of a step: first + u * stride, below end.
  const int64_t per_warp = (chunks + kWarps - 1) / kWarps;
  const int64_t begin = kContiguous ? warp * per_warp : warp;
  const int64_t end = kContiguous ? min(chunks, begin + per_warp) : chunks;
  const int64_t stride = kContiguous ? 1 : kWarps;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t first = begin; first < end; first += stride * kUnroll) {
    uint4 lo[kUnroll], hi[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every weight load in flight before the first mma
      const int64_t c = first + u * stride;
      const bool in = c < end;
      lo[u] = in && w_lo != nullptr ? __ldcs(w_lo + 4 * c + t) : zero;
      hi[u] = in && w_hi != nullptr ? __ldcs(w_hi + 4 * c + t) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = first + u * stride;
      if (c >= end) break;
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile) {
        const uint4 xv = x_row[tile] != nullptr ? __ldg(x_row[tile] + 4 * c + t) : zero;
        MmaBf16(acc[tile], lo[u].x, hi[u].x, lo[u].y, hi[u].y, xv.x, xv.y);
        MmaBf16(acc[tile], lo[u].z, hi[u].z, lo[u].w, hi[u].w, xv.z, xv.w);
      }
    }
  }
  // D fragment: c0, c1 at (output g, x rows 2t, 2t + 1); c2, c3 at output g + 8.
  auto store = [&](int slot) {
#pragma unroll
    for (int tile = 0; tile < kTiles; ++tile) {
      partial[slot][tile][g][2 * t] = acc[tile][0];
      partial[slot][tile][g][2 * t + 1] = acc[tile][1];
      partial[slot][tile][g + 8][2 * t] = acc[tile][2];
      partial[slot][tile][g + 8][2 * t + 1] = acc[tile][3];
    }
  };
  if constexpr (kWarps > kLinearFoldWarps) {
    if (warp >= kLinearFoldWarps) store(warp - kLinearFoldWarps);
    __syncthreads();
    if (warp < kLinearFoldWarps) {
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile) {
        acc[tile][0] += partial[warp][tile][g][2 * t];
        acc[tile][1] += partial[warp][tile][g][2 * t + 1];
        acc[tile][2] += partial[warp][tile][g + 8][2 * t];
        acc[tile][3] += partial[warp][tile][g + 8][2 * t + 1];
      }
    }
    __syncthreads();
  }
  if (warp < kLinearFoldWarps) store(warp);
  __syncthreads();
  for (int i = threadIdx.x; i < kTiles * 128; i += blockDim.x) {
    const int tile = i / 128, out = (i % 128) / 8, col = i % 8;
    const int64_t m = 8 * tile + col, n = n0 + out;
    if (m >= a.m || n >= a.n) continue;
    float sum = 0.f;
#pragma unroll
    for (int v = 0; v < kLinearFoldWarps; ++v) sum += partial[v][tile][out][col];
    if (a.residual != nullptr) {
      sum += __bfloat162float(
          static_cast<const __nv_bfloat16*>(a.residual)[m * a.residual_stride + n]);
    }
    static_cast<__nv_bfloat16*>(a.y)[m * a.y_stride + n] = __float2bfloat16_rn(sum);
  }
}

template <int kWarps, int kUnroll, bool kContiguous>
cudaError_t LaunchRowsLinearAs(const RowsLinearArgs& a, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((a.n + 15) / 16);
  constexpr int kThreads = kWarps * kWarp;
  switch ((a.m + 7) / 8) {
    case 1:
      RowsLinearKernel<1, kWarps, kUnroll, kContiguous><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case 2:
      RowsLinearKernel<2, kWarps, kUnroll, kContiguous><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case 3:
      RowsLinearKernel<3, kWarps, kUnroll, kContiguous><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case 4:
      RowsLinearKernel<4, kWarps, kUnroll, kContiguous><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case 5:
      RowsLinearKernel<5, kWarps, kUnroll, kContiguous><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case 6:
      RowsLinearKernel<6, kWarps, kUnroll, kContiguous><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case 7:
      RowsLinearKernel<7, kWarps, kUnroll, kContiguous><<<blocks, kThreads, 0, stream>>>(a);
      break;
    default:
      RowsLinearKernel<8, kWarps, kUnroll, kContiguous><<<blocks, kThreads, 0, stream>>>(a);
      break;
  }
  return cudaGetLastError();
}

// ---- VectorLinear: products of one to four rows at the memory's pace.
//
// A block's 8 warps form groups of kSplit warps; a group takes kOutputs consecutive outputs, and
// each of its warps a contiguous slice of k. Lane l reads 16-byte vectors l, l + 32, ... of its
// slice of every output's weight row, kUnroll of each before its first product, so every load
// instruction covers 512 contiguous bytes of a row. x's vectors come through L1 (every warp of
// the grid reads the same x). A warp's lane sums are added by one butterfly, the group's warps'
// sums in warp order; all in float.
constexpr int kVecWarps = 8;

__device__ __forceinline__ float Dot8(uint4 w, uint4 x, float acc) {
  const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = PairToFloat2<__nv_bfloat16>(wv[i]), b = PairToFloat2<__nv_bfloat16>(xv[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

__device__ __forceinline__ void StoreVectorOutput(const VectorLinearArgs& a, int r, int64_t n,
                                                  float sum) {
  if (a.residual != nullptr) {
    sum +=
        __bfloat162float(static_cast<const __nv_bfloat16*>(a.residual)[r * a.residual_stride + n]);
  }
  static_cast<__nv_bfloat16*>(a.y)[r * a.y_stride + n] = __float2bfloat16_rn(sum);
}

template <int kRows, int kOutputs, int kUnroll, int kSplit>
__global__ void __launch_bounds__(kVecWarps* kWarp) VectorLinearKernel(VectorLinearArgs a) {
  constexpr int kGroups = kVecWarps / kSplit;
  __shared__ float partial[kVecWarps][kRows][kOutputs];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int group = warp / kSplit, part = warp % kSplit;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kGroups + group) * kOutputs;
  const int64_t k8 = a.k / 8;  // 16-byte vectors per row
  const int64_t slice = (k8 + kSplit - 1) / kSplit;
  const int64_t begin = part * slice, end = min(k8, begin + slice);
  const auto* w = static_cast<const uint4*>(a.w);
  const uint4* w_row[kOutputs];
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) w_row[o] = n0 + o < a.n ? w + (n0 + o) * k8 : nullptr;
  const uint4* x_row[kRows];  // kRows is m
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    x_row[r] =
        reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + r * a.x_stride);
  }
  float acc[kRows][kOutputs] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t first = begin + lane; n0 < a.n && first < end; first += kWarp * kUnroll) {
    uint4 wv[kUnroll][kOutputs];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = first + u * kWarp;
#pragma unroll
      for (int o = 0; o < kOutputs; ++o)
        wv[u][o] = i < end && w_row[o] != nullptr ? __ldcs(w_row[o] + i) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = first + u * kWarp;
      if (i >= end) break;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint4 xv = __ldg(x_row[r] + i);
#pragma unroll
        for (int o = 0; o < kOutputs; ++o) acc[r][o] = Dot8(wv[u][o], xv, acc[r][o]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) {
      const float sum = WarpSum(acc[r][o]);  // the same butterfly, so the same bits, in every lane
      if (kSplit == 1) {
        if (lane == r * kOutputs + o && n0 + o < a.n) StoreVectorOutput(a, r, n0 + o, sum);
      } else if (lane == 0) {
        partial[warp][r][o] = sum;
      }
    }
  }
  if constexpr (kSplit > 1) {
    __syncthreads();
    const int item = threadIdx.x;
    if (item >= kGroups * kRows * kOutputs) return;
    const int g = item / (kRows * kOutputs), r = item / kOutputs % kRows, o = item % kOutputs;
    const int64_t n = (static_cast<int64_t>(blockIdx.x) * kGroups + g) * kOutputs + o;
    if (n >= a.n) return;
    float sum = 0.f;
#pragma unroll
    for (int p = 0; p < kSplit; ++p) sum += partial[g * kSplit + p][r][o];
    StoreVectorOutput(a, r, n, sum);
  }
}

template <int kOutputs, int kUnroll, int kSplit>
cudaError_t LaunchVectorLinearAs(const VectorLinearArgs& a, cudaStream_t stream) {
  const int64_t per_block = kVecWarps / kSplit * kOutputs;
  const auto blocks = static_cast<unsigned>((a.n + per_block - 1) / per_block);
  constexpr int kThreads = kVecWarps * kWarp;
  switch (a.m) {
    case 1:
      VectorLinearKernel<1, kOutputs, kUnroll, kSplit><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case 2:
      VectorLinearKernel<2, kOutputs, kUnroll, kSplit><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case 3:
      VectorLinearKernel<3, kOutputs, kUnroll, kSplit><<<blocks, kThreads, 0, stream>>>(a);
      break;
    default:
      VectorLinearKernel<4, kOutputs, kUnroll, kSplit><<<blocks, kThreads, 0, stream>>>(a);
      break;
  }
  return cudaGetLastError();
}

// ---- FixedAttention: split over the keys, then combined.
//
// Block (kv head h, split s) stages keys and values [32 s, 32 s + 32) in shared memory (rows
// padded by one 4-byte word, so that lanes reading different rows at one column hit different
// banks). Each warp takes query rows in turn: lane j scores key j, the warp takes the split's
// max and sum, and lane c accumulates output dimensions c, c + 32, ... over the 32 keys. The
// partial (max, sum, output) goes to scratch; the combine kernel rescales the splits in order.
constexpr int kAttnKeys = 32;
constexpr int kAttnWarps = 8;

__host__ __device__ inline int64_t AttnSplits(int64_t capacity) {
  return (capacity + kAttnKeys - 1) / kAttnKeys;
}

// Scratch layout: [heads * n rows][splits][head_dim + 2] floats (output, then max and sum).
template <typename T>
__global__ void __launch_bounds__(kAttnWarps* kWarp)
    FixedAttentionSplitKernel(FixedAttentionArgs a) {
  constexpr int kPad = 4 / static_cast<int>(sizeof(T));  // one 4-byte word per row
  extern __shared__ float smem[];
  const int d = a.head_dim, stride = d + kPad;  // in elements of T
  const int h = blockIdx.x, split = blockIdx.y;
  const int64_t splits = gridDim.y, first_key = static_cast<int64_t>(split) * kAttnKeys;
  const int64_t left = a.capacity - first_key;
  const int keys_here = left < kAttnKeys ? static_cast<int>(left) : kAttnKeys;
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + kAttnKeys * stride;
  float* qs = reinterpret_cast<float*>(vs + kAttnKeys * stride) + threadIdx.x / kWarp * d;
  // Staged as 4-byte words (d * sizeof(T) is a multiple of 4): a row is `words` words in
  // global memory and words + 1 in shared memory.
  const int words = d * static_cast<int>(sizeof(T)) / 4;
  const auto* kg = reinterpret_cast<const uint32_t*>(static_cast<const T*>(a.keys) +
                                                     (h * a.capacity + first_key) * d);
  const auto* vg = reinterpret_cast<const uint32_t*>(static_cast<const T*>(a.values) +
                                                     (h * a.capacity + first_key) * d);
  auto* kw = reinterpret_cast<uint32_t*>(ks);
  auto* vw = reinterpret_cast<uint32_t*>(vs);
  for (int i = threadIdx.x; i < keys_here * words; i += blockDim.x) {
    kw[(i / words) * (words + 1) + i % words] = kg[i];
    vw[(i / words) * (words + 1) + i % words] = vg[i];
  }
  __syncthreads();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int group = a.heads / a.kv_heads;
  const int64_t rows = static_cast<int64_t>(group) * a.n;
  for (int64_t ri = warp; ri < rows; ri += kAttnWarps) {
    const int64_t gi = ri / a.n, r = ri % a.n;
    const int head = h * group + static_cast<int>(gi);
    const T* qg = static_cast<const T*>(a.q) + (r * a.heads + head) * d;
    for (int c = lane; c < d; c += kWarp) qs[c] = ToFloat(qg[c]);
    __syncwarp();
    float score = -INFINITY;
    if (lane < keys_here) {
      const T* kr = ks + lane * stride;
      float dot = 0.f;
      if constexpr (sizeof(T) == 2) {  // pairs: one 4-byte read for two elements
        const auto* kr2 = reinterpret_cast<const uint32_t*>(kr);
        for (int w = 0; w < d / 2; ++w) {
          const float2 k = PairToFloat2<T>(kr2[w]);
          dot += qs[2 * w] * k.x;
          dot += qs[2 * w + 1] * k.y;
        }
      } else {
        for (int c = 0; c < d; ++c) dot += qs[c] * ToFloat(kr[c]);
      }
      score = dot * a.scale;
      if (a.bias != nullptr) {
        score += ToFloat(static_cast<const T*>(a.bias)[ri * a.capacity + first_key + lane]);
      }
    }
    float max = score;
    for (int o = kWarp / 2; o > 0; o /= 2) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, o));
    const float p = max == -INFINITY ? 0.f : expf(score - max);
    const float sum = WarpSum(p);
    float* part = a.scratch + ((h * group + gi) * a.n + r) * splits * (d + 2) + split * (d + 2);
    for (int c = lane; c < d; c += kWarp) {
      float acc = 0.f;
      for (int j = 0; j < keys_here; ++j) {
        acc += __shfl_sync(0xffffffffu, p, j) * ToFloat(vs[j * stride + c]);
      }
      part[c] = acc;
    }
    if (lane == 0) {
      part[d] = max;
      part[d + 1] = sum;
    }
    __syncwarp();
  }
}

// One block per (head, row): the splits' partials rescaled to their common max, in split order.
template <typename T>
__global__ void FixedAttentionCombineKernel(FixedAttentionArgs a, int64_t splits) {
  const int64_t item = blockIdx.x;  // (head, row), head-major as in the scratch
  const int head = static_cast<int>(item / a.n);
  const int64_t r = item % a.n;
  const int d = a.head_dim;
  const float* part = a.scratch + item * splits * (d + 2);
  float max = -INFINITY;
  for (int64_t s = 0; s < splits; ++s) max = fmaxf(max, part[s * (d + 2) + d]);
  float total = 0.f;
  for (int64_t s = 0; s < splits; ++s) {
    const float m = part[s * (d + 2) + d];
    if (m != -INFINITY) total += part[s * (d + 2) + d + 1] * expf(m - max);
  }
  T* out = static_cast<T*>(a.out) + (r * a.heads + head) * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0.f;
    for (int64_t s = 0; s < splits; ++s) {
      const float m = part[s * (d + 2) + d];
      if (m != -INFINITY) acc += part[s * (d + 2) + c] * expf(m - max);
    }
    out[c] = FromFloat<T>(total > 0.f ? acc / total : 0.f);
  }
}

size_t FixedAttentionSharedBytes(int head_dim, size_t element_size) {
  const size_t pad = 4 / element_size;
  return 2 * kAttnKeys * (head_dim + pad) * element_size + kAttnWarps * head_dim * sizeof(float);
}

size_t ElementSize(ElementType type) { return type == ElementType::kF32 ? 4 : 2; }

template <typename T>
cudaError_t LaunchFixedAttentionAs(const FixedAttentionArgs& a, cudaStream_t stream) {
  const int64_t splits = AttnSplits(a.capacity);
  const size_t smem = FixedAttentionSharedBytes(a.head_dim, sizeof(T));
  const dim3 grid(static_cast<unsigned>(a.kv_heads), static_cast<unsigned>(splits));
  FixedAttentionSplitKernel<T><<<grid, kAttnWarps * kWarp, smem, stream>>>(a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t items = static_cast<int64_t>(a.heads) * a.n;
  FixedAttentionCombineKernel<T>
      <<<static_cast<unsigned>(items), std::min(a.head_dim, 128), 0, stream>>>(a, splits);
  return cudaGetLastError();
}
}  // namespace

int LaunchNormRopeQk(const NormRopeQkArgs& args, void* stream) {
  if (args.rows <= 0) return cudaSuccess;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (args.type) {
    case ElementType::kF32:
      return LaunchNormRopeQkAs<float>(args, s);
    case ElementType::kBF16:
      return LaunchNormRopeQkAs<__nv_bfloat16>(args, s);
    case ElementType::kF16:
      return LaunchNormRopeQkAs<__half>(args, s);
  }
  return cudaErrorInvalidValue;
}

int LaunchSwiGlu(const SwiGluArgs& args, void* stream) {
  if (args.rows <= 0 || args.inter <= 0) return cudaSuccess;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (args.type) {
    case ElementType::kF32:
      return LaunchSwiGluAs<float>(args, s);
    case ElementType::kBF16:
      return LaunchSwiGluAs<__nv_bfloat16>(args, s);
    case ElementType::kF16:
      return LaunchSwiGluAs<__half>(args, s);
  }
  return cudaErrorInvalidValue;
}

int LaunchRowsLinear(const RowsLinearArgs& args, void* stream, int shape) {
  if (args.m <= 0 || args.n <= 0) return cudaSuccess;
  if (args.m > kRowsLinearMaxRows || args.k <= 0 || args.k % 32 != 0) return cudaErrorInvalidValue;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (shape) {  // warps per block, chunks in flight per lane, contiguous or interleaved
    case 0:
      return LaunchRowsLinearAs<8, 4, false>(args, s);
    case 1:
      return LaunchRowsLinearAs<16, 2, false>(args, s);
    case 2:
      return LaunchRowsLinearAs<16, 4, false>(args, s);
    case 3:
      return LaunchRowsLinearAs<8, 4, true>(args, s);
    case 4:
      return LaunchRowsLinearAs<16, 2, true>(args, s);
    case 5:
      return LaunchRowsLinearAs<16, 4, true>(args, s);
  }
  return cudaErrorInvalidValue;
}

int LaunchVectorLinear(const VectorLinearArgs& args, void* stream, int shape) {
  if (args.m <= 0 || args.n <= 0) return cudaSuccess;
  if (args.m > kVectorLinearMaxRows || args.k <= 0 || args.k % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const auto s = static_cast<cudaStream_t>(stream);
  // Outputs per group, 16-byte loads in flight per lane and output, warps per group. Shape 2 was
  // the fastest on an H100 (docs/results/2026-11-27-vector-linear-h100.md).
  switch (shape) {
    case 0:
      return LaunchVectorLinearAs<2, 8, 1>(args, s);
    case 1:
      return LaunchVectorLinearAs<2, 4, 2>(args, s);
    case 2:
      return LaunchVectorLinearAs<2, 4, 4>(args, s);
    case 3:
      return LaunchVectorLinearAs<1, 4, 4>(args, s);
    case 4:
      return LaunchVectorLinearAs<2, 4, 8>(args, s);
    case 5:
      return LaunchVectorLinearAs<4, 4, 4>(args, s);
    case 6:
      return LaunchVectorLinearAs<2, 8, 4>(args, s);
    case 7:
      return LaunchVectorLinearAs<1, 8, 8>(args, s);
  }
  return cudaErrorInvalidValue;
}

int64_t FixedAttentionScratchFloats(int64_t n, int64_t capacity, int heads, int head_dim) {
  return static_cast<int64_t>(heads) * n * AttnSplits(capacity) * (head_dim + 2);
}

int LaunchFixedAttention(const FixedAttentionArgs& args, void* stream) {
  if (args.n <= 0 || args.capacity <= 0) return cudaSuccess;
  if (!FixedAttentionTakes(args.type, args.head_dim) || args.kv_heads <= 0 ||
      args.heads % args.kv_heads != 0 || args.scratch == nullptr) {
    return cudaErrorInvalidValue;
  }
  const auto s = static_cast<cudaStream_t>(stream);
  switch (args.type) {
    case ElementType::kF32:
      return LaunchFixedAttentionAs<float>(args, s);
    case ElementType::kBF16:
      return LaunchFixedAttentionAs<__nv_bfloat16>(args, s);
    case ElementType::kF16:
      return LaunchFixedAttentionAs<__half>(args, s);
  }
  return cudaErrorInvalidValue;
}

bool FixedAttentionTakes(ElementType type, int head_dim) {
  return head_dim > 0 && head_dim % kWarp == 0 && head_dim <= kFixedAttentionMaxHeadDim &&
         FixedAttentionSharedBytes(head_dim, ElementSize(type)) <= 48 * 1024;
}

}  // namespace specdec::model::cuda
