// The bf16 matrix-product kernel against a double-precision reference, its row independence,
// output ranges, the two code paths against each other, and ops.h Linear on top of it.
#include "common/model/linear_kernel.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/model/ops.h"

namespace specdec::model {
namespace {

at::Tensor RandomBf16(std::vector<int64_t> shape, double scale) {
  return (at::randn(shape, at::kFloat) * scale).to(at::kBFloat16).contiguous();
}

// y = x W^T through the kernel (`portable`: its portable path), as bf16 [rows, out].
at::Tensor KernelProduct(const at::Tensor& x, const at::Tensor& w, bool portable) {
  at::Tensor y = at::empty({x.size(0), w.size(0)}, at::kBFloat16);
  LinearProblem p;
  p.x = static_cast<const uint16_t*>(x.data_ptr());
  p.rows = x.size(0);
  p.x_stride = x.stride(0);
  p.w = static_cast<const uint16_t*>(w.data_ptr());
  p.in = w.size(1);
  p.out = w.size(0);
  p.y = static_cast<uint16_t*>(y.data_ptr());
  p.y_stride = w.size(0);
  if (portable) {
    RunLinearPortable(p);
  } else {
    RunLinear(p);
  }
  return y;
}

bool BitwiseEqual(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.sizes() == cb.sizes() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()) == 0;
}

// Every element within one bf16 step of the exactly rounded double-precision product (a float
// sum in another order may land on the other side of a rounding boundary, never further).
void ExpectNearExact(const at::Tensor& got, const at::Tensor& x, const at::Tensor& w) {
  at::Tensor exact = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
  at::Tensor diff = (got.to(at::kDouble) - exact).abs();
  at::Tensor step = exact.abs() * (1.0 / 128) + 1e-6;
  EXPECT_TRUE((diff <= step).all().item<bool>())
      << "worst " << (diff / step).max().item<double>() << " steps";
  const double differing =
      (got.to(at::kDouble) != exact.to(at::kBFloat16).to(at::kDouble)).sum().item<double>() /
      static_cast<double>(got.numel());
  EXPECT_LT(differing, 0.02) << differing;
}

TEST(LinearKernelTest, FitsWholeChunksOnly) {
  EXPECT_TRUE(LinearKernelFits(256, 768));
  EXPECT_TRUE(LinearKernelFits(32, 16));
  EXPECT_FALSE(LinearKernelFits(48, 16));
  EXPECT_FALSE(LinearKernelFits(64, 24));
  EXPECT_FALSE(LinearKernelFits(0, 16));
}

TEST(LinearKernelTest, MatchesADoublePrecisionProductOnBothPaths) {
  at::manual_seed(3);
  for (int64_t rows : {1, 2, 3, 7, 8, 13, 32}) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{256, 512}, {768, 256}, {32, 16}}) {
      SCOPED_TRACE(testing::Message() << rows << " rows, " << in << " -> " << out);
      at::Tensor x = RandomBf16({rows, in}, 1.0), w = RandomBf16({out, in}, 0.05);
      ExpectNearExact(KernelProduct(x, w, /*portable=*/false), x, w);
      ExpectNearExact(KernelProduct(x, w, /*portable=*/true), x, w);
    }
  }
}

TEST(LinearKernelTest, ARowsResultDoesNotDependOnTheRowsBesideIt) {
  at::manual_seed(5);
  at::Tensor x = RandomBf16({32, 256}, 1.0), w = RandomBf16({768, 256}, 0.05);
  at::Tensor all = KernelProduct(x, w, false);
  // Every row count takes a different mix of the 8-, 4-, 2- and 1-row blocks.
  for (int64_t rows = 1; rows <= 32; ++rows) {
    EXPECT_TRUE(BitwiseEqual(KernelProduct(x.narrow(0, 0, rows), w, false), all.narrow(0, 0, rows)))
        << rows << " rows";
  }
  for (int64_t r = 0; r < 32; r += 5) {
    EXPECT_TRUE(BitwiseEqual(KernelProduct(x.narrow(0, r, 1), w, false), all.narrow(0, r, 1))) << r;
  }
}

TEST(LinearKernelTest, RowsAndOutputsMayBeStrided) {
  at::manual_seed(9);
  at::Tensor wide = RandomBf16({6, 320}, 1.0);
  at::Tensor x = wide.narrow(1, 64, 256);  // rows 320 elements apart
  at::Tensor w = RandomBf16({64, 256}, 0.05);
  at::Tensor want = KernelProduct(x.contiguous(), w, false);
  EXPECT_TRUE(BitwiseEqual(KernelProduct(x, w, false), want));
  // Outputs [16, 48) alone, written into a wider matrix.
  at::Tensor y = at::zeros({6, 64}, at::kBFloat16);
  LinearProblem p;
  p.x = static_cast<const uint16_t*>(x.data_ptr());
  p.rows = 6;
  p.x_stride = x.stride(0);
  p.w = static_cast<const uint16_t*>(w.data_ptr()) + 16 * 256;
  p.in = 256;
  p.out = 32;
  p.y = static_cast<uint16_t*>(y.data_ptr()) + 16;
  p.y_stride = 64;
  RunLinear(p);
  EXPECT_TRUE(BitwiseEqual(y.narrow(1, 16, 32), want.narrow(1, 16, 32)));
  EXPECT_EQ(y.narrow(1, 0, 16).abs().sum().item<float>(), 0.f);
  EXPECT_EQ(y.narrow(1, 48, 16).abs().sum().item<float>(), 0.f);
}

TEST(LinearKernelTest, TheAvx512PathSumsInThePortableOrder) {
  if (!LinearKernelNative()) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  at::manual_seed(11);
  for (int64_t rows : {1, 5, 8, 32}) {
    at::Tensor x = RandomBf16({rows, 768}, 1.0), w = RandomBf16({256, 768}, 0.05);
    EXPECT_TRUE(BitwiseEqual(KernelProduct(x, w, false), KernelProduct(x, w, true)))
        << rows << " rows";
  }
}

TEST(LinearKernelTest, OpsLinearTakesTheKernelUpToItsRowLimit) {
  const int64_t limit = LinearKernelMaxRows();
  ASSERT_EQ(limit, LinearKernelNative() ? 32 : 2);
  at::manual_seed(13);
  at::Tensor w = RandomBf16({512, 256}, 0.05);
  for (int64_t rows : {int64_t{1}, limit / 2 + 1, limit}) {
    at::Tensor x = RandomBf16({rows, 256}, 1.0);
    EXPECT_TRUE(BitwiseEqual(Linear(x, w), KernelProduct(x, w, false))) << rows;
  }
  // Beyond the limit (and for widths the kernel does not take) it is ATen's product.
  at::Tensor x = RandomBf16({limit + 1, 256}, 1.0);
  ExpectNearExact(Linear(x, w), x, w);
  at::Tensor odd_w = RandomBf16({40, 256}, 0.05);
  ExpectNearExact(Linear(x.narrow(0, 0, 1), odd_w), x.narrow(0, 0, 1), odd_w);
}

}  // namespace
}  // namespace specdec::model
