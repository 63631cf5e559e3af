#include "services/common/heap_trimmer.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace specdec::services {

HeapStats ReadHeapStats() {
  HeapStats s;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = mallinfo2();
  s.in_use_bytes = static_cast<int64_t>(m.uordblks + m.hblkhd);
  s.free_bytes = static_cast<int64_t>(m.fordblks);
#endif
  return s;
}

bool TrimHeapIfWorthIt(int64_t min_free_bytes) {
#if defined(__GLIBC__)
  if (ReadHeapStats().free_bytes < min_free_bytes) return false;
  malloc_trim(0);
  return true;
#else
  (void)min_free_bytes;
  return false;
#endif
}

HeapTrimmer::HeapTrimmer(std::chrono::milliseconds interval, int64_t min_free_bytes) {
  if (interval.count() > 0) thread_ = std::thread([=, this] { Run(interval, min_free_bytes); });
}

HeapTrimmer::~HeapTrimmer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t HeapTrimmer::trims() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trims_;
}

void HeapTrimmer::Run(std::chrono::milliseconds interval, int64_t min_free_bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    const bool trimmed = TrimHeapIfWorthIt(min_free_bytes);
    lock.lock();
    trims_ += trimmed;
  }
}

}  // namespace specdec::services
