#include "common/model/balanced_parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "common/model/compute_pool.h"

namespace specdec::model {
namespace {

class BalancedParallelForTest : public testing::Test {
 protected:
  void SetUp() override { threads_before_ = ComputeThreads(); }
  void TearDown() override { SetComputeThreads(threads_before_); }

 private:
  int threads_before_ = 1;
};

TEST_F(BalancedParallelForTest, RunsEveryItemExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    SetComputeThreads(threads);
    for (int64_t items : {0, 1, 3, 7, 64, 1000}) {
      for (int64_t min_per_thread : {1, 4}) {
        std::vector<std::atomic<int>> runs(static_cast<size_t>(items));
        BalancedParallelFor(items, min_per_thread, [&](int64_t begin, int64_t end) {
          ASSERT_LE(0, begin);
          ASSERT_LT(begin, end);
          ASSERT_LE(end, items);
          for (int64_t i = begin; i < end; ++i) runs[i].fetch_add(1);
        });
        for (int64_t i = 0; i < items; ++i) {
          EXPECT_EQ(runs[i].load(), 1) << "item " << i << " of " << items << ", " << threads
                                       << " threads, at least " << min_per_thread << " each";
        }
      }
    }
  }
}

TEST_F(BalancedParallelForTest, TooFewItemsForTwoThreadsRunAsOneCall) {
  SetComputeThreads(2);
  std::vector<std::pair<int64_t, int64_t>> calls;
  BalancedParallelFor(7, 4, [&](int64_t begin, int64_t end) { calls.emplace_back(begin, end); });
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(int64_t{0}, int64_t{7}));
}

// Items of the first thread's range are slow, the second's instant: the second thread, done with
// its own, takes the first range's items from the back.
TEST_F(BalancedParallelForTest, AThreadDoneWithItsRangeTakesTheRestOfASlowOne) {
  SetComputeThreads(2);
  constexpr int64_t kItems = 40;
  std::mutex mu;
  std::vector<std::thread::id> ran_on(kItems);
  std::set<std::thread::id> threads;
  BalancedParallelFor(kItems, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (i < kItems / 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::lock_guard<std::mutex> lock(mu);
      ran_on[i] = std::this_thread::get_id();
      threads.insert(ran_on[i]);
    }
  });
  ASSERT_EQ(threads.size(), 2u) << "the compute pool ran both ranges on one thread";
  EXPECT_NE(ran_on[0], ran_on[kItems / 2 - 1]) << "the slow range's last item";
  EXPECT_EQ(ran_on[kItems / 2], ran_on[kItems / 2 - 1]);
}

}  // namespace
}  // namespace specdec::model
