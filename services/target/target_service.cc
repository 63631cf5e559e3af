#include "services/target/target_service.h"

#include <ATen/ATen.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/engine/target_session.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"
#include "services/common/handle_table.h"
#include "services/common/server.h"
#include "services/common/shutdown.h"
#include "services/common/tensor_proto.h"
#include "specdec/v1/target.grpc.pb.h"

namespace specdec::services {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

const char* OpName(v1::TargetRequest::OpCase op) {
  switch (op) {
    case v1::TargetRequest::kPrefill:
      return "prefill";
    case v1::TargetRequest::kVerify:
      return "verify";
    case v1::TargetRequest::kRelease:
      return "release";
    case v1::TargetRequest::kAttach:
      return "attach";
    default:
      return "none";
  }
}

// Metric children resolved at startup; the hot path only increments.
struct TargetMetrics {
  explicit TargetMetrics(prometheus::Registry& r)
      : ops(prometheus::BuildCounter()
                .Name("specdec_target_operations_total")
                .Help("Session operations by kind and gRPC status code")
                .Register(r)),
        compute(prometheus::BuildHistogram()
                    .Name("specdec_target_compute_seconds")
                    .Help("Forward compute per operation")
                    .Register(r)),
        queue(prometheus::BuildHistogram()
                  .Name("specdec_target_queue_seconds")
                  .Help("Time an operation waited for the scheduler")
                  .Register(r)
                  .Add({}, Buckets())),
        kv_bytes(prometheus::BuildGauge()
                     .Name("specdec_kv_cache_bytes")
                     .Help("KV-cache bytes accounted to live handles")
                     .Register(r)
                     .Add({{"service", "target"}})),
        handles(prometheus::BuildGauge()
                    .Name("specdec_kv_handles")
                    .Help("Live KV-cache handles")
                    .Register(r)
                    .Add({{"service", "target"}})),
        sessions(prometheus::BuildGauge()
                     .Name("specdec_active_sessions")
                     .Help("Open Session streams")
                     .Register(r)
                     .Add({{"service", "target"}})) {}
  static prometheus::Histogram::BucketBoundaries Buckets() {
    return {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2};
  }
  void Op(const char* op, absl::StatusCode code) {
    ops.Add({{"op", op}, {"code", absl::StatusCodeToString(code)}}).Increment();
  }
  prometheus::Family<prometheus::Counter>& ops;
  prometheus::Family<prometheus::Histogram>& compute;
  prometheus::Histogram& queue;
  prometheus::Gauge& kv_bytes;
  prometheus::Gauge& handles;
  prometheus::Gauge& sessions;
};

// What the scheduler needs to answer a stream; outlives the reactor (a cancelled stream's queued
// work still finds it, and then drops its answer).
struct StreamState {
  std::mutex mu;
  class SessionReactor* reactor = nullptr;  // null once the RPC is done
};

struct Work {
  std::shared_ptr<StreamState> stream;
  uint64_t owner = 0;
  v1::TargetRequest request;
  Clock::time_point enqueued;
};

class TargetCore;

class SessionReactor final : public grpc::ServerBidiReactor<v1::TargetRequest, v1::TargetResponse> {
 public:
  SessionReactor(TargetCore* core, uint64_t id);
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;
  // Queues a response (called by the scheduler thread).
  void Send(v1::TargetResponse response);

 private:
  void MaybeFinishLocked();
  TargetCore* core_;
  uint64_t id_;
  std::shared_ptr<StreamState> state_;
  v1::TargetRequest request_;
  std::mutex mu_;
  std::deque<v1::TargetResponse> outbox_;
  bool writing_ = false, reads_done_ = false, finished_ = false;
  int pending_ = 0;
};

// Owns the model, the handles and the scheduler loop thread that runs every operation.
class TargetCore {
 public:
  TargetCore(std::unique_ptr<model::Transformer> model,
             HandleTable<engine::TargetSession>::Options table_options, TargetMetrics* metrics)
      : model_(std::move(model)),
        table_(std::move(table_options)),
        metrics_(metrics),
        loop_([this] { Loop(); }) {}

  ~TargetCore() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    loop_.join();
  }

  void Enqueue(Work w) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(w));
    }
    cv_.notify_one();
  }

  void StreamDone(uint64_t owner) {
    table_.ReleaseOwner(owner);
    UpdateGauges();
  }

  const model::Transformer& model() const { return *model_; }
  HandleTable<engine::TargetSession>& table() { return table_; }
  TargetMetrics& metrics() { return *metrics_; }

 private:
  void UpdateGauges() {
    metrics_->kv_bytes.Set(static_cast<double>(table_.bytes_in_use()));
    metrics_->handles.Set(static_cast<double>(table_.size()));
  }

  void Loop() {
    while (true) {
      std::deque<Work> items;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_ || !queue_.empty(); });
        if (stopping_ && queue_.empty()) return;
        items.swap(queue_);
      }
      if (table_.ExpireIdle() > 0) UpdateGauges();
      for (Work& w : items) {
        v1::TargetResponse resp;
        resp.set_seq(w.request.seq());
        const char* op = OpName(w.request.op_case());
        metrics_->queue.Observe(MsSince(w.enqueued) / 1000.0);
        auto t0 = Clock::now();
        absl::Status s = Execute(w, &resp);
        metrics_->compute.Add({{"op", op}}, TargetMetrics::Buckets()).Observe(MsSince(t0) / 1000.0);
        metrics_->Op(op, s.code());
        if (!s.ok()) {
          resp.clear_result();
          auto* e = resp.mutable_error();
          e->set_code(static_cast<int>(s.code()));
          e->set_message(std::string(s.message()));
          if (s.code() == absl::StatusCode::kResourceExhausted) e->set_retry_after_ms(100);
        }
        UpdateGauges();
        std::lock_guard<std::mutex> lock(w.stream->mu);
        if (w.stream->reactor != nullptr) w.stream->reactor->Send(std::move(resp));
      }
    }
  }

  void FillHandle(const std::string& id, const engine::TargetSession& s, v1::KvHandle* h) {
    h->set_id(id);
    h->set_replica(table_.replica());
    h->set_length(s.length());
    h->set_cache_bytes(s.kv_bytes());
  }

  absl::Status Execute(const Work& w, v1::TargetResponse* resp) {
    const v1::TargetRequest& r = w.request;
    switch (r.op_case()) {
      case v1::TargetRequest::kPrefill:
        return Prefill(w, r.prefill(), resp);
      case v1::TargetRequest::kVerify:
        return Verify(w, r.verify(), resp);
      case v1::TargetRequest::kRelease: {
        RETURN_IF_ERROR(table_.Release(r.release().handle()));
        resp->mutable_released()->set_id(r.release().handle());
        return absl::OkStatus();
      }
      case v1::TargetRequest::kAttach: {
        RETURN_IF_ERROR(table_.Attach(r.attach().handle(), w.owner));
        ASSIGN_OR_RETURN(auto* s, table_.Acquire(r.attach().handle(), w.owner));
        FillHandle(r.attach().handle(), *s, resp->mutable_attached());
        return absl::OkStatus();
      }
      default:
        return absl::InvalidArgumentError(
            "request has no operation (prefill/verify/release/attach)");
    }
  }

  absl::Status Prefill(const Work& w, const v1::TargetPrefill& p, v1::TargetResponse* resp) {
    if (!p.handle().empty() || p.features_tail() != 0) {
      return absl::UnimplementedError(
          "prefill.handle (extending a cache) and prefill.features_tail are not supported yet");
    }
    if (p.tokens().empty()) return absl::InvalidArgumentError("prefill.tokens is empty");
    sampling::SamplingParams sp{p.sampling().temperature(), p.sampling().top_k(),
                                p.sampling().top_p() == 0.f ? 1.f : p.sampling().top_p(),
                                p.sampling().seed()};
    RETURN_IF_ERROR(sampling::ValidateSamplingParams(sp));
    const int64_t want_tokens =
        p.tokens_size() + static_cast<int64_t>(std::min<uint64_t>(p.reserve_tokens(), 1 << 20));
    if (want_tokens > model_->max_context()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prefill: ", p.tokens_size(), " prompt tokens + reserve_tokens ", p.reserve_tokens(),
          " exceed the maximum context of ", model_->max_context()));
    }
    std::vector<int64_t> capture(p.capture_layers().begin(), p.capture_layers().end());
    auto session = std::make_unique<engine::TargetSession>(*model_, sp, capture);
    engine::TargetSession* s = session.get();
    // Admission: reserve the whole request's KV memory up front.
    ASSIGN_OR_RETURN(
        std::string id,
        table_.Create(std::move(session), want_tokens * model_->kv_bytes_per_token(), w.owner));
    std::vector<int32_t> tokens(p.tokens().begin(), p.tokens().end());
    auto out = s->Prefill(tokens);
    if (!out.ok()) {
      (void)table_.Release(id);
      return out.status();
    }
    auto* res = resp->mutable_prefill();
    FillHandle(id, *s, res->mutable_handle());
    res->set_first_token(out->first_token);
    if (p.return_logits()) {
      at::Tensor l = out->last_logits.contiguous();
      const int64_t shape[] = {l.numel()};
      *res->mutable_last_logits() =
          FloatsToTensor(std::span<const float>(l.data_ptr<float>(), l.numel()), shape, v1::F32);
    }
    if (out->features.defined()) *res->mutable_features() = FeaturesToTensor(out->features);
    res->set_batch_size(1);
    return absl::OkStatus();
  }

  static v1::Tensor FeaturesToTensor(const at::Tensor& f) {
    at::Tensor c = f.to(at::kFloat).contiguous();
    const int64_t shape[] = {c.size(0), c.size(1)};
    return FloatsToTensor(std::span<const float>(c.data_ptr<float>(), c.numel()), shape, v1::BF16);
  }

  absl::Status Verify(const Work& w, const v1::TargetVerify& v, v1::TargetResponse* resp) {
    if (!v.draft_probs_sparse().empty() || v.return_logits() || v.return_top2_gaps() ||
        v.sibling_sampling() > 1) {
      return absl::UnimplementedError(
          "verify: sparse draft_probs, return_logits, return_top2_gaps and sibling sampling "
          "without replacement are not supported yet");
    }
    ASSIGN_OR_RETURN(engine::TargetSession * s, table_.Acquire(v.handle(), w.owner));
    if (v.expected_length() != 0 && v.expected_length() != s->length()) {
      return absl::FailedPreconditionError(absl::StrCat("verify: handle holds ", s->length(),
                                                        " tokens, the client expected ",
                                                        v.expected_length(), " (a step was lost)"));
    }
    std::vector<int32_t> tokens(v.tokens().begin(), v.tokens().end());
    std::vector<int32_t> parents(v.tree_parents().begin(), v.tree_parents().end());
    std::vector<float> q;
    if (v.has_draft_probs()) {
      ASSIGN_OR_RETURN(q, TensorToFloats(v.draft_probs(), "verify.draft_probs"));
    }
    engine::VerifyRequest req;
    req.tokens = tokens;
    req.tree_parents = parents;
    req.proposal = v.proposal() == v1::TargetVerify::ONE_HOT ? engine::Proposal::kOneHot
                                                             : engine::Proposal::kSampled;
    req.draft_probs = q;
    req.want_features = v.return_features();
    ASSIGN_OR_RETURN(engine::VerifyOutcome o, s->Verify(req));
    auto* res = resp->mutable_verify();
    res->set_num_accepted(o.result.num_accepted);
    if (parents.empty()) {
      for (int32_t i = 1; i <= o.result.num_accepted; ++i) res->add_accepted_rows(i);
    } else {
      for (int32_t n : o.result.accepted_nodes) res->add_accepted_rows(n);
    }
    res->set_next_token(o.result.next_token);
    for (int32_t t : o.committed) res->add_committed(t);
    if (o.features.defined()) *res->mutable_features() = FeaturesToTensor(o.features);
    res->set_length(s->length());
    res->set_batch_size(1);
    return absl::OkStatus();
  }

  std::unique_ptr<model::Transformer> model_;
  HandleTable<engine::TargetSession> table_;
  TargetMetrics* metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Work> queue_;
  bool stopping_ = false;
  std::thread loop_;
};

SessionReactor::SessionReactor(TargetCore* core, uint64_t id)
    : core_(core), id_(id), state_(std::make_shared<StreamState>()) {
  state_->reactor = this;
  core_->metrics().sessions.Increment();
  StartRead(&request_);
}

void SessionReactor::OnReadDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    reads_done_ = true;
    MaybeFinishLocked();
    return;
  }
  ++pending_;
  core_->Enqueue(Work{state_, id_, std::move(request_), Clock::now()});
  request_.Clear();
  StartRead(&request_);
}

void SessionReactor::Send(v1::TargetResponse response) {
  std::lock_guard<std::mutex> lock(mu_);
  --pending_;
  if (finished_) return;
  outbox_.push_back(std::move(response));
  if (!writing_) {
    writing_ = true;
    StartWrite(&outbox_.front());
  }
}

void SessionReactor::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  outbox_.pop_front();
  if (!ok) {
    writing_ = false;
    if (!finished_) {
      finished_ = true;
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "client stream closed"));
    }
    return;
  }
  if (!outbox_.empty() && !finished_) {
    StartWrite(&outbox_.front());
  } else {
    writing_ = false;
    MaybeFinishLocked();
  }
}

void SessionReactor::MaybeFinishLocked() {
  if (reads_done_ && pending_ == 0 && !writing_ && !finished_) {
    finished_ = true;
    Finish(grpc::Status::OK);
  }
}

void SessionReactor::OnCancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!finished_) {
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }
}

void SessionReactor::OnDone() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->reactor = nullptr;
  }
  core_->StreamDone(id_);  // closing the stream releases every handle it owns
  core_->metrics().sessions.Decrement();
  delete this;
}

class TargetServiceImpl final : public v1::Target::CallbackService {
 public:
  explicit TargetServiceImpl(TargetCore* core) : core_(core) {}

  grpc::ServerBidiReactor<v1::TargetRequest, v1::TargetResponse>* Session(
      grpc::CallbackServerContext*) override {
    return new SessionReactor(core_, next_stream_.fetch_add(1));
  }

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const v1::GetInfoRequest*,
                                    v1::ModelInfo* info) override {
    const auto& c = core_->model().config();
    info->set_name("target");
    info->set_architecture(model::ArchitectureName(c.architecture));
    info->set_vocab_size(c.vocab_size);
    info->set_hidden_size(c.hidden_size);
    info->set_num_layers(c.num_hidden_layers);
    info->set_max_context(core_->model().max_context());
    info->set_bos_token_id(c.bos_token_id ? *c.bos_token_id : -1);
    for (int32_t e : c.eos_token_ids) info->add_eos_token_ids(e);
    info->set_dtype(core_->model().dtype() == at::kBFloat16 ? "bf16" : "f32");
    info->set_device("cpu");
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  TargetCore* core_;
  std::atomic<uint64_t> next_stream_{1};
};

}  // namespace

struct TargetServer::Impl {
  TargetServerOptions options;
  MetricsServer metrics_server;
  std::unique_ptr<TargetMetrics> metrics;
  std::unique_ptr<TargetCore> core;
  std::unique_ptr<TargetServiceImpl> service;
  StartedServer server;
};

TargetServer::TargetServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TargetServer::~TargetServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<TargetServer>> TargetServer::Start(
    const TargetServerOptions& options) {
  if (options.model_dir.empty()) {
    return absl::InvalidArgumentError("--model is required: the target's checkpoint directory");
  }
  model::ConfigureComputeThreads(options.threads);
  model::LoadOptions lo;
  if (options.dtype == "f32") lo.dtype = at::kFloat;
  if (options.dtype == "bf16") lo.dtype = at::kBFloat16;
  ASSIGN_OR_RETURN(auto m, model::Transformer::Load(options.model_dir, lo));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->metrics = std::make_unique<TargetMetrics>(impl->metrics_server.registry());
  HandleTable<engine::TargetSession>::Options to;
  to.replica = options.replica;
  to.budget_bytes = options.kv_budget_bytes;
  to.lease = std::chrono::milliseconds(options.lease_ms);
  impl->core = std::make_unique<TargetCore>(std::move(m), to, impl->metrics.get());
  impl->service = std::make_unique<TargetServiceImpl>(impl->core.get());
  if (!options.metrics_address.empty()) {
    RETURN_IF_ERROR(impl->metrics_server.Listen(options.metrics_address));
  }
  ASSIGN_OR_RETURN(impl->server, StartServer(options.address, {impl->service.get()}));
  return std::unique_ptr<TargetServer>(new TargetServer(std::move(impl)));
}

int TargetServer::port() const { return impl_->server.port; }
int TargetServer::metrics_port() const { return impl_->metrics_server.port(); }
prometheus::Registry& TargetServer::registry() { return impl_->metrics_server.registry(); }
size_t TargetServer::handles_in_use() const { return impl_->core->table().size(); }
int64_t TargetServer::kv_bytes_in_use() const { return impl_->core->table().bytes_in_use(); }

void TargetServer::Shutdown() {
  if (!impl_ || !impl_->server.server) return;
  DrainAndShutdown(impl_->server.server.get(), impl_->options.drain_ms);
  impl_->server.server->Wait();
  impl_->server.server.reset();
  impl_->service.reset();
  impl_->core.reset();
}

int RunTargetServer(const TargetServerOptions& options) {
  auto server = TargetServer::Start(options);
  if (!server.ok()) {
    std::cerr << "specdec-target: " << server.status() << "\n";
    return 1;
  }
  std::cerr << "specdec-target: serving on port " << (*server)->port() << ", /metrics on port "
            << (*server)->metrics_port() << "\n";
  WaitForShutdownSignal();
  std::cerr << "specdec-target: draining\n";
  (*server)->Shutdown();
  return 0;
}

}  // namespace specdec::services
