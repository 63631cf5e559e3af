#include "common/model/balanced_parallel_for.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "common/model/compute_pool.h"

namespace specdec::model {
namespace {

// One thread's range of items, [front, back) packed in one word (front in the low 32 bits) so
// that the owner's claims from the front and the others' from the back never take an item twice.
// One cache line each: a range's owner updates it without disturbing the others'.
struct alignas(64) ItemRange {
  std::atomic<uint64_t> front_back{0};
};

uint64_t Pack(uint32_t front, uint32_t back) { return (uint64_t{back} << 32) | front; }

// Takes the front (or back) item of `range` into *item; false when the range is empty.
bool Claim(ItemRange& range, bool from_front, int64_t* item) {
  uint64_t v = range.front_back.load(std::memory_order_relaxed);
  while (true) {
    const auto front = static_cast<uint32_t>(v), back = static_cast<uint32_t>(v >> 32);
    if (front >= back) return false;
    const uint64_t next = from_front ? Pack(front + 1, back) : Pack(front, back - 1);
    if (range.front_back.compare_exchange_weak(v, next, std::memory_order_relaxed)) {
      *item = from_front ? front : back - 1;
      return true;
    }
  }
}

}  // namespace

void BalancedParallelFor(int64_t items, int64_t min_items_per_thread,
                         absl::FunctionRef<void(int64_t begin, int64_t end)> run) {
  BalancedParallelFor(items, min_items_per_thread, run, [](int, int) { return ReadAhead{}; });
}

void BalancedParallelFor(int64_t items, int64_t min_items_per_thread,
                         absl::FunctionRef<void(int64_t begin, int64_t end)> run,
                         absl::FunctionRef<ReadAhead(int thread, int threads)> read_ahead) {
  if (items <= 0) return;
  const int64_t per_thread = std::max<int64_t>(1, min_items_per_thread);
  const int64_t threads = std::min<int64_t>(ComputeThreads(), items / per_thread);
  if (threads <= 1 || InComputeRun() || at::in_parallel_region() || items > UINT32_MAX) {
    run(0, items);
    return;
  }
  std::vector<ItemRange> ranges(threads);
  for (int64_t t = 0; t < threads; ++t) {
    ranges[t].front_back.store(Pack(items * t / threads, items * (t + 1) / threads),
                               std::memory_order_relaxed);
  }
  RunOnComputeThreads(
      static_cast<int>(threads),
      [&](int t) {
        int64_t item;
        while (Claim(ranges[t], /*from_front=*/true, &item)) run(item, item + 1);
        for (int64_t k = 1; k < threads; ++k) {
          while (Claim(ranges[(t + k) % threads], /*from_front=*/false, &item)) {
            run(item, item + 1);
          }
        }
      },
      [&](int t) { return read_ahead(t, static_cast<int>(threads)); });
}

}  // namespace specdec::model
