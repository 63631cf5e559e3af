// The matrix products of linear_kernel.h and linear_f32_kernel.h over the intra-op threads.
// Torch-free.
#ifndef SPECDEC_COMMON_MODEL_PARALLEL_LINEAR_H_
#define SPECDEC_COMMON_MODEL_PARALLEL_LINEAR_H_

#include "common/model/linear_f32_kernel.h"
#include "common/model/linear_kernel.h"

namespace specdec::model {

// `p` (every output, all rows) split over the threads by BalancedParallelFor in blocks of
// outputs, so that even a small model's products (256 outputs) take two threads and the threads
// finish together. Which thread computes an output changes none of its sums.
void RunLinearParallel(const LinearProblem& p);
void RunLinearF32Parallel(const LinearF32Problem& p);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_PARALLEL_LINEAR_H_
