// CancelSignal: callbacks run once on Cancel, at once when added after it, never after Remove.
#include "services/router/cancel_signal.h"

#include <gtest/gtest.h>

namespace specdec::services {
namespace {

TEST(CancelSignalTest, CancelRunsEveryRegisteredCallbackOnce) {
  CancelSignal signal;
  int first = 0, second = 0, removed = 0;
  signal.Add([&] { ++first; });
  signal.Add([&] { ++second; });
  const uint64_t id = signal.Add([&] { ++removed; });
  signal.Remove(id);
  EXPECT_FALSE(signal.cancelled());
  signal.Cancel();
  signal.Cancel();
  EXPECT_TRUE(signal.cancelled());
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 1);
  EXPECT_EQ(removed, 0);
}

TEST(CancelSignalTest, ACallbackAddedAfterCancelRunsAtOnce) {
  CancelSignal signal;
  signal.Cancel();
  int runs = 0;
  signal.Add([&] { ++runs; });
  EXPECT_EQ(runs, 1);
}

}  // namespace
}  // namespace specdec::services
