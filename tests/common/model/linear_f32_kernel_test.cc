// The float32 product kernel: every path sums in the documented order (the CPU's own path and
// the AVX2 path equal the portable loop bit for bit), a row's result does not depend on the rows
// beside it, and the sums are those of a float64 reference within float rounding.
#include "common/model/linear_f32_kernel.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

namespace specdec::model {
namespace {

struct Result {
  at::Tensor native, portable, avx2;  // avx2 undefined where the CPU has no AVX2
};

// x [rows, in] (rows `x_stride` apart) times w [out, in], on both paths.
Result RunBothPaths(const at::Tensor& x, const at::Tensor& w) {
  const int64_t rows = x.size(0), in = w.size(1), out = w.size(0);
  Result r{at::full({rows, out}, -7.0f), at::full({rows, out}, -7.0f)};
  LinearF32Problem p;
  p.x = x.data_ptr<float>();
  p.rows = rows;
  p.x_stride = x.stride(0);
  p.w = w.data_ptr<float>();
  p.in = in;
  p.out = out;
  p.y_stride = out;
  p.y = r.native.data_ptr<float>();
  RunLinearF32(p);
  p.y = r.portable.data_ptr<float>();
  RunLinearF32Portable(p);
  at::Tensor avx2 = at::full({rows, out}, -7.0f);
  p.y = avx2.data_ptr<float>();
  if (RunLinearF32Avx2(p)) r.avx2 = avx2;
  return r;
}

TEST(LinearF32Kernel, EveryPathSumsInOneOrderAndNearTheFloat64Product) {
  at::manual_seed(3);
  for (int64_t in : {1, 7, 16, 33, 64, 100, 256}) {
    for (int64_t out : {1, 3, 4, 17, 64, 130}) {
      for (int64_t rows : {1, 2, 3, 4, 5, 8, 9}) {
        SCOPED_TRACE(testing::Message() << "in " << in << " out " << out << " rows " << rows);
        // Rows 3 apart in a wider buffer: strides are honoured.
        const at::Tensor x = at::randn({rows, in + 3}).narrow(1, 0, in);
        const at::Tensor w = at::randn({out, in});
        const Result r = RunBothPaths(x, w);
        EXPECT_TRUE(r.native.equal(r.portable));
        if (r.avx2.defined()) {
          EXPECT_TRUE(r.avx2.equal(r.portable));
        }
        const at::Tensor ref = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
        const double err = (r.native.to(at::kDouble) - ref).abs().max().item<double>();
        EXPECT_LT(err, 1e-5 * std::sqrt(static_cast<double>(in)) * 4);
      }
    }
  }
}

TEST(LinearF32Kernel, ARowsResultIsTheSameAloneAndAmongOtherRows) {
  at::manual_seed(5);
  const at::Tensor w = at::randn({96, 200});
  const at::Tensor x = at::randn({17, 200});
  const at::Tensor all = RunBothPaths(x, w).native;
  for (int64_t n : {1, 2, 3, 4, 5, 8, 17}) {
    const at::Tensor some = RunBothPaths(x.narrow(0, 0, n).contiguous(), w).native;
    EXPECT_TRUE(some.equal(all.narrow(0, 0, n))) << n << " rows";
  }
  // An output range is the problem with w and y advanced: outputs do not depend on the range.
  const at::Tensor part = RunBothPaths(x, w.narrow(0, 32, 40).contiguous()).native;
  EXPECT_TRUE(part.equal(all.narrow(1, 32, 40)));
}

TEST(LinearF32Kernel, NoRowsWriteNothing) {
  const at::Tensor w = at::randn({20, 48});
  const at::Tensor x = at::randn({1, 48});
  const Result r = RunBothPaths(x.narrow(0, 0, 0), w);
  EXPECT_EQ(r.native.numel(), 0);
  at::Tensor y = at::full({1, 20}, -7.0f);
  LinearF32Problem p;
  p.x = x.data_ptr<float>();
  p.x_stride = 48;
  p.w = w.data_ptr<float>();
  p.in = 48;
  p.out = 20;
  p.y = y.data_ptr<float>();
  p.y_stride = 20;
  RunLinearF32(p);  // rows = 0
  RunLinearF32Avx2(p);
  EXPECT_TRUE(y.eq(-7.0f).all().item<bool>());
}

TEST(LinearF32Kernel, AnyPositiveWidthFits) {
  EXPECT_TRUE(LinearF32KernelFits(1, 1));
  EXPECT_TRUE(LinearF32KernelFits(172, 97));
  EXPECT_FALSE(LinearF32KernelFits(0, 4));
  EXPECT_FALSE(LinearF32KernelFits(16, 0));
}

}  // namespace
}  // namespace specdec::model
