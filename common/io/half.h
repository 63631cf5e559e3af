// IEEE half (F16) and bfloat16 (BF16) bit patterns to and from float, for converters that move
// small tensors between file formats (no SIMD; the model kernels have their own).
#ifndef SPECDEC_COMMON_IO_HALF_H_
#define SPECDEC_COMMON_IO_HALF_H_

#include <cstdint>
#include <cstring>
#include <optional>

namespace specdec::io {

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    f = static_cast<float>(man) * (1.0f / 16777216.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  const uint32_t bits =
      exp == 0x1f ? sign | 0x7f800000u | (man << 13) : sign | ((exp + 112) << 23) | (man << 13);
  std::memcpy(&f, &bits, 4);
  return f;
}

// The BF16 pattern of `f` when `f` is exactly representable, else nullopt.
inline std::optional<uint16_t> ExactBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0xffff) != 0) return std::nullopt;
  return static_cast<uint16_t>(bits >> 16);
}

// `f` rounded to the nearest BF16 (ties to even), as torch's float-to-bfloat16 conversion rounds;
// a NaN stays a (quiet) NaN.
inline uint16_t RoundBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// The F16 pattern of `f` when `f` is exactly representable (normal, subnormal, zero, infinity),
// else nullopt.
inline std::optional<uint16_t> ExactHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const int exp = static_cast<int>((bits >> 23) & 0xff);
  const uint32_t man = bits & 0x7fffff;
  if (exp == 0xff) {
    if (man != 0) return std::nullopt;  // NaN payloads are not kept
    return static_cast<uint16_t>(sign | 0x7c00);
  }
  if (exp == 0 && man == 0) return sign;
  const int e = exp - 127;  // unbiased
  if (e >= -14 && e <= 15) {
    if ((man & 0x1fff) != 0) return std::nullopt;
    return static_cast<uint16_t>(sign | ((e + 15) << 10) | (man >> 13));
  }
  if (e >= -24 && e < -14) {               // a half subnormal: value = m * 2^-24 with m < 1024
    const uint32_t full = man | 0x800000;  // 24-bit significand, value = full * 2^(e-23)
    const int shift = -e - 1;              // full * 2^(e-23) = m * 2^-24 -> m = full >> (-e-1)
    if ((full & ((1u << shift) - 1)) != 0) return std::nullopt;
    return static_cast<uint16_t>(sign | (full >> shift));
  }
  return std::nullopt;
}

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_HALF_H_
