// Linear's row bucketing for bf16 products: GemmRows' buckets, and padded products that equal the
// unpadded ones row for row.
#include "common/model/ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

namespace specdec::model {
namespace {

TEST(GemmRowsTest, ExactUpTo32ThenRoundedUp) {
  for (int64_t r = 1; r <= 32; ++r) EXPECT_EQ(GemmRows(r), r);
  EXPECT_EQ(GemmRows(33), 48);
  EXPECT_EQ(GemmRows(48), 48);
  EXPECT_EQ(GemmRows(136), 144);
  EXPECT_EQ(GemmRows(256), 256);
  EXPECT_EQ(GemmRows(257), 320);
  EXPECT_EQ(GemmRows(1024), 1024);
  EXPECT_EQ(GemmRows(1025), 1152);
  std::set<int64_t> distinct;
  for (int64_t r = 1; r <= 4096; ++r) {
    const int64_t g = GemmRows(r);
    ASSERT_GE(g, r);
    if (r > 256) {
      EXPECT_LE(g - r, r * 0.25) << r;
    }
    distinct.insert(g);
  }
  EXPECT_LE(distinct.size(), 90u);
}

TEST(LinearTest, PaddedBf16ProductsEqualUnpaddedOnes) {
  at::manual_seed(3);
  const at::Tensor w = at::randn({96, 64}).to(at::kBFloat16);
  for (int64_t rows : {1, 17, 33, 47, 130, 300}) {
    const at::Tensor x = at::randn({rows, 64}).to(at::kBFloat16);
    const at::Tensor y = Linear(x, w);
    ASSERT_EQ(y.size(0), rows);
    ASSERT_EQ(y.size(1), 96);
    // Row by row, each through its own (exact, 1-row) product.
    for (int64_t r = 0; r < rows; r += 16) {
      const at::Tensor ref = at::linear(x.narrow(0, r, 1), w);
      const double diff =
          (y.narrow(0, r, 1).to(at::kFloat) - ref.to(at::kFloat)).abs().max().item<double>();
      EXPECT_LT(diff, 0.05) << "rows " << rows << " row " << r;
    }
  }
}

}  // namespace
}  // namespace specdec::model
