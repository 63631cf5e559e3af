#include "services/target/target_service.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/engine/draft_session.h"
#include "common/engine/prompt_lookup.h"
#include "common/engine/request_limits.h"
#include "common/engine/stop_rule.h"
#include "common/engine/target_session.h"
#include "common/model/dflash_drafter.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/util/clock.h"
#include "common/util/status_macros.h"
#include "services/common/handle_table.h"
#include "services/common/lookup_weighing_proto.h"
#include "services/common/model_info.h"
#include "services/common/run_server.h"
#include "services/common/server.h"
#include "services/common/session_loop.h"
#include "services/common/tensor_proto.h"
#include "services/common/weights_revision.h"
#include "services/target/pass_planner.h"
#include "services/target/server_run.h"
#include "services/target/target_metrics.h"
#include "specdec/v1/target.grpc.pb.h"

namespace specdec::services {
namespace {

using Clock = SteadyClock;

// A verify pass: a TargetVerify, or a step of a TargetRun.
bool IsStep(const v1::TargetRequest& r) { return r.has_verify() || r.has_run(); }

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
    case v1::TargetRequest::kRun:
      return "run";
    default:
      return "none";
  }
}

// What a handle holds: the target's session and, with target-hosted drafting
// (TargetPrefill.hosted_draft), the hosted DFlash drafter's session. Scheduler thread only.
struct TargetEntry {
  std::unique_ptr<engine::TargetSession> target;
  std::unique_ptr<engine::DFlashDraftSession> draft;
  engine::LookupHistory tokens;  // the cached sequence, for runs that look up (TargetRun.lookup)
};

// Owns the model and the handles; runs every operation on the session loop's thread.
class TargetCore {
 public:
  using Loop = SessionLoop<v1::TargetRequest, v1::TargetResponse>;
  // `drafter` (optional) is bound to `model`: target-hosted drafting.
  TargetCore(std::unique_ptr<model::Transformer> model,
             std::unique_ptr<model::DFlashDrafter> drafter,
             HandleTable<TargetEntry>::Options table_options, TargetMetrics* metrics,
             const TargetServerOptions& batching)
      : model_(std::move(model)),
        drafter_(std::move(drafter)),
        table_(std::move(table_options)),
        metrics_(metrics),
        batch_prefill_max_rows_(batching.batch_prefill_max_rows),
        iteration_prefill_max_rows_(batching.iteration_prefill_max_rows > 0
                                        ? batching.iteration_prefill_max_rows
                                        : std::numeric_limits<int64_t>::max()) {
    SessionLoop<v1::TargetRequest, v1::TargetResponse>::Hooks h;
    h.execute = [this](uint64_t owner, const v1::TargetRequest& r, v1::TargetResponse* resp) {
      absl::Status s = Execute(owner, r, resp);
      if (IsStep(r) && s.ok()) metrics_->batch.Observe(1);
      UpdateGauges();
      return s;
    };
    h.execute_batch = [this](std::vector<Loop::Op>& ops) {
      ExecuteBatch(ops);
      UpdateGauges();
    };
    // A prompt alone in its iteration goes through the batch path too, to be prefilled in parts.
    h.batch_alone = [this](const v1::TargetRequest& r) {
      return r.has_prefill() && batch_prefill_max_rows_ > 0;
    };
    h.max_batch = static_cast<size_t>(std::max(1, batching.max_batch));
    h.batch_wait_max = std::chrono::microseconds(std::max(0, batching.batch_wait_max_us));
    h.observe = [this](const v1::TargetRequest& r, const absl::Status& s, double queued,
                       double compute, v1::TargetResponse* resp) {
      // The wait in the queue, for the router's StageTimings.queue_ms (a prompt prefilled in
      // parts: since its first part was queued), and a prefill's compute where its passes did
      // not report it (a verify reports its pass itself).
      if (resp->has_prefill()) {
        resp->mutable_prefill()->set_queue_ms(queued * 1000.0);
        if (resp->prefill().compute_ms() == 0) {
          resp->mutable_prefill()->set_compute_ms(compute * 1000.0);
        }
      }
      if (resp->has_verify()) resp->mutable_verify()->set_queue_ms(queued * 1000.0);
      if (s.ok() && resp->has_verify() && resp->verify().pass_rows() == 1) {
        const double ms = resp->verify().compute_ms(), prev = ar_step_ms_.load();
        ar_step_ms_.store(prev == 0 ? ms : 0.95 * prev + 0.05 * ms);
      }
      const char* op = OpName(r.op_case());
      metrics_->queue.Observe(queued);
      metrics_->compute.Add({{"op", op}}, TargetMetrics::Buckets()).Observe(compute);
      metrics_->Op(op, s.code());
    };
    h.follow_up = [this](uint64_t, const v1::TargetRequest& r, const absl::Status& s,
                         double elapsed,
                         v1::TargetResponse* resp) { return RunContinuation(r, s, elapsed, resp); };
    h.periodic = [this] {
      if (table_.ExpireIdle() > 0) UpdateGauges();
    };
    h.stream_done = [this](uint64_t owner) {
      parted_.erase(owner);
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
    loop_ = std::make_unique<SessionLoop<v1::TargetRequest, v1::TargetResponse>>(std::move(h));
  }

  grpc::ServerBidiReactor<v1::TargetRequest, v1::TargetResponse>* NewReactor() {
    return loop_->NewReactor();
  }

  const model::Transformer& model() const { return *model_; }
  const model::DFlashDrafter* drafter() const { return drafter_.get(); }
  // Running mean of the compute of lone one-row passes (ModelInfo.ar_step_ms), 0 until one ran.
  double ar_step_ms() const { return ar_step_ms_.load(); }
  HandleTable<TargetEntry>& table() { return table_; }
  TargetMetrics& metrics() { return *metrics_; }

 private:
  void UpdateGauges() {
    metrics_->kv_bytes.Set(static_cast<double>(table_.bytes_in_use()));
    metrics_->handles.Set(static_cast<double>(table_.size()));
  }

  void FillHandle(const std::string& id, const TargetEntry& e, v1::KvHandle* h) {
    h->set_id(id);
    h->set_replica(table_.replica());
    h->set_lease_ms(table_.lease().count());
    h->set_lease_expires_unix_ms(table_.LeaseExpiresUnixMs());
    h->set_length(e.target->length());
    h->set_cache_bytes(e.target->kv_bytes());
  }

  // KV bytes per token of the hosted drafter's context cache.
  int64_t DraftBytesPerToken() const {
    const auto& c = drafter_->config().layers;
    return 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim *
           static_cast<int64_t>(at::elementSize(model_->kv_dtype()));
  }

  absl::Status Execute(uint64_t owner, const v1::TargetRequest& r, v1::TargetResponse* resp) {
    switch (r.op_case()) {
      case v1::TargetRequest::kPrefill:
        return Prefill(owner, r.prefill(), resp);
      case v1::TargetRequest::kVerify:
      case v1::TargetRequest::kRun:
        return Verify(owner, r, resp);
      case v1::TargetRequest::kRelease: {
        RETURN_IF_ERROR(table_.Release(r.release().handle()));
        resp->mutable_released()->set_id(r.release().handle());
        return absl::OkStatus();
      }
      case v1::TargetRequest::kAttach: {
        RETURN_IF_ERROR(table_.Attach(r.attach().handle(), owner));
        ASSIGN_OR_RETURN(TargetEntry * e, table_.Acquire(r.attach().handle(), owner));
        FillHandle(r.attach().handle(), *e, resp->mutable_attached());
        return absl::OkStatus();
      }
      default:
        return absl::InvalidArgumentError(
            "request has no operation (prefill/verify/run/release/attach)");
    }
  }

  // A prefill operation decoded from its request, its handle created (and its KV memory
  // reserved) but its prompt not run yet.
  struct ParsedPrefill {
    const v1::TargetPrefill* request = nullptr;
    std::string id;
    TargetEntry* entry = nullptr;
    std::vector<int32_t> tokens;
    int64_t done = 0;       // prompt rows in the cache (earlier parts of a prompt run in parts)
    int64_t rows = 0;       // the rows after those that this pass runs (0: all of them)
    double compute_ms = 0;  // its passes' time (every part's)
    int batch_size = 1;     // sequences in its (last) pass
  };

  absl::Status Prefill(uint64_t owner, const v1::TargetPrefill& p, v1::TargetResponse* resp) {
    ParsedPrefill pp;
    RETURN_IF_ERROR(ParsePrefill(owner, p, &pp));
    return FinishPrefill(pp, pp.entry->target->Prefill(pp.tokens), resp);
  }

  // The prompt of `owner`'s stream that an earlier iteration began to prefill in parts, moved into
  // `pp` with its entry acquired again (which renews its lease), or false when there is none.
  absl::StatusOr<bool> TakeParted(uint64_t owner, const v1::TargetPrefill& p, ParsedPrefill* pp) {
    auto it = parted_.find(owner);
    if (it == parted_.end()) return false;
    *pp = std::move(it->second);
    parted_.erase(it);
    ASSIGN_OR_RETURN(pp->entry, table_.Acquire(pp->id, owner));
    pp->request = &p;
    return true;
  }

  // A prompt, or the rest of one begun in parts, planned to run `rows` of its rows now.
  absl::Status StartPrefill(const Loop::Op& op, int64_t rows, ParsedPrefill* pp) {
    const v1::TargetPrefill& p = op.request->prefill();
    ASSIGN_OR_RETURN(const bool parted, TakeParted(op.owner, p, pp));
    if (!parted) RETURN_IF_ERROR(ParsePrefill(op.owner, p, pp));
    pp->rows = rows;
    return absl::OkStatus();
  }

  absl::Status ParsePrefill(uint64_t owner, const v1::TargetPrefill& p, ParsedPrefill* out) {
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
    int64_t bytes_per_token = model_->kv_bytes_per_token();
    auto entry = std::make_unique<TargetEntry>();
    if (p.hosted_draft()) {
      if (!drafter_) {
        return absl::FailedPreconditionError(
            "prefill.hosted_draft: this target replica hosts no DFlash drafter (start it with "
            "--dflash); draft on a drafter service instead");
      }
      const std::vector<int64_t>& ids = drafter_->config().target_layer_ids;
      if (!capture.empty() && capture != ids) {
        return absl::InvalidArgumentError(
            "prefill.capture_layers must be empty or equal the hosted drafter's target_layer_ids "
            "when hosted_draft is set");
      }
      capture = ids;
      bytes_per_token += DraftBytesPerToken();
      entry->draft = std::make_unique<engine::DFlashDraftSession>(*drafter_);
    }
    entry->target = std::make_unique<engine::TargetSession>(*model_, sp, capture);
    TargetEntry* e = entry.get();
    // Admission: reserve the whole request's KV memory up front.
    ASSIGN_OR_RETURN(out->id,
                     table_.Create(std::move(entry), want_tokens * bytes_per_token, owner));
    out->request = &p;
    out->entry = e;
    out->tokens.assign(p.tokens().begin(), p.tokens().end());
    return absl::OkStatus();
  }

  // Answers a parsed prefill with the outcome of its prompt's pass; a failed one frees its handle.
  absl::Status FinishPrefill(const ParsedPrefill& pp,
                             const absl::StatusOr<engine::PrefillOutcome>& out,
                             v1::TargetResponse* resp) {
    if (!out.ok()) {
      (void)table_.Release(pp.id);
      return out.status();
    }
    const v1::TargetPrefill& p = *pp.request;
    TargetEntry* e = pp.entry;
    e->tokens.Assign(pp.tokens);
    if (e->draft) e->draft->Extend(out->features);
    auto* res = resp->mutable_prefill();
    FillHandle(pp.id, *e, res->mutable_handle());
    res->set_first_token(out->first_token);
    if (p.return_logits()) {
      at::Tensor l = out->last_logits.contiguous();
      const int64_t shape[] = {l.numel()};
      *res->mutable_last_logits() =
          FloatsToTensor(std::span<const float>(l.data_ptr<float>(), l.numel()), shape, v1::F32);
    }
    if (out->features.defined() && !p.capture_layers().empty()) {
      *res->mutable_features() = FeaturesToTensor(out->features);
    }
    res->set_batch_size(pp.batch_size);
    res->set_compute_ms(pp.compute_ms);  // 0 when it ran alone: the loop's compute, in observe
    return absl::OkStatus();
  }

  static v1::Tensor FeaturesToTensor(const at::Tensor& f) {
    at::Tensor c = f.to(at::TensorOptions().device(at::kCPU).dtype(at::kFloat)).contiguous();
    const int64_t shape[] = {c.size(0), c.size(1)};
    return FloatsToTensor(std::span<const float>(c.data_ptr<float>(), c.numel()), shape, v1::BF16);
  }

  // A verify pass decoded from its request (a TargetVerify, or a step of a TargetRun): the
  // session, and the engine request with the storage its spans point into.
  struct ParsedVerify {
    TargetEntry* entry = nullptr;
    engine::TargetSession* session = nullptr;
    std::vector<int32_t> tokens, parents;
    std::vector<float> q;
    engine::VerifyRequest req;
    bool return_features = false;  // the client asked for them (hosted drafting always takes them)
    int32_t draft_rows = 0;        // rows to verify with a hosted draft block (>= 2), else 0
    bool lookup = false;           // a step of a run that looks up (TargetRun.lookup)
    bool looked_up = false;        // and its draft came from the lookup (it is in tokens)
    int32_t lookup_match = 0;      // the lookup's matched suffix length
    double draft_ms = 0;
    int32_t draft_pass_rows = 0;  // rows of the batched drafter pass that drafted its block
    std::string draft_error;
    double pass_ms = 0;     // compute of the forward pass that verified it
    int64_t pass_rows = 0;  // rows of that pass
    int64_t pass_prompt_rows = 0;  // of them, rows of prompts that joined the pass
  };

  // The next step of a server-side run, or nullopt when the run is over (server_run.h).
  std::optional<v1::TargetRequest> RunContinuation(const v1::TargetRequest& r,
                                                   const absl::Status& s, double elapsed,
                                                   v1::TargetResponse* resp) const {
    if (!s.ok() || !r.has_run() || !resp->has_verify()) return std::nullopt;
    int32_t left = 0;
    auto next =
        NextRunStep(r.run(), resp->verify(), elapsed * 1000.0, model_->max_context(), &left);
    resp->mutable_verify()->set_run_left(left);
    return next;
  }

  absl::Status ParseStep(uint64_t owner, const v1::TargetRequest& r, ParsedVerify* p) {
    return r.has_run() ? ParseRun(owner, r.run(), p) : ParseVerify(owner, r.verify(), p);
  }

  absl::Status AcquireSession(uint64_t owner, const std::string& handle, ParsedVerify* p) {
    ASSIGN_OR_RETURN(p->entry, table_.Acquire(handle, owner));
    p->session = p->entry->target.get();
    return absl::OkStatus();
  }

  absl::Status ParseVerify(uint64_t owner, const v1::TargetVerify& v, ParsedVerify* p) {
    RETURN_IF_ERROR(AcquireSession(owner, v.handle(), p));
    if (v.expected_length() != 0 && v.expected_length() != p->session->length()) {
      return absl::FailedPreconditionError(
          absl::StrCat("verify: handle holds ", p->session->length(),
                       " tokens, the client expected ", v.expected_length(), " (a step was lost)"));
    }
    p->tokens.assign(v.tokens().begin(), v.tokens().end());
    p->parents.assign(v.tree_parents().begin(), v.tree_parents().end());
    if (v.has_draft_probs()) {
      ASSIGN_OR_RETURN(p->q, TensorToFloats(v.draft_probs(), "verify.draft_probs"));
    }
    p->req.tokens = p->tokens;
    p->req.tree_parents = p->parents;
    p->req.proposal = v.proposal() == v1::TargetVerify::ONE_HOT ? engine::Proposal::kOneHot
                                                                : engine::Proposal::kSampled;
    p->req.draft_probs = p->q;
    p->return_features = v.return_features();
    // The hosted drafter takes the features of everything committed, whatever the step.
    p->req.want_features = v.return_features() || p->entry->draft != nullptr;
    return absl::OkStatus();
  }

  absl::Status ParseRun(uint64_t owner, const v1::TargetRun& run, ParsedVerify* p) {
    RETURN_IF_ERROR(ValidateRun(run));
    RETURN_IF_ERROR(AcquireSession(owner, run.handle(), p));
    const int32_t vocab = static_cast<int32_t>(model_->config().vocab_size);
    if (run.last_token() < 0 || run.last_token() >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("run.last_token: id ", run.last_token(), " outside [0, ", vocab, ")"));
    }
    p->tokens = {run.last_token()};
    p->req.tokens = p->tokens;
    p->req.proposal = engine::Proposal::kOneHot;
    p->return_features = run.return_features();
    p->req.want_features = run.return_features() || p->entry->draft != nullptr;
    if (run.lookup().max_tokens() > 0) {
      // A lookup draft, where the sequence repeats, takes the place of the step's hosted block.
      p->lookup = true;
      engine::LookupHistory& sequence = p->entry->tokens;
      const engine::LookupShape shape{run.lookup().max_tokens(),
                                      std::max(1, run.lookup().min_match()),
                                      std::max(1, run.lookup().min_tokens())};
      std::vector<int32_t> draft = sequence.DraftAfter(run.last_token(), shape, run.max_tokens(),
                                                       model_->max_context(), &p->lookup_match);
      if (run.lookup().has_weighing() && !draft.empty()) {
        // The run verifies what its weighing predicts pays (ValidateRun checked it).
        ASSIGN_OR_RETURN(const engine::LookupWeighing weighing,
                         WeighingFromProto(run.lookup().weighing()));
        const auto found = static_cast<int32_t>(draft.size());
        draft.resize(static_cast<size_t>(weighing.Tokens(found, p->lookup_match)));
      }
      p->tokens.insert(p->tokens.end(), draft.begin(), draft.end());
      p->req.tokens = p->tokens;
      p->looked_up = !draft.empty();
      if (!p->looked_up) p->lookup_match = 0;
    }
    if (run.draft_block_size() == 0 || p->looked_up) return absl::OkStatus();
    if (!p->entry->draft) {
      return absl::FailedPreconditionError(
          "run.draft_block_size: the handle has no hosted drafter session (prefill it with "
          "hosted_draft on a replica started with --dflash)");
    }
    // Never commit more than the run has left, nor write past the context.
    const int32_t rows = engine::BlockRows(run.draft_block_size(), run.max_tokens(),
                                           p->session->length(), model_->max_context());
    p->draft_rows = rows >= engine::kMinBlockSize ? rows : 0;
    return absl::OkStatus();
  }

  // Target-hosted drafting: drafts the blocks of every parsed verify that asks for one in one
  // batched drafter pass and appends them to its rows. A failed block leaves its verify a plain
  // AR step (lossless either way) and says why in its response.
  void DraftBlocks(std::span<ParsedVerify* const> ps) {
    std::vector<ParsedVerify*> todo;
    std::vector<engine::DFlashDraftSession*> sessions;
    std::vector<int32_t> lasts, sizes;
    for (ParsedVerify* p : ps) {
      if (p->draft_rows < 2) continue;
      todo.push_back(p);
      sessions.push_back(p->entry->draft.get());
      lasts.push_back(p->tokens[0]);
      sizes.push_back(p->draft_rows);
    }
    if (todo.empty()) return;
    const auto t0 = Clock::now();
    auto results = engine::DFlashDraftSession::DraftBlockBatch(sessions, lasts, sizes);
    const double ms = MsSince(t0);
    metrics_->draft_batch.Observe(static_cast<double>(todo.size()));
    int32_t rows = 0;
    for (int32_t s : sizes) rows += s;
    for (size_t k = 0; k < todo.size(); ++k) {
      ParsedVerify* p = todo[k];
      p->draft_ms = ms;
      p->draft_pass_rows = rows;
      if (results[k].ok()) {
        p->tokens.insert(p->tokens.end(), results[k]->begin(), results[k]->end());
      } else {
        p->draft_error = std::string(results[k].status().message());
        metrics_->draft_failures.Increment();
      }
      p->req.tokens = p->tokens;
    }
  }

  // After a verify committed: the cached sequence grows by row 0 and the accepted rows, and the
  // hosted drafter's context by their features (a view into the whole pass's output, which the
  // session copies into its pending buffer).
  static void KeepCommitted(const ParsedVerify& p, const engine::VerifyOutcome& o) {
    engine::LookupHistory& sequence = p.entry->tokens;
    sequence.Append(p.tokens[0]);
    sequence.Append(std::span<const int32_t>(o.committed).first(o.committed.size() - 1));
    if (p.entry->draft && o.features.defined()) p.entry->draft->Extend(o.features);
  }

  static void FillVerify(const ParsedVerify& p, const engine::VerifyOutcome& o, int batch_size,
                         v1::TargetResponse* resp) {
    auto* res = resp->mutable_verify();
    res->set_num_accepted(o.result.num_accepted);
    if (p.parents.empty()) {
      for (int32_t i = 1; i <= o.result.num_accepted; ++i) res->add_accepted_rows(i);
    } else {
      for (int32_t n : o.result.accepted_nodes) res->add_accepted_rows(n);
    }
    res->set_next_token(o.result.next_token);
    for (int32_t t : o.committed) res->add_committed(t);
    if (o.features.defined() && p.return_features) {
      *res->mutable_features() = FeaturesToTensor(o.features);
    }
    res->set_length(p.session->length());
    res->set_batch_size(batch_size);
    res->set_compute_ms(p.pass_ms);
    res->set_pass_rows(static_cast<int32_t>(p.pass_rows));
    res->set_pass_prompt_rows(static_cast<int32_t>(p.pass_prompt_rows));
    res->set_draft_pass_rows(p.draft_pass_rows);
    if (p.draft_rows >= 2 || p.lookup) {
      res->set_rows_verified(static_cast<int32_t>(p.tokens.size()));
    }
    res->set_looked_up(p.looked_up);
    res->set_lookup_match(p.lookup_match);
    if (p.draft_rows >= 2) {
      res->set_draft_ms(p.draft_ms);
      res->set_draft_error(p.draft_error);
    }
  }

  absl::Status Verify(uint64_t owner, const v1::TargetRequest& r, v1::TargetResponse* resp) {
    ParsedVerify p;
    RETURN_IF_ERROR(ParseStep(owner, r, &p));
    ParsedVerify* one[] = {&p};
    DraftBlocks(one);
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(engine::VerifyOutcome o, p.session->Verify(p.req));
    p.pass_ms = MsSince(t0);
    p.pass_rows = static_cast<int64_t>(p.tokens.size());
    KeepCommitted(p, o);
    FillVerify(p, o, 1, resp);
    return absl::OkStatus();
  }

  // The queued operations of one scheduler iteration, decoded.
  struct Batch {
    std::vector<ParsedVerify> verifies;
    std::vector<ParsedPrefill> prefills;
    PassPlanner planner;
  };

  PassItem ItemOf(const Batch& b, const Loop::Op& op, size_t i) const {
    PassItem item;
    item.prefill = op.request->has_prefill();
    if (item.prefill) {
      const engine::TargetSession& t = *b.prefills[i].entry->target;
      const ParsedPrefill& pp = b.prefills[i];
      item.rows = pp.rows > 0 ? pp.rows : static_cast<int64_t>(pp.tokens.size()) - pp.done;
      item.capture = t.WantsFeaturesOnPrefill() ? &t.capture_layers() : nullptr;
      return item;
    }
    const ParsedVerify& v = b.verifies[i];
    item.rows = std::max<int64_t>(v.draft_rows, static_cast<int64_t>(v.tokens.size()));
    item.capture = v.req.want_features ? &v.session->capture_layers() : nullptr;
    item.session = v.session;
    return item;
  }

  // The prompt rows each operation runs in this iteration (PrefillRows; 0 for the others).
  std::vector<int64_t> PromptRowsNow(const std::vector<Loop::Op>& ops, std::vector<int64_t>* rest) {
    std::vector<QueuedPrompt> prompts;
    rest->assign(ops.size(), 0);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i].request->has_prefill()) continue;
      auto it = parted_.find(ops[i].owner);
      (*rest)[i] =
          ops[i].request->prefill().tokens_size() - (it == parted_.end() ? 0 : it->second.done);
      prompts.push_back({(*rest)[i], it != parted_.end()});
    }
    const std::vector<int64_t> planned = PrefillRows(iteration_prefill_max_rows_, prompts);
    std::vector<int64_t> rows(ops.size(), 0);
    for (size_t i = 0, k = 0; i < ops.size(); ++i) {
      if (ops[i].request->has_prefill()) rows[i] = planned[k++];
    }
    return rows;
  }

  // Decodes every operation and places the forward passes' items (verifies first, so that
  // prompts fill the room they leave); prompt rows beyond the iteration's budget (PrefillRows)
  // wait for the next one; other operations run now, in queue order.
  void PlanBatch(std::vector<Loop::Op>& ops, Batch* b) {
    std::vector<int64_t> rest;
    const std::vector<int64_t> rows = PromptRowsNow(ops, &rest);
    for (size_t i = 0; i < ops.size(); ++i) {
      Loop::Op& op = ops[i];
      if (op.request->has_prefill() && batch_prefill_max_rows_ > 0) {
        op.deferred = rest[i] > 0 && rows[i] == 0;  // an empty prompt: ParsePrefill refuses it
        if (op.deferred) continue;
        op.status = StartPrefill(op, rows[i], &b->prefills[i]);
      } else if (IsStep(*op.request)) {
        op.status = ParseStep(op.owner, *op.request, &b->verifies[i]);
        if (op.status.ok()) b->planner.Place(i, ItemOf(*b, op, i));
      } else {
        op.status = Execute(op.owner, *op.request, op.response);
      }
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].request->has_prefill() && batch_prefill_max_rows_ > 0 && ops[i].status.ok() &&
          !ops[i].deferred) {
        b->planner.Place(i, ItemOf(*b, ops[i], i));
      }
    }
  }

  // One forward pass over a planned group: its prompts and its verifies.
  void RunPass(std::vector<Loop::Op>& ops, Batch& b, const std::vector<size_t>& pass,
               int64_t pass_rows) {
    std::vector<size_t> pi, vi;
    std::vector<engine::TargetSession*> psessions, vsessions;
    std::vector<std::span<const int32_t>> prompts;
    std::vector<int64_t> part_rows;
    std::vector<engine::VerifyRequest> reqs;
    int64_t prompt_rows = 0;
    for (size_t i : pass) {
      if (ops[i].request->has_prefill()) {
        pi.push_back(i);
        prompt_rows += ItemOf(b, ops[i], i).rows;
        psessions.push_back(b.prefills[i].entry->target.get());
        prompts.push_back(b.prefills[i].tokens);
        part_rows.push_back(b.prefills[i].rows);
      } else {
        vi.push_back(i);
        vsessions.push_back(b.verifies[i].session);
        reqs.push_back(b.verifies[i].req);
      }
    }
    const auto t0 = Clock::now();
    auto results = engine::TargetSession::RunBatch(psessions, prompts, vsessions, reqs, part_rows);
    const double pass_ms = MsSince(t0);
    if (!vi.empty()) metrics_->batch.Observe(static_cast<double>(vi.size()));
    for (size_t k = 0; k < pi.size(); ++k) {
      ParsedPrefill& pp = b.prefills[pi[k]];
      pp.batch_size = static_cast<int>(pass.size());
      pp.compute_ms += pass_ms;
      if (results.prefills[k].ok() && !results.prefills[k]->complete) {
        // More of the prompt to run: the operation goes on in the next iteration, unanswered.
        pp.done += pp.rows;
        ops[pi[k]].deferred = true;
        parted_[ops[pi[k]].owner] = std::move(pp);
        continue;
      }
      ops[pi[k]].status = FinishPrefill(pp, results.prefills[k], ops[pi[k]].response);
    }
    for (size_t k = 0; k < vi.size(); ++k) {
      ParsedVerify& v = b.verifies[vi[k]];
      v.pass_ms = pass_ms;
      v.pass_rows = pass_rows;
      v.pass_prompt_rows = prompt_rows;
      ops[vi[k]].status = results.verifies[k].status();
      if (!results.verifies[k].ok()) continue;
      KeepCommitted(v, *results.verifies[k]);
      FillVerify(v, *results.verifies[k], static_cast<int>(vi.size()), ops[vi[k]].response);
    }
  }

  // Continuous batching: the verify passes of different sessions run as batched forward passes
  // (PassPlanner: sessions that need different feature layers go in separate passes, a new
  // request's prompt joins a pass within batch_prefill_max_rows_ rows instead of costing the
  // running requests a pass of its own, and the prompt rows beyond iteration_prefill_max_rows_
  // wait for the next iteration: PrefillRows); every other operation runs on its own.
  void ExecuteBatch(std::vector<Loop::Op>& ops) {
    Batch b{std::vector<ParsedVerify>(ops.size()), std::vector<ParsedPrefill>(ops.size()),
            PassPlanner(batch_prefill_max_rows_)};
    PlanBatch(ops, &b);
    std::vector<ParsedVerify*> drafting;
    for (const auto& pass : b.planner.passes()) {
      for (size_t i : pass) {
        if (IsStep(*ops[i].request)) drafting.push_back(&b.verifies[i]);
      }
    }
    DraftBlocks(drafting);
    for (size_t g = 0; g < b.planner.passes().size(); ++g) {
      RunPass(ops, b, b.planner.passes()[g], b.planner.rows()[g]);
    }
  }

  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<model::DFlashDrafter> drafter_;  // bound to *model_; optional
  HandleTable<TargetEntry> table_;
  // Prompts being prefilled in parts, by stream (a stream has at most one operation in flight).
  absl::flat_hash_map<uint64_t, ParsedPrefill> parted_;
  std::atomic<double> ar_step_ms_{0};  // written on the scheduler thread only
  TargetMetrics* metrics_;
  const int64_t batch_prefill_max_rows_;
  const int64_t iteration_prefill_max_rows_;  // no limit: int64 max
  std::unique_ptr<Loop> loop_;  // last: stops first
};

class TargetServiceImpl final : public v1::Target::CallbackService {
 public:
  // `revision`, `dflash_revision`: WeightsRevision of the checkpoints ("" when unknown).
  TargetServiceImpl(TargetCore* core, std::string revision, std::string dflash_revision)
      : core_(core), revision_(std::move(revision)), dflash_revision_(std::move(dflash_revision)) {}

  grpc::ServerBidiReactor<v1::TargetRequest, v1::TargetResponse>* Session(
      grpc::CallbackServerContext*) override {
    return core_->NewReactor();
  }

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const v1::GetInfoRequest*,
                                    v1::ModelInfo* info) override {
    FillTransformerInfo(core_->model(), "target", info);
    info->set_revision(revision_);
    info->set_ar_step_ms(core_->ar_step_ms());
    if (const model::DFlashDrafter* d = core_->drafter()) {
      v1::DraftModelInfo* dm = info->add_draft_models();
      dm->set_kind(v1::DFLASH_DRAFTER);
      FillDFlashInfo(*d, dm->mutable_model());
      dm->mutable_model()->set_revision(dflash_revision_);
    }
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  TargetCore* core_;
  const std::string revision_, dflash_revision_;
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
  model::ConfigureKernelCache(options.kernel_cache_capacity);
  model::ConfigureComputeThreads(options.threads);
  ASSIGN_OR_RETURN(model::LoadOptions lo, model::LoadOptions::ForDtype(options.dtype));
  ASSIGN_OR_RETURN(lo.device, model::LoadOptions::ParseDevice(options.device));
  ASSIGN_OR_RETURN(auto m, model::Transformer::Load(options.model_dir, lo));
  std::unique_ptr<model::DFlashDrafter> drafter;
  if (!options.dflash_dir.empty()) {
    ASSIGN_OR_RETURN(drafter, model::DFlashDrafter::Load(options.dflash_dir, *m));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->metrics = std::make_unique<TargetMetrics>(impl->metrics_server.registry());
  const auto to = HandleTable<TargetEntry>::FromServerFlags(options);
  impl->core = std::make_unique<TargetCore>(std::move(m), std::move(drafter), to,
                                            impl->metrics.get(), options);
  ASSIGN_OR_RETURN(std::string revision, WeightsRevision(options.model_dir));
  std::string dflash_revision;
  if (!options.dflash_dir.empty()) {
    ASSIGN_OR_RETURN(dflash_revision, WeightsRevision(options.dflash_dir));
  }
  impl->service = std::make_unique<TargetServiceImpl>(impl->core.get(), std::move(revision),
                                                      std::move(dflash_revision));
  if (!options.metrics_address.empty()) {
    RETURN_IF_ERROR(impl->metrics_server.Listen(options.metrics_address));
  }
  ASSIGN_OR_RETURN(impl->server, StartServer(options.address, {impl->service.get()},
                                             {v1::Target::service_full_name()}, options.tls));
  return std::unique_ptr<TargetServer>(new TargetServer(std::move(impl)));
}

int TargetServer::port() const { return impl_->server.port; }
int TargetServer::metrics_port() const { return impl_->metrics_server.port(); }
prometheus::Registry& TargetServer::registry() { return impl_->metrics_server.registry(); }
size_t TargetServer::handles_in_use() const { return impl_->core->table().size(); }
int64_t TargetServer::kv_bytes_in_use() const { return impl_->core->table().bytes_in_use(); }

void TargetServer::Shutdown() {
  if (!impl_ || !impl_->server.server) return;
  StopServer(impl_->server, impl_->options.drain_ms);
  impl_->service.reset();
  impl_->core.reset();
}

int RunTargetServer(const TargetServerOptions& options) {
  return RunUntilSignal<TargetServer>("specdec-target", options);
}

}  // namespace specdec::services
