// bfloat16 <-> float conversions for the torch-free kernels (attention_kernel.cc, row_kernels.cc).
#ifndef SPECDEC_COMMON_MODEL_BF16_H_
#define SPECDEC_COMMON_MODEL_BF16_H_

#include <bit>
#include <cmath>
#include <cstdint>

namespace specdec::model {

inline float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Rounds to nearest even, as ATen's float -> bfloat16 conversion does.
inline uint16_t FloatToBf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return 0x7FC0;
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_BF16_H_
