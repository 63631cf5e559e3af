// Dequantization of ggml's block types to float32, value for value as ggml's own to_float computes
// it: the 32-value types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (each value an integer code times the
// block's f16 scale, plus its f16 minimum for the _1 types) and the 256-value K-quants Q4_K, Q5_K
// and Q6_K (codes times a 6- or 8-bit scale per sub-block times an f16 scale, less a 6-bit minimum
// times an f16 one for Q4_K and Q5_K): the types of llama.cpp's Q8_0, Q5 and Q4 files, the
// K_S and K_M mixes included. Torch-free.
#ifndef SPECDEC_COMMON_IO_GGUF_DEQUANTIZE_H_
#define SPECDEC_COMMON_IO_GGUF_DEQUANTIZE_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace specdec::io {

inline constexpr int kGgmlTypeQ4_0 = 2;
inline constexpr int kGgmlTypeQ4_1 = 3;
inline constexpr int kGgmlTypeQ5_0 = 6;
inline constexpr int kGgmlTypeQ5_1 = 7;
inline constexpr int kGgmlTypeQ8_0 = 8;
inline constexpr int kGgmlTypeQ4_K = 12;
inline constexpr int kGgmlTypeQ5_K = 13;
inline constexpr int kGgmlTypeQ6_K = 14;

// Whether `ggml_type` is one of the block types above.
bool IsDequantizable(int ggml_type);

// Writes the out.size() values held by `blocks` (whole blocks of `ggml_type`, in order) to `out`.
// INVALID_ARGUMENT for another type, a count that is not a multiple of the block's values, or
// blocks of another byte size than the count needs.
absl::Status Dequantize(int ggml_type, std::span<const std::byte> blocks, std::span<float> out);

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_GGUF_DEQUANTIZE_H_
