// The matrix products of linear_kernel.h and linear_f32_kernel.h over the intra-op threads.
// Torch-free.
#ifndef SPECDEC_COMMON_MODEL_PARALLEL_LINEAR_H_
#define SPECDEC_COMMON_MODEL_PARALLEL_LINEAR_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "common/model/compute_pool.h"
#include "common/model/linear_f32_kernel.h"
#include "common/model/linear_kernel.h"

namespace specdec::model {

// `p` (every output, all rows) split over the threads by BalancedParallelFor in blocks of
// outputs, so that even a small model's products (256 outputs) take two threads and the threads
// finish together. Which thread computes an output changes none of its sums.
void RunLinearParallel(const LinearProblem& p);
void RunLinearF32Parallel(const LinearF32Problem& p);

// The weights of the product a pass runs next: [out, in] elements of `element_bytes` bytes,
// row-major or packed (either way, a range of outputs from a multiple of 64 starts at
// first * in elements).
struct NextWeights {
  const void* data = nullptr;
  int64_t out = 0, in = 0, element_bytes = 0;
};

// As above; once a thread is done with its part, it reads the start of its share of `next`'s
// weights into its cache while it waits for the other threads (and a worker, for its next loop),
// so that the serial work between two products and the ends of their loops keep reading memory.
// The 100M bf16 shape's 1-token step at 2 threads ran 1.048x as fast (f32 1.030x; the pack's
// verifies of 4 and 17 rows 1.05-1.06x): docs/results/2026-11-28-read-ahead.md.
void RunLinearParallel(const LinearProblem& p, const NextWeights& next);
void RunLinearF32Parallel(const LinearF32Problem& p, const NextWeights& next);

// The most a thread reads ahead: half of a Zen 5 core's 1 MiB L2 cache (128 KiB gained less;
// 768 KiB and 1 MiB alike).
constexpr int64_t kReadAheadBytes = int64_t{512} << 10;

// What thread `thread` of `next`'s loop reads ahead: the first kReadAheadBytes of the output
// blocks it starts on (its range in BalancedParallelFor's split over ComputeThreads() threads);
// nothing where that loop runs on one thread or has no such thread.
ReadAhead ReadAheadShare(const NextWeights& next, int thread);

// The split both use: run(o0, n) for the blocks [o0, o0 + n) of `out` outputs, over the threads
// (specdec-linear-bench reads the same bytes split the same way).
void ForEachOutputBlock(int64_t out, absl::FunctionRef<void(int64_t o0, int64_t n)> run);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_PARALLEL_LINEAR_H_
