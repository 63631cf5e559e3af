// NGRAM drafting (prompt lookup): the drafter side that proposes the tokens that followed the
// latest earlier occurrence of the sequence's last n tokens, from the prompt and the output so
// far. No model, almost no cost; its proposals are point masses (verified one-hot, lossless at
// any temperature). Torch-free; the same drafter serves the in-process engine and the router.
#ifndef SPECDEC_COMMON_ENGINE_NGRAM_DRAFTER_H_
#define SPECDEC_COMMON_ENGINE_NGRAM_DRAFTER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "common/engine/step_loop.h"

namespace specdec::engine {

// Matches suffixes of `max_n` down to `min_n` tokens. Not thread-safe.
class NgramDrafter final : public DrafterSide {
 public:
  explicit NgramDrafter(int32_t max_n = 3, int32_t min_n = 1) : max_n_(max_n), min_n_(min_n) {}

  absl::Status Open(std::span<const int32_t> prompt) override;
  // Up to shape.length tokens; none when no suffix of the sequence occurred before.
  absl::StatusOr<Draft> Propose(int32_t last, const DraftShape& shape) override;
  absl::Status Accept(const StepResult& step) override;

  // The continuation of `tokens`' longest matching suffix (n in [min_n, max_n]) at its latest
  // earlier occurrence, at most `length` tokens; empty when nothing matches.
  static std::vector<int32_t> Lookup(std::span<const int32_t> tokens, int32_t max_n, int32_t min_n,
                                     int32_t length);

 private:
  const int32_t max_n_, min_n_;
  std::vector<int32_t> history_;  // the prompt and every committed token before `root_`
  int32_t root_ = -1;             // the last token of the latest proposal's context
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_NGRAM_DRAFTER_H_
