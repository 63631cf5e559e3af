#include "common/io/gguf_dequantize.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/io/half.h"

namespace specdec::io {
namespace {

constexpr int64_t kBlock = 32;
constexpr int64_t kSuperBlock = 256;  // Q6_K
constexpr int64_t kQ6KBytes = 210;

// A 32-value block's bytes: the f16 scale d, for the _1 types the f16 minimum m, for the Q5 types
// 32 high bits, then the codes: 16 bytes of two 4-bit codes (low nibble: value j, high: value j +
// 16) or 32 signed bytes (Q8_0).
struct BlockLayout {
  int64_t bytes = 0;
  bool has_min = false;  // value = code * d + m; else (code - offset) * d
  bool high_bits = false;
  int offset = 0;
};

BlockLayout LayoutOf(int type) {
  switch (type) {
    case kGgmlTypeQ4_0:
      return {18, false, false, 8};
    case kGgmlTypeQ4_1:
      return {20, true, false, 0};
    case kGgmlTypeQ5_0:
      return {22, false, true, 16};
    case kGgmlTypeQ5_1:
      return {24, true, true, 0};
    case kGgmlTypeQ8_0:
      return {34, false, false, 0};
    case kGgmlTypeQ6_K:
      return {kQ6KBytes};
    default:
      return {};
  }
}

uint16_t U16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void DequantizeBlock(int type, const BlockLayout& l, const std::byte* b, float* out) {
  const float d = HalfToFloat(U16(b));
  if (type == kGgmlTypeQ8_0) {
    for (int j = 0; j < kBlock; ++j) out[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
    return;
  }
  const float m = l.has_min ? HalfToFloat(U16(b + 2)) : 0.f;
  const std::byte* p = b + (l.has_min ? 4 : 2);
  uint32_t high = 0;
  if (l.high_bits) {
    std::memcpy(&high, p, sizeof high);
    p += 4;
  }
  for (int j = 0; j < kBlock / 2; ++j) {
    const auto byte = static_cast<uint8_t>(p[j]);
    int lo = byte & 0x0f, hi = byte >> 4;
    if (l.high_bits) {
      lo |= static_cast<int>((high >> j) & 1u) << 4;
      hi |= static_cast<int>((high >> (j + 16)) & 1u) << 4;
    }
    if (l.has_min) {
      out[j] = static_cast<float>(lo) * d + m;
      out[j + kBlock / 2] = static_cast<float>(hi) * d + m;
    } else {
      out[j] = static_cast<float>(lo - l.offset) * d;
      out[j + kBlock / 2] = static_cast<float>(hi - l.offset) * d;
    }
  }
}

// Q6_K's 256 values: 128 bytes of low 4 bits, 64 of high 2 bits, 16 signed 8-bit scales (one per
// 16 values), the f16 scale d. Each half of 128 values takes 64 low bytes, 32 high bytes and 8
// scales: value l + 32 i (i = 0..3, l = 0..31) has the low or high nibble of low byte l or l + 32
// and bits 2i..2i+1 of high byte l, minus 32, times d times scale l / 16 + 2i.
void DequantizeQ6K(const std::byte* b, float* out) {
  const auto* low = reinterpret_cast<const uint8_t*>(b);
  const auto* high = low + kSuperBlock / 2;
  const auto* scales = reinterpret_cast<const int8_t*>(high + kSuperBlock / 4);
  const float d = HalfToFloat(U16(b + kQ6KBytes - 2));
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

}  // namespace

bool IsDequantizable(int ggml_type) { return LayoutOf(ggml_type).bytes > 0; }

absl::Status Dequantize(int ggml_type, std::span<const std::byte> blocks, std::span<float> out) {
  const BlockLayout l = LayoutOf(ggml_type);
  if (l.bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ggml type ", ggml_type, " is not a block type"));
  }
  const int64_t n = static_cast<int64_t>(out.size());
  const int64_t per_block = ggml_type == kGgmlTypeQ6_K ? kSuperBlock : kBlock;
  if (n % per_block != 0 || static_cast<int64_t>(blocks.size()) != n / per_block * l.bytes) {
    return absl::InvalidArgumentError(absl::StrCat(n, " values in ", blocks.size(),
                                                   " bytes: not whole blocks of ", per_block,
                                                   " values of ", l.bytes, " bytes"));
  }
  for (int64_t i = 0; i < n / per_block; ++i) {
    if (ggml_type == kGgmlTypeQ6_K) {
      DequantizeQ6K(blocks.data() + i * l.bytes, out.data() + i * per_block);
    } else {
      DequantizeBlock(ggml_type, l, blocks.data() + i * l.bytes, out.data() + i * per_block);
    }
  }
  return absl::OkStatus();
}

}  // namespace specdec::io
