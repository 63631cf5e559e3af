// The bf16 matrix-product kernel against a double-precision reference and against its documented
// order of sums, its row independence, output ranges, the two code paths against each other, and
// ops.h Linear on top of it.
#include "common/model/linear_kernel.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/model/ops.h"
#include "common/model/vec16.h"

namespace specdec::model {
namespace {

at::Tensor RandomBf16(std::vector<int64_t> shape, double scale) {
  return (at::randn(shape, at::kFloat) * scale).to(at::kBFloat16).contiguous();
}

// y = x W^T through the kernel (`portable`: its portable path), as bf16 [rows, out], or with
// `f32` through its float output (LinearProblem::y_f32), as float [rows, out]; with `packed`, the
// matrix w read in the packed layout with blocks of `block` outputs.
at::Tensor KernelProduct(const at::Tensor& x, const at::Tensor& w, bool portable, bool f32 = false,
                         const at::Tensor& packed = {}, int32_t block = 0) {
  at::Tensor y = at::empty({x.size(0), w.size(0)}, f32 ? at::kFloat : at::kBFloat16);
  LinearProblem p;
  p.x = static_cast<const uint16_t*>(x.data_ptr());
  p.rows = x.size(0);
  p.x_stride = x.stride(0);
  p.w = static_cast<const uint16_t*>((packed.defined() ? packed : w).data_ptr());
  p.w_block = packed.defined() ? block : 0;
  p.in = w.size(1);
  p.out = w.size(0);
  if (f32) {
    p.y_f32 = y.data_ptr<float>();
  } else {
    p.y = static_cast<uint16_t*>(y.data_ptr());
  }
  p.y_stride = w.size(0);
  if (portable) {
    RunLinearPortable(p);
  } else {
    RunLinear(p);
  }
  return y;
}

at::Tensor KernelProductF32(const at::Tensor& x, const at::Tensor& w, bool portable) {
  return KernelProduct(x, w, portable, /*f32=*/true);
}

// Values whose float sums depend on their order: +-1024 and +-2^-14 (half a float step of 1024,
// lost or kept by where it falls), scattered among zeros.
at::Tensor CancellingBf16(std::vector<int64_t> shape) {
  const at::Tensor pick = at::randint(0, 6, shape, at::kLong);
  const at::Tensor sign = at::randint(0, 2, shape, at::kLong) * 2 - 1;
  const at::Tensor table = at::tensor({0.0, 0.0, 1024.0, std::ldexp(1.0, -14), 1.0, 0.5});
  return (table.index({pick}) * sign).to(at::kBFloat16).contiguous();
}

// The contract's order written out one element at a time: per output, 16 lane sums over the
// odd then the even element of each pair (`even_first`: the other way, a wrong order for the
// check that the data can tell orders apart), then common/model/vec16.h's reduction tree over
// the 16 outputs of a group, rounded to bf16.
at::Tensor OrderedReference(const at::Tensor& x, const at::Tensor& w, bool even_first = false) {
  const int64_t rows = x.size(0), in = w.size(1), out = w.size(0);
  at::Tensor y = at::empty({rows, out}, at::kBFloat16);
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  const auto* wp = static_cast<const uint16_t*>(w.data_ptr());
  auto* yp = static_cast<uint16_t*>(y.data_ptr());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o0 = 0; o0 < out; o0 += kLanes) {
      F16 lanes[kLanes] = {};
      for (int64_t n = 0; n < kLanes; ++n) {
        const uint16_t* xr = xp + r * x.stride(0);
        const uint16_t* wr = wp + (o0 + n) * in;
        for (int64_t c = 0; c < in; c += 32) {
          for (int l = 0; l < kLanes; ++l) {
            const int64_t first = c + 2 * l + (even_first ? 0 : 1);
            const int64_t second = c + 2 * l + (even_first ? 1 : 0);
            lanes[n][l] += Bf16ToFloat(xr[first]) * Bf16ToFloat(wr[first]);
            lanes[n][l] += Bf16ToFloat(xr[second]) * Bf16ToFloat(wr[second]);
          }
        }
      }
      const F16 sums = Reduce16(lanes);
      for (int n = 0; n < kLanes; ++n) yp[r * out + o0 + n] = FloatToBf16(sums[n]);
    }
  }
  return y;
}

bool BitwiseEqual(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  // An empty tensor may have no storage: memcmp's pointers must not be null even for 0 bytes.
  return ca.sizes() == cb.sizes() &&
         (ca.numel() == 0 ||
          std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()) == 0);
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

TEST(LinearKernelTest, EveryPathSumsInTheDocumentedOrder) {
  at::manual_seed(7);
  // Row counts that take every mix of 4-, 2- and 1-row blocks, and more than one 64-row panel.
  {
    const at::Tensor x = CancellingBf16({16, 256}), w = CancellingBf16({48, 256});
    ASSERT_FALSE(BitwiseEqual(OrderedReference(x, w, /*even_first=*/true), OrderedReference(x, w)))
        << "the data does not tell summation orders apart";
  }
  for (int64_t rows : {1, 2, 3, 5, 6, 7, 67}) {
    at::Tensor x = CancellingBf16({rows, 256}), w = CancellingBf16({48, 256});
    const at::Tensor want = OrderedReference(x, w);
    EXPECT_TRUE(BitwiseEqual(KernelProduct(x, w, /*portable=*/true), want)) << rows << " rows";
    // RunLinear's path for this CPU (AVX-512 BF16, AVX2 or portable) sums in the same order.
    EXPECT_TRUE(BitwiseEqual(KernelProduct(x, w, /*portable=*/false), want)) << rows << " rows";
  }
}

TEST(LinearKernelTest, ARowsResultDoesNotDependOnTheRowsBesideIt) {
  at::manual_seed(5);
  at::Tensor x = RandomBf16({70, 256}, 1.0), w = RandomBf16({768, 256}, 0.05);
  for (bool portable : {false, true}) {
    SCOPED_TRACE(portable ? "portable path" : "RunLinear");
    at::Tensor all = KernelProduct(x, w, portable);
    // Every row count takes a different mix of the row blocks (and of 64-row panels).
    for (int64_t rows = 1; rows <= 70; rows += rows < 33 ? 1 : 7) {
      EXPECT_TRUE(
          BitwiseEqual(KernelProduct(x.narrow(0, 0, rows), w, portable), all.narrow(0, 0, rows)))
          << rows << " rows";
    }
    for (int64_t r = 0; r < 70; r += 5) {
      EXPECT_TRUE(BitwiseEqual(KernelProduct(x.narrow(0, r, 1), w, portable), all.narrow(0, r, 1)))
          << r;
    }
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

// The float output holds the very sums the bf16 output rounds (so it sums in the same order and
// keeps a row's result independent of the rows beside it), with a float's precision.
TEST(LinearKernelTest, FloatOutputIsTheUnroundedSum) {
  at::manual_seed(17);
  for (int64_t rows : {1, 3, 6, 67}) {
    SCOPED_TRACE(testing::Message() << rows << " rows");
    at::Tensor x = RandomBf16({rows, 256}, 1.0), w = RandomBf16({48, 256}, 0.05);
    for (bool portable : {false, true}) {
      const at::Tensor f = KernelProductF32(x, w, portable);
      EXPECT_TRUE(BitwiseEqual(f.to(at::kBFloat16), KernelProduct(x, w, portable)));
      at::Tensor exact = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
      EXPECT_LT((f.to(at::kDouble) - exact).abs().max().item<double>(), 1e-4);
      EXPECT_TRUE(BitwiseEqual(KernelProductF32(x.narrow(0, rows - 1, 1), w, portable),
                               f.narrow(0, rows - 1, 1)));
    }
  }
}

// ops.h Linear of float activations with bf16 weights: the activations rounded to bf16, every row
// count on the kernel with its float output.
TEST(LinearKernelTest, OpsLinearOfFloatActivationsRoundsOnlyWhatTheProductConsumes) {
  at::manual_seed(19);
  at::Tensor w = RandomBf16({512, 256}, 0.05);
  at::Tensor x = at::randn({70, 256}, at::kFloat);
  const at::Tensor all = Linear(x, w);
  ASSERT_EQ(all.scalar_type(), at::kFloat);
  EXPECT_TRUE(BitwiseEqual(all, KernelProductF32(x.to(at::kBFloat16).contiguous(), w, false)));
  for (int64_t rows : {1, 2, 3, 33, 69}) {
    EXPECT_TRUE(
        BitwiseEqual(Linear(x.narrow(0, 70 - rows, rows), w), all.narrow(0, 70 - rows, rows)))
        << rows;
  }
  // Widths the kernel does not take: ATen's bf16 product.
  at::Tensor odd_w = RandomBf16({40, 256}, 0.05);
  const at::Tensor odd = Linear(x.narrow(0, 0, 2), odd_w);
  EXPECT_EQ(odd.scalar_type(), at::kFloat);
  ExpectNearExact(odd.to(at::kBFloat16), x.narrow(0, 0, 2).to(at::kBFloat16), odd_w);
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
  const bool avx512 = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  const int64_t limit = LinearKernelMaxRows();
  ASSERT_EQ(limit, avx512 && !LinearKernelNative() ? 2 : std::numeric_limits<int64_t>::max());
  at::manual_seed(13);
  at::Tensor w = RandomBf16({512, 256}, 0.05);
  const int64_t tested = std::min<int64_t>(limit, 100);
  for (int64_t rows : {int64_t{1}, tested / 2 + 1, tested}) {
    at::Tensor x = RandomBf16({rows, 256}, 1.0);
    EXPECT_TRUE(BitwiseEqual(Linear(x, w), KernelProduct(x, w, false))) << rows;
  }
  // Beyond the limit, where there is one (and for widths the kernel does not take), it is ATen's
  // product.
  at::Tensor x = RandomBf16({tested + 1, 256}, 1.0);
  ExpectNearExact(Linear(x, w), x, w);
  at::Tensor odd_w = RandomBf16({40, 256}, 0.05);
  ExpectNearExact(Linear(x.narrow(0, 0, 1), odd_w), x.narrow(0, 0, 1), odd_w);
}

// w [out, in] in the packed layout with blocks of `block` outputs, element by element from the
// layout's formula.
at::Tensor PackedByFormula(const at::Tensor& w, int64_t block) {
  const int64_t out = w.size(0), in = w.size(1);
  at::Tensor packed = at::empty({out * in}, at::kBFloat16);
  const auto* src = static_cast<const uint16_t*>(w.data_ptr());
  auto* dst = static_cast<uint16_t*>(packed.data_ptr());
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      dst[(o / block) * block * in + (i / 32) * 32 * block + (o % block) * 32 + i % 32] =
          src[o * in + i];
    }
  }
  return packed;
}

TEST(LinearKernelTest, PackingFollowsTheLayoutAndUnpacksBack) {
  at::manual_seed(23);
  const at::Tensor w = RandomBf16({48, 96}, 1.0);
  for (int32_t block : {4, 16}) {
    SCOPED_TRACE(testing::Message() << "blocks of " << block);
    at::Tensor packed = at::empty({48 * 96}, at::kBFloat16);
    PackLinearWeights(static_cast<const uint16_t*>(w.data_ptr()), 96, 48, block,
                      static_cast<uint16_t*>(packed.data_ptr()));
    EXPECT_TRUE(BitwiseEqual(packed, PackedByFormula(w, block)));
    at::Tensor back = at::empty({48, 96}, at::kBFloat16);
    UnpackLinearWeights(static_cast<const uint16_t*>(packed.data_ptr()), 96, 48, block,
                        static_cast<uint16_t*>(back.data_ptr()));
    EXPECT_TRUE(BitwiseEqual(back, w));
    at::Tensor row = at::empty({96}, at::kBFloat16);
    for (int64_t o : {0, 5, 17, 47}) {
      CopyPackedRow(static_cast<const uint16_t*>(packed.data_ptr()), 96, o, block,
                    static_cast<uint16_t*>(row.data_ptr()));
      EXPECT_TRUE(BitwiseEqual(row, w[o])) << "row " << o;
    }
  }
}

TEST(LinearKernelTest, PackedWeightsGiveTheSameSumsOnEveryPath) {
  at::manual_seed(29);
  // Widths below, at and across the packed path's 1,024-input segments (1,056: a segment and one
  // chunk), row counts that take every block of rows, and both outputs.
  for (int64_t in : {256, 1024, 1056}) {
    const at::Tensor w = CancellingBf16({48, in});
    for (int32_t block : {4, 16}) {
      const at::Tensor packed = PackedByFormula(w, block);
      for (int64_t rows : {0, 1, 2, 3, 4, 5, 7, 17, 67}) {
        SCOPED_TRACE(testing::Message()
                     << in << " inputs, " << rows << " rows, blocks of " << block);
        const at::Tensor x = CancellingBf16({rows, in});
        for (bool portable : {false, true}) {
          for (bool f32 : {false, true}) {
            EXPECT_TRUE(BitwiseEqual(KernelProduct(x, w, portable, f32, packed, block),
                                     KernelProduct(x, w, portable, f32)))
                << (portable ? "portable" : "this CPU's path") << (f32 ? ", float" : ", bf16");
          }
        }
      }
    }
  }
}

TEST(LinearKernelTest, OpsLinearAndEmbeddingRowsTakePackedWeights) {
  at::manual_seed(31);
  const at::Tensor w = RandomBf16({64, 256}, 0.05), packed = PackLinearWeight(w);
  // This machine's path reads packed weights (AVX2 or AVX-512 BF16) where it takes every product.
  const bool packs =
      LinearPackBlock() != 0 && LinearKernelMaxRows() == std::numeric_limits<int64_t>::max();
  ASSERT_EQ(packed.dim(), packs ? 3 : 2);
  if (packs) {
    EXPECT_EQ(packed.size(2), 32 * LinearPackBlock());
  }
  EXPECT_TRUE(BitwiseEqual(UnpackLinearWeight(packed), w));
  for (int64_t rows : {1, 5, 40}) {
    const at::Tensor xb = RandomBf16({rows, 256}, 1.0), xf = at::randn({rows, 256});
    EXPECT_TRUE(BitwiseEqual(Linear(xb, packed), Linear(xb, w))) << rows << " bf16 rows";
    EXPECT_TRUE(BitwiseEqual(Linear(xf, packed), Linear(xf, w))) << rows << " float rows";
    const at::Tensor strided = RandomBf16({256, rows}, 1.0).t();  // rows 1 element apart
    EXPECT_TRUE(BitwiseEqual(Linear(strided, packed), Linear(strided.contiguous(), w))) << rows;
  }
  const at::Tensor ids = at::tensor({3, 0, 63, 3}, at::kLong);
  EXPECT_TRUE(BitwiseEqual(EmbeddingRows(packed, ids), w.index_select(0, ids)));
  EXPECT_ANY_THROW(EmbeddingRows(packed, at::tensor({64}, at::kLong)));
  // Matrices the kernel does not take, float ones and odd widths, stay as they are.
  EXPECT_EQ(PackLinearWeight(w.to(at::kFloat)).dim(), 2);
  EXPECT_EQ(PackLinearWeight(RandomBf16({40, 256}, 0.05)).dim(), 2);
}

}  // namespace
}  // namespace specdec::model
