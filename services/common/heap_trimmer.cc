#include "services/common/heap_trimmer.h"

#include <dlfcn.h>

#include <cstddef>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace specdec::services {
namespace {

// gperftools' C interface, when tcmalloc is the process's allocator (looked up at run time, so
// the binaries need neither its headers nor a link-time dependency for this).
struct Tcmalloc {
  int (*get_property)(const char* name, size_t* value) = nullptr;
  void (*release_free_memory)() = nullptr;
  bool present() const { return get_property != nullptr && release_free_memory != nullptr; }
};

const Tcmalloc& FindTcmalloc() {
  static const Tcmalloc t = [] {
    Tcmalloc t;
    t.get_property = reinterpret_cast<int (*)(const char*, size_t*)>(
        dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty"));
    t.release_free_memory =
        reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"));
    return t;
  }();
  return t;
}

int64_t TcmallocProperty(const Tcmalloc& t, const char* name) {
  size_t v = 0;
  return t.get_property(name, &v) ? static_cast<int64_t>(v) : 0;
}

}  // namespace

const char* HeapAllocatorName() {
  if (kSanitizerHeap) return "sanitizer";
  if (FindTcmalloc().present()) return "tcmalloc";
#if defined(__GLIBC__)
  return "glibc";
#else
  return "unknown";
#endif
}

HeapStats ReadHeapStats() {
  HeapStats s;
  if (kSanitizerHeap) return s;
  if (const Tcmalloc& t = FindTcmalloc(); t.present()) {
    s.in_use_bytes = TcmallocProperty(t, "generic.current_allocated_bytes");
    // Free pages still mapped (page heap), not the small per-size caches.
    s.free_bytes = TcmallocProperty(t, "tcmalloc.pageheap_free_bytes");
    return s;
  }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = mallinfo2();
  s.in_use_bytes = static_cast<int64_t>(m.uordblks + m.hblkhd);
  s.free_bytes = static_cast<int64_t>(m.fordblks);
#endif
  return s;
}

bool TrimHeapIfWorthIt(int64_t min_free_bytes) {
  if (kSanitizerHeap) return false;
  if (const Tcmalloc& t = FindTcmalloc(); t.present()) {
    if (ReadHeapStats().free_bytes < min_free_bytes) return false;
    t.release_free_memory();
    return true;
  }
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
