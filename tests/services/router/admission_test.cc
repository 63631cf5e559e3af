// AdmissionQueue: a bound on requests in flight, a FIFO queue with a bounded wait, and clear
// statuses for a full queue, a timeout, a passed deadline and a cancel.
#include "services/router/admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace specdec::services {
namespace {

using std::chrono::milliseconds;
auto Far() { return std::chrono::system_clock::now() + std::chrono::hours(1); }

TEST(AdmissionQueue, AdmitsUpToTheBoundThenQueuesInArrivalOrder) {
  AdmissionQueue q({/*max_active=*/2, /*max_waiting=*/8, milliseconds(5000)});
  ASSERT_TRUE(q.Admit(Far(), nullptr).ok());
  ASSERT_TRUE(q.Admit(Far(), nullptr).ok());
  EXPECT_EQ(q.active(), 2);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&, i] {
      double waited = -1;
      absl::Status s = q.Admit(Far(), nullptr, &waited);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_GT(waited, 0);
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      }
      q.Release();
    });
    while (q.waiting() < i + 1) std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(q.waiting(), 3);
  q.Release();  // one slot: the waiters go one after another, oldest first
  for (auto& t : waiters) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(q.active(), 1);
  EXPECT_EQ(q.waiting(), 0);
}

TEST(AdmissionQueue, FullQueueAndLongWaitAreResourceExhausted) {
  AdmissionQueue q({1, 1, milliseconds(60)});
  ASSERT_TRUE(q.Admit(Far(), nullptr).ok());
  std::thread waiter([&] {
    double waited = 0;
    absl::Status s = q.Admit(Far(), nullptr, &waited);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("--queue-timeout-ms"), std::string::npos) << s;
    EXPECT_GE(waited, 0.055);
  });
  while (q.waiting() < 1) std::this_thread::sleep_for(milliseconds(1));
  absl::Status full = q.Admit(Far(), nullptr);  // the one queue place is taken
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("--max-queued-requests"), std::string::npos) << full;
  waiter.join();
  EXPECT_EQ(q.waiting(), 0);
  EXPECT_EQ(q.active(), 1);  // the failed ones hold nothing
}

TEST(AdmissionQueue, DeadlineAndCancelWhileQueued) {
  AdmissionQueue q({1, 4, milliseconds(5000)});
  ASSERT_TRUE(q.Admit(Far(), nullptr).ok());
  absl::Status late =
      q.Admit(std::chrono::system_clock::now() + milliseconds(50), nullptr);
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(40));
    cancel = true;
  });
  absl::Status cancelled = q.Admit(Far(), [&] { return cancel.load(); });
  canceller.join();
  EXPECT_EQ(cancelled.code(), absl::StatusCode::kCancelled) << cancelled;
  EXPECT_EQ(q.waiting(), 0);
  q.Release();
  EXPECT_TRUE(q.Admit(Far(), nullptr).ok());  // a freed slot is usable again
}

TEST(AdmissionQueue, ZeroBoundMeansUnbounded) {
  AdmissionQueue q({0, 0, milliseconds(1)});
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(q.Admit(Far(), nullptr).ok());
  EXPECT_EQ(q.active(), 100);
}

}  // namespace
}  // namespace specdec::services
