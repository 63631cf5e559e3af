#include "common/engine/verify.h"

#include <algorithm>
#include <vector>

namespace specdec::engine {
namespace {

// Samples from max(0, p - q) renormalized; falls back to p when the residual has no mass (p == q).
int32_t SampleResidual(std::span<const float> p, std::span<const float> q, sampling::Rng& rng) {
  std::vector<float> r(p.size());
  double mass = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    r[i] = std::max(0.0f, p[i] - q[i]);
    mass += r[i];
  }
  if (mass <= 0) return sampling::SampleFromProbs(p, rng);
  for (float& v : r) v = static_cast<float>(v / mass);
  return sampling::SampleFromProbs(r, rng);
}

// Samples from p with token x removed, renormalized (rejection of a one-hot proposal).
int32_t SampleWithout(std::span<const float> p, int32_t x, sampling::Rng& rng) {
  std::vector<float> r(p.begin(), p.end());
  const double rest = 1.0 - r[x];
  r[x] = 0;
  if (rest <= 0) return sampling::SampleFromProbs(p, rng);
  for (float& v : r) v = static_cast<float>(v / rest);
  return sampling::SampleFromProbs(r, rng);
}

// Accepts draft token x against p (and q for sampled proposals).
bool Accept(std::span<const float> p, std::span<const float> q, int32_t x, Proposal proposal,
            sampling::Rng& rng) {
  const double px = p[x];
  if (proposal == Proposal::kOneHot) return rng.Uniform() < px;
  const double qx = q[x];
  if (qx <= 0) return px > 0;  // a proposal q could not have made; accept only if p allows it
  return rng.Uniform() < std::min(1.0, px / qx);
}

}  // namespace

VerifyResult VerifyChain(std::span<const int32_t> draft, const ProbRows& target,
                         const ProbRows& draft_probs, Proposal proposal, bool greedy,
                         sampling::Rng& rng) {
  VerifyResult r;
  const int32_t k = static_cast<int32_t>(draft.size());
  for (int32_t i = 0; i < k; ++i) {
    std::span<const float> p = target.row(i);
    if (greedy) {
      const int32_t best = sampling::Argmax(p);
      if (draft[i] != best) {
        r.next_token = best;
        return r;
      }
      ++r.num_accepted;
      continue;
    }
    std::span<const float> q =
        proposal == Proposal::kSampled ? draft_probs.row(i) : std::span<const float>();
    if (Accept(p, q, draft[i], proposal, rng)) {
      ++r.num_accepted;
      continue;
    }
    r.next_token = proposal == Proposal::kSampled ? SampleResidual(p, q, rng)
                                                  : SampleWithout(p, draft[i], rng);
    return r;
  }
  std::span<const float> last = target.row(k);
  r.next_token = greedy ? sampling::Argmax(last) : sampling::SampleFromProbs(last, rng);
  return r;
}

VerifyResult VerifyTree(std::span<const int32_t> tokens, std::span<const int32_t> parents,
                        const ProbRows& target, const ProbRows& draft_probs, Proposal proposal,
                        bool greedy, sampling::Rng& rng) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  // children[i + 1] lists the children of node i; children[0] those of the context.
  std::vector<std::vector<int32_t>> children(n + 1);
  for (int32_t i = 0; i < n; ++i) children[parents[i] + 1].push_back(i);

  VerifyResult r;
  int32_t row = 0;  // target row of the current node (0 = committed context)
  std::vector<float> p;
  while (true) {
    std::span<const float> p_row = target.row(row);
    const auto& kids = children[row];
    if (greedy) {
      const int32_t best = sampling::Argmax(p_row);
      auto it =
          std::find_if(kids.begin(), kids.end(), [&](int32_t c) { return tokens[c] == best; });
      if (it == kids.end()) {
        r.next_token = best;
        return r;
      }
      r.accepted_nodes.push_back(*it);
      ++r.num_accepted;
      row = *it + 1;
      continue;
    }
    p.assign(p_row.begin(), p_row.end());
    std::span<const float> q =
        proposal == Proposal::kSampled ? draft_probs.row(row) : std::span<const float>();
    int32_t chosen = -1;
    for (int32_t c : kids) {
      const int32_t x = tokens[c];
      if (Accept(p, q, x, proposal, rng)) {
        chosen = c;
        break;
      }
      // Residual for the next sibling: max(0, p - q) for sampled siblings, p without x for
      // one-hot ones (distinct one-hot siblings = recursive rejection without replacement).
      double mass = 0;
      if (proposal == Proposal::kSampled) {
        for (size_t v = 0; v < p.size(); ++v) {
          p[v] = std::max(0.0f, p[v] - q[v]);
          mass += p[v];
        }
      } else {
        p[x] = 0;
        for (float v : p) mass += v;
      }
      if (mass <= 0) {
        // p == q (or p was exactly the rejected point masses): p itself is the residual.
        p.assign(p_row.begin(), p_row.end());
        mass = 1;
      }
      for (float& v : p) v = static_cast<float>(v / mass);
    }
    if (chosen < 0) {
      r.next_token = sampling::SampleFromProbs(p, rng);
      return r;
    }
    r.accepted_nodes.push_back(chosen);
    ++r.num_accepted;
    row = chosen + 1;
  }
}

}  // namespace specdec::engine
