#include "services/drafter/drafter_service.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/engine/draft_session.h"
#include "common/engine/request_limits.h"
#include "common/model/dflash_drafter.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"
#include "services/common/handle_table.h"
#include "services/common/model_info.h"
#include "services/common/run_server.h"
#include "services/common/server.h"
#include "services/common/session_loop.h"
#include "services/common/tensor_proto.h"
#include "services/common/weights_revision.h"
#include "specdec/v1/drafter.grpc.pb.h"

namespace specdec::services {
namespace {

const char* OpName(v1::DrafterRequest::OpCase op) {
  switch (op) {
    case v1::DrafterRequest::kOpen:
      return "open";
    case v1::DrafterRequest::kExtend:
      return "extend";
    case v1::DrafterRequest::kDraftBlock:
      return "draft_block";
    case v1::DrafterRequest::kDraftChain:
      return "draft_chain";
    case v1::DrafterRequest::kDraftTree:
      return "draft_tree";
    case v1::DrafterRequest::kCommit:
      return "commit";
    case v1::DrafterRequest::kRelease:
      return "release";
    case v1::DrafterRequest::kAttach:
      return "attach";
    default:
      return "none";
  }
}

struct DrafterMetrics {
  explicit DrafterMetrics(prometheus::Registry& r)
      : ops(prometheus::BuildCounter()
                .Name("specdec_drafter_operations_total")
                .Help("Session operations by kind and gRPC status code")
                .Register(r)),
        compute(prometheus::BuildHistogram()
                    .Name("specdec_drafter_compute_seconds")
                    .Help("Draft compute per operation")
                    .Register(r)),
        handles(prometheus::BuildGauge()
                    .Name("specdec_kv_handles")
                    .Help("Live KV-cache handles")
                    .Register(r)
                    .Add({{"service", "drafter"}})),
        kv_bytes(prometheus::BuildGauge()
                     .Name("specdec_kv_cache_bytes")
                     .Help("KV-cache bytes accounted to live handles")
                     .Register(r)
                     .Add({{"service", "drafter"}})),
        sessions(prometheus::BuildGauge()
                     .Name("specdec_active_sessions")
                     .Help("Open Session streams")
                     .Register(r)
                     .Add({{"service", "drafter"}})),
        batch(prometheus::BuildHistogram()
                  .Name("specdec_drafter_batch_size")
                  .Help("Sessions per batched DFlash draft pass")
                  .Register(r)
                  .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 3, 4, 6, 8, 12, 16, 24, 32,
                                                                   48, 64})) {}
  prometheus::Family<prometheus::Counter>& ops;
  prometheus::Family<prometheus::Histogram>& compute;
  prometheus::Gauge& handles;
  prometheus::Gauge& kv_bytes;
  prometheus::Gauge& sessions;
  prometheus::Histogram& batch;
};

// One request's draft state: exactly one of the two sessions.
struct DraftEntry {
  std::unique_ptr<engine::ArDraftSession> ar;
  std::unique_ptr<engine::DFlashDraftSession> dflash;
};

class DrafterCore {
 public:
  using Loop = SessionLoop<v1::DrafterRequest, v1::DrafterResponse>;
  DrafterCore(std::unique_ptr<model::Transformer> target,
              std::unique_ptr<model::DFlashDrafter> dflash,
              std::unique_ptr<model::Transformer> draft_lm,
              HandleTable<DraftEntry>::Options table_options, DrafterMetrics* metrics,
              int max_batch, int batch_wait_max_us)
      : target_(std::move(target)),
        dflash_(std::move(dflash)),
        draft_lm_(std::move(draft_lm)),
        table_(std::move(table_options)),
        metrics_(metrics) {
    SessionLoop<v1::DrafterRequest, v1::DrafterResponse>::Hooks h;
    h.execute = [this](uint64_t owner, const v1::DrafterRequest& r, v1::DrafterResponse* resp) {
      absl::Status s = Execute(owner, r, resp);
      if (r.has_draft_block() && s.ok()) metrics_->batch.Observe(1);
      UpdateGauges();
      return s;
    };
    h.execute_batch = [this](std::vector<Loop::Op>& ops) {
      ExecuteBatch(ops);
      UpdateGauges();
    };
    h.max_batch = static_cast<size_t>(std::max(1, max_batch));
    h.batch_wait_max = std::chrono::microseconds(std::max(0, batch_wait_max_us));
    h.observe = [this](const v1::DrafterRequest& r, const absl::Status& s, double, double c,
                       v1::DrafterResponse*) {
      const char* op = OpName(r.op_case());
      metrics_->ops.Add({{"op", op}, {"code", absl::StatusCodeToString(s.code())}}).Increment();
      metrics_->compute
          .Add({{"op", op}}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.002, 0.005,
                                                                     0.01, 0.02, 0.05, 0.1, 0.5})
          .Observe(c);
    };
    h.periodic = [this] {
      if (table_.ExpireIdle() > 0) UpdateGauges();
    };
    h.stream_done = [this](uint64_t owner) {
      table_.ReleaseOwner(owner);
      UpdateGauges();
    };
    h.sessions = [this](int d) { metrics_->sessions.Increment(d); };
    // Every tensor op runs on the scheduler thread, and none is ever differentiated: inference
    // mode for the thread's lifetime skips autograd bookkeeping on every op.
    h.thread_start = [] {
      static thread_local c10::InferenceMode inference;
      (void)inference;
    };
    loop_ = std::make_unique<SessionLoop<v1::DrafterRequest, v1::DrafterResponse>>(std::move(h));
  }

  grpc::ServerBidiReactor<v1::DrafterRequest, v1::DrafterResponse>* NewReactor() {
    return loop_->NewReactor();
  }
  HandleTable<DraftEntry>& table() { return table_; }
  const model::DFlashDrafter* dflash() const { return dflash_.get(); }
  const model::Transformer* draft_lm() const { return draft_lm_.get(); }

 private:
  void UpdateGauges() {
    metrics_->handles.Set(static_cast<double>(table_.size()));
    metrics_->kv_bytes.Set(static_cast<double>(table_.bytes_in_use()));
  }

  absl::StatusOr<DraftEntry*> Get(uint64_t owner, const std::string& handle) {
    return table_.Acquire(handle, owner);
  }

  absl::Status Execute(uint64_t owner, const v1::DrafterRequest& r, v1::DrafterResponse* resp) {
    switch (r.op_case()) {
      case v1::DrafterRequest::kOpen:
        return Open(owner, r.open(), resp);
      case v1::DrafterRequest::kExtend: {
        ASSIGN_OR_RETURN(DraftEntry * e, Get(owner, r.extend().handle()));
        RETURN_IF_ERROR(
            Extend(e, r.extend().tokens(), r.extend().features(), r.extend().has_features()));
        resp->mutable_extended()->set_id(r.extend().handle());
        return absl::OkStatus();
      }
      case v1::DrafterRequest::kDraftBlock: {
        ASSIGN_OR_RETURN(DraftEntry * e, PrepareDraftBlock(owner, r.draft_block()));
        ASSIGN_OR_RETURN(auto tokens, e->dflash->DraftBlock(r.draft_block().last_token(),
                                                            r.draft_block().block_size()));
        FillDrafted(tokens, resp);
        return absl::OkStatus();
      }
      case v1::DrafterRequest::kDraftChain: {
        const v1::DraftChain& c = r.draft_chain();
        ASSIGN_OR_RETURN(DraftEntry * e, Get(owner, c.handle()));
        if (!e->ar) return absl::FailedPreconditionError("handle is not an AR draft session");
        if (c.length() < 1 || c.length() > engine::kMaxDraftLength) {
          return absl::InvalidArgumentError(absl::StrCat("draft_chain.length must be in [1, ",
                                                         engine::kMaxDraftLength, "], got ",
                                                         c.length()));
        }
        ASSIGN_OR_RETURN(auto d, e->ar->DraftChain(c.last_token(), c.length()));
        auto* out = resp->mutable_drafted();
        for (int32_t t : d.tokens) out->add_tokens(t);
        SetProbs(d.probs, static_cast<int64_t>(d.tokens.size()), out);
        out->set_forward_passes(c.length());
        return absl::OkStatus();
      }
      case v1::DrafterRequest::kDraftTree: {
        const v1::DraftTree& t = r.draft_tree();
        ASSIGN_OR_RETURN(DraftEntry * e, Get(owner, t.handle()));
        if (!e->ar) return absl::FailedPreconditionError("handle is not an AR draft session");
        if (t.budget() < 1 || t.budget() > engine::kMaxTreeBudget || t.max_depth() < 1 ||
            t.max_depth() > engine::kMaxTreeDepth) {
          return absl::InvalidArgumentError(
              absl::StrCat("draft_tree.budget must be in [1, ", engine::kMaxTreeBudget,
                           "] and max_depth in [1, ", engine::kMaxTreeDepth, "], got ", t.budget(),
                           " and ", t.max_depth()));
        }
        engine::TreeParams tp;
        tp.budget = t.budget();
        tp.max_depth = t.max_depth();
        tp.threshold = t.threshold();
        ASSIGN_OR_RETURN(auto d, e->ar->DraftTree(t.last_token(), tp));
        auto* out = resp->mutable_drafted();
        for (int32_t i = 0; i < d.tree.size(); ++i) {
          out->add_tokens(d.tree.tokens[i]);
          out->add_tree_parents(d.tree.parents[i]);
          out->add_node_scores(static_cast<float>(d.tree.estimates[i]));
        }
        SetProbs(d.probs, d.tree.size() + 1, out);
        return absl::OkStatus();
      }
      case v1::DrafterRequest::kCommit: {
        ASSIGN_OR_RETURN(DraftEntry * e, Get(owner, r.commit().handle()));
        if (e->ar) {
          std::vector<int32_t> acc(r.commit().accepted().begin(), r.commit().accepted().end());
          RETURN_IF_ERROR(e->ar->Commit(acc));
        }
        resp->mutable_committed()->set_id(r.commit().handle());
        return absl::OkStatus();
      }
      case v1::DrafterRequest::kRelease:
        RETURN_IF_ERROR(table_.Release(r.release().handle()));
        resp->mutable_released()->set_id(r.release().handle());
        return absl::OkStatus();
      case v1::DrafterRequest::kAttach:
        RETURN_IF_ERROR(table_.Attach(r.attach().handle(), owner));
        resp->mutable_attached()->set_id(r.attach().handle());
        return absl::OkStatus();
      default:
        return absl::InvalidArgumentError("request has no operation");
    }
  }

  void SetProbs(const std::vector<float>& probs, int64_t rows, v1::Drafted* out) {
    if (probs.empty() || rows == 0) return;
    const int64_t shape[] = {rows, static_cast<int64_t>(probs.size()) / rows};
    *out->mutable_probs() = FloatsToTensor(probs, shape, v1::F32);
  }

  absl::Status Open(uint64_t owner, const v1::DrafterOpen& o, v1::DrafterResponse* resp) {
    sampling::SamplingParams sp{o.sampling().temperature(), o.sampling().top_k(),
                                o.sampling().top_p() == 0.f ? 1.f : o.sampling().top_p(),
                                o.sampling().seed()};
    RETURN_IF_ERROR(sampling::ValidateSamplingParams(sp));
    auto entry = std::make_unique<DraftEntry>();
    int64_t bytes = 0;
    const int64_t reserve = static_cast<int64_t>(std::min<uint64_t>(o.reserve_tokens(), 1 << 20));
    if (o.kind() == v1::DFLASH_DRAFTER) {
      if (!dflash_) return absl::UnavailableError("no DFlash drafter is loaded on this replica");
      entry->dflash = std::make_unique<engine::DFlashDraftSession>(*dflash_);
      const auto& c = dflash_->config().layers;
      bytes = reserve * 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim *
              static_cast<int64_t>(at::elementSize(target_->kv_dtype()));
    } else if (o.kind() == v1::AR_DRAFT_LM) {
      if (!draft_lm_) return absl::UnavailableError("no AR draft model is loaded on this replica");
      entry->ar = std::make_unique<engine::ArDraftSession>(*draft_lm_, sp);
      bytes = reserve * draft_lm_->kv_bytes_per_token();
    } else {
      return absl::InvalidArgumentError("open.kind must be DFLASH_DRAFTER or AR_DRAFT_LM");
    }
    ASSIGN_OR_RETURN(std::string id, table_.Create(std::move(entry), bytes, owner));
    resp->mutable_opened()->set_id(id);
    resp->mutable_opened()->set_replica(table_.replica());
    resp->mutable_opened()->set_lease_ms(table_.lease().count());
    resp->mutable_opened()->set_lease_expires_unix_ms(table_.LeaseExpiresUnixMs());
    return absl::OkStatus();
  }

  // Looks the DFlash session up and takes in the features the request carries.
  absl::StatusOr<DraftEntry*> PrepareDraftBlock(uint64_t owner, const v1::DraftBlock& b) {
    ASSIGN_OR_RETURN(DraftEntry * e, Get(owner, b.handle()));
    if (!e->dflash) return absl::FailedPreconditionError("handle is not a DFlash session");
    if (b.has_new_features()) RETURN_IF_ERROR(Extend(e, {}, b.new_features(), true));
    return e;
  }

  static void FillDrafted(const std::vector<int32_t>& tokens, v1::DrafterResponse* resp) {
    for (int32_t t : tokens) resp->mutable_drafted()->add_tokens(t);
    resp->mutable_drafted()->set_forward_passes(1);
  }

  // Continuous batching: the DFlash block drafts of different sessions run as one batched
  // drafter pass; every other operation runs on its own.
  void ExecuteBatch(std::vector<Loop::Op>& ops) {
    std::vector<size_t> blocks;
    std::vector<engine::DFlashDraftSession*> sessions;
    std::vector<int32_t> lasts, sizes;
    for (size_t i = 0; i < ops.size(); ++i) {
      Loop::Op& op = ops[i];
      if (!op.request->has_draft_block()) {
        op.status = Execute(op.owner, *op.request, op.response);
        continue;
      }
      auto e = PrepareDraftBlock(op.owner, op.request->draft_block());
      if (!e.ok()) {
        op.status = e.status();
        continue;
      }
      blocks.push_back(i);
      sessions.push_back((*e)->dflash.get());
      lasts.push_back(op.request->draft_block().last_token());
      sizes.push_back(op.request->draft_block().block_size());
    }
    if (blocks.empty()) return;
    auto results = engine::DFlashDraftSession::DraftBlockBatch(sessions, lasts, sizes);
    metrics_->batch.Observe(static_cast<double>(blocks.size()));
    for (size_t k = 0; k < blocks.size(); ++k) {
      Loop::Op& op = ops[blocks[k]];
      op.status = results[k].status();
      if (results[k].ok()) FillDrafted(*results[k], op.response);
    }
  }

  absl::Status Extend(DraftEntry* e, const google::protobuf::RepeatedField<int32_t>& tokens,
                      const v1::Tensor& features, bool has_features) {
    if (e->ar) {
      const int64_t vocab = draft_lm_->config().vocab_size;
      for (int32_t t : tokens) {
        if (t < 0 || t >= vocab) {
          return absl::InvalidArgumentError(
              absl::StrCat("extend.tokens: id ", t, " outside [0, ", vocab, ")"));
        }
      }
      std::vector<int32_t> v(tokens.begin(), tokens.end());
      e->ar->Extend(v);
      return absl::OkStatus();
    }
    if (!has_features) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::vector<float> f, TensorToFloats(features, "features"));
    const int64_t width = static_cast<int64_t>(dflash_->config().target_layer_ids.size()) *
                          target_->config().hidden_size;
    if (features.shape_size() != 2 || features.shape(1) != width) {
      return absl::InvalidArgumentError(
          absl::StrCat("features must be [m, ", width, "] (target layers x hidden)"));
    }
    // Extend copies the rows into the session's buffer, so a view of `f` will do.
    e->dflash->Extend(at::from_blob(f.data(), {features.shape(0), width}, at::kFloat)
                          .to(target_->activation_dtype()));
    return absl::OkStatus();
  }

  std::unique_ptr<model::Transformer> target_;
  std::unique_ptr<model::DFlashDrafter> dflash_;
  std::unique_ptr<model::Transformer> draft_lm_;
  HandleTable<DraftEntry> table_;
  DrafterMetrics* metrics_;
  std::unique_ptr<Loop> loop_;  // stops first
};

class DrafterServiceImpl final : public v1::Drafter::CallbackService {
 public:
  // `lm_revision`, `dflash_revision`: WeightsRevision of the draft checkpoints ("" when absent).
  DrafterServiceImpl(DrafterCore* core, std::string lm_revision, std::string dflash_revision)
      : core_(core),
        lm_revision_(std::move(lm_revision)),
        dflash_revision_(std::move(dflash_revision)) {}
  grpc::ServerBidiReactor<v1::DrafterRequest, v1::DrafterResponse>* Session(
      grpc::CallbackServerContext*) override {
    return core_->NewReactor();
  }
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const v1::GetInfoRequest*,
                                    v1::ModelInfo* info) override {
    // The top level describes the DFlash drafter when one is loaded, else the AR draft model;
    // draft_models lists both.
    v1::ModelInfo all;
    if (const model::Transformer* lm = core_->draft_lm()) {
      v1::DraftModelInfo* dm = all.add_draft_models();
      dm->set_kind(v1::AR_DRAFT_LM);
      FillTransformerInfo(*lm, "draft", dm->mutable_model());
      dm->mutable_model()->set_revision(lm_revision_);
    }
    if (const model::DFlashDrafter* d = core_->dflash()) {
      v1::DraftModelInfo* dm = all.add_draft_models();
      dm->set_kind(v1::DFLASH_DRAFTER);
      FillDFlashInfo(*d, dm->mutable_model());
      dm->mutable_model()->set_revision(dflash_revision_);
    }
    if (all.draft_models_size() > 0) {
      *info = all.draft_models(all.draft_models_size() - 1).model();
      *info->mutable_draft_models() = all.draft_models();
    }
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  DrafterCore* core_;
  const std::string lm_revision_, dflash_revision_;
};

}  // namespace

struct DrafterServer::Impl {
  DrafterServerOptions options;
  MetricsServer metrics_server;
  std::unique_ptr<DrafterMetrics> metrics;
  std::unique_ptr<DrafterCore> core;
  std::unique_ptr<DrafterServiceImpl> service;
  StartedServer server;
};

DrafterServer::DrafterServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DrafterServer::~DrafterServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<DrafterServer>> DrafterServer::Start(
    const DrafterServerOptions& options) {
  if (options.dflash_dir.empty() && options.draft_lm_dir.empty()) {
    return absl::InvalidArgumentError("give --dflash and/or --draft-lm: nothing to serve");
  }
  model::ConfigureKernelCache(options.kernel_cache_capacity);
  model::ConfigureComputeThreads(options.threads);
  ASSIGN_OR_RETURN(model::LoadOptions lo, model::LoadOptions::ForDtype(options.dtype));
  ASSIGN_OR_RETURN(lo.device, model::LoadOptions::ParseDevice(options.device));
  std::unique_ptr<model::Transformer> target, draft_lm;
  std::unique_ptr<model::DFlashDrafter> dflash;
  if (!options.dflash_dir.empty()) {
    if (options.target_dir.empty()) {
      return absl::InvalidArgumentError(
          "--target is required with --dflash: the drafter uses the target's embedding and head");
    }
    ASSIGN_OR_RETURN(target, model::Transformer::Load(options.target_dir, lo));
    ASSIGN_OR_RETURN(dflash, model::DFlashDrafter::Load(options.dflash_dir, *target));
  }
  if (!options.draft_lm_dir.empty()) {
    ASSIGN_OR_RETURN(draft_lm, model::Transformer::Load(options.draft_lm_dir, lo));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->metrics = std::make_unique<DrafterMetrics>(impl->metrics_server.registry());
  const auto to = HandleTable<DraftEntry>::FromServerFlags(options);
  impl->core = std::make_unique<DrafterCore>(std::move(target), std::move(dflash),
                                             std::move(draft_lm), to, impl->metrics.get(),
                                             options.max_batch, options.batch_wait_max_us);
  std::string lm_revision, dflash_revision;
  if (!options.draft_lm_dir.empty()) {
    ASSIGN_OR_RETURN(lm_revision, WeightsRevision(options.draft_lm_dir));
  }
  if (!options.dflash_dir.empty()) {
    ASSIGN_OR_RETURN(dflash_revision, WeightsRevision(options.dflash_dir));
  }
  impl->service = std::make_unique<DrafterServiceImpl>(impl->core.get(), std::move(lm_revision),
                                                       std::move(dflash_revision));
  if (!options.metrics_address.empty()) {
    RETURN_IF_ERROR(impl->metrics_server.Listen(options.metrics_address));
  }
  ASSIGN_OR_RETURN(impl->server, StartServer(options.address, {impl->service.get()},
                                             {v1::Drafter::service_full_name()}, options.tls));
  return std::unique_ptr<DrafterServer>(new DrafterServer(std::move(impl)));
}

int DrafterServer::port() const { return impl_->server.port; }
int DrafterServer::metrics_port() const { return impl_->metrics_server.port(); }
prometheus::Registry& DrafterServer::registry() { return impl_->metrics_server.registry(); }
size_t DrafterServer::handles_in_use() const { return impl_->core->table().size(); }

void DrafterServer::Shutdown() {
  if (!impl_ || !impl_->server.server) return;
  StopServer(impl_->server, impl_->options.drain_ms);
  impl_->service.reset();
  impl_->core.reset();
}

int RunDrafterServer(const DrafterServerOptions& options) {
  return RunUntilSignal<DrafterServer>("specdec-drafter", options);
}

}  // namespace specdec::services
