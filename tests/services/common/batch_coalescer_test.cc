#include "services/common/batch_coalescer.h"

#include <gtest/gtest.h>

namespace specdec::services {
namespace {

using Clock = BatchCoalescer::Clock;
using std::chrono::microseconds;

class BatchCoalescerTest : public ::testing::Test {
 protected:
  Clock::time_point At(int us) { return t0_ + microseconds(us); }
  // Stream `s` is answered at `sent_us` and comes back `gap_us` later, once.
  void RoundTrip(BatchCoalescer& c, uint64_t s, int sent_us, int gap_us) {
    c.Sent(s, At(sent_us));
    c.Arrived(s, At(sent_us + gap_us));
  }
  Clock::time_point t0_ = Clock::now();
};

TEST_F(BatchCoalescerTest, WaitsForAStreamDueBackWithinAQuarterOfAPass) {
  BatchCoalescer c;
  c.Computed(0.004);  // passes take 4 ms: the window is 1 ms
  c.Arrived(1, At(0));
  RoundTrip(c, 1, 0, 300);  // stream 1 comes back 0.3 ms after its answer
  c.Sent(1, At(5000));
  // Stream 2's op is being scheduled 0.1 ms after stream 1 was answered: stream 1 is due at
  // 5.3 ms, inside the window, so the batch waits (at most the window).
  EXPECT_EQ(c.Awaited(At(5100)), 1);
  auto until = c.WaitUntil(At(5100));
  ASSERT_TRUE(until.has_value());
  EXPECT_EQ(*until, At(6100));
  // Once stream 1 arrived nobody is awaited.
  c.Arrived(1, At(5300));
  EXPECT_EQ(c.Awaited(At(5300)), 0);
  EXPECT_FALSE(c.WaitUntil(At(5300)).has_value());
}

TEST_F(BatchCoalescerTest, DoesNotWaitForStreamsAwayLongerThanTheWindow) {
  BatchCoalescer c;
  c.Computed(0.004);
  RoundTrip(c, 1, 0, 3000);  // e.g. drafting on another service for 3 ms
  c.Sent(1, At(10000));
  EXPECT_EQ(c.Awaited(At(10100)), 0);  // due at 13 ms, far outside a 1 ms window
  // ... but it is waited for once it is about due.
  EXPECT_EQ(c.Awaited(At(12500)), 1);
  // A stream overdue by more than the window (its request ended) is not waited for.
  EXPECT_EQ(c.Awaited(At(14500)), 0);
}

TEST_F(BatchCoalescerTest, NeverWaitsUntilGapAndComputeAreMeasuredOrWhenDisabledOrEnded) {
  BatchCoalescer c;
  c.Sent(1, At(0));  // no gap measured yet
  c.Computed(0.004);
  EXPECT_EQ(c.Awaited(At(100)), 0);
  RoundTrip(c, 1, 0, 200);
  c.Sent(1, At(1000));
  EXPECT_EQ(c.Awaited(At(1000)), 1);
  c.Ended(1);
  EXPECT_EQ(c.Awaited(At(1000)), 0);

  BatchCoalescer::Options off;
  off.max_wait = Clock::duration::zero();
  BatchCoalescer d(off);
  EXPECT_FALSE(d.enabled());
  d.Computed(0.004);
  RoundTrip(d, 1, 0, 200);
  d.Sent(1, At(1000));
  EXPECT_EQ(d.Awaited(At(1000)), 0);
  EXPECT_FALSE(d.WaitUntil(At(1000)).has_value());
}

TEST_F(BatchCoalescerTest, WindowIsCappedByMaxWait) {
  BatchCoalescer::Options o;
  o.max_wait = microseconds(500);
  BatchCoalescer c(o);
  c.Computed(0.040);  // a quarter would be 10 ms
  RoundTrip(c, 1, 0, 400);
  c.Sent(1, At(1000));
  auto until = c.WaitUntil(At(1000));
  ASSERT_TRUE(until.has_value());
  EXPECT_EQ(*until, At(1500));
}

TEST_F(BatchCoalescerTest, GapIsASmoothedMeanOfRoundTrips) {
  BatchCoalescer c;
  c.Computed(0.004);  // 1 ms window
  RoundTrip(c, 1, 0, 200);
  for (int i = 1; i <= 20; ++i) RoundTrip(c, 1, i * 10000, 5000);  // the stream now drafts 5 ms
  c.Sent(1, At(300000));
  EXPECT_EQ(c.Awaited(At(300000)), 0);  // due ~5 ms later: not waited for
  EXPECT_EQ(c.Awaited(At(304500)), 1);
}

}  // namespace
}  // namespace specdec::services
