// The router's warm-up request over real loopback services (the cluster fixture's checkpoints):
// it measures the passes' costs for the block choice, shares no acceptance, and is refused
// where no DFlash drafter is served.
#include "services/router/warmup.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <memory>

#include "services/router/backends.h"
#include "services/router/router_metrics.h"
#include "tests/services/router/cluster_fixture.h"

namespace specdec::services {
namespace {

using cluster_testing::Checkpoints;

class WarmUpTest : public testing::Test {
 protected:
  // A target service, hosting the DFlash drafter when `hosted`, and Backends on it.
  void Start(bool hosted) {
    TargetServerOptions to;
    to.address = "127.0.0.1:0";
    to.metrics_address = "";
    to.model_dir = Checkpoints().target;
    if (hosted) to.dflash_dir = Checkpoints().dflash;
    to.threads = 1;
    auto target = TargetServer::Start(to);
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = *std::move(target);
    RouterServerOptions ro;
    ro.target_address = "127.0.0.1:" + std::to_string(target_->port());
    auto backends = Backends::Connect(ro, &metrics_);
    ASSERT_TRUE(backends.ok()) << backends.status();
    backends_ = *std::move(backends);
  }
  RequestDefaults Defaults() const {
    RequestDefaults d;
    d.method = backends_->DefaultMethod();
    d.max_new_tokens = 128;
    d.limits = {backends_->target_info().vocab_size(), backends_->target_info().max_context()};
    d.model_names = {backends_->target_info().name()};
    return d;
  }

  prometheus::Registry registry_;
  RouterMetrics metrics_{registry_};
  std::unique_ptr<TargetServer> target_;
  std::unique_ptr<Backends> backends_;
};

TEST_F(WarmUpTest, MeasuresEveryCandidatesCostsAndSharesNoAcceptance) {
  Start(/*hosted=*/true);
  engine::BlockCostModel model;
  auto result = WarmUp(*backends_, model, nullptr, Defaults(), {.max_new_tokens = 64});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens.size(), 64u);
  EXPECT_GT(result->stats.drafted_tokens, 0);
  // Its decisions took the candidates in turn: AR's pass and the drafted blocks' are measured.
  EXPECT_GE(model.NextDecision(), 16);
  EXPECT_GT(model.StepMs(1, 1), 0);
  EXPECT_GT(model.StepMs(1, 5), 0);
  // Its acceptance, on a prompt nobody sent, is not the machine's.
  double weight = 0;
  model.AcceptedShare(0, 0, &weight);
  EXPECT_EQ(weight, 0);
  EXPECT_EQ(model.SpeculativeSteps(), 0);
}

TEST_F(WarmUpTest, NothingToChooseWithoutADflashDrafter) {
  Start(/*hosted=*/false);
  engine::BlockCostModel model;
  auto result = WarmUp(*backends_, model, nullptr, Defaults(), {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_EQ(model.StepMs(1, 1), 0);
}

}  // namespace
}  // namespace specdec::services
