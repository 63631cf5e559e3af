#include "services/router/remote_sides.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/util/clock.h"
#include "common/util/status_macros.h"
#include "services/common/lookup_weighing_proto.h"
#include "services/common/tensor_proto.h"

namespace specdec::services {
namespace {

v1::SamplingParams ToProto(const sampling::SamplingParams& s) {
  v1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_top_k(s.top_k);
  p.set_top_p(s.top_p);
  p.set_seed(s.seed);
  return p;
}

// Appends the rows of the [rows, F] tensor `src` to `dst` (same dtype and width; the target sends
// every feature block in one layout).
void AppendRows(const v1::Tensor& src, v1::Tensor* dst) {
  if (src.data().empty()) return;
  if (dst->data().empty() || dst->shape_size() != 2 || src.shape_size() != 2 ||
      dst->dtype() != src.dtype() || dst->shape(1) != src.shape(1)) {
    *dst = src;
    return;
  }
  dst->set_shape(0, dst->shape(0) + src.shape(0));
  dst->mutable_data()->append(src.data());
}

// A backend call the request's own cancellation ended is no backend failure.
bool ClientCancelled(const CallScope& scope) {
  return scope.cancel != nullptr && scope.cancel->cancelled();
}

absl::Status CancelledByClient() { return absl::CancelledError("cancelled by the client"); }

}  // namespace

RemoteTarget::RemoteTarget(Backends& backends, CallScope scope,
                           const engine::DecodeOptions& options, std::vector<int64_t> capture,
                           bool try_hosted)
    : backends_(backends),
      scope_(scope),
      options_(options),
      capture_(std::move(capture)),
      try_hosted_(try_hosted) {}

v1::TargetRequest RemoteTarget::PrefillRequest(std::span<const int32_t> prompt,
                                               const engine::PrefillAsk& ask) const {
  v1::TargetRequest r;
  v1::TargetPrefill* p = r.mutable_prefill();
  for (int32_t t : prompt) p->add_tokens(t);
  *p->mutable_sampling() = ToProto(options_.sampling);
  p->set_reserve_tokens(options_.max_new_tokens);
  p->set_return_logits(ask.logits);
  p->set_hosted_draft(hosted_);
  if (!hosted_ && ask.may_draft) {
    for (int64_t id : capture_) p->add_capture_layers(id);
  }
  return r;
}

absl::StatusOr<engine::PrefillResult> RemoteTarget::Prefill(std::span<const int32_t> prompt,
                                                            const engine::PrefillAsk& ask) {
  absl::StatusOr<v1::TargetResponse> got = absl::UnavailableError("no target replica tried");
  std::vector<size_t> tried;
  auto t0 = SteadyClock::now();
  while (true) {
    replica_ = backends_.Pick(backends_.targets(), "target", tried);
    if (!replica_) {
      return absl::UnavailableError(absl::StrCat("no healthy target replica (",
                                                 backends_.targets().Describe(),
                                                 "); last error: ", got.status().message()));
    }
    tried.push_back(*replica_);
    hosted_ = try_hosted_ && ask.may_draft && backends_.hosted_dflash(*replica_).has_value();
    auto opened = TargetClient::Open(backends_.target_stub(*replica_), scope_);
    if (opened.ok()) {
      client_ = *std::move(opened);
      t0 = SteadyClock::now();
      got = client_->Call(PrefillRequest(prompt, ask), "target prefill");
    } else {
      got = opened.status();
    }
    if (got.ok()) break;
    if (ClientCancelled(scope_)) return CancelledByClient();
    if (got.status().code() != absl::StatusCode::kUnavailable) return got.status();
    backends_.targets().MarkUnhealthy(*replica_);
    if (std::chrono::system_clock::now() >= scope_.deadline) {
      return absl::DeadlineExceededError("the deadline passed while looking for a target replica");
    }
  }
  const v1::TargetPrefillResult& p = got->prefill();
  handle_ = p.handle().id();
  AppendRows(p.features(), &features_);
  engine::PrefillResult r;
  r.first_token = p.first_token();
  r.queue_ms = p.queue_ms();
  r.network_ms = std::max(0.0, MsSince(t0) - p.compute_ms() - p.queue_ms());
  if (p.has_last_logits()) {
    ASSIGN_OR_RETURN(r.last_logits, TensorToFloats(p.last_logits(), "prefill.last_logits"));
  }
  return r;
}

int32_t RemoteTarget::HostedBlockSize() const {
  return hosted_ ? backends_.hosted_dflash(*replica_)->block_size() : 0;
}

v1::Tensor RemoteTarget::TakeFeatures() {
  v1::Tensor t = std::move(features_);
  features_.Clear();
  return t;
}

absl::Status RemoteTarget::Failed(const absl::Status& status) {
  if (ClientCancelled(scope_)) return CancelledByClient();
  Backends::NoteFailure(backends_.targets(), *replica_, status);
  return status;
}

absl::StatusOr<v1::TargetResponse> RemoteTarget::Call(const v1::TargetRequest& request,
                                                      const char* what) {
  absl::StatusOr<v1::TargetResponse> got = client_->Call(request, what);
  if (!got.ok()) return Failed(got.status());
  return got;
}

engine::StepResult RemoteTarget::FromResult(const v1::TargetVerifyResult& v, double ms) {
  engine::StepResult step;
  step.committed.assign(v.committed().begin(), v.committed().end());
  step.accepted = v.num_accepted();
  step.verify_ms = ms;
  step.batch_size = std::max(1, v.batch_size());
  step.pass_rows = v.pass_rows();
  step.pass_prompt_rows = v.pass_prompt_rows();
  step.pass_ms = v.compute_ms();
  step.draft_rows = v.draft_pass_rows();
  step.queue_ms = v.queue_ms();
  step.network_ms = std::max(0.0, ms - v.compute_ms() - v.queue_ms() - v.draft_ms());
  AppendRows(v.features(), &features_);
  return step;
}

absl::StatusOr<engine::StepResult> RemoteTarget::Verify(int32_t last, const engine::Draft& draft,
                                                        bool want_features) {
  v1::TargetRequest r;
  v1::TargetVerify* v = r.mutable_verify();
  v->set_handle(handle_);
  v->add_tokens(last);
  for (int32_t t : draft.tokens) v->add_tokens(t);
  if (!draft.parents.empty()) {
    v->add_tree_parents(-1);
    for (int32_t p : draft.parents) v->add_tree_parents(p + 1);
  }
  v->set_proposal(draft.proposal == engine::Proposal::kOneHot ? v1::TargetVerify::ONE_HOT
                                                              : v1::TargetVerify::SAMPLED);
  if (!draft.probs.empty()) {
    const int64_t vocab = backends_.target_info().vocab_size();
    const int64_t shape[] = {static_cast<int64_t>(draft.probs.size()) / vocab, vocab};
    *v->mutable_draft_probs() = FloatsToTensor(draft.probs, shape, v1::F32);
  }
  v->set_return_features(want_features);
  const auto t0 = SteadyClock::now();
  ASSIGN_OR_RETURN(v1::TargetResponse got, Call(r, "target verify"));
  engine::StepResult step = FromResult(got.verify(), MsSince(t0));
  step.drafted = static_cast<int32_t>(draft.tokens.size());
  return step;
}

absl::Status RemoteTarget::Run(int32_t last, const engine::RunPlan& plan,
                               const engine::StepSink& sink) {
  if (plan.max_tokens <= 1 && plan.block_size == 0) {  // one AR step: a plain verify
    ASSIGN_OR_RETURN(engine::StepResult step, Verify(last, engine::Draft{}, plan.features));
    step.wall_ms = step.verify_ms;
    sink(std::move(step));
    return absl::OkStatus();
  }
  const char* what = plan.block_size > 0          ? "target speculative run"
                     : plan.lookup.max_tokens > 0 ? "target lookup run"
                                                  : "target run";
  v1::TargetRequest r;
  v1::TargetRun* run = r.mutable_run();
  run->set_handle(handle_);
  run->set_last_token(last);
  run->set_max_tokens(plan.max_tokens);
  for (int32_t t : plan.stop_token_ids) run->add_stop_token_ids(t);
  run->set_draft_block_size(plan.block_size);
  run->set_max_ms(static_cast<float>(plan.max_ms));
  run->set_return_features(plan.features);
  if (plan.lookup.max_tokens > 0) {
    run->mutable_lookup()->set_max_tokens(plan.lookup.max_tokens);
    run->mutable_lookup()->set_min_match(plan.lookup.min_match);
    run->mutable_lookup()->set_min_tokens(plan.lookup.min_tokens);
    if (plan.lookup_weighing) {
      WeighingToProto(*plan.lookup_weighing, run->mutable_lookup()->mutable_weighing());
    }
  }
  auto t0 = SteadyClock::now();
  if (absl::Status s = client_->Send(r, what); !s.ok()) return Failed(s);
  while (true) {
    absl::StatusOr<v1::TargetResponse> got = client_->Next(what);
    if (!got.ok()) return Failed(got.status());
    const double ms = MsSince(t0);
    const v1::TargetVerifyResult& v = got->verify();
    engine::StepResult step = FromResult(v, ms);
    const int32_t rows = std::max(1, v.rows_verified());
    step.drafted = rows - 1;
    step.positions = rows - 1;
    step.draft_ms = v.draft_ms();
    step.wall_ms = ms;
    step.draft_error = v.draft_error();
    step.looked_up = v.looked_up();
    step.lookup_match = v.lookup_match();
    const bool more = sink(std::move(step));
    t0 = SteadyClock::now();
    if (!more || v.run_left() == 0) return absl::OkStatus();
  }
}

RemoteDrafter::RemoteDrafter(Backends& backends, size_t replica, CallScope scope,
                             const engine::DecodeOptions& options, RemoteTarget* target,
                             int32_t trained_block)
    : backends_(backends),
      replica_(replica),
      scope_(scope),
      options_(options),
      target_(target),
      dflash_(engine::IsDflash(options.method)),
      trained_block_(trained_block) {}

absl::StatusOr<v1::DrafterResponse> RemoteDrafter::Call(const v1::DrafterRequest& request,
                                                        const char* what) {
  absl::StatusOr<v1::DrafterResponse> got = client_->Call(request, what);
  if (got.ok()) return got;
  if (ClientCancelled(scope_)) return CancelledByClient();
  Backends::NoteFailure(*backends_.drafters(), replica_, got.status());
  return got;
}

absl::Status RemoteDrafter::Open(std::span<const int32_t> prompt) {
  auto opened = DrafterClient::Open(backends_.drafter_stub(replica_), scope_);
  if (!opened.ok()) {
    Backends::NoteFailure(*backends_.drafters(), replica_, opened.status());
    return opened.status();
  }
  client_ = *std::move(opened);
  v1::DrafterRequest o;
  o.mutable_open()->set_kind(dflash_ ? v1::DFLASH_DRAFTER : v1::AR_DRAFT_LM);
  *o.mutable_open()->mutable_sampling() = ToProto(options_.sampling);
  ASSIGN_OR_RETURN(v1::DrafterResponse r, Call(o, "drafter open"));
  handle_ = r.opened().id();
  if (dflash_) return absl::OkStatus();
  v1::DrafterRequest e;
  e.mutable_extend()->set_handle(handle_);
  for (int32_t t : prompt) e.mutable_extend()->add_tokens(t);
  return Call(e, "drafter extend").status();
}

absl::StatusOr<engine::Draft> RemoteDrafter::Propose(int32_t last,
                                                     const engine::DraftShape& shape) {
  v1::DrafterRequest r;
  engine::Draft d;
  if (dflash_) {
    v1::DraftBlock* b = r.mutable_draft_block();
    b->set_handle(handle_);
    b->set_last_token(last);
    b->set_block_size(shape.length + 1);
    // Every feature row since the last draft: one per committed token, however many steps
    // (speculative or AR) committed them.
    v1::Tensor features = target_->TakeFeatures();
    if (!features.data().empty()) *b->mutable_new_features() = std::move(features);
    d.proposal = engine::Proposal::kOneHot;
  } else if (options_.method == engine::Method::kDyspecTree) {
    v1::DraftTree* t = r.mutable_draft_tree();
    t->set_handle(handle_);
    t->set_last_token(last);
    t->set_budget(shape.tree_budget);
    t->set_max_depth(shape.length);
    t->set_threshold(options_.tree_threshold);
  } else {
    v1::DraftChain* c = r.mutable_draft_chain();
    c->set_handle(handle_);
    c->set_last_token(last);
    c->set_length(shape.length);
  }
  ASSIGN_OR_RETURN(v1::DrafterResponse got, Call(r, "drafter draft"));
  const v1::Drafted& drafted = got.drafted();
  d.tokens.assign(drafted.tokens().begin(), drafted.tokens().end());
  d.parents.assign(drafted.tree_parents().begin(), drafted.tree_parents().end());
  if (!drafted.probs().data().empty()) {
    ASSIGN_OR_RETURN(d.probs, TensorToFloats(drafted.probs(), "drafted.probs"));
  }
  std::vector<int32_t> depth(d.parents.size());
  for (size_t i = 0; i < d.parents.size(); ++i) {
    depth[i] = d.parents[i] < 0 ? 1 : depth[d.parents[i]] + 1;
    d.positions = std::max(d.positions, depth[i]);
  }
  if (d.parents.empty()) d.positions = static_cast<int32_t>(d.tokens.size());
  return d;
}

absl::Status RemoteDrafter::Accept(const engine::StepResult& step) {
  if (dflash_) return absl::OkStatus();  // the next block carries the committed rows' features
  v1::DrafterRequest c;
  c.mutable_commit()->set_handle(handle_);
  for (size_t i = 0; i + 1 < step.committed.size(); ++i) {
    c.mutable_commit()->add_accepted(step.committed[i]);
  }
  return Call(c, "drafter commit").status();
}

absl::StatusOr<engine::BlockChoice> RemotePolicy::ChooseBlockSize(
    std::span<const float> last_logits) {
  ReplicaSet* set = backends_.policies();
  if (set == nullptr) return absl::UnavailableError("no policy service is configured");
  std::optional<size_t> i = backends_.Pick(*set, "policy");
  if (!i) {
    return absl::UnavailableError(absl::StrCat("no healthy policy replica: ", set->Describe()));
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(
      std::min(deadline_, std::chrono::system_clock::now() + std::chrono::milliseconds(500)));
  v1::PredictBlockSizeRequest request;
  const int64_t shape[] = {static_cast<int64_t>(last_logits.size())};
  *request.mutable_logits() = FloatsToTensor(last_logits, shape, v1::F32);
  v1::PredictBlockSizeResponse response;
  grpc::Status s = backends_.policy_stub(*i)->PredictBlockSize(&ctx, request, &response);
  if (s.ok()) {
    return engine::BlockChoice{
        response.block_size(),
        std::vector<float>(response.acceptance().begin(), response.acceptance().end()),
        response.acceptance_temperature()};
  }
  absl::Status why(static_cast<absl::StatusCode>(s.error_code()),
                   absl::StrCat("policy ", set->address(*i), ": ", s.error_message()));
  Backends::NoteFailure(*set, *i, why);
  return why;
}

engine::LoopParts RemoteSides::Parts(const Backends& backends) const {
  engine::LoopParts parts;
  parts.target = target.get();
  parts.drafter = drafter.get();
  parts.policy = policy.get();
  parts.max_context = backends.target_info().max_context();
  parts.drafter_unavailable = drafter_unavailable;
  return parts;
}

RemoteSides ConnectSides(Backends& backends, CallScope scope,
                         const engine::DecodeOptions& options) {
  RemoteSides sides;
  const bool dflash = engine::IsDflash(options.method);
  if (options.method == engine::Method::kNgram) {  // the target drafts: lookup runs
    sides.target =
        std::make_unique<RemoteTarget>(backends, scope, options, std::vector<int64_t>(), false);
    return sides;
  }
  const bool try_hosted = dflash && backends.TargetDrafting();
  ReplicaSet* drafters = backends.drafters();
  bool use_drafter = false;  // a drafter replica serves this request: `replica`
  size_t replica = 0;
  if (options.method != engine::Method::kAr && drafters &&
      !(try_hosted && backends.AllTargetsHost())) {
    if (std::optional<size_t> picked = backends.Pick(*drafters, "drafter")) {
      use_drafter = true;
      replica = *picked;
    } else {
      sides.drafter_unavailable = absl::UnavailableError(
          absl::StrCat("no healthy drafter replica: ", drafters->Describe()));
    }
  }
  v1::ModelInfo info;
  if (dflash && use_drafter) {
    absl::StatusOr<v1::ModelInfo> got = backends.DrafterInfo(replica, scope.deadline);
    if (got.ok()) {
      info = *std::move(got);
    } else {
      Backends::NoteFailure(*drafters, replica, got.status());
      sides.drafter_unavailable = got.status();
      use_drafter = false;
    }
  }
  std::vector<int64_t> capture(info.target_layer_ids().begin(), info.target_layer_ids().end());
  sides.target =
      std::make_unique<RemoteTarget>(backends, scope, options, std::move(capture), try_hosted);
  if (use_drafter) {
    sides.drafter = std::make_unique<RemoteDrafter>(backends, replica, scope, options,
                                                    sides.target.get(), info.block_size());
  }
  if (options.method == engine::Method::kDflashAdaptive && backends.policies()) {
    sides.policy = std::make_unique<RemotePolicy>(backends, scope.deadline);
  }
  return sides;
}

}  // namespace specdec::services
