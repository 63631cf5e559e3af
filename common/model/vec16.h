// 16-lane float vectors (GCC vector types) and bfloat16 conversions for the torch-free kernels
// (attention_kernel.cc, linear_kernel.cc, row_kernels.cc). A vector is one AVX-512 register, two
// AVX2 or four SSE ones, depending on the clone a kernel resolved to; a fixed chunk order keeps
// float sums independent of the instruction set.
#ifndef SPECDEC_COMMON_MODEL_VEC16_H_
#define SPECDEC_COMMON_MODEL_VEC16_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace specdec::model {

inline constexpr int64_t kLanes = 16;

// Every function that takes or returns a vector by value is forced inline: the kernels are
// compiled as target clones, and an out-of-line call between an AVX-512 clone and a baseline body
// passes a 64-byte vector in a zmm register on one side and in memory on the other.
#define SPECDEC_VECTOR_FN inline __attribute__((always_inline))

// Whether the CPU has AVX2 and FMA (read once).
inline bool CpuHasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// Whether the CPU has AVX-512F (read once).
inline bool CpuHasAvx512F() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// Whether this CPU has AVX-512 BF16 dot products (and the AVX-512 subsets the kernels' paths
// for them use).
inline bool CpuHasAvx512Bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
}
typedef float F16 __attribute__((vector_size(kLanes * sizeof(float))));
typedef uint16_t H16 __attribute__((vector_size(kLanes * sizeof(uint16_t))));
typedef uint32_t U16 __attribute__((vector_size(kLanes * sizeof(uint32_t))));

typedef int32_t I16 __attribute__((vector_size(kLanes * sizeof(int32_t))));

SPECDEC_VECTOR_FN F16 Splat(float x) { return F16{} + x; }

// exp(x), lane by lane: Cephes' single-precision polynomial after a range reduction by powers of
// two, about 1 ulp. Exactly 0 below -87 (an attention's masked scores are -inf); x above 88 is
// taken as 88 (about 1.7e38, finite). NaN stays NaN.
SPECDEC_VECTOR_FN F16 Exp(F16 x) {
  const I16 under = x < Splat(-87.f);
  x = under ? Splat(-87.f) : x;
  x = x > Splat(88.f) ? Splat(88.f) : x;
  const F16 fx = x * 1.44269504088896341f + 0.5f;
  I16 n = __builtin_convertvector(fx, I16);   // truncates towards zero
  n += __builtin_convertvector(n, F16) > fx;  // floor: -1 where it rounded up
  const F16 nf = __builtin_convertvector(n, F16);
  const F16 r = x - nf * 0.693359375f - nf * -2.12194440e-4f;
  F16 y = Splat(1.9875691500E-4f);
  y = y * r + 1.3981999507E-3f;
  y = y * r + 8.3334519073E-3f;
  y = y * r + 4.1665795894E-2f;
  y = y * r + 1.6666665459E-1f;
  y = y * r + 5.0000001201E-1f;
  y = y * r * r + r + 1.f;
  const F16 scale = std::bit_cast<F16>((n + 127) << 23);
  return under ? Splat(0.f) : y * scale;
}

inline float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Rounds to nearest even, as ATen's float -> bfloat16 conversion does.
inline uint16_t FloatToBf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return 0x7FC0;
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

inline float ToFloat(float x) { return x; }
inline float ToFloat(uint16_t b) { return Bf16ToFloat(b); }

SPECDEC_VECTOR_FN F16 LoadF16(const float* p) {
  F16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

SPECDEC_VECTOR_FN void StoreF16(float* p, F16 v) { std::memcpy(p, &v, sizeof(v)); }

// 16 bf16 values as floats.
SPECDEC_VECTOR_FN F16 WidenBf16(H16 h) {
  const U16 u = __builtin_convertvector(h, U16) << 16;
  F16 v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

// 16 elements of a float or bf16 row as floats.
SPECDEC_VECTOR_FN F16 LoadAny(const float* p) { return LoadF16(p); }
SPECDEC_VECTOR_FN F16 LoadAny(const uint16_t* p) {
  H16 h;
  std::memcpy(&h, p, sizeof(h));
  return WidenBf16(h);
}

// The 32 bf16 elements at p as two float vectors: lane l of `odd` is element 2l + 1, of `even`
// element 2l (a little-endian pair of bf16 is one 32-bit word: high half odd, low half even).
SPECDEC_VECTOR_FN void LoadPairs(const uint16_t* p, F16* odd, F16* even) {
  U16 u;
  std::memcpy(&u, p, sizeof(u));
  const U16 hi = u & 0xFFFF0000u, lo = u << 16;
  std::memcpy(odd, &hi, sizeof(hi));
  std::memcpy(even, &lo, sizeof(lo));
}

// FloatToBf16 on 16 lanes.
SPECDEC_VECTOR_FN H16 RoundBf16(F16 v) {
  U16 u;
  std::memcpy(&u, &v, sizeof(u));
  const U16 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const U16 nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  return __builtin_convertvector(nan ? U16{} + 0x7FC0u : rounded, H16);
}

// Lane k of the result is the sum of the lanes of v[k]: a transposing tree of shuffles and adds
// (15 steps for 16 vectors instead of 16 horizontal sums).
SPECDEC_VECTOR_FN F16 Reduce16(const F16* v) {
  F16 u[8], w[4], z[2];
  for (int k = 0; k < 8; ++k) {
    u[k] = __builtin_shufflevector(v[2 * k], v[2 * k + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                   20, 21, 22, 23) +
           __builtin_shufflevector(v[2 * k], v[2 * k + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26,
                                   27, 28, 29, 30, 31);
  }
  for (int k = 0; k < 4; ++k) {
    w[k] = __builtin_shufflevector(u[2 * k], u[2 * k + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19,
                                   24, 25, 26, 27) +
           __builtin_shufflevector(u[2 * k], u[2 * k + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                   23, 28, 29, 30, 31);
  }
  for (int k = 0; k < 2; ++k) {
    z[k] = __builtin_shufflevector(w[2 * k], w[2 * k + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21,
                                   24, 25, 28, 29) +
           __builtin_shufflevector(w[2 * k], w[2 * k + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22,
                                   23, 26, 27, 30, 31);
  }
  return __builtin_shufflevector(z[0], z[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                 30) +
         __builtin_shufflevector(z[0], z[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                 31);
}

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_VEC16_H_
