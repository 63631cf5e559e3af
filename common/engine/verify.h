// Lossless verification rules of speculative decoding (docs/design.md §2.1), on plain probability
// rows.
//
// All functions take *warped* distributions: the target's p and the drafter's q after the same
// temperature / top-k / top-p (sampling::WarpedProbs). With greedy set, p rows only need their
// argmax and no randomness is consumed, so greedy output equals AR greedy output exactly.
#ifndef SPECDEC_COMMON_ENGINE_VERIFY_H_
#define SPECDEC_COMMON_ENGINE_VERIFY_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/sampling/sampler.h"

namespace specdec::engine {

// A read-only row-major [rows, vocab] matrix of probabilities (or logits for greedy use).
// `prepare`, when set, makes row i of `data` just before each read of it: a verify's target rows
// are warped only as far as the verification reads them (a chain rejected at its first token
// reads two rows of its K + 1).
struct ProbRows {
  std::span<const float> data;
  int64_t vocab = 0;
  std::function<void(int64_t)> prepare;
  int64_t rows() const { return vocab == 0 ? 0 : static_cast<int64_t>(data.size()) / vocab; }
  std::span<const float> row(int64_t i) const {
    if (prepare) prepare(i);
    return data.subspan(i * vocab, vocab);
  }
  bool empty() const { return data.empty(); }
};

struct VerifyResult {
  // Chain: number of draft tokens accepted. Tree: number of nodes on the accepted path.
  int32_t num_accepted = 0;
  // Tree only: the accepted nodes, root child first (indices into the tree's node list).
  std::vector<int32_t> accepted_nodes;
  // The token committed after the accepted ones: the correction at the first rejection, or the
  // bonus token after a fully accepted chain / at a leaf.
  int32_t next_token = -1;
};

enum class Proposal {
  kSampled,  // draft tokens were drawn from q: accept with min(1, p/q), residual max(0, p-q)
  kOneHot,   // draft tokens are point masses (e.g. drafter argmax): accept with p(x), residual p\x
};

// Verifies a chain of K draft tokens. `target` has K+1 rows: row i is p at the position of
// draft[i], row K the distribution after the whole chain. `draft` has K rows of q for kSampled
// (ignored for kOneHot and greedy).
VerifyResult VerifyChain(std::span<const int32_t> draft, const ProbRows& target,
                         const ProbRows& draft_probs, Proposal proposal, bool greedy,
                         sampling::Rng& rng);

// Verifies a token tree. Node i holds tokens[i]; parents[i] is its parent node or -1 for a child
// of the committed context; siblings are tried in index order. `target` has n+1 rows: row 0 is p
// after the committed context, row i+1 is p after node i. For kSampled, `draft_probs` has n+1
// rows laid out the same way: the q each node's children were drawn from (i.i.d.; duplicates
// allowed), verified with the multi-round rule of SpecInfer.
VerifyResult VerifyTree(std::span<const int32_t> tokens, std::span<const int32_t> parents,
                        const ProbRows& target, const ProbRows& draft_probs, Proposal proposal,
                        bool greedy, sampling::Rng& rng);

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_VERIFY_H_
