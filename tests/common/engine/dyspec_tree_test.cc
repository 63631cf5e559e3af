#include "common/engine/dyspec_tree.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace specdec::engine {
namespace {

// A fake draft model: the distribution after a path depends only on its last token.
std::vector<float> DistAfter(int32_t last) {
  std::vector<float> q = {0.05f, 0.05f, 0.05f, 0.05f, 0.05f};
  q[(last + 1) % 5] = 0.6f;
  q[(last + 2) % 5] = 0.2f;
  return q;
}

DraftDistFn FakeDist(int* calls, int* max_batch) {
  return [calls, max_batch](
             const DraftTree& tree,
             std::span<const int32_t> nodes) -> absl::StatusOr<std::vector<std::vector<float>>> {
    ++*calls;
    *max_batch = std::max<int>(*max_batch, static_cast<int>(nodes.size()));
    std::vector<std::vector<float>> out;
    for (int32_t n : nodes) out.push_back(DistAfter(n < 0 ? 0 : tree.tokens[n]));
    return out;
  };
}

TEST(DyspecTree, GreedyHeapExpandsBestEstimatesFirst) {
  int calls = 0, max_batch = 0;
  sampling::Rng rng(1);
  TreeParams p;
  p.budget = 6;
  p.max_depth = 4;
  p.greedy = true;
  auto tree = BuildDyspecTree(p, FakeDist(&calls, &max_batch), rng);
  ASSERT_TRUE(tree.ok()) << tree.status();
  ASSERT_EQ(tree->size(), 6);
  // The top chain from root (token 0): 1 (0.6), 2 (0.36), 3 (0.216) ... must be present.
  EXPECT_EQ(tree->tokens[0], 1);
  EXPECT_NEAR(tree->estimates[0], 0.6, 1e-6);
  for (int i = 0; i < tree->size(); ++i) {
    const int par = tree->parents[i];
    EXPECT_LT(par, i);
    const double parent_est = par < 0 ? 1.0 : tree->estimates[par];
    const int parent_tok = par < 0 ? 0 : tree->tokens[par];
    EXPECT_NEAR(tree->estimates[i], parent_est * DistAfter(parent_tok)[tree->tokens[i]], 1e-6);
    EXPECT_EQ(tree->depths[i], par < 0 ? 1 : tree->depths[par] + 1);
  }
  // Best-first: every created node's estimate is >= every estimate left unexpanded is hard to
  // state directly; check the chosen set is the 6 highest-estimate nodes of the full tree.
  std::vector<double> ests = tree->estimates;
  std::sort(ests.rbegin(), ests.rend());
  EXPECT_NEAR(ests[0], 0.6, 1e-6);
  EXPECT_NEAR(ests[1], 0.36, 1e-6);
  EXPECT_NEAR(ests[2], 0.216, 1e-6);
  EXPECT_NEAR(ests[3], 0.2, 1e-6);
  EXPECT_EQ(max_batch, 1);
}

TEST(DyspecTree, ThresholdVariantUsesOneCallPerLayer) {
  int calls = 0, max_batch = 0;
  sampling::Rng rng(1);
  TreeParams p;
  p.budget = 64;
  p.max_depth = 3;
  p.threshold = 0.1f;
  auto tree = BuildDyspecTree(p, FakeDist(&calls, &max_batch), rng);
  ASSERT_TRUE(tree.ok());
  // Layer 1: 0.6, 0.2 pass. Layer 2: 0.36, 0.12 (under 0.6), 0.12 (under 0.2); 0.04 fails.
  // Layer 3: 0.216, under 0.36; 0.12*0.6=0.072 fails...
  for (int i = 0; i < tree->size(); ++i) EXPECT_GT(tree->estimates[i], 0.1);
  EXPECT_EQ(tree->size(), 6);
  EXPECT_EQ(calls, 3);  // root + one per layer below the last
  EXPECT_GT(max_batch, 1);
}

TEST(DyspecTree, SampledChildrenComeFromTheNodeDistribution) {
  int calls = 0, max_batch = 0;
  sampling::Rng rng(5);
  TreeParams p;
  p.budget = 3;
  p.max_depth = 1;
  p.greedy = false;
  std::map<int, int> counts;
  for (int s = 0; s < 2000; ++s) {
    auto tree = BuildDyspecTree(p, FakeDist(&calls, &max_batch), rng);
    ASSERT_TRUE(tree.ok());
    ASSERT_EQ(tree->size(), 3);
    for (int t : tree->tokens) ++counts[t];
  }
  // 6000 draws from DistAfter(0): token 1 has 0.6.
  EXPECT_NEAR(counts[1] / 6000.0, 0.6, 0.03);
  EXPECT_NEAR(counts[2] / 6000.0, 0.2, 0.03);
}

}  // namespace
}  // namespace specdec::engine
