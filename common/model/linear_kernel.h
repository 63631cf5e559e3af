// A bfloat16 matrix product for the few rows of a decoding or verification pass: y = x W^T.
//
// A one-row bf16 product through oneDNN takes 15-30 us here however small it is (a 256x256 one
// 16 us), so a one-row pass of a small model (33 products) spends most of its matrix time in
// set-up; and oneDNN blocks rows differently for different row counts, so a row's result
// depends on the rows batched with it.
// This kernel streams the weights once per block of rows with AVX-512 BF16 dot products where
// the CPU has them (a portable loop with the same order of float operations otherwise) and sums
// every output in one fixed order: a row's result never depends on the other rows. Torch-free,
// like attention_kernel.h.
#ifndef SPECDEC_COMMON_MODEL_LINEAR_KERNEL_H_
#define SPECDEC_COMMON_MODEL_LINEAR_KERNEL_H_

#include <cstdint>

namespace specdec::model {

// The product the kernel computes (bf16 elements as their raw 16 bits):
//   y[r][o] = bf16(sum_i x[r][i] * w[o][i]),  r < rows, o < out, i < in,
// x rows `x_stride` and y rows `y_stride` elements apart, w [out, in] contiguous (a range of
// outputs is the problem with w and y advanced to its first one). Every sum is taken
// in float in one order: 16 partial sums, the one of lane l over elements 32c + 2l + 1 then
// 32c + 2l for c = 0, 1, ... (the order of AVX-512 BF16's dot product), then added in a fixed
// tree, and the total rounded to nearest even. Denormal inputs and partial sums are flushed to
// zero on the AVX-512 path and kept on the portable one.
// With `y_f32` set, the totals are stored there as floats, unrounded, and `y` is not used (the
// product of bf16 weights with activations kept in float, rounded to bf16 on the way in).
// With `w_block` set (4 or 16), w holds the matrix in the packed layout with blocks of that many
// outputs (PackLinearWeights); the sums are the same.
struct LinearProblem {
  const uint16_t* x = nullptr;
  int64_t rows = 0, x_stride = 0;
  const uint16_t* w = nullptr;
  int64_t in = 0, out = 0;
  uint16_t* y = nullptr;
  int64_t y_stride = 0;
  float* y_f32 = nullptr;
  int32_t w_block = 0;  // 0: w row-major
};

// The packed layout of a matrix w [out, in] (LinearKernelFits) with blocks of B outputs (4 or
// 16): blocks of B consecutive outputs, and in each block the B rows interleaved by chunks of 32
// inputs. Element (o, i) sits at
//   (o / B) * B * in + (i / 32) * 32 * B + (o % B) * 32 + i % 32.
// A block of B outputs occupies the same B * in elements as in the row-major layout, so a range
// of outputs from a multiple of B is still the problem with w advanced by first * in. A one-row
// product reads a packed matrix as one sequential stream, where the row-major layout makes it B
// streams 2 * in bytes apart. The AVX2 path reads blocks of 4 outputs (and prefetches ahead of
// where it reads), the AVX-512 BF16 path blocks of 16.
void PackLinearWeights(const uint16_t* w, int64_t in, int64_t out, int32_t block, uint16_t* packed);
void UnpackLinearWeights(const uint16_t* packed, int64_t in, int64_t out, int32_t block,
                         uint16_t* w);
// Copies row o of a packed matrix (its `in` elements) to dst: an embedding lookup in a tied,
// packed matrix.
void CopyPackedRow(const uint16_t* packed, int64_t in, int64_t o, int32_t block, uint16_t* dst);
// The block of the packed layout this CPU's path reads directly: 16 on the AVX-512 BF16 path, 4
// on the AVX2 one, 0 on the portable one. Every path takes either block, the others by unpacking
// the problem's matrix first (slow: for tests).
int32_t LinearPackBlock();

// Whether the kernel takes these widths: `in` a multiple of 32 and `out` of 16.
bool LinearKernelFits(int64_t in, int64_t out);
// Whether the AVX-512 BF16 path runs on this CPU.
bool LinearKernelNative();
// Computes p (LinearKernelFits(p.in, p.out) must hold), on the AVX-512 BF16 path when the CPU
// has it, else the portable one.
void RunLinear(const LinearProblem& p);
// The portable path alone (for tests).
void RunLinearPortable(const LinearProblem& p);
// Rounds `rows` rows of `in` floats (`x_stride` elements apart) to bf16 (nearest even) into
// `out`, contiguously: the x of a product of float activations.
void RoundRowsToBf16(const float* x, int64_t rows, int64_t in, int64_t x_stride, uint16_t* out);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_LINEAR_KERNEL_H_
