#include "services/common/heap_trimmer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

namespace specdec::services {
namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Allocates `total` bytes in small blocks, touches them, then frees all but every 16th block so
// that the free memory is fragmented (no free top chunk that an ordinary free() would release).
std::vector<char*> FragmentHeap(int64_t total) {
  constexpr int64_t kBlock = 32 << 10;  // below glibc's mmap threshold: heap, not mmap
  std::vector<char*> blocks;
  for (int64_t done = 0; done < total; done += kBlock) {
    char* p = static_cast<char*>(std::malloc(kBlock));
    std::memset(p, 1, kBlock);
    blocks.push_back(p);
  }
  std::vector<char*> kept;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i % 16 == 15) {
      kept.push_back(blocks[i]);
    } else {
      std::free(blocks[i]);
    }
  }
  return kept;
}

void FreeAll(std::vector<char*>& blocks) {
  for (char* p : blocks) std::free(p);
  blocks.clear();
}

#if !defined(SPECDEC_EXPECTED_ALLOCATOR) && defined(__GLIBC__)
#define SPECDEC_EXPECTED_ALLOCATOR "glibc"
#endif

// Under a sanitizer (scripts/sanitize.sh) its allocator is detected and nothing is trimmed.
TEST(HeapTrimmerTest, ASanitizersAllocatorIsLeftAlone) {
  if (!kSanitizerHeap) GTEST_SKIP() << "not a sanitizer build";
  EXPECT_STREQ(HeapAllocatorName(), "sanitizer");
  EXPECT_EQ(ReadHeapStats().in_use_bytes, 0);
  EXPECT_FALSE(TrimHeapIfWorthIt(0));
}

#if defined(SPECDEC_EXPECTED_ALLOCATOR)
// The binary linked against tcmalloc (the services' allocator) really allocates with it.
TEST(HeapTrimmerTest, DetectsTheProcessAllocator) {
  if (kSanitizerHeap) GTEST_SKIP() << "a sanitizer's allocator (ASanitizersAllocatorIsLeftAlone)";
  EXPECT_STREQ(HeapAllocatorName(), SPECDEC_EXPECTED_ALLOCATOR);
  void* p = std::malloc(1 << 20);
  std::memset(p, 1, 1 << 20);
  EXPECT_GE(ReadHeapStats().in_use_bytes, 1 << 20);
  std::free(p);
}
#endif

#if defined(__GLIBC__)
TEST(HeapTrimmerTest, TrimReturnsFragmentedFreeMemoryToTheOs) {
  if (kSanitizerHeap) GTEST_SKIP() << "a sanitizer's allocator (ASanitizersAllocatorIsLeftAlone)";
  constexpr int64_t kTotal = 96 << 20;
  std::vector<char*> kept = FragmentHeap(kTotal);
  EXPECT_GE(ReadHeapStats().free_bytes, kTotal / 2) << "the freed blocks stay in the heap";
  const int64_t before = ResidentBytes();
  ASSERT_TRUE(TrimHeapIfWorthIt(1 << 20));
  const int64_t after = ResidentBytes();
  // 15/16 of 96 MiB was freed; most of it must leave the resident set.
  EXPECT_LT(after, before - kTotal / 2) << "resident " << before << " -> " << after;
  FreeAll(kept);
}

TEST(HeapTrimmerTest, DoesNothingBelowTheThreshold) {
  EXPECT_FALSE(TrimHeapIfWorthIt(int64_t{1} << 50));
}

TEST(HeapTrimmerTest, BackgroundThreadTrimsPeriodically) {
  if (kSanitizerHeap) GTEST_SKIP() << "a sanitizer's allocator (ASanitizersAllocatorIsLeftAlone)";
  std::vector<char*> kept = FragmentHeap(32 << 20);
  HeapTrimmer trimmer(std::chrono::milliseconds(10), 1 << 20);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (trimmer.trims() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(trimmer.trims(), 1);
  FreeAll(kept);
}
#endif

TEST(HeapTrimmerTest, ZeroIntervalStartsNoThreadAndStopsCleanly) {
  HeapTrimmer trimmer(std::chrono::milliseconds(0), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(trimmer.trims(), 0);
}

}  // namespace
}  // namespace specdec::services
