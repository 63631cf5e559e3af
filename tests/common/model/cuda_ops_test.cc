// specdec's own CUDA kernels (cuda_ops.h) against the CPU's compositions of the same operators
// (ctest label `gpu`: runs only where a GPU is, never in CI).
#include "common/model/cuda_ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "common/model/model_config.h"
#include "common/model/ops.h"
#include "common/model/transformer.h"
#include "tests/common/model/test_device.h"

namespace specdec::model {
namespace {

c10::Device TestDevice() { return testing::TestDevice("cuda"); }

at::Tensor F32(const at::Tensor& t) { return t.to(at::kCPU, at::kFloat); }

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kCPU, at::kDouble) - b.to(at::kCPU, at::kDouble)).abs().max().item<double>();
}

// Whether every element of `got` is `want` rounded once to bf16: within one unit in its last
// place (2^-7 of the value; a float result next to a rounding midpoint may round either way),
// plus 1e-4 for float results that cancel to almost nothing.
bool WithinOneBf16Rounding(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kCPU, at::kDouble), w = want.to(at::kCPU, at::kDouble);
  return (g - w).abs().le(w.abs() * (1.0 / 128) + 1e-4).all().item<bool>();
}

ModelConfig Shape(bool qk_norm) {
  ModelConfig c;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  c.qk_norm = qk_norm;
  return c;
}

struct QkInputs {
  at::Tensor qkv;  // [rows, width], its rows further apart than width
  at::Tensor q_norm, k_norm, cos, sin;
};

QkInputs RandomInputs(const ModelConfig& c, int64_t rows, at::ScalarType dtype) {
  at::manual_seed(7);
  const int64_t d = c.head_dim;
  const int64_t width = (c.num_attention_heads + 2 * c.num_key_value_heads) * d;
  QkInputs in;
  in.qkv = (at::randn({rows, width + 24}) * 3.0).to(dtype).narrow(1, 0, width);
  in.q_norm = (1.0 + 0.5 * at::randn({d})).to(dtype);
  in.k_norm = (1.0 + 0.5 * at::randn({d})).to(dtype);
  RopeCosSin(RopeInvFreq(c), at::randint(0, 4000, {rows}, at::kLong), &in.cos, &in.sin);
  return in;
}

// q and k through the kernel on `device`; the RoPE tables in `table_dtype`.
void KernelQk(const ModelConfig& c, const QkInputs& in, at::ScalarType table_dtype,
              c10::Device device, at::Tensor* q, at::Tensor* k) {
  const at::Tensor none;
  ASSERT_TRUE(CudaNormRopeQk(in.qkv.to(device), c.num_attention_heads, c.num_key_value_heads,
                             c.head_dim, c.qk_norm ? in.q_norm.to(device) : none,
                             c.qk_norm ? in.k_norm.to(device) : none, c.rms_norm_eps,
                             in.cos.to(device, table_dtype), in.sin.to(device, table_dtype), q, k));
  *q = q->to(at::kCPU);
  *k = k->to(at::kCPU);
}

// The CPU's composition (RmsNorm, then ApplyRope) in the inputs' dtype, or in float of the
// same (rounded) inputs.
void CompositionQk(const ModelConfig& c, const QkInputs& in, bool in_float, at::Tensor* q,
                   at::Tensor* k) {
  auto cast = [&](const at::Tensor& t) { return in_float ? F32(t) : t; };
  NormRopeQk(cast(in.qkv), c, cast(in.q_norm), cast(in.k_norm), in.cos, in.sin, q, k);
}

TEST(CudaOpsTest, NormRopeQkMatchesTheCompositionInF32WithAndWithoutNorms) {
  const c10::Device device = TestDevice();
  ASSERT_TRUE(CudaKernelsOn()) << "this build has no CUDA kernels, or SPECDEC_CUDA_KERNELS=0";
  for (bool qk_norm : {true, false}) {
    const ModelConfig c = Shape(qk_norm);
    const QkInputs in = RandomInputs(c, 9, at::kFloat);
    at::Tensor q, k, ref_q, ref_k;
    KernelQk(c, in, at::kFloat, device, &q, &k);
    CompositionQk(c, in, /*in_float=*/true, &ref_q, &ref_k);
    ASSERT_EQ(q.sizes(), ref_q.sizes());
    ASSERT_EQ(k.sizes(), ref_k.sizes());
    EXPECT_LT(MaxAbsDiff(q, ref_q), 1e-5) << "qk_norm " << qk_norm;
    EXPECT_LT(MaxAbsDiff(k, ref_k), 1e-5) << "qk_norm " << qk_norm;
  }
}

// In bf16 the kernel rounds once: each element is the float result of the same bf16 inputs,
// rounded; the CPU's bf16 composition rounds after every step and is further off.
TEST(CudaOpsTest, NormRopeQkInBf16RoundsOnce) {
  const c10::Device device = TestDevice();
  for (at::ScalarType tables : {at::kFloat, at::kBFloat16}) {
    const ModelConfig c = Shape(true);
    QkInputs in = RandomInputs(c, 17, at::kBFloat16);
    if (tables == at::kBFloat16) {  // the float reference reads the same rounded tables
      in.cos = F32(in.cos.to(at::kBFloat16));
      in.sin = F32(in.sin.to(at::kBFloat16));
    }
    at::Tensor q, k, ref_q, ref_k, comp_q, comp_k;
    KernelQk(c, in, tables, device, &q, &k);
    CompositionQk(c, in, /*in_float=*/true, &ref_q, &ref_k);
    CompositionQk(c, in, /*in_float=*/false, &comp_q, &comp_k);
    EXPECT_EQ(q.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(WithinOneBf16Rounding(q, ref_q)) << MaxAbsDiff(q, ref_q);
    EXPECT_TRUE(WithinOneBf16Rounding(k, ref_k)) << MaxAbsDiff(k, ref_k);
    std::printf(
        "NormRopeQk bf16 (tables %s): kernel max |error| q %.4g k %.4g, CPU composition "
        "q %.4g k %.4g\n",
        tables == at::kFloat ? "f32" : "bf16", MaxAbsDiff(q, ref_q), MaxAbsDiff(k, ref_k),
        MaxAbsDiff(comp_q, ref_q), MaxAbsDiff(comp_k, ref_k));
    EXPECT_LE(MaxAbsDiff(q, ref_q), MaxAbsDiff(comp_q, ref_q));
  }
}

TEST(CudaOpsTest, SwiGluMatchesTheCompositionAndRoundsOnceInBf16) {
  const c10::Device device = TestDevice();
  at::manual_seed(11);
  const int64_t inter = 200;
  const at::Tensor gu = (at::randn({5, 2 * inter + 8}) * 4.0).narrow(1, 0, 2 * inter);
  at::Tensor out;
  ASSERT_TRUE(CudaSwiGlu(gu.to(device), inter, &out));
  const at::Tensor ref = at::silu(gu.narrow(1, 0, inter)) * gu.narrow(1, inter, inter);
  EXPECT_LT(MaxAbsDiff(out, ref), 1e-5);

  const at::Tensor gu16 = gu.to(at::kBFloat16);
  ASSERT_TRUE(CudaSwiGlu(gu16.to(device), inter, &out));
  const at::Tensor g = F32(gu16.narrow(1, 0, inter)), u = F32(gu16.narrow(1, inter, inter));
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(WithinOneBf16Rounding(out, at::silu(g) * u));
}

at::Tensor Bf16Randn(std::vector<int64_t> sizes, c10::Device device, double scale = 1.0) {
  return (at::randn(sizes) * scale).to(device, at::kBFloat16);
}

// Against float64 products of the same bf16 inputs: one rounding of a float sum (cuBLAS's error
// printed beside it), in each way of cutting k.
TEST(CudaOpsTest, RowsLinearRoundsTheFloatSumOnceWithAndWithoutResidual) {
  const c10::Device device = TestDevice();
  at::manual_seed(3);
  const int64_t n = 200, k = 640;  // n not a multiple of the block's 16 outputs
  const at::Tensor w = Bf16Randn({n, k}, device, 0.05);
  for (int shape = 0; shape < 6; ++shape) {
    for (int64_t m : {1, 5, 17, 64}) {
      const at::Tensor x = Bf16Randn({m, k}, device);
      const at::Tensor residual = Bf16Randn({m, n}, device);
      const at::Tensor ref = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
      at::Tensor y, y_res;
      ASSERT_TRUE(CudaRowsLinear(x, w, at::Tensor(), &y, shape));
      ASSERT_TRUE(CudaRowsLinear(x, w, residual, &y_res, shape));
      ASSERT_EQ(y.sizes(), (std::vector<int64_t>{m, n}));
      EXPECT_TRUE(WithinOneBf16Rounding(y, ref))
          << "shape " << shape << " m " << m << ": " << MaxAbsDiff(y, ref);
      const at::Tensor ref_res = ref + residual.to(at::kDouble);
      EXPECT_TRUE(WithinOneBf16Rounding(y_res, ref_res)) << "shape " << shape << " m " << m;
      std::printf(
          "RowsLinear shape %d m=%ld: max |error| %.4g (cuBLAS %.4g), with residual %.4g (addmm "
          "%.4g)\n",
          shape, static_cast<long>(m), MaxAbsDiff(y, ref), MaxAbsDiff(at::linear(x, w), ref),
          MaxAbsDiff(y_res, ref_res), MaxAbsDiff(at::addmm(residual, x, w.t()), ref_res));
    }
  }
}

// A row's products are bit-identical alone and at any place among up to 63 other rows, in each
// way of cutting k.
TEST(CudaOpsTest, RowsLinearGivesEachRowTheSameBitsWhateverTheRowsBesideIt) {
  const c10::Device device = TestDevice();
  at::manual_seed(5);
  const int64_t n = 333, k = 256 + 32 * 7;  // chunks not a multiple of any shape's warps
  const at::Tensor w = Bf16Randn({n, k}, device, 0.1);
  const at::Tensor row = Bf16Randn({1, k}, device);
  const at::Tensor res_row = Bf16Randn({1, n}, device);
  for (int shape = 0; shape < 6; ++shape) {
    at::Tensor alone, alone_res;
    ASSERT_TRUE(CudaRowsLinear(row, w, at::Tensor(), &alone, shape));
    ASSERT_TRUE(CudaRowsLinear(row, w, res_row, &alone_res, shape));
    for (int64_t m : {2, 7, 8, 9, 16, 17, 33, 64}) {
      for (int64_t at_row : {int64_t{0}, m / 2, m - 1}) {
        at::Tensor x = Bf16Randn({m, k}, device);
        at::Tensor residual = Bf16Randn({m, n}, device);
        x.narrow(0, at_row, 1).copy_(row);
        residual.narrow(0, at_row, 1).copy_(res_row);
        at::Tensor y, y_res;
        ASSERT_TRUE(CudaRowsLinear(x, w, at::Tensor(), &y, shape));
        ASSERT_TRUE(CudaRowsLinear(x, w, residual, &y_res, shape));
        EXPECT_TRUE(at::equal(y.narrow(0, at_row, 1), alone))
            << "shape " << shape << " m " << m << " row " << at_row;
        EXPECT_TRUE(at::equal(y_res.narrow(0, at_row, 1), alone_res))
            << "shape " << shape << " m " << m;
      }
    }
  }
}

// The decoding step's products, in each way of cutting the work: one rounding of the float sum
// for 1 to 4 rows, k not a multiple of the elements a warp reads per step and n not of the
// outputs per block; a row's bits do not depend on the rows beside it.
TEST(CudaOpsTest, VectorLinearRoundsTheFloatSumOnceAndKeepsEachRowsBits) {
  const c10::Device device = TestDevice();
  at::manual_seed(11);
  const int64_t n = 301, k = 1000;
  const at::Tensor w = Bf16Randn({n, k}, device, 0.05);
  const at::Tensor x = Bf16Randn({4, k}, device);
  const at::Tensor residual = Bf16Randn({4, n}, device);
  for (int shape = 0; shape < 8; ++shape) {
    at::Tensor first, first_res;
    for (int64_t m = 1; m <= 4; ++m) {
      const at::Tensor xm = x.narrow(0, 0, m), rm = residual.narrow(0, 0, m);
      const at::Tensor ref = at::matmul(xm.to(at::kDouble), w.to(at::kDouble).t());
      at::Tensor y, y_res;
      ASSERT_TRUE(CudaVectorLinear(xm, w, at::Tensor(), &y, shape));
      ASSERT_TRUE(CudaVectorLinear(xm, w, rm, &y_res, shape));
      ASSERT_EQ(y.sizes(), (std::vector<int64_t>{m, n}));
      EXPECT_TRUE(WithinOneBf16Rounding(y, ref))
          << shape << " m " << m << ": " << MaxAbsDiff(y, ref);
      const at::Tensor ref_res = ref + rm.to(at::kDouble);
      EXPECT_TRUE(WithinOneBf16Rounding(y_res, ref_res)) << "shape " << shape << " m " << m;
      if (m == 1) {
        first = y;
        first_res = y_res;
      }
      EXPECT_TRUE(at::equal(y.narrow(0, 0, 1), first)) << "shape " << shape << " m " << m;
      EXPECT_TRUE(at::equal(y_res.narrow(0, 0, 1), first_res)) << "shape " << shape << " m " << m;
      std::printf(
          "VectorLinear shape %d m=%ld: max |error| %.4g (cuBLAS %.4g), with residual %.4g\n",
          shape, static_cast<long>(m), MaxAbsDiff(y, ref), MaxAbsDiff(at::linear(xm, w), ref),
          MaxAbsDiff(y_res, ref_res));
    }
  }
  // A strided x (rows 8-element aligned) reads the same as its contiguous copy.
  const at::Tensor wide = Bf16Randn({2, k + 24}, device).narrow(1, 0, k);
  at::Tensor strided, packed;
  ASSERT_TRUE(CudaVectorLinear(wide, w, at::Tensor(), &strided));
  ASSERT_TRUE(CudaVectorLinear(wide.contiguous(), w, at::Tensor(), &packed));
  EXPECT_TRUE(at::equal(strided, packed));
}

// A fixed pass's attention: n new rows at slots [past, past + n) of a cache of `capacity` slots,
// the earlier slots visible, causal among the new rows, the rest masked.
struct AttentionInputs {
  at::Tensor q, keys, values, mask;  // mask: float [n, capacity]
};

AttentionInputs RandomAttention(int64_t n, int64_t heads, int64_t kv_heads, int64_t d,
                                int64_t capacity, int64_t past) {
  AttentionInputs in;
  in.q = at::randn({n, heads, d});
  in.keys = at::randn({kv_heads, capacity, d});
  in.values = at::randn({kv_heads, capacity, d});
  in.mask = at::full({n, capacity}, -std::numeric_limits<float>::infinity());
  in.mask.narrow(1, 0, past).zero_();
  for (int64_t r = 0; r < n; ++r) in.mask.narrow(0, r, 1).narrow(1, past, r + 1).zero_();
  return in;
}

// The kernel on `device` in `dtype`, the mask prepared as the fixed passes do.
at::Tensor KernelAttention(const AttentionInputs& in, at::ScalarType dtype, c10::Device device) {
  const int64_t group = in.q.size(1) / in.keys.size(0);
  at::Tensor out;
  EXPECT_TRUE(CudaFixedAttention(in.q.to(device, dtype), in.keys.to(device, dtype),
                                 in.values.to(device, dtype),
                                 in.mask.to(device, dtype).repeat({group, 1}),
                                 1.0 / std::sqrt(static_cast<double>(in.q.size(2))), &out));
  return out.defined() ? out.to(at::kCPU) : out;
}

// The CPU's composition in float of the same (rounded) inputs.
at::Tensor ReferenceAttention(const AttentionInputs& in, at::ScalarType dtype) {
  auto f = [&](const at::Tensor& t) { return F32(t.to(dtype)); };
  return Attention(f(in.q), f(in.keys), f(in.values), in.mask);
}

TEST(CudaOpsTest, FixedAttentionMatchesTheCompositionOverTheMaskedCapacity) {
  const c10::Device device = TestDevice();
  at::manual_seed(13);
  for (int64_t d : {64, 128}) {
    for (int64_t n : {1, 5, 17}) {
      // 200 slots: the last block of keys is partial, and the blocks past the new rows are
      // wholly masked.
      const AttentionInputs in = RandomAttention(n, 8, 2, d, 200, 90);
      const at::Tensor f32 = KernelAttention(in, at::kFloat, device);
      ASSERT_TRUE(f32.defined());
      EXPECT_LT(MaxAbsDiff(f32, ReferenceAttention(in, at::kFloat)), 2e-5) << d << " " << n;
      const at::Tensor bf16 = KernelAttention(in, at::kBFloat16, device);
      ASSERT_TRUE(bf16.defined());
      EXPECT_EQ(bf16.scalar_type(), at::kBFloat16);
      const at::Tensor ref = ReferenceAttention(in, at::kBFloat16);
      EXPECT_TRUE(WithinOneBf16Rounding(bf16, ref))
          << d << " " << n << ": " << MaxAbsDiff(bf16, ref);
    }
  }
}

// A row's attention is bit-identical alone and among 16 other rows.
TEST(CudaOpsTest, FixedAttentionGivesEachRowTheSameBitsWhateverTheRowsBesideIt) {
  const c10::Device device = TestDevice();
  at::manual_seed(17);
  AttentionInputs many = RandomAttention(17, 32, 8, 128, 1024, 700);
  for (int64_t r : {0, 5, 16}) {
    AttentionInputs one = many;
    one.q = many.q.narrow(0, r, 1);
    one.mask = many.mask.narrow(0, r, 1).contiguous();
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      const at::Tensor all = KernelAttention(many, dtype, device);
      const at::Tensor alone = KernelAttention(one, dtype, device);
      ASSERT_TRUE(all.defined() && alone.defined());
      EXPECT_TRUE(at::equal(all.narrow(0, r, 1), alone)) << "row " << r;
    }
  }
}

TEST(CudaOpsTest, KernelsDeclineWhatTheyCannotRead) {
  const c10::Device device = TestDevice();
  const ModelConfig c = Shape(true);
  const QkInputs in = RandomInputs(c, 3, at::kFloat);
  at::Tensor q, k, out;
  // CPU tensors, a non-float dtype, RoPE tables of the wrong shape, a row-strided last dimension.
  EXPECT_FALSE(
      CudaNormRopeQk(in.qkv, 4, 2, 64, in.q_norm, in.k_norm, 1e-6, in.cos, in.sin, &q, &k));
  EXPECT_FALSE(CudaNormRopeQk(in.qkv.to(device, at::kInt), 4, 2, 64, in.q_norm.to(device),
                              in.k_norm.to(device), 1e-6, in.cos.to(device), in.sin.to(device), &q,
                              &k));
  EXPECT_FALSE(CudaNormRopeQk(in.qkv.to(device), 4, 2, 64, in.q_norm.to(device),
                              in.k_norm.to(device), 1e-6, in.cos.to(device).narrow(0, 0, 2),
                              in.sin.to(device).narrow(0, 0, 2), &q, &k));
  EXPECT_FALSE(q.defined() || k.defined());
  const at::Tensor gu = at::randn({8, 4}, at::TensorOptions().device(device));
  EXPECT_FALSE(CudaSwiGlu(gu.t(), 4, &out));
  EXPECT_FALSE(CudaSwiGlu(gu.cpu(), 2, &out));
  // Products of more than 64 rows, of float, or of k not a multiple of 32 are cuBLAS's.
  const at::Tensor w = Bf16Randn({16, 64}, device);
  EXPECT_FALSE(CudaRowsLinear(Bf16Randn({65, 64}, device), w, at::Tensor(), &out));
  EXPECT_FALSE(CudaRowsLinear(Bf16Randn({2, 64}, device).to(at::kFloat), w.to(at::kFloat),
                              at::Tensor(), &out));
  EXPECT_FALSE(
      CudaRowsLinear(Bf16Randn({2, 48}, device), Bf16Randn({16, 48}, device), at::Tensor(), &out));
  // Vector products of more than 4 rows, of float, or of k not a multiple of 8 are cuBLAS's.
  EXPECT_FALSE(CudaVectorLinear(Bf16Randn({5, 64}, device), w, at::Tensor(), &out));
  EXPECT_FALSE(CudaVectorLinear(Bf16Randn({1, 64}, device).to(at::kFloat), w.to(at::kFloat),
                                at::Tensor(), &out));
  EXPECT_FALSE(CudaVectorLinear(Bf16Randn({1, 44}, device), Bf16Randn({16, 44}, device),
                                at::Tensor(), &out));
  EXPECT_FALSE(CudaVectorLinear(Bf16Randn({1, 64}, device), w, at::Tensor(), &out, 8));
  EXPECT_FALSE(CudaRowsLinear(Bf16Randn({1, 64}, device), w, at::Tensor(), &out, 6));
  EXPECT_FALSE(out.defined());
  // Attention: heads of 48, float heads of 256 (over 48 KiB staged), a mask not per group row.
  const AttentionInputs a48 = RandomAttention(2, 4, 2, 48, 64, 10);
  EXPECT_FALSE(CudaFixedAttention(a48.q.to(device), a48.keys.to(device), a48.values.to(device),
                                  at::Tensor(), 0.1, &out));
  const AttentionInputs a256 = RandomAttention(2, 4, 2, 256, 64, 10);
  EXPECT_FALSE(CudaFixedAttention(a256.q.to(device), a256.keys.to(device), a256.values.to(device),
                                  at::Tensor(), 0.1, &out));
  const AttentionInputs a = RandomAttention(2, 4, 2, 64, 64, 10);
  EXPECT_FALSE(CudaFixedAttention(a.q.to(device), a.keys.to(device), a.values.to(device),
                                  a.mask.to(device), 0.1, &out));  // [n, m], not [group * n, m]
  EXPECT_FALSE(out.defined());
}

}  // namespace
}  // namespace specdec::model
