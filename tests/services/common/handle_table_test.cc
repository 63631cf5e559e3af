#include "services/common/handle_table.h"

#include <gtest/gtest.h>

#include "common/util/status_matchers.h"

namespace specdec::services {
namespace {

using Clock = std::chrono::steady_clock;

struct Fake {
  int value = 0;
};

class HandleTableTest : public ::testing::Test {
 protected:
  HandleTable<Fake>::Options Opts() {
    HandleTable<Fake>::Options o;
    o.replica = "t0";
    o.budget_bytes = 1000;
    o.lease = std::chrono::milliseconds(100);
    o.now = [this] { return now_; };
    return o;
  }
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
};

TEST(HandleTableOptionsTest, ComeFromAServersFlags) {
  struct Flags {
    std::string replica = "target-3";
    int64_t kv_budget_bytes = 12345;
    int64_t lease_ms = 250;
  } flags;
  const auto o = HandleTable<Fake>::FromServerFlags(flags);
  EXPECT_EQ(o.replica, "target-3");
  EXPECT_EQ(o.budget_bytes, 12345);
  EXPECT_EQ(o.lease, std::chrono::milliseconds(250));
}

TEST_F(HandleTableTest, CreateAcquireRelease) {
  HandleTable<Fake> t(Opts());
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string h, t.Create(std::make_unique<Fake>(Fake{7}), 400, 1));
  EXPECT_EQ(h.rfind("t0/", 0), 0u);
  SPECDEC_ASSERT_OK_AND_ASSIGN(Fake * f, t.Acquire(h, 1));
  EXPECT_EQ(f->value, 7);
  EXPECT_EQ(t.bytes_in_use(), 400);
  SPECDEC_EXPECT_OK(t.Release(h));
  EXPECT_EQ(t.bytes_in_use(), 0);
  SPECDEC_EXPECT_STATUS(t.Acquire(h, 1), absl::StatusCode::kNotFound, "unknown or expired");
  SPECDEC_EXPECT_STATUS(t.Release(h), absl::StatusCode::kNotFound, h);
}

TEST_F(HandleTableTest, BudgetIsEnforcedAndFreedMemoryIsReusable) {
  HandleTable<Fake> t(Opts());
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string a, t.Create(std::make_unique<Fake>(), 600, 1));
  SPECDEC_EXPECT_STATUS(t.Create(std::make_unique<Fake>(), 500, 2),
                        absl::StatusCode::kResourceExhausted, "budget");
  SPECDEC_EXPECT_STATUS(t.Resize(a, 1001), absl::StatusCode::kResourceExhausted, "growing");
  SPECDEC_EXPECT_OK(t.Resize(a, 300));
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string b, t.Create(std::make_unique<Fake>(), 500, 2));
  EXPECT_EQ(t.bytes_in_use(), 800);
  EXPECT_NE(a, b);
}

TEST_F(HandleTableTest, ForeignHandlesAndOwnership) {
  HandleTable<Fake> t(Opts());
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string h, t.Create(std::make_unique<Fake>(), 10, 1));
  SPECDEC_EXPECT_STATUS(t.Acquire("t1/1-5", 1), absl::StatusCode::kFailedPrecondition,
                        "not minted by replica 't0'");
  SPECDEC_EXPECT_STATUS(t.Acquire(h, 2), absl::StatusCode::kFailedPrecondition, "Attach");
  SPECDEC_EXPECT_OK(t.Attach(h, 2));  // a reconnecting stream takes it over
  SPECDEC_EXPECT_OK(t.Acquire(h, 2).status());
  SPECDEC_EXPECT_STATUS(t.Acquire(h, 1), absl::StatusCode::kFailedPrecondition, "Attach");
}

TEST_F(HandleTableTest, LeasesExpireUnlessRenewed) {
  HandleTable<Fake> t(Opts());
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string a, t.Create(std::make_unique<Fake>(), 10, 1));
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string b, t.Create(std::make_unique<Fake>(), 20, 1));
  now_ += std::chrono::milliseconds(80);
  SPECDEC_EXPECT_OK(t.Acquire(a, 1).status());  // renews a
  now_ += std::chrono::milliseconds(80);
  EXPECT_EQ(t.ExpireIdle(), 1);  // b idle 160 ms > 100 ms lease
  EXPECT_EQ(t.bytes_in_use(), 10);
  SPECDEC_EXPECT_STATUS(t.Acquire(b, 1), absl::StatusCode::kNotFound, "");
  now_ += std::chrono::milliseconds(150);
  SPECDEC_EXPECT_STATUS(t.Acquire(a, 1), absl::StatusCode::kNotFound, "expired");
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.bytes_in_use(), 0);
}

TEST_F(HandleTableTest, StreamEndReleasesItsHandlesOnly) {
  HandleTable<Fake> t(Opts());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.Create(std::make_unique<Fake>(), 10, 1).ok());
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string keep, t.Create(std::make_unique<Fake>(), 10, 2));
  EXPECT_EQ(t.ReleaseOwner(1), 3);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.bytes_in_use(), 10);
  SPECDEC_EXPECT_OK(t.Acquire(keep, 2).status());
}

}  // namespace
}  // namespace specdec::services
