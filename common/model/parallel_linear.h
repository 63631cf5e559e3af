// The matrix products of linear_kernel.h and linear_f32_kernel.h over the intra-op threads.
// Torch-free.
#ifndef SPECDEC_COMMON_MODEL_PARALLEL_LINEAR_H_
#define SPECDEC_COMMON_MODEL_PARALLEL_LINEAR_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "common/model/linear_f32_kernel.h"
#include "common/model/linear_kernel.h"

namespace specdec::model {

// `p` (every output, all rows) split over the threads by BalancedParallelFor in blocks of
// outputs, so that even a small model's products (256 outputs) take two threads and the threads
// finish together. Which thread computes an output changes none of its sums.
void RunLinearParallel(const LinearProblem& p);
void RunLinearF32Parallel(const LinearF32Problem& p);

// The split both use: run(o0, n) for the blocks [o0, o0 + n) of `out` outputs, over the threads
// (specdec-linear-bench reads the same bytes split the same way).
void ForEachOutputBlock(int64_t out, absl::FunctionRef<void(int64_t o0, int64_t n)> run);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_PARALLEL_LINEAR_H_
