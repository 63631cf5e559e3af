// The greedy lossless check of the decoder tests: a method's tokens equal AR's, or first differ
// where AR's two best logits are within a stated tolerance (docs/design.md §2.6: a verify pass
// may round differently from a one-token step).
#ifndef SPECDEC_TESTS_COMMON_ENGINE_EXPECT_SAME_AS_AR_H_
#define SPECDEC_TESTS_COMMON_ENGINE_EXPECT_SAME_AS_AR_H_

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "common/model/transformer.h"

namespace specdec::testing_util {

// Top-2 logit gap of `target` after `prefix`.
inline double Top2Gap(const model::Transformer& target, const std::vector<int32_t>& prefix) {
  auto cache = target.NewCache();
  model::SequenceInput in{cache.get(), prefix};
  auto out = target.Forward(std::span<const model::SequenceInput>(&in, 1));
  auto top = at::topk((*out)[0].logits.select(0, 0), 2);
  return (std::get<0>(top)[0] - std::get<0>(top)[1]).item<double>();
}

// `got` equals `want` (AR's tokens after `prompt`), or diverges first where AR's top-2 gap is
// below `tie`; a divergence's gap is printed either way.
inline void ExpectSameAsAr(const model::Transformer& target, const std::vector<int32_t>& prompt,
                           const std::vector<int32_t>& want, const std::vector<int32_t>& got,
                           double tie, const std::string& what) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  if (i == want.size() && i == got.size()) return;
  std::vector<int32_t> prefix = prompt;
  prefix.insert(prefix.end(), want.begin(), want.begin() + i);
  const double gap = Top2Gap(target, prefix);
  std::printf("[near-tie] %s diverges at token %zu: AR top-2 logit gap %.3g (tolerance %.2g)\n",
              what.c_str(), i, gap, tie);
  EXPECT_LT(gap, tie) << what << " diverges from AR at token " << i << " with gap " << gap;
}

}  // namespace specdec::testing_util

#endif  // SPECDEC_TESTS_COMMON_ENGINE_EXPECT_SAME_AS_AR_H_
