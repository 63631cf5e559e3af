// A verify's target rows as the verification rules read them (verify.h): the raw logits when
// greedy, otherwise each row warped by the request's sampling parameters (a softmax over the
// vocabulary, after temperature, top-k and top-p) on its first read. A chain rejected at its
// first token reads two rows of its K + 1, so the rest are never warped. Torch-free.
#ifndef SPECDEC_COMMON_ENGINE_WARPED_ROWS_H_
#define SPECDEC_COMMON_ENGINE_WARPED_ROWS_H_

#include <cstdint>
#include <vector>

#include "common/engine/verify.h"
#include "common/sampling/sampler.h"

namespace specdec::engine {

class WarpedRows {
 public:
  // `logits`: [rows, vocab] row-major. `params` must outlive this object.
  WarpedRows(std::vector<float> logits, int64_t vocab, const sampling::SamplingParams& params);

  // The rows for VerifyChain / VerifyTree; valid while this object lives.
  ProbRows View();
  // Rows warped so far.
  int64_t warped_rows() const { return warped_count_; }

 private:
  void Warp(int64_t row);

  std::vector<float> logits_, probs_;
  int64_t vocab_;
  const sampling::SamplingParams& params_;
  std::vector<bool> warped_;
  int64_t warped_count_ = 0;
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_WARPED_ROWS_H_
