// A float32 matrix product y = x W^T whose every output is summed in one fixed order, whatever
// the row count: a row's result never depends on the rows beside it (batch invariance,
// design.md §2.6). The libraries' products do not promise that: OpenBLAS's one-row product and
// its blocked product sum in different orders, and the blocked one differs by row count.
// Torch-free, like linear_kernel.h.
#ifndef SPECDEC_COMMON_MODEL_LINEAR_F32_KERNEL_H_
#define SPECDEC_COMMON_MODEL_LINEAR_F32_KERNEL_H_

#include <cstdint>

namespace specdec::model {

// The product: y[r][o] = sum_i x[r][i] * w[o][i], r < rows, o < out, i < in, x rows `x_stride`
// and y rows `y_stride` floats apart, w [out, in] contiguous (a range of outputs is the problem
// with w and y advanced to its first one). Every sum is 16 partial sums, the one of lane l over
// elements 16c + l for c = 0, 1, ... by fused multiply-adds (elements past `in` count as zeros),
// then added as a fixed tree: lanes l and l + 8, then l and l + 4, then l and l + 2, then the
// two that are left.
struct LinearF32Problem {
  const float* x = nullptr;
  int64_t rows = 0, x_stride = 0;
  const float* w = nullptr;
  int64_t in = 0, out = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
};

// Whether the kernel takes these widths (any positive ones).
bool LinearF32KernelFits(int64_t in, int64_t out);
// Computes p (LinearF32KernelFits must hold) on the AVX-512 path where the CPU has AVX-512F, the
// AVX2 path where it has AVX2 and FMA, else the portable loop: the same sums bit for bit.
void RunLinearF32(const LinearF32Problem& p);
// The portable loop alone, and the AVX2 path alone where the CPU has AVX2 and FMA (false
// otherwise): for tests on CPUs whose RunLinearF32 takes another path.
void RunLinearF32Portable(const LinearF32Problem& p);
bool RunLinearF32Avx2(const LinearF32Problem& p);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_LINEAR_F32_KERNEL_H_
