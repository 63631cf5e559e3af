// Gives freed heap memory back to the operating system.
//
// An allocator keeps freed memory mapped: a long-running service that allocates tensors of
// ever-changing sizes (KV caches that grow, ragged batches) therefore sees its resident size
// creep up although its live heap is flat. HeapTrimmer checks the heap's free bytes periodically
// and, past a threshold, gives them back to the OS: with tcmalloc (the binaries' allocator, see
// SPECDEC_MALLOC) its page heap's free pages, with glibc's malloc every arena's (malloc_trim).
// With any other allocator it does nothing.
#ifndef SPECDEC_SERVICES_COMMON_HEAP_TRIMMER_H_
#define SPECDEC_SERVICES_COMMON_HEAP_TRIMMER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace specdec::services {

// Whether the process allocates through a sanitizer's allocator (the ASan and TSan builds of
// scripts/sanitize.sh): it keeps its own books, so the trimmer reads nothing and does nothing.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerHeap = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizerHeap = true;
#else
inline constexpr bool kSanitizerHeap = false;
#endif
#else
inline constexpr bool kSanitizerHeap = false;
#endif

struct HeapStats {
  int64_t in_use_bytes = 0;  // allocated and not freed (arenas and mmapped chunks)
  int64_t free_bytes = 0;    // freed but still held by the allocator's arenas
};

// The allocator this process uses: "tcmalloc", "glibc", "sanitizer" or "unknown".
const char* HeapAllocatorName();

// The allocator's current statistics (all zero with an unknown allocator).
HeapStats ReadHeapStats();

// Returns the heap's free pages to the OS if at least `min_free_bytes` are held free; returns
// whether it trimmed.
bool TrimHeapIfWorthIt(int64_t min_free_bytes);

// A background thread running TrimHeapIfWorthIt every `interval` (zero: no thread).
class HeapTrimmer {
 public:
  HeapTrimmer(std::chrono::milliseconds interval, int64_t min_free_bytes);
  ~HeapTrimmer();
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

  int64_t trims() const;

 private:
  void Run(std::chrono::milliseconds interval, int64_t min_free_bytes);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int64_t trims_ = 0;
  std::thread thread_;  // last: started after the state it uses
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_HEAP_TRIMMER_H_
