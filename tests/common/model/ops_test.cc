// Linear's row bucketing for bf16 products: GemmRows' buckets, and padded products that equal the
// unpadded ones row for row; a head padded for the kernel; RoPE's table against RopeCosSin; a
// pass's mask over a cache's capacity against the general path's.
#include "common/model/ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <vector>

#include "common/model/transformer_internal.h"

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

// A head whose width (a vocabulary of 1001) alone keeps it off the linear kernel, padded with zero
// rows: its products run on the kernel, so a row's result is the same bits at every row count,
// and the real columns are the unpadded matrix's product.
TEST(LinearTest, AnOddWidthPaddedForTheKernelGivesEveryRowCountTheSameBits) {
  at::manual_seed(5);
  const at::Tensor w = at::randn({1001, 1024}).to(at::kBFloat16);
  const at::Tensor padded = PadOutputsForKernel(w);
  ASSERT_EQ(padded.size(0), 1008);
  EXPECT_TRUE(at::equal(padded.narrow(0, 0, 1001), w));
  EXPECT_EQ(padded.narrow(0, 1001, 7).abs().max().item<float>(), 0.f);
  const at::Tensor x = at::randn({40, 1024}).to(at::kBFloat16);
  const at::Tensor whole = Linear(x, padded);
  ASSERT_EQ(whole.size(1), 1008);
  for (int64_t rows : {1, 2, 15, 16, 17, 32}) {
    const at::Tensor part = Linear(x.narrow(0, 0, rows), padded);
    EXPECT_TRUE(at::equal(part, whole.narrow(0, 0, rows))) << rows << " rows";
  }
  const double diff = (whole.narrow(1, 0, 1001).to(at::kFloat) - at::linear(x, w).to(at::kFloat))
                          .abs()
                          .max()
                          .item<double>();
  EXPECT_LT(diff, 0.05);
  // Widths the kernel takes, and other dtypes, stay as they are.
  const at::Tensor fits = at::randn({96, 64}).to(at::kBFloat16);
  EXPECT_TRUE(PadOutputsForKernel(fits).is_same(fits));
  const at::Tensor f32 = at::randn({101, 64});
  EXPECT_TRUE(PadOutputsForKernel(f32).is_same(f32));
}

}  // namespace
}  // namespace specdec::model

namespace specdec::model {
namespace {

// The table's rows are RopeCosSin's bits: for positions gathered from it in any order and count,
// and for positions past it (computed).
TEST(RopeTableTest, RowsEqualRopeCosSinBitForBit) {
  for (int64_t head_dim : {64, 80, 128}) {
    ModelConfig c;
    c.head_dim = head_dim;
    c.rope_theta = 1e6;
    const at::Tensor inv_freq = RopeInvFreq(c);
    const RopeTable table(inv_freq, 4096);
    EXPECT_EQ(table.positions(), 4096);
    EXPECT_EQ(RopeTable(inv_freq, 1 << 20).positions(), RopeTable::kMaxPositions);
    for (const std::vector<int64_t>& pos : std::vector<std::vector<int64_t>>{
             {0}, {4095}, {17, 18, 19}, {3000, 5, 2048, 7, 1}, {4094, 4095, 4096, 9000}}) {
      SCOPED_TRACE(testing::Message() << "head_dim " << head_dim << ", first " << pos[0]);
      const at::Tensor positions = at::tensor(pos, at::kLong);
      at::Tensor cos, sin, want_cos, want_sin;
      table.CosSin(positions, &cos, &sin);
      RopeCosSin(inv_freq, positions, &want_cos, &want_sin);
      ASSERT_EQ(cos.sizes(), want_cos.sizes());
      EXPECT_TRUE(at::equal(cos, want_cos));
      EXPECT_TRUE(at::equal(sin, want_sin));
      // Each row alone, as a 1-token step computes it.
      for (size_t i = 0; i < pos.size(); ++i) {
        at::Tensor one_cos, one_sin;
        RopeCosSin(inv_freq, at::tensor({pos[i]}, at::kLong), &one_cos, &one_sin);
        EXPECT_TRUE(at::equal(cos[static_cast<int64_t>(i)], one_cos[0])) << "row " << i;
        EXPECT_TRUE(at::equal(sin[static_cast<int64_t>(i)], one_sin[0])) << "row " << i;
      }
    }
  }
}

// CapacityMask over a cache's capacity: the general path's own mask (NewRowsMask: the past, then
// the new rows' keys) in its first past + n slots, -inf after them; chains, trees and a lone row.
TEST(CapacityMaskTest, IsTheNewRowsMaskPaddedWithMaskedSlots) {
  const float inf = std::numeric_limits<float>::infinity();
  constexpr int64_t kCapacity = 16;
  const std::vector<int32_t> tokens = {5, 6, 7, 8};
  const std::vector<int32_t> tree = {-1, 0, 0, 1};
  for (const std::vector<int32_t>& parents : {std::vector<int32_t>{}, tree}) {
    for (int64_t past : {0, 3, 12}) {
      for (int64_t n : {1, 4}) {
        SequenceInput in{nullptr, std::span<const int32_t>(tokens).first(n)};
        if (!parents.empty()) in.tree_parents = std::span<const int32_t>(parents).first(n);
        const at::Tensor general = NewRowsMask(in, past, n);
        const at::Tensor slots = at::arange(past, past + n, at::kLong);
        const at::Tensor own = n > 1 ? general.narrow(1, past, n) : at::Tensor();
        const at::Tensor mask = CapacityMask(slots, own, kCapacity);
        ASSERT_EQ(mask.sizes(), (at::IntArrayRef{n, kCapacity}));
        EXPECT_TRUE(at::equal(mask.narrow(1, 0, past + n), general))
            << "past " << past << " n " << n << " tree " << !parents.empty();
        const at::Tensor after = mask.narrow(1, past + n, kCapacity - past - n);
        EXPECT_TRUE(at::equal(after, at::full_like(after, -inf))) << "past " << past << " n " << n;
      }
    }
  }
}

}  // namespace
}  // namespace specdec::model
