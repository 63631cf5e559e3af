// The row kernels (through ops.h RmsNorm, ApplyRope and SwiGlu) against the ATen formulation on
// random data: matrices, strided [rows, heads, head_dim] views like a fused QKV product's, row
// lengths that are and are not multiples of the 16 lanes, f32 and bf16.
#include "common/model/row_kernels.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "common/model/ops.h"

namespace specdec::model {
namespace {

at::Tensor AtenRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return (xf * at::rsqrt(var + eps)).to(x.scalar_type()) * w;
}

at::Tensor AtenSwiGlu(const at::Tensor& gu, int64_t inter) {
  return at::silu(gu.narrow(1, 0, inter)) * gu.narrow(1, inter, inter);
}

// The bf16 kernel's rule, element by element: silu(g) = g / (1 + exp(-g)) rounded to bf16 after
// each operation (as PyTorch 1.x computes a bf16 silu), times up, rounded.
at::Tensor RuleSwiGluBf16(const at::Tensor& gu, int64_t inter) {
  auto round = [](float f) { return c10::BFloat16(f).operator float(); };
  at::Tensor g = gu.narrow(1, 0, inter).to(at::kFloat).contiguous();
  at::Tensor u = gu.narrow(1, inter, inter).to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(g);
  const float* gp = g.data_ptr<float>();
  const float* up = u.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < g.numel(); ++i) {
    const float silu = round(gp[i] / round(1.f + round(std::exp(-gp[i]))));
    op[i] = silu * up[i];
  }
  return out.to(at::kBFloat16);
}

// Finite elements of two bf16 tensors agree within two bf16 steps (relative 2^-6).
void ExpectWithinTwoBf16Steps(const at::Tensor& got, const at::Tensor& want) {
  at::Tensor g = got.to(at::kFloat), w = want.to(at::kFloat);
  at::Tensor finite = at::isfinite(w);
  at::Tensor excess = ((g - w).abs() - w.abs() / 64 - 1e-30).masked_select(finite);
  EXPECT_LE(excess.max().item<float>(), 0.f);
  EXPECT_TRUE(at::equal(at::isnan(got), at::isnan(want)));
}

// f32: equal up to float rounding. bf16: the kernels round where ATen does, so an element can
// differ only when a float sum taken in another order lands on the other side of a rounding
// boundary: at most one bf16 step, and rarely.
void ExpectMatches(const at::Tensor& got, const at::Tensor& want) {
  ASSERT_EQ(got.sizes(), want.sizes());
  ASSERT_EQ(got.scalar_type(), want.scalar_type());
  ASSERT_TRUE(got.is_contiguous());
  at::Tensor g = got.to(at::kFloat), w = want.to(at::kFloat);
  if (got.scalar_type() == at::kFloat) {
    EXPECT_TRUE(at::allclose(g, w, /*rtol=*/1e-5, /*atol=*/1e-6))
        << (g - w).abs().max().item<float>();
    return;
  }
  at::Tensor diff = (g - w).abs();
  at::Tensor step = w.abs() * (1.0 / 128) + 1e-30;  // one bf16 step at the value's magnitude
  EXPECT_TRUE((diff <= step * 1.01).all().item<bool>()) << diff.max().item<float>();
  const double differing = (diff > 0).sum().item<double>() / static_cast<double>(got.numel());
  EXPECT_LT(differing, 0.01) << differing;
}

class RowKernelsTest : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(RowKernelsTest, RmsNormMatchesAtenOnMatricesAndStridedHeads) {
  const at::ScalarType dt = GetParam();
  at::manual_seed(7);
  for (int64_t dim : {16, 40, 64, 256}) {
    SCOPED_TRACE(dim);
    at::Tensor w = (at::rand({dim}) + 0.5).to(dt);
    at::Tensor x = (at::randn({33, dim}) * 3).to(dt);
    ExpectMatches(RmsNorm(x, w, 1e-6), AtenRmsNorm(x, w, 1e-6));
    // One row, and a vector.
    ExpectMatches(RmsNorm(x.narrow(0, 5, 1), w, 1e-5), AtenRmsNorm(x.narrow(0, 5, 1), w, 1e-5));
    ExpectMatches(RmsNorm(x[3], w, 1e-6), AtenRmsNorm(x[3], w, 1e-6));
    // The k part of a fused [rows, (heads + 2 kv_heads) * dim] product seen as [rows, 2, dim].
    at::Tensor qkv = at::randn({9, 8 * dim}).to(dt);
    at::Tensor k = qkv.narrow(1, 4 * dim, 2 * dim).reshape({9, 2, dim});
    ASSERT_FALSE(k.is_contiguous());
    ExpectMatches(RmsNorm(k, w, 1e-6), AtenRmsNorm(k, w, 1e-6));
  }
}

TEST_P(RowKernelsTest, RmsNormOfZeroRowIsZeroNotNan) {
  const at::ScalarType dt = GetParam();
  at::Tensor x = at::zeros({2, 64}, dt);
  at::Tensor y = RmsNorm(x, at::ones({64}, dt), 1e-6);
  EXPECT_TRUE(at::equal(y, x));
}

TEST_P(RowKernelsTest, SwiGluMatchesAtenOnRowsOfAPaddedProduct) {
  const at::ScalarType dt = GetParam();
  at::manual_seed(11);
  for (int64_t inter : {16, 24, 768}) {
    SCOPED_TRACE(inter);
    // Rows 0..20 of a 32-row product (Linear's padded bf16 path returns such a view).
    at::Tensor gu = (at::randn({32, 2 * inter}) * 4).to(dt).narrow(0, 0, 21);
    if (dt == at::kBFloat16) {
      // No float sum: the rule's roundings give its bits exactly. ATen rounds a bf16 silu per
      // operation in PyTorch 1.x and once in 2.x: within two steps of either.
      EXPECT_TRUE(at::equal(SwiGlu(gu, inter), RuleSwiGluBf16(gu, inter)));
      ExpectWithinTwoBf16Steps(SwiGlu(gu, inter), AtenSwiGlu(gu, inter));
    } else {
      ExpectMatches(SwiGlu(gu, inter), AtenSwiGlu(gu, inter));
    }
    // Every bf16 gate value at once (the table covers all 65536, NaN and infinities included).
    if (dt == at::kBFloat16) {
      at::Tensor bits = at::arange(0, 65536, at::kInt).to(at::kShort);
      at::Tensor gate = bits.view(at::kBFloat16).reshape({-1, inter == 16 ? 16 : 1024});
      if (gate.size(1) != inter) continue;
      at::Tensor up = at::ones_like(gate);
      at::Tensor all = at::cat({gate, up}, 1);
      at::Tensor got = SwiGlu(all, inter), want = RuleSwiGluBf16(all, inter);
      at::Tensor finite = at::isfinite(want);
      EXPECT_TRUE(at::equal(at::isnan(got), at::isnan(want)));
      EXPECT_TRUE(at::equal(got.masked_select(finite), want.masked_select(finite)));
      ExpectWithinTwoBf16Steps(got, AtenSwiGlu(all, inter));
    }
  }
}

TEST_P(RowKernelsTest, RopeMatchesAtenBitForBitOnStridedHeads) {
  const at::ScalarType dt = GetParam();
  at::manual_seed(13);
  for (int64_t dim : {16, 40, 64}) {
    SCOPED_TRACE(dim);
    const int64_t n = 11;
    at::Tensor inv_freq = 1.0 / at::pow(10000.f, at::arange(0, dim, 2).to(at::kFloat) / dim);
    at::Tensor cos, sin;
    RopeCosSin(inv_freq, at::arange(100, 100 + n, at::kLong), &cos, &sin);
    // q of a fused [n, (4 + 2 + 2) * dim] product seen as [n, 4, dim], and a contiguous copy.
    at::Tensor qkv = (at::randn({n, 8 * dim}) * 2).to(dt);
    at::Tensor q = qkv.narrow(1, 0, 4 * dim).reshape({n, 4, dim});
    ASSERT_FALSE(q.is_contiguous());
    for (const at::Tensor& x : {q, q.contiguous()}) {
      at::Tensor c = cos.to(dt).unsqueeze(1), s = sin.to(dt).unsqueeze(1);
      at::Tensor rotated = at::cat({-x.narrow(-1, dim / 2, dim / 2), x.narrow(-1, 0, dim / 2)}, -1);
      at::Tensor want = x * c + rotated * s;
      at::Tensor got = ApplyRope(x, cos, sin);
      EXPECT_TRUE(got.is_contiguous());
      EXPECT_TRUE(at::equal(got, want)) << (got.to(at::kFloat) - want.to(at::kFloat)).abs().max();
    }
  }
}

TEST(RowKernelsFallbackTest, OtherDtypesUseAten) {
  at::Tensor x = at::randn({4, 32}, at::kDouble);
  at::Tensor w = at::rand({32}, at::kDouble);
  EXPECT_TRUE(at::equal(RmsNorm(x, w, 1e-6), AtenRmsNorm(x, w, 1e-6)));
  at::Tensor gu = at::randn({4, 64}, at::kDouble);
  EXPECT_TRUE(at::equal(SwiGlu(gu, 32), AtenSwiGlu(gu, 32)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RowKernelsTest, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) {
                           return std::string(info.param == at::kFloat ? "F32" : "BF16");
                         });

}  // namespace
}  // namespace specdec::model
