// The threads that run the model's parallel loops (the products and the attention work items).
// Torch-free.
//
// A parallel region of OpenMP's runtime (ATen's at::parallel_for on Debian's libtorch) costs
// about 3 us on this project's 2-core machine even when its body is empty: the thread that ends a
// barrier always makes a futex system call to wake the others, sleeping or not, and a region
// ends one barrier and starts another. A 1-token step runs about 60 regions. This pool's workers
// wait spinning on one word for a while and only then sleep; the caller wakes them with a store
// (and a system call only when one sleeps), so an empty region costs about 0.7 us
// (docs/results/2026-11-27-compute-pool.md).
#ifndef SPECDEC_COMMON_MODEL_COMPUTE_POOL_H_
#define SPECDEC_COMMON_MODEL_COMPUTE_POOL_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace specdec::model {

// Runs run(t) for every t in [0, threads) and returns when all have returned: t = 0 on the
// calling thread, the others on the pool's workers (started on first use, kept for the process).
// Runs them one after another on the calling thread when `threads` <= 1, when called from inside
// a run (nested loops), or while another thread's run holds the pool. `run` must not throw, and
// what it computes must not depend on which thread runs it.
void RunOnComputeThreads(int threads, absl::FunctionRef<void(int thread)> run);

// Bytes a thread reads into its cache (one line at a time, prefetches only) while it waits: the
// caller for the workers at the run's end, a worker for its next run. Used for the start of what
// the thread's share of the next loop will read.
struct ReadAhead {
  const char* begin = nullptr;
  int64_t bytes = 0;
};
// As above; once thread t is done with run(t), read_ahead(t) names the bytes it reads ahead (not
// called where the run runs alone on the calling thread).
void RunOnComputeThreads(int threads, absl::FunctionRef<void(int thread)> run,
                         absl::FunctionRef<ReadAhead(int thread)> read_ahead);

// The thread count of the model's parallel loops (1 until set). ConfigureComputeThreads
// (runtime.h) sets it at start-up; tests set it directly.
void SetComputeThreads(int threads);
int ComputeThreads();

// Whether the calling thread is inside a RunOnComputeThreads run (where a nested one runs alone).
bool InComputeRun();

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_COMPUTE_POOL_H_
