// The cluster over real loopback gRPC for the router's tests: four in-process servers on port 0
// (target, drafter, policy, router) over small random checkpoints written once per process.
#ifndef SPECDEC_TESTS_SERVICES_ROUTER_CLUSTER_FIXTURE_H_
#define SPECDEC_TESTS_SERVICES_ROUTER_CLUSTER_FIXTURE_H_

#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/model/block_pilot.h"
#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "services/drafter/drafter_service.h"
#include "services/policy/policy_service.h"
#include "services/router/router_service.h"
#include "services/target/target_service.h"
#include "specdec/v1/router.grpc.pb.h"
#include "tests/services/test_checkpoints.h"

namespace specdec::services::cluster_testing {

inline model::ModelConfig Config(int64_t hidden, int64_t layers) {
  model::ModelConfig c;
  c.architecture = model::Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 67;
  c.hidden_size = hidden;
  c.intermediate_size = 2 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = hidden / 4;
  c.max_position_embeddings = 512;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {66};
  return c;
}

struct Dirs {
  std::string target, draft, dflash, policy;
};

inline const Dirs& Checkpoints() {
  static const Dirs* d = [] {
    auto* d = new Dirs;
    auto tc = Config(32, 3);
    d->target = testing_util::WriteCheckpoint("cluster_target",
                                              model::Transformer::RandomWeights(tc, 1, 0.3),
                                              model::ModelConfigToJson(tc));
    auto dc = Config(16, 1);
    d->draft = testing_util::WriteCheckpoint("cluster_draft",
                                             model::Transformer::RandomWeights(dc, 2, 0.3),
                                             model::ModelConfigToJson(dc));
    model::DFlashConfig fc;
    fc.layers = Config(32, 1);
    fc.block_size = 5;
    fc.mask_token_id = 65;
    fc.target_layer_ids = {0, 2};
    d->dflash = testing_util::WriteCheckpoint("cluster_dflash",
                                              model::DFlashDrafter::RandomWeights(fc, 32, 3, 0.3),
                                              model::DFlashConfigToJson(fc));
    model::BlockPilotConfig pc;
    pc.vocab_size = 67;
    pc.hidden_size = 8;
    pc.training_block_size = 5;
    pc.block_sizes = {3, 4, 5, 6, 7};
    std::map<std::string, at::Tensor> pw;
    at::manual_seed(9);
    for (const auto& s : model::BlockPilot::WeightShapes(pc)) pw[s.name] = at::randn(s.shape);
    d->policy =
        testing_util::WriteCheckpoint("cluster_policy", pw, model::BlockPilotConfigToJson(pc));
    return d;
  }();
  return *d;
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override { StartAll(true, true); }

  void RestartRouterWithLoadAwareEpochMs(int ms) {
    router_.reset();
    StartRouter(ms);
  }
  void RestartRouterWithAdmission(int max_active, int max_queued, int queue_timeout_ms) {
    router_.reset();
    StartRouter(250, max_active, max_queued, queue_timeout_ms);
  }

  // `target_drafting`: the target hosts the DFlash drafter too (specdec-target --dflash).
  void StartAll(bool with_drafter, bool with_policy, bool target_drafting = false) {
    const Dirs& d = Checkpoints();
    TargetServerOptions to;
    to.address = "127.0.0.1:0";
    to.metrics_address = "";
    to.model_dir = d.target;
    if (target_drafting) to.dflash_dir = d.dflash;
    to.threads = 1;
    target_ = *TargetServer::Start(to);
    if (with_drafter) {
      DrafterServerOptions dopt;
      dopt.address = "127.0.0.1:0";
      dopt.metrics_address = "";
      dopt.target_dir = d.target;
      dopt.dflash_dir = d.dflash;
      dopt.draft_lm_dir = d.draft;
      dopt.threads = 1;
      dopt.drain_ms = 0;  // stopping it mid-request cuts its streams at once
      drafter_ = *DrafterServer::Start(dopt);
    }
    if (with_policy) {
      PolicyServerOptions po;
      po.address = "127.0.0.1:0";
      po.metrics_address = "";
      po.policy_dir = d.policy;
      policy_ = *PolicyServer::Start(po);
    }
    StartRouter(250);
  }
  void StartRouter(int load_aware_epoch_ms, int max_active = 64, int max_queued = 256,
                   int queue_timeout_ms = 10000) {
    RouterServerOptions ro;
    ro.load_aware_epoch_ms = load_aware_epoch_ms;
    ro.max_active_requests = max_active;
    ro.max_queued_requests = max_queued;
    ro.queue_timeout_ms = queue_timeout_ms;
    ro.address = "127.0.0.1:0";
    ro.metrics_address = "";
    ro.target_address = Addr(target_->port());
    // A drafter/policy address nobody listens on is how "configured but down" looks.
    ro.drafter_address = drafter_ ? Addr(drafter_->port()) : "127.0.0.1:1";
    ro.policy_address = policy_ ? Addr(policy_->port()) : "127.0.0.1:1";
    ro.tokenizer_dir = tokenizer_dir_;
    ro.http_address = "127.0.0.1:0";
    ro.api_keys_path = api_keys_path_;
    auto r = RouterServer::Start(ro);
    ASSERT_TRUE(r.ok()) << r.status();
    router_ = *std::move(r);
    stub_ = v1::Router::NewStub(
        grpc::CreateChannel(Addr(router_->port()), grpc::InsecureChannelCredentials()));
  }
  static std::string Addr(int port) { return "127.0.0.1:" + std::to_string(port); }

  struct Result {
    grpc::Status status;
    std::vector<int32_t> tokens;
    v1::Summary summary;
  };
  Result Generate(const v1::GenerateRequest& req, int timeout_ms = 30000,
                  v1::Router::Stub* stub = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    auto reader = (stub ? stub : stub_.get())->Generate(&ctx, req);
    Result r;
    v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
      if (resp.has_chunk()) {
        r.tokens.insert(r.tokens.end(), resp.chunk().token_ids().begin(),
                        resp.chunk().token_ids().end());
      } else {
        r.summary = resp.summary();
      }
    }
    r.status = reader->Finish();
    return r;
  }
  // Prompt p of the greedy-equality tests: 3 + 4p tokens.
  static std::vector<int32_t> TestPrompt(int p) {
    std::vector<int32_t> prompt;
    for (int j = 0; j < 3 + 4 * p; ++j) prompt.push_back((p * 13 + j * 7) % 60);
    return prompt;
  }
  static v1::GenerateRequest Request(const std::vector<int32_t>& prompt, v1::Method m, int n) {
    v1::GenerateRequest req;
    for (int32_t t : prompt) req.mutable_token_ids()->add_ids(t);
    req.set_method(m);
    req.set_max_new_tokens(n);
    req.set_ignore_eos(true);
    return req;
  }

  std::unique_ptr<TargetServer> target_;
  std::unique_ptr<DrafterServer> drafter_;
  std::unique_ptr<PolicyServer> policy_;
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<v1::Router::Stub> stub_;
  std::string tokenizer_dir_;  // the router's tokenizer (text prompts, stop strings); none if empty
  std::string api_keys_path_;  // the router's API keys file; none required if empty
};

}  // namespace specdec::services::cluster_testing

#endif  // SPECDEC_TESTS_SERVICES_ROUTER_CLUSTER_FIXTURE_H_
