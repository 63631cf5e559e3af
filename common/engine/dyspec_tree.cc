#include "common/engine/dyspec_tree.h"

#include <algorithm>
#include <queue>
#include <unordered_set>

#include "common/util/status_macros.h"

namespace specdec::engine {
namespace {

// Per-node expansion state: which tokens were already drawn as children.
struct Expansion {
  std::unordered_set<int32_t> drawn;
  std::vector<int32_t> order;  // tokens by descending probability (lazily sorted)
  size_t cursor = 0;           // first entry of `order` not yet drawn
};

// Keeps the `k` most probable tokens, best first (a node never gets more children than the
// tree budget, so the rest of the vocabulary is never needed).
void Rank(const std::vector<float>& q, size_t k, Expansion* e) {
  std::vector<int32_t> all(q.size());
  for (size_t i = 0; i < q.size(); ++i) all[i] = static_cast<int32_t>(i);
  k = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + k, all.end(),
                    [&](int32_t a, int32_t b) { return q[a] > q[b] || (q[a] == q[b] && a < b); });
  all.resize(k);
  e->order = std::move(all);
}

// Largest probability among tokens not yet drawn at this node (0 when exhausted).
double NextBest(const std::vector<float>& q, Expansion* e) {
  while (e->cursor < e->order.size() && e->drawn.count(e->order[e->cursor])) ++e->cursor;
  return e->cursor < e->order.size() ? q[e->order[e->cursor]] : 0.0;
}

}  // namespace

std::vector<int32_t> DraftTree::Path(int32_t node) const {
  std::vector<int32_t> path;
  for (int32_t n = node; n >= 0; n = parents[n]) path.push_back(tokens[n]);
  std::reverse(path.begin(), path.end());
  return path;
}

absl::StatusOr<DraftTree> BuildDyspecTree(const TreeParams& params, const DraftDistFn& dist,
                                          sampling::Rng& rng) {
  DraftTree tree;
  if (params.budget <= 0 || params.max_depth <= 0) return tree;
  tree.dists.emplace_back();
  const int32_t root = -1;
  ASSIGN_OR_RETURN(auto root_dist, dist(tree, std::span<const int32_t>(&root, 1)));
  tree.dists[0] = std::move(root_dist[0]);
  std::vector<Expansion> exp(1);
  Rank(tree.dists[0], params.budget, &exp[0]);

  // Adds a child of `node` (-1 = root), drawn from that node's distribution.
  auto add_child = [&](int32_t node) {
    const std::vector<float>& q = tree.dists[node + 1];
    Expansion& e = exp[node + 1];
    int32_t tok;
    if (params.greedy) {
      NextBest(q, &e);
      if (e.cursor >= e.order.size()) return -1;  // no candidate left
      tok = e.order[e.cursor];
    } else {
      tok = sampling::SampleFromProbs(q, rng);
    }
    e.drawn.insert(tok);
    const double parent_est = node < 0 ? 1.0 : tree.estimates[node];
    tree.tokens.push_back(tok);
    tree.parents.push_back(node);
    tree.depths.push_back(node < 0 ? 1 : tree.depths[node] + 1);
    tree.estimates.push_back(parent_est * q[tok]);
    tree.dists.emplace_back();
    exp.emplace_back();
    return tree.size() - 1;
  };

  if (params.threshold > 0) {
    std::vector<int32_t> frontier = {-1};
    for (int32_t depth = 1; depth <= params.max_depth && !frontier.empty(); ++depth) {
      std::vector<int32_t> next;
      for (int32_t v : frontier) {
        const std::vector<float>& q = tree.dists[v + 1];
        const double est = v < 0 ? 1.0 : tree.estimates[v];
        // Children whose estimate passes the threshold (at least one below the root).
        int32_t want = 0;
        for (float p : q) want += (est * p > params.threshold);
        if (v < 0) want = std::max(want, 1);
        for (int32_t i = 0; i < want && tree.size() < params.budget; ++i) {
          const int32_t c = add_child(v);
          if (c < 0) break;
          next.push_back(c);
        }
      }
      if (tree.size() >= params.budget || depth == params.max_depth || next.empty()) break;
      ASSIGN_OR_RETURN(auto dists, dist(tree, next));
      for (size_t i = 0; i < next.size(); ++i) {
        tree.dists[next[i] + 1] = std::move(dists[i]);
        Rank(tree.dists[next[i] + 1], params.budget, &exp[next[i] + 1]);
      }
      frontier = std::move(next);
    }
    return tree;
  }

  // Heap variant. Entries: (priority, node, expanded?). An unexpanded node is pushed with its
  // own estimate, an upper bound on its best child's estimate; when popped, its distribution is
  // computed and it is re-pushed with the exact priority.
  using Entry = std::tuple<double, int32_t, bool>;
  std::priority_queue<Entry> heap;
  heap.push({NextBest(tree.dists[0], &exp[0]), -1, true});
  while (tree.size() < params.budget && !heap.empty()) {
    auto [priority, v, expanded] = heap.top();
    heap.pop();
    if (priority <= 0) break;
    if (!expanded) {
      ASSIGN_OR_RETURN(auto d, dist(tree, std::span<const int32_t>(&v, 1)));
      tree.dists[v + 1] = std::move(d[0]);
      Rank(tree.dists[v + 1], params.budget, &exp[v + 1]);
      heap.push({tree.estimates[v] * NextBest(tree.dists[v + 1], &exp[v + 1]), v, true});
      continue;
    }
    const int32_t child = add_child(v);
    if (child < 0) continue;
    if (tree.depths[child] < params.max_depth) heap.push({tree.estimates[child], child, false});
    const double est = v < 0 ? 1.0 : tree.estimates[v];
    heap.push({est * NextBest(tree.dists[v + 1], &exp[v + 1]), v, true});
  }
  return tree;
}

}  // namespace specdec::engine
