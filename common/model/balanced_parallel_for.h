// A parallel loop over items whose cost is not known in advance: memory-bound work such as a
// 1-token step's weight streams, where one thread can get less bandwidth than another for a while.
#ifndef SPECDEC_COMMON_MODEL_BALANCED_PARALLEL_FOR_H_
#define SPECDEC_COMMON_MODEL_BALANCED_PARALLEL_FOR_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "common/model/compute_pool.h"

namespace specdec::model {

// Runs `run(begin, end)` over the items [0, items) on ComputeThreads() threads of the
// compute pool (compute_pool.h), every item exactly once. Each thread owns an equal range of at
// least `min_items_per_thread` items and takes it one item at a time from the front, so its reads
// stay one ascending stream; a thread that finishes its own range takes the items left in the
// others' ranges from their backs, so no thread waits while work remains. Runs everything on the
// calling thread when one range is all there is, or inside a parallel loop. `run` must not throw
// or depend on which thread calls it.
void BalancedParallelFor(int64_t items, int64_t min_items_per_thread,
                         absl::FunctionRef<void(int64_t begin, int64_t end)> run);
// As above; once thread t of the loop's `threads` is done, it reads read_ahead(t, threads) into
// its cache while it waits (RunOnComputeThreads). Not called when the loop runs on one thread.
void BalancedParallelFor(int64_t items, int64_t min_items_per_thread,
                         absl::FunctionRef<void(int64_t begin, int64_t end)> run,
                         absl::FunctionRef<ReadAhead(int thread, int threads)> read_ahead);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_BALANCED_PARALLEL_FOR_H_
