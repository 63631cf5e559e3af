// DySpec dynamic token-tree construction (docs/design.md §2.3), independent of how draft
// distributions are computed.
#ifndef SPECDEC_COMMON_ENGINE_DYSPEC_TREE_H_
#define SPECDEC_COMMON_ENGINE_DYSPEC_TREE_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sampling/sampler.h"

namespace specdec::engine {

// A draft tree below a root (the last committed token). Node i holds tokens[i]; parents[i] is its
// parent node or -1 for a child of the root; depths[i] is 1 for the root's children. Nodes are in
// creation order, so a parent always precedes its children.
struct DraftTree {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;
  std::vector<int32_t> depths;
  std::vector<double> estimates;  // product of draft probabilities along the path
  // Draft distribution at the root (dists[0]) and after node i (dists[i + 1]); empty for nodes
  // that were never expanded. These are the q the children were drawn from.
  std::vector<std::vector<float>> dists;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  // Tokens on the path from the root's child down to `node` (inclusive).
  std::vector<int32_t> Path(int32_t node) const;
};

struct TreeParams {
  int32_t budget = 16;    // nodes to create (excluding the root)
  int32_t max_depth = 8;  // no node deeper than this
  float threshold = 0.f;  // > 0: layer-wise variant keeping children with estimate > threshold
  // Greedy (T=0): children are the draft's top candidates in order. Sampling: children are drawn
  // i.i.d. from the node's distribution (duplicates allowed), as the SpecInfer rule expects.
  bool greedy = true;
};

// Computes the draft distributions after each of `nodes` (-1 = the root) of `tree`; returns one
// probability vector per requested node, in order.
using DraftDistFn = std::function<absl::StatusOr<std::vector<std::vector<float>>>(
    const DraftTree& tree, std::span<const int32_t> nodes)>;

// Builds a tree. Heap variant (threshold == 0): best-first expansion keyed by the estimate of a
// node's next child; a node's distribution is computed lazily the first time it is popped. The
// estimate of a node's next child is its estimate times the largest draft probability among
// tokens not yet drawn at that node. Threshold variant: one DraftDistFn call per layer.
absl::StatusOr<DraftTree> BuildDyspecTree(const TreeParams& params, const DraftDistFn& dist,
                                          sampling::Rng& rng);

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_DYSPEC_TREE_H_
