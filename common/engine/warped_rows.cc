#include "common/engine/warped_rows.h"

#include <span>
#include <utility>

namespace specdec::engine {

WarpedRows::WarpedRows(std::vector<float> logits, int64_t vocab,
                       const sampling::SamplingParams& params)
    : logits_(std::move(logits)), vocab_(vocab), params_(params) {
  if (params_.temperature == 0.f || vocab_ <= 0) return;  // greedy: only the argmax matters
  probs_.resize(logits_.size());
  warped_.assign(logits_.size() / static_cast<size_t>(vocab_), false);
}

ProbRows WarpedRows::View() {
  if (probs_.empty()) return ProbRows{logits_, vocab_};
  return ProbRows{probs_, vocab_, [this](int64_t row) { Warp(row); }};
}

void WarpedRows::Warp(int64_t row) {
  if (warped_[row]) return;
  sampling::WarpedProbsInto(std::span<const float>(logits_).subspan(row * vocab_, vocab_), params_,
                            std::span<float>(probs_).subspan(row * vocab_, vocab_));
  warped_[row] = true;
  ++warped_count_;
}

}  // namespace specdec::engine
