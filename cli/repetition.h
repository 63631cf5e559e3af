// Repetition statistics of generated text: how much of a continuation repeats itself, the usual
// sign of a degenerate (looping) language model.
#ifndef SPECDEC_CLI_REPETITION_H_
#define SPECDEC_CLI_REPETITION_H_

#include <cstdint>
#include <span>

namespace specdec::cli {

struct NgramRepetition {
  int64_t ngrams = 0;    // n-gram positions in the sequence: max(0, length - n + 1)
  int64_t repeated = 0;  // positions whose n-gram already occurred at an earlier position
  double share() const { return ngrams > 0 ? static_cast<double>(repeated) / ngrams : 0.0; }
  NgramRepetition& operator+=(const NgramRepetition& o) {
    ngrams += o.ngrams;
    repeated += o.repeated;
    return *this;
  }
};

// Counts the repeated n-grams of `tokens` (n >= 1).
NgramRepetition CountRepeatedNgrams(std::span<const int32_t> tokens, int n);

}  // namespace specdec::cli

#endif  // SPECDEC_CLI_REPETITION_H_
