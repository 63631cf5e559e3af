// Verification rules: greedy equality, and distribution tests (chi-square, p-value threshold
// 1e-4) showing the committed tokens are distributed exactly as the target p; a deliberately
// biased verifier must fail the same test.
#include "common/engine/verify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "common/sampling/stats.h"

namespace specdec::engine {
namespace {

constexpr double kPValue = 1e-4;  // reject "same distribution" below this
constexpr int kSamples = 40000;
constexpr int kVocab = 6;

std::vector<float> Dist(std::vector<double> w) {
  double s = 0;
  for (double v : w) s += v;
  std::vector<float> out;
  for (double v : w) out.push_back(static_cast<float>(v / s));
  return out;
}

const std::vector<float> kP = Dist({0.30, 0.05, 0.25, 0.0, 0.15, 0.25});
const std::vector<float> kQ = Dist({0.10, 0.40, 0.20, 0.10, 0.15, 0.05});

// Second-level target distribution after token x (depends on x).
std::vector<float> PAfter(int x) {
  std::vector<double> w(kVocab);
  for (int i = 0; i < kVocab; ++i) w[i] = 1.0 + ((i * 7 + x * 3) % 5);
  return Dist(w);
}
std::vector<float> QAfter(int x) {
  std::vector<double> w(kVocab);
  for (int i = 0; i < kVocab; ++i) w[i] = 1.0 + ((i * 2 + x) % 3);
  return Dist(w);
}

double PValueOf(const std::vector<int64_t>& counts, const std::vector<double>& expected,
                const char* what) {
  const double p = sampling::ChiSquarePValue(counts, expected);
  std::printf("[chi-square] %-40s p-value %.4g over %d samples\n", what, p, kSamples);
  return p;
}

// Joint distribution over (first, second) committed token of one chain step with K=2 drafts,
// where a run that commits fewer than 2 tokens draws the second from the target (the next step).
std::vector<double> ExpectedJoint() {
  std::vector<double> e(kVocab * kVocab);
  for (int a = 0; a < kVocab; ++a) {
    auto p2 = PAfter(a);
    for (int b = 0; b < kVocab; ++b) e[a * kVocab + b] = kP[a] * p2[b];
  }
  return e;
}

using ChainVerifier = std::function<VerifyResult(std::span<const int32_t>, const ProbRows&,
                                                 const ProbRows&, sampling::Rng&)>;

std::vector<int64_t> RunChainJoint(const ChainVerifier& verify, Proposal proposal, uint64_t seed) {
  sampling::Rng rng(seed);
  std::vector<int64_t> counts(kVocab * kVocab, 0);
  for (int s = 0; s < kSamples; ++s) {
    // Draft two tokens from q (or the argmax for one-hot proposals).
    int32_t d1 =
        proposal == Proposal::kOneHot ? sampling::Argmax(kQ) : sampling::SampleFromProbs(kQ, rng);
    auto q2 = QAfter(d1);
    int32_t d2 =
        proposal == Proposal::kOneHot ? sampling::Argmax(q2) : sampling::SampleFromProbs(q2, rng);
    std::vector<int32_t> draft = {d1, d2};
    auto p2 = PAfter(d1);
    std::vector<float> p_rows(kP), q_rows(kQ);
    p_rows.insert(p_rows.end(), p2.begin(), p2.end());
    auto p3 = PAfter(d2);  // bonus distribution (not counted)
    p_rows.insert(p_rows.end(), p3.begin(), p3.end());
    q_rows.insert(q_rows.end(), q2.begin(), q2.end());
    VerifyResult r = verify(draft, ProbRows{p_rows, kVocab}, ProbRows{q_rows, kVocab}, rng);
    std::vector<int32_t> committed(draft.begin(), draft.begin() + r.num_accepted);
    committed.push_back(r.next_token);
    if (committed.size() < 2)
      committed.push_back(sampling::SampleFromProbs(PAfter(committed[0]), rng));
    ++counts[committed[0] * kVocab + committed[1]];
  }
  return counts;
}

// Rows are made on demand: a chain reads the rows up to its first rejection (or all K + 1).
TEST(VerifyChain, ReadsTargetRowsOnlyAsFarAsItVerifies) {
  // Point-mass rows: token 1, then 2, then 3, then 4.
  std::vector<float> rows(4 * 5, 0.f);
  for (int r = 0; r < 4; ++r) rows[r * 5 + r + 1] = 1.f;
  for (const bool greedy : {true, false}) {
    for (const auto& [draft, reached] : std::vector<std::pair<std::vector<int32_t>, int64_t>>{
             {{1, 2, 3}, 4}, {{1, 0, 3}, 2}, {{0, 2, 3}, 1}}) {
      std::vector<int64_t> prepared;
      ProbRows target{rows, 5, [&](int64_t r) { prepared.push_back(r); }};
      sampling::Rng rng(3);
      const VerifyResult result =
          VerifyChain(draft, target, ProbRows{}, Proposal::kOneHot, greedy, rng);
      EXPECT_EQ(result.num_accepted, reached - 1) << "greedy " << greedy;
      ASSERT_FALSE(prepared.empty());
      EXPECT_EQ(*std::max_element(prepared.begin(), prepared.end()), reached - 1)
          << "greedy " << greedy << ", accepted " << result.num_accepted;
    }
  }
}

TEST(VerifyChain, GreedyAcceptsLongestArgmaxPrefix) {
  sampling::Rng rng(1);
  // Rows are logits; argmaxes are 2, 0, 5.
  std::vector<float> rows = {0, 1, 3, 0, 0, 0, /**/ 4, 1, 0, 0, 0, 0, /**/ 0, 0, 0, 0, 0, 9};
  std::vector<int32_t> good = {2, 0};
  VerifyResult r = VerifyChain(good, ProbRows{rows, 6}, ProbRows{}, Proposal::kOneHot, true, rng);
  EXPECT_EQ(r.num_accepted, 2);
  EXPECT_EQ(r.next_token, 5);  // bonus
  std::vector<int32_t> bad = {2, 1};
  r = VerifyChain(bad, ProbRows{rows, 6}, ProbRows{}, Proposal::kOneHot, true, rng);
  EXPECT_EQ(r.num_accepted, 1);
  EXPECT_EQ(r.next_token, 0);  // correction
  std::vector<int32_t> none = {3, 0};
  r = VerifyChain(none, ProbRows{rows, 6}, ProbRows{}, Proposal::kOneHot, true, rng);
  EXPECT_EQ(r.num_accepted, 0);
  EXPECT_EQ(r.next_token, 2);
}

TEST(VerifyChain, SampledProposalsGiveTargetDistribution) {
  ChainVerifier v = [](auto d, const ProbRows& p, const ProbRows& q, sampling::Rng& rng) {
    return VerifyChain(d, p, q, Proposal::kSampled, false, rng);
  };
  EXPECT_GT(PValueOf(RunChainJoint(v, Proposal::kSampled, 7), ExpectedJoint(), "chain sampled"),
            kPValue);
}

TEST(VerifyChain, OneHotProposalsGiveTargetDistribution) {
  ChainVerifier v = [](auto d, const ProbRows& p, const ProbRows& q, sampling::Rng& rng) {
    return VerifyChain(d, p, q, Proposal::kOneHot, false, rng);
  };
  EXPECT_GT(PValueOf(RunChainJoint(v, Proposal::kOneHot, 8), ExpectedJoint(), "chain one-hot"),
            kPValue);
}

// The test has power: a verifier that resamples from p instead of the residual after a
// rejection (a classic bug) is caught.
TEST(VerifyChain, BiasedVerifierIsCaught) {
  ChainVerifier biased = [](std::span<const int32_t> d, const ProbRows& p, const ProbRows& q,
                            sampling::Rng& rng) {
    VerifyResult r;
    for (size_t i = 0; i < d.size(); ++i) {
      const double ratio = std::min(1.0, static_cast<double>(p.row(i)[d[i]]) / q.row(i)[d[i]]);
      if (rng.Uniform() < ratio) {
        ++r.num_accepted;
        continue;
      }
      r.next_token = sampling::SampleFromProbs(p.row(i), rng);  // wrong: should be the residual
      return r;
    }
    r.next_token = sampling::SampleFromProbs(p.row(d.size()), rng);
    return r;
  };
  EXPECT_LT(PValueOf(RunChainJoint(biased, Proposal::kSampled, 9), ExpectedJoint(),
                     "chain BIASED (must fail)"),
            kPValue);
}

// Tree: the root has 3 i.i.d. children from q, each child 2 i.i.d. children from q(.|child).
std::vector<int64_t> RunTreeJoint(Proposal proposal, uint64_t seed, bool bias = false) {
  sampling::Rng rng(seed);
  std::vector<int64_t> counts(kVocab * kVocab, 0);
  for (int s = 0; s < kSamples; ++s) {
    std::vector<int32_t> tokens, parents;
    std::vector<float> p_rows(kP), q_rows(kQ);
    std::vector<int32_t> root_kids;
    for (int c = 0; c < 3; ++c) {
      int32_t t = proposal == Proposal::kOneHot ? (c == 0   ? 0
                                                   : c == 1 ? 2
                                                            : 5)
                                                : sampling::SampleFromProbs(kQ, rng);
      tokens.push_back(t);
      parents.push_back(-1);
    }
    for (int c = 0; c < 3; ++c) {
      auto q2 = QAfter(tokens[c]);
      for (int g = 0; g < 2; ++g) {
        int32_t t = proposal == Proposal::kOneHot ? g * 3 : sampling::SampleFromProbs(q2, rng);
        tokens.push_back(t);
        parents.push_back(c);
      }
    }
    // Rows: root, then one per node (p after that node's path).
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::vector<float> p, q;
      if (parents[i] < 0) {
        p = PAfter(tokens[i]);
        q = QAfter(tokens[i]);
      } else {
        p = PAfter(tokens[i] + 1 < kVocab ? tokens[i] + 1 : 0);  // any path-dependent row
        q = QAfter(tokens[i]);
      }
      p_rows.insert(p_rows.end(), p.begin(), p.end());
      q_rows.insert(q_rows.end(), q.begin(), q.end());
    }
    VerifyResult r;
    if (bias) {
      // Wrong: accept the first child with min(1, p/q), no multi-round residual.
      r = VerifyTree(std::span(tokens).first(1), std::span(parents).first(1),
                     ProbRows{std::span(p_rows).first(2 * kVocab), kVocab},
                     ProbRows{std::span(q_rows).first(2 * kVocab), kVocab}, proposal, false, rng);
      if (r.num_accepted == 0) r.next_token = sampling::SampleFromProbs(kP, rng);
    } else {
      r = VerifyTree(tokens, parents, ProbRows{p_rows, kVocab}, ProbRows{q_rows, kVocab}, proposal,
                     false, rng);
    }
    std::vector<int32_t> committed;
    for (int32_t n : r.accepted_nodes) committed.push_back(tokens[n]);
    committed.push_back(r.next_token);
    if (committed.size() < 2)
      committed.push_back(sampling::SampleFromProbs(PAfter(committed[0]), rng));
    ++counts[committed[0] * kVocab + committed[1]];
  }
  return counts;
}

TEST(VerifyTree, SampledSiblingsGiveTargetDistribution) {
  EXPECT_GT(PValueOf(RunTreeJoint(Proposal::kSampled, 11), ExpectedJoint(), "tree sampled"),
            kPValue);
}

TEST(VerifyTree, OneHotSiblingsGiveTargetDistribution) {
  EXPECT_GT(PValueOf(RunTreeJoint(Proposal::kOneHot, 12), ExpectedJoint(), "tree one-hot"),
            kPValue);
}

TEST(VerifyTree, BiasedTreeVerifierIsCaught) {
  EXPECT_LT(PValueOf(RunTreeJoint(Proposal::kSampled, 13, /*bias=*/true), ExpectedJoint(),
                     "tree BIASED (must fail)"),
            kPValue);
}

TEST(VerifyTree, GreedyFollowsArgmaxPath) {
  sampling::Rng rng(1);
  // Nodes: 0:(tok 1, root) 1:(tok 2, root) 2:(tok 3, parent 1) 3:(tok 4, parent 2)
  std::vector<int32_t> tokens = {1, 2, 3, 4}, parents = {-1, -1, 1, 2};
  auto onehot = [](int t) {
    std::vector<float> v(6, 0.f);
    v[t] = 1.f;
    return v;
  };
  std::vector<float> rows;
  for (int t : {2, 0, 3, 5, 0}) {  // root argmax 2 -> node 1; node1 argmax 3 -> node 2; node2 -> 5
    auto r = onehot(t);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  VerifyResult r =
      VerifyTree(tokens, parents, ProbRows{rows, 6}, ProbRows{}, Proposal::kOneHot, true, rng);
  EXPECT_EQ(r.accepted_nodes, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.next_token, 5);
}

}  // namespace
}  // namespace specdec::engine
