#include "common/io/gguf_dequantize.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/io/gguf.h"
#include "common/io/half.h"

namespace specdec::io {
namespace {

uint16_t U16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float Half(const std::byte* p) { return HalfToFloat(U16(p)); }

// A 32-value block's bytes: the f16 scale d, for the _1 types the f16 minimum m, for the Q5 types
// 32 high bits, then 16 bytes of two 4-bit codes (low nibble: value j, high: value j + 16).
struct SmallBlock {
  bool has_min = false;  // value = code * d + m; else (code - offset) * d
  bool high_bits = false;
  int offset = 0;
};

void DequantizeSmall(const SmallBlock& l, const std::byte* b, float* out) {
  const float d = Half(b);
  const float m = l.has_min ? Half(b + 2) : 0.f;
  const std::byte* p = b + (l.has_min ? 4 : 2);
  uint32_t high = 0;
  if (l.high_bits) {
    std::memcpy(&high, p, sizeof high);
    p += 4;
  }
  for (int j = 0; j < 16; ++j) {
    const auto byte = static_cast<uint8_t>(p[j]);
    int lo = byte & 0x0f, hi = byte >> 4;
    if (l.high_bits) {
      lo |= static_cast<int>((high >> j) & 1u) << 4;
      hi |= static_cast<int>((high >> (j + 16)) & 1u) << 4;
    }
    if (l.has_min) {
      out[j] = static_cast<float>(lo) * d + m;
      out[j + 16] = static_cast<float>(hi) * d + m;
    } else {
      out[j] = static_cast<float>(lo - l.offset) * d;
      out[j + 16] = static_cast<float>(hi - l.offset) * d;
    }
  }
}

void DequantizeQ4_0(const std::byte* b, float* out) { DequantizeSmall({false, false, 8}, b, out); }
void DequantizeQ4_1(const std::byte* b, float* out) { DequantizeSmall({true, false, 0}, b, out); }
void DequantizeQ5_0(const std::byte* b, float* out) { DequantizeSmall({false, true, 16}, b, out); }
void DequantizeQ5_1(const std::byte* b, float* out) { DequantizeSmall({true, true, 0}, b, out); }

// The f16 scale d, then 32 signed codes.
void DequantizeQ8_0(const std::byte* b, float* out) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// Q4_K and Q5_K's 6-bit scale and minimum of sub-block j (of 8) from their 12 packed bytes: j < 4
// in the low 6 bits of bytes j and j + 4; else 4 bits in byte j + 4 (low: scale, high: minimum)
// and 2 in the top bits of bytes j - 4 (scale) and j (minimum).
void ScaleAndMin(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K (high == nullptr) and Q5_K's 256 values: f16 d and dmin, 12 bytes of scales, for Q5_K 32
// bytes of high bits, then 128 bytes of low 4 bits. Each 64 values take 32 code bytes (low nibbles
// the first 32, high nibbles the next) and two sub-blocks: value = d * scale * code - dmin * min.
void DequantizeKQuant(const std::byte* b, bool five_bits, float* out) {
  const float d = Half(b), dmin = Half(b + 2);
  const auto* scales = reinterpret_cast<const uint8_t*>(b + 4);
  const uint8_t* high = five_bits ? scales + 12 : nullptr;
  const uint8_t* codes = scales + 12 + (five_bits ? 32 : 0);
  for (int part = 0; part < 4; ++part) {
    for (int half = 0; half < 2; ++half) {
      int scale = 0, min = 0;
      ScaleAndMin(2 * part + half, scales, &scale, &min);
      const float step = d * static_cast<float>(scale), offset = dmin * static_cast<float>(min);
      const int bit = 2 * part + half;  // the high bit's position in Q5_K's high bytes
      for (int l = 0; l < 32; ++l) {
        int code = half == 0 ? codes[l] & 0x0f : codes[l] >> 4;
        if (high != nullptr && (high[l] >> bit) & 1) code += 16;
        out[64 * part + 32 * half + l] = step * static_cast<float>(code) - offset;
      }
    }
    codes += 32;
  }
}

void DequantizeQ4_K(const std::byte* b, float* out) { DequantizeKQuant(b, false, out); }
void DequantizeQ5_K(const std::byte* b, float* out) { DequantizeKQuant(b, true, out); }

// Q6_K's 256 values: 128 bytes of low 4 bits, 64 of high 2 bits, 16 signed 8-bit scales (one per
// 16 values), the f16 scale d. Each half of 128 values takes 64 low bytes, 32 high bytes and 8
// scales: value l + 32 i (i = 0..3, l = 0..31) has the low or high nibble of low byte l or l + 32
// and bits 2i..2i+1 of high byte l, minus 32, times d times scale l / 16 + 2i.
void DequantizeQ6_K(const std::byte* b, float* out) {
  const auto* low = reinterpret_cast<const uint8_t*>(b);
  const auto* high = low + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(high + 64);
  const float d = Half(b + 208);
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      for (int i = 0; i < 4; ++i) {
        const uint8_t byte = low[l + (i % 2) * 32];
        const int nibble = i < 2 ? byte & 0x0f : byte >> 4;
        const int code = (nibble | (((high[l] >> (2 * i)) & 3) << 4)) - 32;
        // d * scale first, then the code: the order ggml multiplies in.
        out[l + 32 * i] = d * static_cast<float>(scales[l / 16 + 2 * i]) * static_cast<float>(code);
      }
    }
    low += 64;
    high += 32;
    scales += 8;
    out += 128;
  }
}

// A block type's dequantizer; its block's values and bytes are GgmlTypeLayoutOf's.
using BlockDequantizer = void (*)(const std::byte* block, float* out);

BlockDequantizer DequantizerOf(int type) {
  switch (type) {
    case kGgmlTypeQ4_0:
      return DequantizeQ4_0;
    case kGgmlTypeQ4_1:
      return DequantizeQ4_1;
    case kGgmlTypeQ5_0:
      return DequantizeQ5_0;
    case kGgmlTypeQ5_1:
      return DequantizeQ5_1;
    case kGgmlTypeQ8_0:
      return DequantizeQ8_0;
    case kGgmlTypeQ4_K:
      return DequantizeQ4_K;
    case kGgmlTypeQ5_K:
      return DequantizeQ5_K;
    case kGgmlTypeQ6_K:
      return DequantizeQ6_K;
    default:
      return nullptr;
  }
}

}  // namespace

bool IsDequantizable(int ggml_type) { return DequantizerOf(ggml_type) != nullptr; }

absl::Status Dequantize(int ggml_type, std::span<const std::byte> blocks, std::span<float> out) {
  const BlockDequantizer dequantize = DequantizerOf(ggml_type);
  if (dequantize == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("ggml type ", ggml_type, " is not a block type"));
  }
  const GgmlTypeLayout layout = GgmlTypeLayoutOf(ggml_type);
  const int64_t values = static_cast<int64_t>(layout.block);
  const int64_t bytes = static_cast<int64_t>(layout.bytes);
  const int64_t n = static_cast<int64_t>(out.size());
  if (n % values != 0 || static_cast<int64_t>(blocks.size()) != n / values * bytes) {
    return absl::InvalidArgumentError(absl::StrCat(n, " values in ", blocks.size(),
                                                   " bytes: not whole blocks of ", values,
                                                   " values of ", bytes, " bytes"));
  }
  for (int64_t i = 0; i < n / values; ++i) {
    dequantize(blocks.data() + i * bytes, out.data() + i * values);
  }
  return absl::OkStatus();
}

}  // namespace specdec::io
