// The fused attention kernel against the ATen formulation (ops.h Attention) on random data:
// several sequences with different cache lengths, causal, tree and bidirectional masks, grouped
// KV heads, f32 and bf16.
#include "common/model/attention_kernel.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/model/ops.h"

namespace specdec::model {
namespace {

constexpr int64_t kHeads = 4, kKvHeads = 2;

struct Case {
  int64_t past, n, capacity;
  std::vector<int32_t> parents;  // empty: causal
  bool bidirectional = false;    // every new row sees every new row (a DFlash block)
};

at::Tensor Mask(const Case& c) {
  at::Tensor mask = at::full({c.n, c.past + c.n}, -std::numeric_limits<float>::infinity());
  mask.narrow(1, 0, c.past).zero_();
  if (c.bidirectional) return mask.zero_();
  for (int64_t i = 0; i < c.n; ++i) {
    if (c.parents.empty()) {
      for (int64_t j = 0; j <= i; ++j) mask[i][c.past + j] = 0.f;
    } else {
      for (int64_t j = i; j >= 0; j = c.parents[j]) mask[i][c.past + j] = 0.f;
    }
  }
  return mask;
}

using Runner = void (*)(const AttentionProblem&, int64_t, int64_t);

// The kernel's view of case c: queries q [n, heads, dim], new keys and values [n, kv_heads, dim],
// caches k and v [kv_heads, capacity, dim], outputs out [n, heads * dim].
AttentionSequence Sequence(const Case& c, int64_t dim, const at::Tensor& q, const at::Tensor& nk,
                           const at::Tensor& nv, at::Tensor& k, at::Tensor& v, at::Tensor& out) {
  AttentionSequence s;
  s.q = q.data_ptr();
  s.q_row_stride = kHeads * dim;
  s.out = out.data_ptr();
  s.out_row_stride = kHeads * dim;
  s.new_keys = nk.data_ptr();
  s.new_values = nv.data_ptr();
  s.keys = k.data_ptr();
  s.values = v.data_ptr();
  s.capacity = c.capacity;
  s.past = c.past;
  s.n = c.n;
  s.tree_parents = c.parents.empty() ? nullptr : c.parents.data();
  s.bidirectional = c.bidirectional;
  return s;
}

// head_dim = dim, a multiple of the 16 lanes or not (the kernel pads rows to whole vectors).
void CheckAgainstAten(at::ScalarType dt, double tol, int64_t dim, Runner run = RunAttention,
                      bool pair_path = true) {
  at::manual_seed(7);
  const std::vector<Case> cases = {{0, 1, 4, {}},   {37, 1, 64, {}},
                                   {12, 5, 20, {}}, {30, 7, 40, {-1, -1, 0, 0, 1, 2, 2}},
                                   {5, 33, 64, {}}, {40, 16, 64, {}, true}};
  const auto opts = at::TensorOptions().dtype(dt);
  std::vector<at::Tensor> alive, new_k, new_v, keys, values, outs, expected;
  std::vector<AttentionSequence> seqs;
  for (const Case& c : cases) {
    at::Tensor k = at::randn({kKvHeads, c.capacity, dim}).to(dt);
    at::Tensor v = at::randn({kKvHeads, c.capacity, dim}).to(dt);
    at::Tensor nk = at::randn({c.n, kKvHeads, dim}).to(dt);
    at::Tensor nv = at::randn({c.n, kKvHeads, dim}).to(dt);
    at::Tensor q = at::randn({c.n, kHeads, dim}).to(dt);
    // Reference: the cache with the new rows written, then ATen attention.
    at::Tensor rk = k.clone(), rv = v.clone();
    rk.narrow(1, c.past, c.n).copy_(nk.transpose(0, 1));
    rv.narrow(1, c.past, c.n).copy_(nv.transpose(0, 1));
    const int64_t m = c.past + c.n;
    expected.push_back(
        Attention(q, rk.narrow(1, 0, m), rv.narrow(1, 0, m), Mask(c)).to(at::kFloat));
    at::Tensor out = at::zeros({c.n, kHeads * dim}, opts);
    seqs.push_back(Sequence(c, dim, q, nk, nv, k, v, out));
    alive.push_back(q);  // the kernel reads q through a raw pointer
    keys.push_back(k);
    values.push_back(v);
    new_k.push_back(nk);
    new_v.push_back(nv);
    outs.push_back(out);
  }
  AttentionProblem p{seqs,
                     kHeads,
                     kKvHeads,
                     dim,
                     dt == at::kFloat ? KernelDType::kF32 : KernelDType::kBF16,
                     static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim))),
                     pair_path};
  ASSERT_EQ(AttentionWorkItems(p), static_cast<int64_t>(cases.size()) * kKvHeads);
  // Split the items across calls the way a thread pool would.
  run(p, 0, 3);
  run(p, 3, AttentionWorkItems(p));
  for (size_t i = 0; i < cases.size(); ++i) {
    const double diff = (outs[i].to(at::kFloat) - expected[i]).abs().max().item<double>();
    EXPECT_LT(diff, tol) << "sequence " << i;
    // The new rows landed in the cache slots.
    EXPECT_TRUE(keys[i].narrow(1, cases[i].past, cases[i].n).equal(new_k[i].transpose(0, 1)));
    EXPECT_TRUE(values[i].narrow(1, cases[i].past, cases[i].n).equal(new_v[i].transpose(0, 1)));
  }
}

TEST(AttentionKernelTest, MatchesAtenInF32) {
  for (int64_t dim : {20, 64, 48, 128, 160}) {
    SCOPED_TRACE(dim);
    CheckAgainstAten(at::kFloat, 1e-5, dim);
  }
}

// ATen rounds scores and probabilities to bf16 between its matmuls; the kernel keeps the scores
// in float (and on the float path the probabilities too), so the two differ by bf16 rounding of
// O(1) outputs. Heads of 32, 64 and 128 take the pair path where the CPU has AVX-512 BF16, 20
// always the float one; the other tests cover each path on every CPU.
TEST(AttentionKernelTest, MatchesAtenInBf16) {
  for (int64_t dim : {20, 32, 64, 128}) {
    SCOPED_TRACE(dim);
    CheckAgainstAten(at::kBFloat16, 0.06, dim);
  }
}

TEST(AttentionKernelTest, FloatPathMatchesAtenInBf16) {
  for (int64_t dim : {32, 64, 128}) {
    SCOPED_TRACE(dim);
    CheckAgainstAten(at::kBFloat16, 0.06, dim, RunAttention, /*pair_path=*/false);
  }
}

TEST(AttentionKernelTest, PortablePairPathMatchesAtenInBf16) {
  for (int64_t dim : {32, 64, 128}) {
    SCOPED_TRACE(dim);
    CheckAgainstAten(at::kBFloat16, 0.06, dim, RunAttentionPortable);
  }
}

// One row's output, bit for bit, does not depend on the rows computed with it: a causal pass of
// n rows equals n one-row passes over the growing cache (what makes a verify pass commit exactly
// the tokens AR steps would, and a batched pass equal separate ones).
void CheckRowsIndependent(at::ScalarType dt, int64_t dim, Runner runner = RunAttention,
                          bool pair_path = true) {
  at::manual_seed(11);
  const int64_t past = 21, n = 13, capacity = 64;
  at::Tensor k = at::randn({kKvHeads, capacity, dim}).to(dt);
  at::Tensor v = at::randn({kKvHeads, capacity, dim}).to(dt);
  at::Tensor nk = at::randn({n, kKvHeads, dim}).to(dt);
  at::Tensor nv = at::randn({n, kKvHeads, dim}).to(dt);
  at::Tensor q = at::randn({n, kHeads, dim}).to(dt);
  const auto opts = at::TensorOptions().dtype(dt);
  const KernelDType kdt = dt == at::kFloat ? KernelDType::kF32 : KernelDType::kBF16;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  auto run = [&](at::Tensor keys, at::Tensor values, int64_t first, int64_t rows) {
    at::Tensor out = at::zeros({rows, kHeads * dim}, opts);
    AttentionSequence s;
    s.q = q.narrow(0, first, rows).data_ptr();
    s.q_row_stride = kHeads * dim;
    s.out = out.data_ptr();
    s.out_row_stride = kHeads * dim;
    s.new_keys = nk.narrow(0, first, rows).data_ptr();
    s.new_values = nv.narrow(0, first, rows).data_ptr();
    s.keys = keys.data_ptr();
    s.values = values.data_ptr();
    s.capacity = capacity;
    s.past = past + first;
    s.n = rows;
    std::vector<AttentionSequence> seqs = {s};
    AttentionProblem p{seqs, kHeads, kKvHeads, dim, kdt, scale, pair_path};
    runner(p, 0, AttentionWorkItems(p));
    return out;
  };
  const at::Tensor whole = run(k.clone(), v.clone(), 0, n);
  at::Tensor kc = k.clone(), vc = v.clone();
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor row = run(kc, vc, i, 1);
    EXPECT_TRUE(row.equal(whole.narrow(0, i, 1))) << "row " << i;
  }
}

TEST(AttentionKernelTest, ARowDoesNotDependOnTheRowsBesideIt) {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (int64_t dim : {20, 64, 128}) {
      SCOPED_TRACE(testing::Message() << dt << " dim " << dim);
      CheckRowsIndependent(dt, dim);
    }
  }
  for (int64_t dim : {32, 64}) {
    SCOPED_TRACE(testing::Message() << "dim " << dim << ", portable pairs and float path");
    CheckRowsIndependent(at::kBFloat16, dim, RunAttentionPortable);
    CheckRowsIndependent(at::kBFloat16, dim, RunAttention, /*pair_path=*/false);
  }
}

// A row of a token tree equals, bit for bit, the causal row of its context and its ancestors:
// the row AR decoding computes at its position once the ancestors are committed (so the greedy
// verification of a tree commits AR's tokens whatever the tree's shape).
void CheckTreeRowsEqualCausal(at::ScalarType dt, int64_t dim, bool pair_path) {
  at::manual_seed(13);
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 3, 3, 5, 4, -1, 10, 6, 12, 13, 2, 15};
  const int64_t past = 21, n = static_cast<int64_t>(parents.size()), capacity = 64;
  const at::Tensor k = at::randn({kKvHeads, capacity, dim}).to(dt);
  const at::Tensor v = at::randn({kKvHeads, capacity, dim}).to(dt);
  const at::Tensor nk = at::randn({n, kKvHeads, dim}).to(dt);
  const at::Tensor nv = at::randn({n, kKvHeads, dim}).to(dt);
  const at::Tensor q = at::randn({n, kHeads, dim}).to(dt);
  const KernelDType kdt = dt == at::kFloat ? KernelDType::kF32 : KernelDType::kBF16;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  auto run = [&](const Case& c, const at::Tensor& rq, const at::Tensor& rk, const at::Tensor& rv,
                 at::Tensor keys, at::Tensor values) {
    at::Tensor out = at::zeros({c.n, kHeads * dim}, at::TensorOptions().dtype(dt));
    std::vector<AttentionSequence> seqs = {Sequence(c, dim, rq, rk, rv, keys, values, out)};
    AttentionProblem p{seqs, kHeads, kKvHeads, dim, kdt, scale, pair_path};
    RunAttention(p, 0, AttentionWorkItems(p));
    return out;
  };
  const Case tree{past, n, capacity, parents};
  const at::Tensor whole = run(tree, q, nk, nv, k.clone(), v.clone());
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> ancestors;  // root first, without i
    for (int32_t j = parents[i]; j >= 0; j = parents[j]) ancestors.insert(ancestors.begin(), j);
    at::Tensor kc = k.clone(), vc = v.clone();
    for (size_t a = 0; a < ancestors.size(); ++a) {
      kc.select(1, past + a).copy_(nk[ancestors[a]]);
      vc.select(1, past + a).copy_(nv[ancestors[a]]);
    }
    const Case causal{past + static_cast<int64_t>(ancestors.size()), 1, capacity, {}};
    const at::Tensor row =
        run(causal, q.narrow(0, i, 1).contiguous(), nk.narrow(0, i, 1).contiguous(),
            nv.narrow(0, i, 1).contiguous(), kc, vc);
    EXPECT_TRUE(row.equal(whole.narrow(0, i, 1)))
        << "row " << i << " (depth " << ancestors.size() << ")";
  }
}

TEST(AttentionKernelTest, ATreeRowEqualsTheCausalRowOfItsAncestors) {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (int64_t dim : {20, 64}) {
      SCOPED_TRACE(testing::Message() << dt << " dim " << dim << ", float path");
      CheckTreeRowsEqualCausal(dt, dim, /*pair_path=*/false);
    }
  }
}

// The pair path's AVX-512 BF16 functions compute the portable loops' float operations: equal
// scores and float outputs (before rounding) bit for bit, over causal, tree and bidirectional rows,
// odd and even key counts.
TEST(AttentionKernelTest, NativePairPathEqualsPortable) {
  if (!AttentionKernelNative()) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  at::manual_seed(5);
  const std::vector<Case> cases = {{0, 1, 8, {}},   {36, 1, 64, {}},
                                   {15, 6, 32, {}}, {30, 7, 40, {-1, -1, 0, 0, 1, 2, 2}},
                                   {6, 33, 64, {}}, {41, 16, 64, {}, true}};
  for (int64_t dim : {32, 64, 128, 256}) {
    SCOPED_TRACE(dim);
    for (const Case& c : cases) {
      at::Tensor k = at::randn({kKvHeads, c.capacity, dim}).to(at::kBFloat16);
      at::Tensor v = at::randn({kKvHeads, c.capacity, dim}).to(at::kBFloat16);
      const at::Tensor nk = at::randn({c.n, kKvHeads, dim}).to(at::kBFloat16);
      const at::Tensor nv = at::randn({c.n, kKvHeads, dim}).to(at::kBFloat16);
      const at::Tensor q = at::randn({c.n, kHeads, dim}).to(at::kBFloat16);
      at::Tensor out = at::zeros({c.n, kHeads * dim}, at::kBFloat16);
      std::vector<AttentionSequence> seqs = {Sequence(c, dim, q, nk, nv, k, v, out)};
      AttentionProblem p{seqs,
                         kHeads,
                         kKvHeads,
                         dim,
                         KernelDType::kBF16,
                         static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)))};
      // Bits of floats that differ between the two.
      auto differ = [](const std::vector<float>& a, const std::vector<float>& b) {
        int64_t count = 0;
        for (size_t e = 0; e < a.size(); ++e)
          count += std::memcmp(&a[e], &b[e], sizeof(float)) != 0;
        return count;
      };
      const int64_t rows = c.n * (kHeads / kKvHeads);
      for (int64_t item = 0; item < AttentionWorkItems(p); ++item) {
        const AttentionPairTrace native = TraceAttentionPairs(p, item, true);
        const AttentionPairTrace portable = TraceAttentionPairs(p, item, false);
        ASSERT_EQ(native.scores.size(), static_cast<size_t>(rows * (c.past + c.n)));
        ASSERT_EQ(native.outputs.size(), static_cast<size_t>(rows * dim));
        ASSERT_EQ(portable.scores.size(), native.scores.size());
        ASSERT_EQ(portable.outputs.size(), native.outputs.size());
        EXPECT_EQ(differ(native.scores, portable.scores), 0)
            << "past " << c.past << " n " << c.n << " item " << item;
        EXPECT_EQ(differ(native.outputs, portable.outputs), 0)
            << "past " << c.past << " n " << c.n << " item " << item;
      }
    }
  }
}

// The float path on AVX-512 registers gives the bits of its AVX2 loops, over float and bf16
// caches, for heads of whole 64-element blocks and of a remainder of 16 (80 elements).
TEST(AttentionKernelTest, FloatPathOnAvx512EqualsItsAvx2Loops) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2")) {
    GTEST_SKIP() << "this CPU lacks AVX-512F or AVX2";
  }
  at::manual_seed(29);
  const std::vector<Case> cases = {{0, 1, 8, {}},   {200, 1, 256, {}},
                                   {15, 6, 32, {}}, {30, 7, 40, {-1, -1, 0, 0, 1, 2, 2}},
                                   {6, 33, 64, {}}, {41, 16, 64, {}, true}};
  for (const at::ScalarType cache : {at::kFloat, at::kBFloat16}) {
    for (int64_t dim : {64, 80, 128}) {
      SCOPED_TRACE(testing::Message() << "dim " << dim << ", cache " << cache);
      for (const Case& c : cases) {
        const at::Tensor k = at::randn({kKvHeads, c.capacity, dim}).to(cache);
        const at::Tensor v = at::randn({kKvHeads, c.capacity, dim}).to(cache);
        const at::Tensor nk = at::randn({c.n, kKvHeads, dim}).to(cache);
        const at::Tensor nv = at::randn({c.n, kKvHeads, dim}).to(cache);
        const at::Tensor q = at::randn({c.n, kHeads, dim}).to(cache);
        at::Tensor k512 = k.clone(), v512 = v.clone(), k2 = k.clone(), v2 = v.clone();
        at::Tensor out512 = at::zeros({c.n, kHeads * dim}, cache), out2 = at::zeros_like(out512);
        const AttentionSequence s512 = Sequence(c, dim, q, nk, nv, k512, v512, out512);
        const AttentionSequence s2 = Sequence(c, dim, q, nk, nv, k2, v2, out2);
        const KernelDType dt = cache == at::kFloat ? KernelDType::kF32 : KernelDType::kBF16;
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
        const AttentionProblem p512{std::span<const AttentionSequence>(&s512, 1),
                                    kHeads,
                                    kKvHeads,
                                    dim,
                                    dt,
                                    scale,
                                    /*pair_path=*/false};
        const AttentionProblem p2{std::span<const AttentionSequence>(&s2, 1),
                                  kHeads,
                                  kKvHeads,
                                  dim,
                                  dt,
                                  scale,
                                  /*pair_path=*/false};
        RunAttention(p512, 0, AttentionWorkItems(p512));
        RunAttentionAvx2(p2, 0, AttentionWorkItems(p2));
        EXPECT_TRUE(at::equal(out512, out2)) << "past " << c.past << ", n " << c.n;
        EXPECT_GT(out512.abs().sum().item<double>(), 0.0) << "past " << c.past << ", n " << c.n;
      }
    }
  }
}

// Float rows over a bf16 cache (float activations, LoadOptions::kv_dtype bf16): the new keys and
// values are stored rounded to bf16, and the outputs are bit for bit those of a float cache that
// holds the same rounded values.
TEST(AttentionKernelTest, FloatRowsOverABf16CacheEqualAFloatCacheOfRoundedValues) {
  at::manual_seed(23);
  constexpr int64_t kDim = 64;
  for (const Case& c : {Case{0, 1, 4, {}}, Case{37, 1, 64, {}}, Case{12, 5, 20, {}},
                        Case{30, 7, 40, {-1, -1, 0, 0, 1, 2, 2}}}) {
    const at::Tensor kb = at::randn({kKvHeads, c.capacity, kDim}).to(at::kBFloat16);
    const at::Tensor vb = at::randn({kKvHeads, c.capacity, kDim}).to(at::kBFloat16);
    const at::Tensor nk = at::randn({c.n, kKvHeads, kDim}), nv = at::randn({c.n, kKvHeads, kDim});
    const at::Tensor q = at::randn({c.n, kHeads, kDim});
    // The float cache holds the bf16 cache's values; its new rows come rounded.
    at::Tensor kf = kb.to(at::kFloat), vf = vb.to(at::kFloat);
    const at::Tensor nk_rounded = nk.to(at::kBFloat16).to(at::kFloat);
    const at::Tensor nv_rounded = nv.to(at::kBFloat16).to(at::kFloat);
    at::Tensor k_mixed = kb.clone(), v_mixed = vb.clone();
    at::Tensor out_mixed = at::zeros({c.n, kHeads * kDim}), out_float = at::zeros_like(out_mixed);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kDim)));
    const AttentionSequence mixed = Sequence(c, kDim, q, nk, nv, k_mixed, v_mixed, out_mixed);
    const AttentionSequence plain = Sequence(c, kDim, q, nk_rounded, nv_rounded, kf, vf, out_float);
    AttentionProblem pm{std::span<const AttentionSequence>(&mixed, 1),
                        kHeads,
                        kKvHeads,
                        kDim,
                        KernelDType::kF32,
                        scale,
                        true,
                        KernelDType::kBF16};
    AttentionProblem pf{std::span<const AttentionSequence>(&plain, 1),
                        kHeads,
                        kKvHeads,
                        kDim,
                        KernelDType::kF32,
                        scale};
    RunAttention(pm, 0, AttentionWorkItems(pm));
    RunAttention(pf, 0, AttentionWorkItems(pf));
    EXPECT_TRUE(at::equal(out_mixed, out_float)) << "past " << c.past << ", n " << c.n;
    EXPECT_TRUE(at::equal(k_mixed.to(at::kFloat), kf));
    EXPECT_TRUE(at::equal(v_mixed.to(at::kFloat), vf));
    // The comparison can fail: unrounded new rows give other outputs.
    at::Tensor out_unrounded = at::zeros_like(out_mixed), kf2 = kb.to(at::kFloat),
               vf2 = vb.to(at::kFloat);
    const AttentionSequence raw = Sequence(c, kDim, q, nk, nv, kf2, vf2, out_unrounded);
    AttentionProblem pr{std::span<const AttentionSequence>(&raw, 1),
                        kHeads,
                        kKvHeads,
                        kDim,
                        KernelDType::kF32,
                        scale};
    RunAttention(pr, 0, AttentionWorkItems(pr));
    EXPECT_FALSE(at::equal(out_unrounded, out_mixed));
  }
}

}  // namespace
}  // namespace specdec::model
