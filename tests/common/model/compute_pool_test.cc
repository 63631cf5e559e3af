#include "common/model/compute_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace specdec::model {
namespace {

TEST(ComputePoolTest, RunsEveryThreadIndexOnceAndReturnsWhenAllHaveReturned) {
  for (int threads : {0, 1, 2, 3, 5, 2}) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(std::max(threads, 1)));
    RunOnComputeThreads(threads, [&](int t) {
      // The last index finishes well after the caller's: the call must wait for it.
      if (t == threads - 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      runs[static_cast<size_t>(t)].fetch_add(1);
    });
    for (size_t t = 0; t < runs.size(); ++t) {
      EXPECT_EQ(runs[t].load(), 1) << "index " << t << " of " << threads;
    }
  }
}

TEST(ComputePoolTest, RunsOnDistinctThreadsWithTheCallerAsIndexZero) {
  // Twice: the second run finds the workers asleep (the wait exceeds their spin).
  for (int round = 0; round < 2; ++round) {
    std::mutex mu;
    std::vector<std::thread::id> ids(3);
    RunOnComputeThreads(3, [&](int t) {
      std::lock_guard<std::mutex> lock(mu);
      ids[static_cast<size_t>(t)] = std::this_thread::get_id();
    });
    EXPECT_EQ(ids[0], std::this_thread::get_id());
    EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), 3u);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(ComputePoolTest, ManyShortRunsInARowLoseNoIndex) {
  std::atomic<int64_t> sum{0};
  constexpr int kRuns = 20000;
  for (int r = 0; r < kRuns; ++r) {
    RunOnComputeThreads(2, [&](int t) { sum.fetch_add(t + 1, std::memory_order_relaxed); });
  }
  EXPECT_EQ(sum.load(), int64_t{kRuns} * 3);
}

TEST(ComputePoolTest, NestedRunsRunAloneOnTheCallingThread) {
  EXPECT_FALSE(InComputeRun());
  std::mutex mu;
  int mismatched = 0, nested_runs = 0, outside_run = 0;
  RunOnComputeThreads(2, [&](int) {
    const std::thread::id outer = std::this_thread::get_id();
    const bool inside = InComputeRun();
    RunOnComputeThreads(3, [&](int) {
      std::lock_guard<std::mutex> lock(mu);
      ++nested_runs;
      if (std::this_thread::get_id() != outer) ++mismatched;
    });
    std::lock_guard<std::mutex> lock(mu);
    if (!inside) ++outside_run;
  });
  EXPECT_EQ(nested_runs, 6);
  EXPECT_EQ(mismatched, 0);
  EXPECT_EQ(outside_run, 0);
  EXPECT_FALSE(InComputeRun());
}

// Each thread names what it reads ahead once, after its own share of the run; the bytes it reads
// ahead change nothing.
TEST(ComputePoolTest, EachThreadAsksForItsReadAheadOnceAfterItsShare) {
  std::vector<char> buffer(1 << 20, 1);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> ran(3), asked(3), asked_before_run(3);
    RunOnComputeThreads(
        3, [&](int t) { ran[static_cast<size_t>(t)].fetch_add(1); },
        [&](int t) {
          const auto i = static_cast<size_t>(t);
          if (ran[i].load() == 0) asked_before_run[i].fetch_add(1);
          asked[i].fetch_add(1);
          return ReadAhead{buffer.data() + t * (buffer.size() / 3), 64 * 1024};
        });
    for (size_t t = 0; t < 3; ++t) {
      EXPECT_EQ(ran[t].load(), 1) << "index " << t;
      EXPECT_EQ(asked[t].load(), 1) << "index " << t;
      EXPECT_EQ(asked_before_run[t].load(), 0) << "index " << t;
    }
  }
  // A run alone (one thread) asks nothing: no thread waits.
  int asked_alone = 0;
  RunOnComputeThreads(
      1, [](int) {},
      [&](int) {
        ++asked_alone;
        return ReadAhead{};
      });
  EXPECT_EQ(asked_alone, 0);
}

// Two callers at once: one runs on the pool, the other (while the pool is held) alone; every
// index of every run still runs once.
TEST(ComputePoolTest, ConcurrentCallersEachGetEveryIndex) {
  std::atomic<int64_t> sum{0};
  constexpr int kRuns = 3000;
  auto caller = [&] {
    for (int r = 0; r < kRuns; ++r) {
      RunOnComputeThreads(2, [&](int t) { sum.fetch_add(t + 1, std::memory_order_relaxed); });
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(sum.load(), int64_t{2} * kRuns * 3);
}

}  // namespace
}  // namespace specdec::model
