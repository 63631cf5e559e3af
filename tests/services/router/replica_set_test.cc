// ReplicaSet against real gRPC servers on loopback that expose only the standard health service:
// round robin over healthy replicas, marking down on failure, probes that bring replicas back,
// NOT_SERVING and dead servers, and the validation of the address list.
#include "services/router/replica_set.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "services/common/server.h"

namespace specdec::services {
namespace {

using ::testing::HasSubstr;

class ReplicaSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      auto s = StartServer("127.0.0.1:0", {}, {});
      ASSERT_TRUE(s.ok()) << s.status();
      addresses_.push_back("127.0.0.1:" + std::to_string(s->port));
      servers_.push_back(std::move(*s));
    }
  }
  std::unique_ptr<ReplicaSet> Make(std::vector<std::string> addresses) {
    ReplicaSet::Options o;
    o.service = "target";
    o.addresses = std::move(addresses);
    o.probe_interval = std::chrono::hours(1);  // the tests probe explicitly
    o.on_change = [this](size_t i, bool healthy) {
      std::lock_guard<std::mutex> lock(mu_);
      changes_.push_back({i, healthy});
    };
    auto set = ReplicaSet::Create(std::move(o));
    EXPECT_TRUE(set.ok()) << set.status();
    return set.ok() ? *std::move(set) : nullptr;
  }
  std::map<size_t, int> PickCounts(ReplicaSet& set, int n) {
    std::map<size_t, int> counts;
    for (int i = 0; i < n; ++i) {
      auto p = set.Pick();
      if (p) ++counts[*p];
    }
    return counts;
  }

  std::vector<StartedServer> servers_;
  std::vector<std::string> addresses_;
  std::mutex mu_;
  std::vector<std::pair<size_t, bool>> changes_;
};

TEST_F(ReplicaSetTest, RoundRobinOverHealthyReplicas) {
  auto set = Make(addresses_);
  set->ProbeAll();
  EXPECT_EQ(set->healthy_count(), 3u);
  auto counts = PickCounts(*set, 30);
  EXPECT_EQ(counts, (std::map<size_t, int>{{0, 10}, {1, 10}, {2, 10}}));
  // `exclude` skips replicas a request already tried.
  for (int i = 0; i < 6; ++i) {
    auto p = set->Pick({0, 2});
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(*p, 1u);
  }
  EXPECT_FALSE(set->Pick({0, 1, 2}).has_value());
}

TEST_F(ReplicaSetTest, MarkedDownUntilAProbeSaysServing) {
  auto set = Make(addresses_);
  set->MarkUnhealthy(1);
  EXPECT_FALSE(set->healthy(1));
  auto counts = PickCounts(*set, 20);
  EXPECT_EQ(counts.count(1), 0u);
  EXPECT_EQ(counts[0] + counts[2], 20);
  EXPECT_THAT(set->Describe(), HasSubstr(addresses_[1] + " (down)"));
  set->ProbeAll();  // the server is fine: back in rotation
  EXPECT_TRUE(set->healthy(1));
  EXPECT_EQ(PickCounts(*set, 30)[1], 10);
  std::lock_guard<std::mutex> lock(mu_);
  // Initial healthy reports for 3 replicas, then down and up for replica 1.
  ASSERT_EQ(changes_.size(), 5u);
  EXPECT_EQ(changes_[3], (std::pair<size_t, bool>{1, false}));
  EXPECT_EQ(changes_[4], (std::pair<size_t, bool>{1, true}));
}

TEST_F(ReplicaSetTest, DeadAndNotServingReplicasAreLeftOut) {
  auto set = Make(addresses_);
  servers_[0].server->GetHealthCheckService()->SetServingStatus(false);  // draining
  servers_[2].server->Shutdown();                                        // gone
  servers_[2].server->Wait();
  set->ProbeAll();
  EXPECT_FALSE(set->healthy(0));
  EXPECT_TRUE(set->healthy(1));
  EXPECT_FALSE(set->healthy(2));
  EXPECT_EQ(PickCounts(*set, 9), (std::map<size_t, int>{{1, 9}}));
  servers_[1].server->Shutdown();
  servers_[1].server->Wait();
  set->ProbeAll();
  EXPECT_EQ(set->healthy_count(), 0u);
  EXPECT_FALSE(set->Pick().has_value());
  servers_[0].server->GetHealthCheckService()->SetServingStatus(true);
  set->ProbeAll();
  EXPECT_EQ(PickCounts(*set, 4), (std::map<size_t, int>{{0, 4}}));
}

TEST_F(ReplicaSetTest, BackgroundProbesFindAReplicaThatCameBack) {
  ReplicaSet::Options o;
  o.service = "drafter";
  o.addresses = {addresses_[0]};
  o.probe_interval = std::chrono::milliseconds(20);
  auto set = ReplicaSet::Create(std::move(o));
  ASSERT_TRUE(set.ok());
  (*set)->MarkUnhealthy(0);
  for (int i = 0; i < 200 && !(*set)->healthy(0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE((*set)->healthy(0));
}

TEST(ReplicaSetOptions, BadAddressListsAreClearErrors) {
  ReplicaSet::Options o;
  o.service = "target";
  auto empty = ReplicaSet::Create(o);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("no target address"));
  o.addresses = {"127.0.0.1:1", "127.0.0.1:1"};
  auto twice = ReplicaSet::Create(o);
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("listed twice"));
}

TEST(SplitAddresses, CommasAndSpaces) {
  EXPECT_EQ(SplitAddresses(" a:1, b:2 ,,c:3 "), (std::vector<std::string>{"a:1", "b:2", "c:3"}));
  EXPECT_TRUE(SplitAddresses("").empty());
  EXPECT_TRUE(SplitAddresses(" , ").empty());
}

}  // namespace
}  // namespace specdec::services
