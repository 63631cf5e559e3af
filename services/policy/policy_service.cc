#include "services/policy/policy_service.h"

#include <prometheus/counter.h>
#include <prometheus/histogram.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/model/block_pilot.h"
#include "common/util/status_macros.h"
#include "services/common/run_server.h"
#include "services/common/server.h"
#include "services/common/tensor_proto.h"
#include "services/common/weights_revision.h"
#include "specdec/v1/policy.grpc.pb.h"

namespace specdec::services {
namespace {

using Clock = std::chrono::steady_clock;

// Metric children resolved at startup; the hot path only increments.
struct PolicyMetrics {
  explicit PolicyMetrics(prometheus::Registry& r)
      : requests(prometheus::BuildCounter()
                     .Name("specdec_policy_requests_total")
                     .Help("PredictBlockSize calls by gRPC status code")
                     .Register(r)),
        ok(requests.Add({{"code", "OK"}})),
        invalid(requests.Add({{"code", "INVALID_ARGUMENT"}})),
        unavailable(requests.Add({{"code", "UNAVAILABLE"}})),
        predicted(prometheus::BuildCounter()
                      .Name("specdec_policy_block_size_predicted_total")
                      .Help("Block sizes chosen by BlockPilot")
                      .Register(r)),
        latency(prometheus::BuildHistogram()
                    .Name("specdec_policy_latency_seconds")
                    .Help("PredictBlockSize latency from arrival to answer")
                    .Register(r)
                    .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.002, 0.005,
                                                                     0.01, 0.02, 0.05, 0.1})),
        batch(prometheus::BuildHistogram()
                  .Name("specdec_policy_batch_size")
                  .Help("Requests per policy forward pass")
                  .Register(r)
                  .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32})) {}
  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Counter& ok;
  prometheus::Counter& invalid;
  prometheus::Counter& unavailable;
  prometheus::Family<prometheus::Counter>& predicted;
  prometheus::Histogram& latency;
  prometheus::Histogram& batch;
};

// The gRPC service. Handlers validate and enqueue; one loop thread owns the model and answers
// all pending requests with one batched forward pass.
class PolicyServiceImpl final : public v1::Policy::CallbackService {
 public:
  // `revision`: WeightsRevision of the checkpoint, also every prediction's policy_version.
  PolicyServiceImpl(std::unique_ptr<model::BlockPilot> policy, PolicyMetrics* metrics,
                    std::string revision)
      : policy_(std::move(policy)),
        metrics_(metrics),
        revision_(std::move(revision)),
        loop_([this] { Loop(); }) {}

  ~PolicyServiceImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    loop_.join();
  }

  grpc::ServerUnaryReactor* PredictBlockSize(grpc::CallbackServerContext* ctx,
                                             const v1::PredictBlockSizeRequest* req,
                                             v1::PredictBlockSizeResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    const auto t0 = Clock::now();
    auto logits = TensorToFloats(req->logits(), "logits");
    absl::Status s = logits.status();
    const int64_t vocab = policy_->config().vocab_size;
    if (s.ok() && static_cast<int64_t>(logits->size()) != vocab) {
      s = absl::InvalidArgumentError(absl::StrCat(
          "logits: expected ", vocab, " values (the target's vocabulary), got ", logits->size()));
    }
    if (!s.ok()) {
      metrics_->invalid.Increment();
      reactor->Finish(ToGrpc(s));
      return reactor;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        metrics_->unavailable.Increment();
        reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "policy is shutting down"));
        return reactor;
      }
      queue_.push_back({*std::move(logits), resp, reactor, t0});
    }
    cv_.notify_one();
    return reactor;
  }

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const v1::GetInfoRequest*,
                                    v1::ModelInfo* info) override {
    const auto& c = policy_->config();
    info->set_name("blockpilot");
    info->set_architecture("blockpilot");
    info->set_vocab_size(c.vocab_size);
    info->set_hidden_size(c.hidden_size);
    info->set_block_size(c.training_block_size);
    for (int32_t b : c.block_sizes) info->add_block_sizes(b);
    info->set_revision(revision_);
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  struct Item {
    std::vector<float> logits;
    v1::PredictBlockSizeResponse* resp;
    grpc::ServerUnaryReactor* reactor;
    Clock::time_point start;
  };

  void Loop() {
    while (true) {
      std::deque<Item> items;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty() && stopping_) return;
        items.swap(queue_);
      }
      std::vector<std::span<const float>> rows;
      for (const Item& it : items) rows.emplace_back(it.logits);
      auto preds = policy_->PredictBatch(rows);
      metrics_->batch.Observe(static_cast<double>(items.size()));
      for (size_t i = 0; i < items.size(); ++i) {
        Item& it = items[i];
        if (!preds.ok()) {
          metrics_->invalid.Increment();
          it.reactor->Finish(ToGrpc(preds.status()));
          continue;
        }
        const auto& p = (*preds)[i];
        it.resp->set_block_size(p.block_size);
        for (int32_t b : policy_->config().block_sizes) it.resp->add_candidates(b);
        for (float s : p.scores) it.resp->add_scores(s);
        for (float a : p.acceptance) it.resp->add_acceptance(a);
        if (!p.acceptance.empty()) {
          it.resp->set_acceptance_temperature(
              static_cast<float>(policy_->config().acceptance_temperature));
        }
        it.resp->set_policy_version(revision_);
        metrics_->predicted.Add({{"block_size", std::to_string(p.block_size)}}).Increment();
        metrics_->ok.Increment();
        metrics_->latency.Observe(std::chrono::duration<double>(Clock::now() - it.start).count());
        it.reactor->Finish(grpc::Status::OK);
      }
    }
  }

  std::unique_ptr<model::BlockPilot> policy_;
  PolicyMetrics* metrics_;
  const std::string revision_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread loop_;
};

}  // namespace

struct PolicyServer::Impl {
  PolicyServerOptions options;
  MetricsServer metrics_server;
  std::unique_ptr<PolicyMetrics> metrics;
  std::unique_ptr<PolicyServiceImpl> service;
  StartedServer server;
};

PolicyServer::PolicyServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PolicyServer::~PolicyServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<PolicyServer>> PolicyServer::Start(
    const PolicyServerOptions& options) {
  if (options.policy_dir.empty()) {
    return absl::InvalidArgumentError("--policy is required: a BlockPilot checkpoint directory");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  ASSIGN_OR_RETURN(auto policy, model::BlockPilot::Load(options.policy_dir));
  impl->metrics = std::make_unique<PolicyMetrics>(impl->metrics_server.registry());
  ASSIGN_OR_RETURN(std::string revision, WeightsRevision(options.policy_dir));
  impl->service = std::make_unique<PolicyServiceImpl>(std::move(policy), impl->metrics.get(),
                                                      std::move(revision));
  if (!options.metrics_address.empty()) {
    RETURN_IF_ERROR(impl->metrics_server.Listen(options.metrics_address));
  }
  ASSIGN_OR_RETURN(impl->server, StartServer(options.address, {impl->service.get()},
                                             {v1::Policy::service_full_name()}, options.tls));
  return std::unique_ptr<PolicyServer>(new PolicyServer(std::move(impl)));
}

int PolicyServer::port() const { return impl_->server.port; }
int PolicyServer::metrics_port() const { return impl_->metrics_server.port(); }
prometheus::Registry& PolicyServer::registry() { return impl_->metrics_server.registry(); }

void PolicyServer::Shutdown() {
  if (!impl_ || !impl_->server.server) return;
  StopServer(impl_->server, impl_->options.drain_ms);
  impl_->service.reset();
}

int RunPolicyServer(const PolicyServerOptions& options) {
  return RunUntilSignal<PolicyServer>("specdec-policy", options);
}

}  // namespace specdec::services
