#include "services/router/router_service.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/stream_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_macros.h"
#include "services/common/run_server.h"
#include "services/common/server.h"
#include "services/router/admission.h"
#include "services/router/block_cost_model.h"
#include "services/router/load_aware.h"
#include "services/router/replica_set.h"
#include "services/router/stream_clients.h"
#include "specdec/v1/policy.grpc.pb.h"
#include "specdec/v1/router.grpc.pb.h"

namespace specdec::services {
namespace {

using Clock = std::chrono::steady_clock;

// At most this many tokens per server-side run of a load-aware request; a run is sized (at the
// measured step time) to end when its arm is next due to change (LoadAwareSpeculation's
// Step::holds), so that the request follows the next arm promptly.
constexpr int32_t kLoadAwareMaxRunTokens = 512;
// The most steps one server-side AR run may ask for (TargetVerify.run_steps); a longer AR stretch
// is several runs.
constexpr int32_t kMaxRunTokens = 4096;
// The largest block a target-hosted drafter drafts (TargetVerify.draft_block_size).
constexpr int32_t kMaxHostedBlock = 256;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
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

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30};
}

// Router metrics (DESIGN §6): vLLM's spec-decode counters under our prefix plus acceptance,
// block size, speedup, latency and outcome metrics. Children are created per label set on first
// use; the families are resolved once.
struct RouterMetrics {
  explicit RouterMetrics(prometheus::Registry& r)
      : drafts(prometheus::BuildCounter()
                   .Name("specdec_spec_decode_num_drafts_total")
                   .Help("Speculative steps (target verify passes with drafts)")
                   .Register(r)),
        draft_tokens(prometheus::BuildCounter()
                         .Name("specdec_spec_decode_num_draft_tokens_total")
                         .Help("Draft tokens proposed")
                         .Register(r)),
        accepted(prometheus::BuildCounter()
                     .Name("specdec_spec_decode_num_accepted_tokens_total")
                     .Help("Draft tokens accepted")
                     .Register(r)),
        accepted_pos(prometheus::BuildCounter()
                         .Name("specdec_spec_decode_num_accepted_tokens_per_pos_total")
                         .Help("Accepted draft tokens by draft position")
                         .Register(r)),
        step_tau(prometheus::BuildHistogram()
                     .Name("specdec_acceptance_length_step")
                     .Help("Tokens committed per target verify pass")
                     .Register(r)),
        request_tau(prometheus::BuildHistogram()
                        .Name("specdec_acceptance_length_request")
                        .Help("Mean acceptance length (tau) per request")
                        .Register(r)),
        block_size(prometheus::BuildCounter()
                       .Name("specdec_block_size_chosen_total")
                       .Help("DFlash block sizes used, per request")
                       .Register(r)),
        speedup(prometheus::BuildHistogram()
                    .Name("specdec_estimated_speedup")
                    .Help("Per request: generated tokens x measured AR step time / decode time")
                    .Register(r)),
        stage(prometheus::BuildHistogram()
                  .Name("specdec_stage_latency_seconds")
                  .Help("Per-request time in each stage")
                  .Register(r)),
        ttft(prometheus::BuildHistogram()
                 .Name("specdec_time_to_first_token_seconds")
                 .Help("Time to first token")
                 .Register(r)
                 .Add({}, LatencyBuckets())),
        itl(prometheus::BuildHistogram()
                .Name("specdec_inter_token_latency_seconds")
                .Help("Mean time between streamed tokens, per request")
                .Register(r)
                .Add({}, LatencyBuckets())),
        e2e(prometheus::BuildHistogram()
                .Name("specdec_request_latency_seconds")
                .Help("End-to-end request latency")
                .Register(r)
                .Add({}, LatencyBuckets())),
        outcomes(prometheus::BuildCounter()
                     .Name("specdec_requests_total")
                     .Help("Finished requests by gRPC status code")
                     .Register(r)),
        fallbacks(prometheus::BuildCounter()
                      .Name("specdec_fallbacks_total")
                      .Help("Requests that degraded (drafter -> AR, policy -> default size)")
                      .Register(r)),
        active(prometheus::BuildGauge()
                   .Name("specdec_active_requests")
                   .Help("Requests in flight")
                   .Register(r)
                   .Add({})),
        replica_healthy(prometheus::BuildGauge()
                            .Name("specdec_replica_healthy")
                            .Help("1 while a backend replica answers its health check SERVING")
                            .Register(r)),
        replica_picks(prometheus::BuildCounter()
                          .Name("specdec_replica_picks_total")
                          .Help("Requests sent to each backend replica")
                          .Register(r)),
        load_aware(prometheus::BuildCounter()
                       .Name("specdec_load_aware_choices_total")
                       .Help("Load-aware speculation epochs by load level (requests in flight) "
                             "and the arm chosen for them (AR or speculative)")
                       .Register(r)),
        queued(prometheus::BuildGauge()
                   .Name("specdec_queued_requests")
                   .Help("Requests waiting for admission (--max-active-requests)")
                   .Register(r)
                   .Add({})),
        queue_wait(prometheus::BuildHistogram()
                       .Name("specdec_queue_wait_seconds")
                       .Help("Time requests waited for admission")
                       .Register(r)
                       .Add({}, LatencyBuckets())),
        load_aware_steps(prometheus::BuildCounter()
                             .Name("specdec_load_aware_steps_total")
                             .Help("Steps of DFLASH_ADAPTIVE requests by the arm load-aware "
                                   "speculation ran them as")
                             .Register(r)),
        load_aware_rate(prometheus::BuildGauge()
                            .Name("specdec_load_aware_decode_rate")
                            .Help("Measured output tokens/s per request in flight by load level "
                                  "and arm (decayed mean over the arm's epochs)")
                            .Register(r)),
        load_aware_advantage(prometheus::BuildGauge()
                                 .Name("specdec_load_aware_log_advantage")
                                 .Help("Median log(speculative / AR epoch rate) over the recent "
                                       "paired epochs, by load level")
                                 .Register(r)),
        load_aware_pairs(prometheus::BuildGauge()
                             .Name("specdec_load_aware_pairs")
                             .Help("Paired epochs measured so far, by load level")
                             .Register(r)),
        load_aware_interval(prometheus::BuildGauge()
                                .Name("specdec_load_aware_explore_interval_epochs")
                                .Help("Epochs between explorations of the other arm, by load "
                                      "level (backoff included; 0: it does not explore, a "
                                      "lower level having found AR at least as fast)")
                                .Register(r)),
        load_aware_unmeasured(prometheus::BuildGauge()
                                  .Name("specdec_load_aware_unmeasured_epochs")
                                  .Help("Epochs whose steps were too slow to measure within the "
                                        "epoch, by load level (cumulative)")
                                  .Register(r)),
        load_aware_epoch(prometheus::BuildGauge()
                             .Name("specdec_load_aware_epoch_seconds")
                             .Help("Length of the load-aware epochs beginning now (the mean "
                                   "lifetime of finished requests, within the router's bounds)")
                             .Register(r)
                             .Add({})),
        load_aware_block(prometheus::BuildCounter()
                             .Name("specdec_load_aware_block_size_total")
                             .Help("Load-aware speculative runs by load level and the block size "
                                   "they drafted (the step-cost model's pick, at most "
                                   "BlockPilot's)")
                             .Register(r)) {}
  prometheus::Family<prometheus::Counter>& drafts;
  prometheus::Family<prometheus::Counter>& draft_tokens;
  prometheus::Family<prometheus::Counter>& accepted;
  prometheus::Family<prometheus::Counter>& accepted_pos;
  prometheus::Family<prometheus::Histogram>& step_tau;
  prometheus::Family<prometheus::Histogram>& request_tau;
  prometheus::Family<prometheus::Counter>& block_size;
  prometheus::Family<prometheus::Histogram>& speedup;
  prometheus::Family<prometheus::Histogram>& stage;
  prometheus::Histogram& ttft;
  prometheus::Histogram& itl;
  prometheus::Histogram& e2e;
  prometheus::Family<prometheus::Counter>& outcomes;
  prometheus::Family<prometheus::Counter>& fallbacks;
  prometheus::Gauge& active;
  prometheus::Family<prometheus::Gauge>& replica_healthy;
  prometheus::Family<prometheus::Counter>& replica_picks;
  prometheus::Family<prometheus::Counter>& load_aware;
  prometheus::Gauge& queued;
  prometheus::Histogram& queue_wait;
  prometheus::Family<prometheus::Counter>& load_aware_steps;
  prometheus::Family<prometheus::Gauge>& load_aware_rate;
  prometheus::Family<prometheus::Gauge>& load_aware_advantage;
  prometheus::Family<prometheus::Gauge>& load_aware_pairs;
  prometheus::Family<prometheus::Gauge>& load_aware_interval;
  prometheus::Family<prometheus::Gauge>& load_aware_unmeasured;
  prometheus::Gauge& load_aware_epoch;
  prometheus::Family<prometheus::Counter>& load_aware_block;
};

// Responses a worker produced, written one at a time by the reactor. Outlives the reactor.
struct Outbox {
  std::mutex mu;
  std::deque<v1::GenerateResponse> queue;
  bool writing = false, finish_requested = false, finished = false;
  grpc::Status status;
  std::atomic<bool> cancelled{false};
  class GenerateReactor* reactor = nullptr;  // null once the RPC is done
};

class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit GenerateReactor(std::shared_ptr<Outbox> box) : box_(std::move(box)) {
    box_->reactor = this;
  }
  // Called with box_->mu held.
  void Pump() {
    if (box_->finished || box_->writing) return;
    if (!box_->queue.empty()) {
      box_->writing = true;
      StartWrite(&box_->queue.front());
    } else if (box_->finish_requested) {
      box_->finished = true;
      Finish(box_->status);
    }
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(box_->mu);
    box_->queue.pop_front();
    box_->writing = false;
    if (!ok) {
      box_->cancelled = true;
      if (!box_->finished) {
        box_->finished = true;
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      }
      return;
    }
    Pump();
  }
  void OnCancel() override { box_->cancelled = true; }
  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(box_->mu);
      box_->reactor = nullptr;
      box_->cancelled = true;
    }
    delete this;
  }

 private:
  std::shared_ptr<Outbox> box_;
};

void Push(Outbox& box, v1::GenerateResponse r) {
  std::lock_guard<std::mutex> lock(box.mu);
  if (box.reactor == nullptr || box.finished) return;
  box.queue.push_back(std::move(r));
  box.reactor->Pump();
}

void FinishBox(Outbox& box, grpc::Status s) {
  std::lock_guard<std::mutex> lock(box.mu);
  if (box.reactor == nullptr || box.finished) return;
  box.finish_requested = true;
  box.status = std::move(s);
  box.reactor->Pump();
}

}  // namespace

struct RouterServer::Impl {
  RouterServerOptions options;
  MetricsServer metrics_server;
  std::unique_ptr<RouterMetrics> metrics;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::mutex drafter_info_mu;
  std::vector<std::optional<v1::ModelInfo>> drafter_info;  // per replica; reset when it goes down
  // Backends: replica sets (health, round robin) and one stub per replica.
  std::unique_ptr<ReplicaSet> targets, drafters, policies;
  std::vector<std::unique_ptr<v1::Target::Stub>> target_stubs;
  std::vector<std::unique_ptr<v1::Drafter::Stub>> drafter_stubs;
  std::vector<std::unique_ptr<v1::Policy::Stub>> policy_stubs;
  v1::ModelInfo target_info;
  bool drafter_has_dflash = false;  // some drafter replica serves DFlash (GetInfo at startup)
  // Per target replica: the DFlash drafter it hosts (its GetInfo at startup), if any; and
  // whether some / every replica hosts one. Read-only after Start.
  std::vector<std::optional<v1::ModelInfo>> hosted_dflash;
  bool any_hosted = false, all_hosted = false;
  bool TargetDrafting() const { return options.target_drafting && any_hosted; }
  v1::Method DefaultMethod() const {
    return (drafters && drafter_has_dflash) || TargetDrafting() ? v1::DFLASH_ADAPTIVE : v1::AR;
  }
  // The drafter replica's ModelInfo, asked once per replica (and again after it was down).
  absl::StatusOr<v1::ModelInfo> DrafterInfo(size_t i,
                                            std::chrono::system_clock::time_point deadline);
  // Picks a replica of `set`, counting the pick; nullopt when none is healthy.
  std::optional<size_t> Pick(ReplicaSet& set, const char* service,
                             const std::vector<size_t>& exclude = {}) {
    auto i = set.Pick(exclude);
    if (i) {
      metrics->replica_picks.Add({{"service", service}, {"address", set.address(*i)}}).Increment();
    }
    return i;
  }
  // Marks replica `i` down when `s` says the replica is gone.
  static void NoteFailure(ReplicaSet& set, size_t i, const absl::Status& s) {
    if (s.code() == absl::StatusCode::kUnavailable) set.MarkUnhealthy(i);
  }
  std::unique_ptr<grpc::Service> service;
  StartedServer server;
  std::mutex workers_mu;
  std::condition_variable workers_cv;
  int workers = 0;
  std::atomic<double> ar_step_ms{0};                 // running mean of single-token target steps
  std::atomic<int64_t> in_flight{0};                 // requests being served
  std::unique_ptr<LoadAwareSpeculation> load_aware;  // set in Start
  BlockCostModel block_model;                        // fed by every server-side run's steps
  std::unique_ptr<AdmissionQueue> admission;         // set in Start

  void Spawn(std::shared_ptr<Outbox> box, v1::GenerateRequest req,
             std::chrono::system_clock::time_point deadline) {
    {
      std::lock_guard<std::mutex> lock(workers_mu);
      ++workers;
    }
    std::thread([this, box, req = std::move(req), deadline] {
      const auto t0 = Clock::now();
      metrics->queued.Increment();
      double waited = 0;
      absl::Status s = admission->Admit(
          deadline, [&box] { return box->cancelled.load(); }, &waited);
      metrics->queued.Decrement();
      metrics->queue_wait.Observe(waited);
      if (s.ok()) {
        metrics->active.Increment();
        ++in_flight;
        const auto started = Clock::now();
        load_aware->RequestStarted(started);
        s = Serve(req, deadline, *box);
        --in_flight;
        const auto now = Clock::now();
        load_aware->RequestFinished(now, s.ok() ? now - started : Clock::duration::zero());
        metrics->active.Decrement();
        admission->Release();
      }
      metrics->outcomes.Add({{"code", absl::StatusCodeToString(s.code())}}).Increment();
      metrics->e2e.Observe(MsSince(t0) / 1000.0);
      FinishBox(*box, ToGrpc(s));
      std::lock_guard<std::mutex> lock(workers_mu);
      --workers;
      workers_cv.notify_all();
    }).detach();
  }

  absl::Status Serve(const v1::GenerateRequest& req, std::chrono::system_clock::time_point deadline,
                     Outbox& box);
};

namespace {

class RouterServiceImpl final : public v1::Router::CallbackService {
 public:
  explicit RouterServiceImpl(RouterServer::Impl* impl) : impl_(impl) {}
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req) override {
    auto box = std::make_shared<Outbox>();
    auto* reactor = new GenerateReactor(box);
    impl_->Spawn(box, *req, ctx->deadline());
    return reactor;
  }
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const v1::GetInfoRequest*,
                                    v1::RouterInfo* info) override {
    *info->mutable_target() = impl_->target_info;
    info->add_methods(v1::AR);
    if (impl_->drafters) {
      info->add_methods(v1::DRAFT_CHAIN);
      info->add_methods(v1::DYSPEC_TREE);
      if (impl_->drafter_has_dflash) {
        info->add_methods(v1::DFLASH);
        info->add_methods(v1::DFLASH_ADAPTIVE);
      }
    }
    info->set_default_method(impl_->DefaultMethod());
    info->set_default_max_new_tokens(impl_->options.default_max_new_tokens);
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  RouterServer::Impl* impl_;
};

}  // namespace

// One request, start to finish, on its worker thread.
absl::Status RouterServer::Impl::Serve(const v1::GenerateRequest& req,
                                       std::chrono::system_clock::time_point deadline,
                                       Outbox& box) {
  const auto t_start = Clock::now();
  const int64_t vocab = target_info.vocab_size();
  // ---- validate every field before touching a backend.
  std::vector<int32_t> prompt;
  if (req.has_token_ids()) {
    prompt.assign(req.token_ids().ids().begin(), req.token_ids().ids().end());
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] < 0 || prompt[i] >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token_ids.ids[", i, "] = ", prompt[i], " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
  } else if (req.has_text()) {
    if (!tokenizer) {
      return absl::FailedPreconditionError(
          "text prompts need the router's tokenizer (--tokenizer); send token_ids instead");
    }
    ASSIGN_OR_RETURN(prompt, tokenizer->Encode(req.text(), tokenizer->add_bos_by_default()));
  }
  if (prompt.empty()) {
    return absl::InvalidArgumentError("the prompt is empty: set text or token_ids");
  }
  const int32_t max_new =
      req.max_new_tokens() == 0 ? options.default_max_new_tokens : req.max_new_tokens();
  if (max_new < 1 || static_cast<int64_t>(prompt.size()) + max_new > target_info.max_context()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens ", max_new, " with a ", prompt.size(),
        "-token prompt must be >= 1 and fit the maximum context of ", target_info.max_context()));
  }
  v1::SamplingParams sampling = req.sampling();
  if (std::isnan(sampling.temperature()) || sampling.temperature() < 0 ||
      sampling.temperature() > 100) {
    return absl::InvalidArgumentError("sampling.temperature must be in [0, 100]");
  }
  if (sampling.top_k() < 0) return absl::InvalidArgumentError("sampling.top_k must be >= 0");
  if (std::isnan(sampling.top_p()) || sampling.top_p() < 0 || sampling.top_p() > 1) {
    return absl::InvalidArgumentError("sampling.top_p must be in (0, 1] (0 = unset)");
  }
  if (req.draft_length() < 0 || req.draft_length() > 64) {
    return absl::InvalidArgumentError("draft_length must be in [1, 64] (0 = default 4)");
  }
  if (req.tree_budget() < 0 || req.tree_budget() > 512 || req.tree_max_depth() < 0 ||
      req.tree_max_depth() > 64 || req.tree_threshold() < 0 || req.tree_threshold() >= 1) {
    return absl::InvalidArgumentError(
        "tree_budget must be in [1, 512], tree_max_depth in [1, 64], tree_threshold in [0, 1)");
  }
  if (req.block_size() != 0 && (req.block_size() < 2 || req.block_size() > 256)) {
    return absl::InvalidArgumentError("block_size must be 0 (default) or in [2, 256]");
  }
  if (!v1::Method_IsValid(req.method())) {
    return absl::InvalidArgumentError(absl::StrCat("unknown method ", req.method()));
  }
  for (int32_t t : req.stop_token_ids()) {
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("stop_token_ids: ", t, " outside vocabulary"));
    }
  }
  v1::Method method = req.method();
  if (method == v1::METHOD_UNSPECIFIED) method = DefaultMethod();
  // Load awareness: each step of an adaptive request may run as plain AR when AR steps were
  // measured to decode faster at the current load (LoadAwareSpeculation).
  const int64_t load = in_flight.load();
  const bool load_aware_on = method == v1::DFLASH_ADAPTIVE && options.load_aware &&
                             req.block_size() == 0 && (drafters || TargetDrafting());
  std::vector<int32_t> stops(req.stop_token_ids().begin(), req.stop_token_ids().end());
  if (!req.ignore_eos())
    stops.insert(stops.end(), target_info.eos_token_ids().begin(),
                 target_info.eos_token_ids().end());
  const std::string method_name = v1::Method_Name(method);
  const std::string& model = options.model_name;

  // ---- state of the request.
  v1::RequestStats stats;
  stats.set_method(method);
  if (load_aware_on) stats.set_in_flight_at_start(static_cast<int32_t>(load));
  std::vector<int32_t> out;
  bool stopped = false;
  int32_t stop_token = -1;
  std::unique_ptr<tokenizer::StreamDecoder> text;
  if (req.return_text() && tokenizer) text = std::make_unique<tokenizer::StreamDecoder>(*tokenizer);
  double ttft_ms = 0;
  auto last_chunk = Clock::now();
  double itl_sum = 0;
  int itl_n = 0;
  auto commit = [&](const std::vector<int32_t>& toks, const v1::StepStats* step) {
    v1::GenerateResponse r;
    auto* c = r.mutable_chunk();
    c->set_index(static_cast<int32_t>(out.size()));
    for (int32_t t : toks) {
      if (static_cast<int32_t>(out.size()) >= max_new || stopped) break;
      if (std::find(stops.begin(), stops.end(), t) != stops.end()) {
        stopped = true;
        stop_token = t;
        break;  // the stop token is not part of the output
      }
      out.push_back(t);
      c->add_token_ids(t);
      if (text) c->mutable_text()->append(text->Push(t));
    }
    if (step) *c->mutable_step() = *step;
    // Every request's output counts for the load-aware epoch it lands in (its throughput).
    if (options.load_aware && c->token_ids_size() > 0) {
      load_aware->Committed(Clock::now(), c->token_ids_size());
    }
    if (c->token_ids_size() > 0) {
      if (out.size() == static_cast<size_t>(c->token_ids_size())) {
        ttft_ms = MsSince(t_start);
      } else {
        itl_sum += MsSince(last_chunk) / c->token_ids_size();
        ++itl_n;
      }
      last_chunk = Clock::now();
      Push(box, std::move(r));
    }
    return stopped || static_cast<int32_t>(out.size()) >= max_new;
  };
  auto cancelled = [&] { return box.cancelled.load(); };

  // ---- the drafter replica (picked first: DFlash's prefill captures the layers it reads).
  const bool dflash = method == v1::DFLASH || method == v1::DFLASH_ADAPTIVE;
  // Target-hosted drafting when the target replica the prefill lands on hosts a DFlash drafter;
  // the drafter service is only needed when some replica does not.
  const bool try_hosted = dflash && TargetDrafting();
  bool hosted = false;
  std::optional<size_t> drafter_index;
  absl::Status drafter_down = absl::UnavailableError("no drafter configured");
  if (method != v1::AR && drafters && !(try_hosted && all_hosted)) {
    drafter_index = Pick(*drafters, "drafter");
    if (!drafter_index) {
      drafter_down = absl::UnavailableError(
          absl::StrCat("no healthy drafter replica: ", drafters->Describe()));
    }
  }
  v1::ModelInfo dinfo;
  if (dflash && drafter_index) {
    auto info = DrafterInfo(*drafter_index, deadline);
    if (info.ok()) {
      dinfo = *std::move(info);
    } else {
      NoteFailure(*drafters, *drafter_index, info.status());
      drafter_down = info.status();
      drafter_index.reset();
    }
  }
  v1::TargetRequest preq;
  auto* pf = preq.mutable_prefill();
  for (int32_t t : prompt) pf->add_tokens(t);
  *pf->mutable_sampling() = sampling;
  pf->set_reserve_tokens(max_new);
  if (dflash) pf->set_return_logits(method == v1::DFLASH_ADAPTIVE);
  // ---- prefill on a target replica; a replica that is gone is marked down and the next one
  // tried (nothing was committed yet, so this is safe).
  auto t0 = Clock::now();
  std::unique_ptr<TargetClient> target_client;
  absl::StatusOr<v1::TargetResponse> presp = absl::UnavailableError("no target replica tried");
  std::vector<size_t> tried;
  while (true) {
    std::optional<size_t> ti = Pick(*targets, "target", tried);
    if (!ti) {
      return absl::UnavailableError(absl::StrCat("no healthy target replica (", targets->Describe(),
                                                 "); last error: ", presp.status().message()));
    }
    tried.push_back(*ti);
    hosted = try_hosted && hosted_dflash[*ti].has_value();
    pf->set_hosted_draft(hosted);
    pf->clear_capture_layers();
    if (dflash && !hosted) {
      for (int64_t id : dinfo.target_layer_ids()) pf->add_capture_layers(id);
    }
    auto opened = TargetClient::Open(target_stubs[*ti].get(), deadline);
    if (opened.ok()) {
      target_client = *std::move(opened);
      presp = target_client->Call(preq, "target prefill");
    } else {
      presp = opened.status();
    }
    if (presp.ok()) break;
    const absl::StatusCode code = presp.status().code();
    if (code != absl::StatusCode::kUnavailable) return presp.status();
    targets->MarkUnhealthy(*ti);
    if (std::chrono::system_clock::now() >= deadline) {
      return absl::DeadlineExceededError("the deadline passed while looking for a target replica");
    }
  }
  const std::string handle = presp->prefill().handle().id();
  const v1::ModelInfo& dflash_info = hosted ? *hosted_dflash[tried.back()] : dinfo;
  stats.mutable_timings()->set_prefill_ms(MsSince(t0));
  int32_t last = presp->prefill().first_token();
  bool finished = commit({last}, nullptr);
  v1::Tensor features = presp->prefill().features();
  double decode_ms = 0;

  auto record = [&](int32_t drafted, int32_t accepted, int32_t positions, v1::StepStats* step) {
    stats.set_verify_steps(stats.verify_steps() + 1);
    stats.set_drafted_tokens(stats.drafted_tokens() + drafted);
    stats.set_accepted_tokens(stats.accepted_tokens() + accepted);
    step->set_drafted(drafted);
    step->set_accepted(accepted);
    step->set_committed(accepted + 1);
    metrics->step_tau
        .Add({{"method", method_name}, {"model", model}},
             prometheus::Histogram::BucketBoundaries{1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32})
        .Observe(accepted + 1);
    if (drafted > 0) {
      metrics->drafts.Add({{"method", method_name}, {"model", model}}).Increment();
      metrics->draft_tokens.Add({{"method", method_name}, {"model", model}}).Increment(drafted);
      metrics->accepted.Add({{"method", method_name}, {"model", model}}).Increment(accepted);
    }
    while (stats.drafted_per_position_size() < positions) {
      stats.add_drafted_per_position(0);
      stats.add_accepted_per_position(0);
    }
    for (int32_t i = 0; i < positions; ++i) {
      stats.set_drafted_per_position(i, stats.drafted_per_position(i) + 1);
      if (i < accepted) {
        stats.set_accepted_per_position(i, stats.accepted_per_position(i) + 1);
        metrics->accepted_pos
            .Add({{"method", method_name}, {"model", model}, {"position", std::to_string(i)}})
            .Increment();
      }
    }
  };
  std::vector<int32_t> last_committed;  // what the last verify committed
  // Commits one verify response: `nrows` rows were verified, `ms` is its round trip.
  auto apply = [&](const v1::TargetResponse& vresp, size_t nrows, int32_t positions,
                   double draft_ms, double ms) {
    decode_ms += ms + draft_ms;
    stats.mutable_timings()->set_verify_ms(stats.timings().verify_ms() + ms);
    if (nrows == 1) {
      const double prev = ar_step_ms.load();
      ar_step_ms.store(prev == 0 ? ms : 0.95 * prev + 0.05 * ms);
    }
    v1::StepStats step;
    step.set_verify_ms(ms);
    step.set_draft_ms(draft_ms);
    step.set_block_size(stats.block_size());
    step.set_batch_size(std::max(1, vresp.verify().batch_size()));
    record(static_cast<int32_t>(nrows) - 1, vresp.verify().num_accepted(), positions, &step);
    last = vresp.verify().next_token();
    AppendRows(vresp.verify().features(), &features);
    std::vector<int32_t> committed(vresp.verify().committed().begin(),
                                   vresp.verify().committed().end());
    stats.set_committed_tokens(stats.committed_tokens() + static_cast<int64_t>(committed.size()));
    finished = commit(committed, &step);
    last_committed = std::move(committed);
  };
  // Verifies `rows` (row 0 = last) on the target and commits the result.
  auto verify = [&](const std::vector<int32_t>& rows, const std::vector<int32_t>& parents,
                    v1::TargetVerify::Proposal proposal, const v1::Tensor* q, bool want_features,
                    int32_t positions, double draft_ms) -> absl::Status {
    v1::TargetRequest vr;
    auto* v = vr.mutable_verify();
    v->set_handle(handle);
    for (int32_t t : rows) v->add_tokens(t);
    for (int32_t p : parents) v->add_tree_parents(p);
    v->set_proposal(proposal);
    if (q && q->data().size() > 0) *v->mutable_draft_probs() = *q;
    v->set_return_features(want_features);
    const auto tv = Clock::now();
    absl::StatusOr<v1::TargetResponse> called = target_client->Call(vr, "target verify");
    if (!called.ok()) {
      NoteFailure(*targets, tried.back(), called.status());
      return called.status();
    }
    apply(*called, rows.size(), positions, draft_ms, MsSince(tv));
    return absl::OkStatus();
  };
  // A server-side run of up to `n` tokens (TargetVerify.run_steps): the target decodes them in
  // its own passes and answers each step as it is committed, so the request pays one round trip
  // for the run instead of one or two per step. Without `block` every step is a single-row AR
  // step (the tokens n single-row verifies would commit); with `block` >= 2 the target drafts
  // every block with its hosted DFlash drafter (draft_block_size). The run stops at a stop token
  // (the target stops there too), the length, or `max_ms` after it began when that is > 0
  // (TargetVerify.run_max_ms). `each` is called after every step.
  auto run = [&](int32_t n, bool want_features, int32_t block,
                 const std::function<void()>& each = nullptr, double max_ms = 0) -> absl::Status {
    if (n <= 1 && block == 0) {
      RETURN_IF_ERROR(verify({last}, {}, v1::TargetVerify::ONE_HOT, nullptr, want_features, 0, 0));
      if (each) each();
      return absl::OkStatus();
    }
    const char* what = block > 0 ? "target speculative run" : "target run";
    v1::TargetRequest vr;
    auto* v = vr.mutable_verify();
    v->set_handle(handle);
    v->add_tokens(last);
    v->set_proposal(v1::TargetVerify::ONE_HOT);
    v->set_return_features(want_features);
    v->set_run_steps(n);
    v->set_draft_block_size(block);
    v->set_run_max_ms(static_cast<float>(max_ms));
    for (int32_t t : stops) v->add_run_stop_token_ids(t);
    auto tv = Clock::now();
    bool first_step = true;  // its time includes the round trip
    absl::Status sent = target_client->Send(vr, what);
    if (!sent.ok()) {
      NoteFailure(*targets, tried.back(), sent);
      return sent;
    }
    while (true) {
      absl::StatusOr<v1::TargetResponse> got = target_client->Next(what);
      if (!got.ok()) {
        NoteFailure(*targets, tried.back(), got.status());
        return got.status();
      }
      const double ms = MsSince(tv);
      const v1::TargetVerifyResult& gv = got->verify();
      if (!gv.draft_error().empty() && stats.note().empty()) {
        stats.set_note(absl::StrCat("the target's hosted drafter failed on a step (",
                                    gv.draft_error(), "); that step ran as AR"));
        metrics->fallbacks.Add({{"kind", "drafter"}}).Increment();
      }
      stats.mutable_timings()->set_draft_ms(stats.timings().draft_ms() + gv.draft_ms());
      const int32_t nrows = std::max(1, gv.rows_verified());
      block_model.ObserveStep({.sessions = gv.batch_size(),
                               .pass_rows = gv.pass_rows(),
                               .pass_ms = gv.compute_ms(),
                               .draft_rows = gv.draft_pass_rows(),
                               .draft_ms = gv.draft_ms(),
                               .wall_ms = first_step ? -1.0 : ms});
      first_step = false;
      if (nrows >= 2) block_model.ObserveAcceptance(nrows - 1, gv.num_accepted());
      apply(*got, static_cast<size_t>(nrows), nrows - 1, 0, ms);
      if (each) each();
      tv = Clock::now();
      if (finished || gv.run_left() == 0) return absl::OkStatus();
      if (cancelled()) return absl::CancelledError("cancelled by the client");
    }
  };

  // ---- the drafter side; any drafter failure degrades the rest of the request to AR.
  std::unique_ptr<DrafterClient> dclient;
  std::string dhandle;
  auto fallback = [&](const absl::Status& why) {
    stats.set_drafter_fallback(true);
    stats.set_note(absl::StrCat("drafter failed (", why.message(), "); finished as AR"));
    metrics->fallbacks.Add({{"kind", "drafter"}}).Increment();
    dclient.reset();
  };
  auto drafter_failed = [&](const absl::Status& why) {
    if (drafter_index) NoteFailure(*drafters, *drafter_index, why);
    fallback(why);
  };
  int32_t b = 0;
  // Opens the drafter session and picks the block size (BlockPilot for DFLASH_ADAPTIVE).
  auto start_drafter = [&]() {
    if (method != v1::AR && !finished && !hosted) {
      if (!drafter_index) {
        fallback(drafter_down);
      } else {
        auto c = DrafterClient::Open(drafter_stubs[*drafter_index].get(), deadline);
        if (!c.ok()) {
          drafter_failed(c.status());
        } else {
          dclient = *std::move(c);
          v1::DrafterRequest o;
          o.mutable_open()->set_kind(dflash ? v1::DFLASH_DRAFTER : v1::AR_DRAFT_LM);
          *o.mutable_open()->mutable_sampling() = sampling;
          auto opened = dclient->Call(o, "drafter open");
          if (!opened.ok()) {
            drafter_failed(opened.status());
          } else {
            dhandle = opened->opened().id();
            if (!dflash) {
              v1::DrafterRequest e;
              e.mutable_extend()->set_handle(dhandle);
              for (int32_t t : prompt) e.mutable_extend()->add_tokens(t);
              auto ext = dclient->Call(e, "drafter extend");
              if (!ext.ok()) drafter_failed(ext.status());
            }
          }
        }
      }
    }
    if (dflash && (dclient || hosted)) {
      b = req.block_size() > 0 ? req.block_size() : dflash_info.block_size();
      if (method == v1::DFLASH_ADAPTIVE && req.block_size() == 0) {
        const auto tp = Clock::now();
        absl::Status why = absl::UnavailableError("no policy configured");
        std::optional<size_t> pi;
        if (policies) {
          pi = Pick(*policies, "policy");
          if (!pi) {
            why = absl::UnavailableError(
                absl::StrCat("no healthy policy replica: ", policies->Describe()));
          }
        }
        if (pi) {
          grpc::ClientContext pctx;
          pctx.set_deadline(std::min(
              deadline, std::chrono::system_clock::now() + std::chrono::milliseconds(500)));
          v1::PredictBlockSizeRequest preq2;
          *preq2.mutable_logits() = presp->prefill().last_logits();
          v1::PredictBlockSizeResponse pres;
          grpc::Status ps = policy_stubs[*pi]->PredictBlockSize(&pctx, preq2, &pres);
          if (ps.ok()) {
            b = pres.block_size();
            stats.set_block_size_from_policy(true);
            why = absl::OkStatus();
          } else {
            why = absl::Status(static_cast<absl::StatusCode>(ps.error_code()), ps.error_message());
            NoteFailure(*policies, *pi, why);
          }
        }
        if (!why.ok()) {
          stats.set_policy_fallback(true);
          stats.set_note(absl::StrCat("policy unavailable (", why.message(),
                                      "); using the drafter's training block size ", b));
          metrics->fallbacks.Add({{"kind", "policy"}}).Increment();
        }
        stats.mutable_timings()->set_policy_ms(MsSince(tp));
      }
      if (b < 2) b = 2;
      stats.set_block_size(b);
      metrics->block_size.Add({{"block_size", std::to_string(b)}}).Increment();
    }
  };
  // A load-aware request starts its drafter at its first speculative step: under load it may
  // never take one, and then it pays neither the drafter session nor the policy call.
  bool drafter_started = !load_aware_on;
  if (drafter_started) start_drafter();
  const bool may_speculate = method != v1::AR && !finished;

  // ---- decode loop.
  const int32_t k = req.draft_length() > 0 ? req.draft_length() : 4;
  const int32_t budget = req.tree_budget() > 0 ? req.tree_budget() : 16;
  const int32_t depth = req.tree_max_depth() > 0 ? req.tree_max_depth() : 8;
  uint64_t la_epoch = 0;  // epoch of this request's previous load-aware step
  // The time bound of a load-aware run beginning when `s` was asked for: at most until its arm
  // is next due to change (both arms' runs then end within a step of an epoch boundary, so that
  // neither arm's steps spill into the other's epochs), at least a moment (a run makes at least
  // one step). Step::run_for.
  auto run_ms = [](const LoadAwareSpeculation::Step& s) {
    return std::max(0.01, std::chrono::duration<double, std::milli>(s.run_for).count());
  };
  // The load-aware arm of a step beginning now (a new epoch is counted in the metrics).
  auto next_step = [&](Clock::time_point now) {
    LoadAwareSpeculation::Step s = load_aware->Next(now);
    if (s.new_epoch) {
      metrics->load_aware
          .Add({{"level", LoadAwareSpeculation::LevelName(s.level)},
                {"arm", LoadAwareSpeculation::ArmName(s.arm)}})
          .Increment();
    }
    return s;
  };
  // A step of a server-side run that began as `began`'s arm ended. The run may outlast its epoch
  // (it lasts while the arm holds), so each step after the first asks which epoch it ended in
  // and counts there, if that epoch runs the same arm (a plan that changed under the run leaves
  // its last steps uncounted). A step is clean when this request's previous step counted in the
  // same epoch, or when it is the first step of a run (it began in this epoch, after the
  // request's previous step had ended).
  auto observe_run_step = [&](const LoadAwareSpeculation::Step& began, bool first) {
    const LoadAwareSpeculation::Step at = first ? began : next_step(Clock::now());
    if (at.arm == began.arm) load_aware->Observe(at, first || la_epoch == at.epoch);
    la_epoch = at.epoch;
  };
  while (!finished) {
    if (cancelled()) return absl::CancelledError("cancelled by the client");
    const int32_t remaining = max_new - static_cast<int32_t>(out.size());
    const bool drafting = dclient || hosted || (!drafter_started && may_speculate);
    if (!drafting || remaining <= 1) {
      RETURN_IF_ERROR(run(std::min(remaining, kMaxRunTokens), false, 0));
      continue;
    }
    auto td = Clock::now();
    std::optional<LoadAwareSpeculation::Step> la;
    if (load_aware_on) {
      la = next_step(td);
      if (la->arm == LoadAwareSpeculation::Arm::kAr) {
        // An AR run until the arm is next due to change (the target ends it at that time), that
        // still collects the features the drafter will need later.
        int64_t ran = 0;
        // A drafter service needs the AR steps' features; a hosted drafter is fed by the target.
        RETURN_IF_ERROR(run(
            std::min(remaining, kLoadAwareMaxRunTokens), !hosted, 0,
            [&] { observe_run_step(*la, ran++ == 0); }, run_ms(*la)));
        stats.set_load_aware_ar_steps(stats.load_aware_ar_steps() + ran);
        metrics->load_aware_steps.Add({{"arm", LoadAwareSpeculation::ArmName(la->arm)}})
            .Increment(static_cast<double>(ran));
        continue;
      }
    }
    if (la) {
      metrics->load_aware_steps.Add({{"arm", LoadAwareSpeculation::ArmName(la->arm)}}).Increment();
    }
    if (!drafter_started) {
      drafter_started = true;
      start_drafter();
      if (!dclient && !hosted) continue;  // the drafter is gone: the request goes on as AR
      td = Clock::now();                  // a once-per-request cost, not the step's
    }
    if (hosted) {
      // A server-side speculative run: the target drafts every block with its hosted drafter and
      // verifies it in its next pass, answering each step as it commits; under load awareness
      // the run lasts until the arm is next due to change (the target ends it at that time).
      const int32_t n = std::min(remaining, la ? kLoadAwareMaxRunTokens : kMaxRunTokens);
      stats.set_target_drafted(true);
      // Under load awareness the block the step-cost model predicts fastest for the requests in
      // flight now, at most BlockPilot's.
      int32_t block = std::clamp(b, 2, kMaxHostedBlock);
      if (la && options.load_aware_block) {
        block = block_model.BestBlock(static_cast<int>(load_aware->in_flight()), block);
        metrics->load_aware_block
            .Add({{"level", LoadAwareSpeculation::LevelName(la->level)},
                  {"block_size", std::to_string(block)}})
            .Increment();
      }
      int64_t steps = 0;
      RETURN_IF_ERROR(run(
          n, false, block,
          [&] {
            if (la) observe_run_step(*la, steps == 0);
            ++steps;
          },
          la ? run_ms(*la) : 0.0));
      if (la) {
        if (steps > 1) {
          metrics->load_aware_steps.Add({{"arm", LoadAwareSpeculation::ArmName(la->arm)}})
              .Increment(static_cast<double>(steps - 1));
        }
      }
      continue;
    }
    v1::DrafterRequest dr;
    std::vector<int32_t> rows = {last}, parents;
    int32_t positions = 0;
    v1::TargetVerify::Proposal proposal = v1::TargetVerify::SAMPLED;
    if (dflash) {
      auto* blk = dr.mutable_draft_block();
      blk->set_handle(dhandle);
      blk->set_last_token(last);
      blk->set_block_size(std::min(b, remaining));
      // Every feature row since the last draft: one per committed token, however many steps
      // (speculative or, under load awareness, AR) committed them.
      if (features.data().size() > 0) *blk->mutable_new_features() = features;
      proposal = v1::TargetVerify::ONE_HOT;
    } else if (method == v1::DYSPEC_TREE) {
      auto* t = dr.mutable_draft_tree();
      t->set_handle(dhandle);
      t->set_last_token(last);
      t->set_budget(budget);
      t->set_max_depth(std::min(depth, remaining - 1));
      t->set_threshold(req.tree_threshold());
    } else {
      auto* c = dr.mutable_draft_chain();
      c->set_handle(dhandle);
      c->set_last_token(last);
      c->set_length(std::min(k, remaining - 1));
    }
    auto drafted = dclient->Call(dr, "drafter draft");
    if (!drafted.ok()) {
      drafter_failed(drafted.status());
      continue;
    }
    if (dflash) features.Clear();  // the drafter has them now
    const v1::Drafted& d = drafted->drafted();
    const double draft_ms = MsSince(td);
    stats.mutable_timings()->set_draft_ms(stats.timings().draft_ms() + draft_ms);
    rows.insert(rows.end(), d.tokens().begin(), d.tokens().end());
    if (d.tree_parents_size() > 0) {
      parents.push_back(-1);
      std::vector<int32_t> dep(d.tokens_size());
      for (int i = 0; i < d.tree_parents_size(); ++i) {
        const int32_t p = d.tree_parents(i);
        parents.push_back(p + 1);
        dep[i] = p < 0 ? 1 : dep[p] + 1;
        positions = std::max(positions, dep[i]);
      }
    } else {
      positions = d.tokens_size();
    }
    RETURN_IF_ERROR(verify(rows, parents, proposal, &d.probs(), dflash, positions, draft_ms));
    if (la) {
      load_aware->Observe(*la, la_epoch == la->epoch);
      la_epoch = la->epoch;
    }
    if (!dflash && dclient && !finished) {
      v1::DrafterRequest cm;
      cm.mutable_commit()->set_handle(dhandle);
      for (size_t i = 0; i + 1 < last_committed.size(); ++i) {
        cm.mutable_commit()->add_accepted(last_committed[i]);
      }
      auto ok = dclient->Call(cm, "drafter commit");
      if (!ok.ok()) drafter_failed(ok.status());
    }
  }

  // ---- summary.
  v1::GenerateResponse s;
  auto* sum = s.mutable_summary();
  sum->set_finish_reason(stopped ? v1::STOP : v1::LENGTH);
  sum->set_stop_token_id(stop_token);
  sum->set_request_id(req.request_id());
  stats.set_tau(stats.verify_steps()
                    ? static_cast<double>(stats.committed_tokens()) / stats.verify_steps()
                    : 0);
  stats.set_ttft_ms(ttft_ms);
  stats.set_mean_itl_ms(itl_n ? itl_sum / itl_n : 0);
  stats.mutable_timings()->set_total_ms(MsSince(t_start));
  const double ar = ar_step_ms.load();
  if (ar > 0 && decode_ms > 0) {
    stats.set_estimated_speedup(static_cast<double>(stats.committed_tokens()) * ar / decode_ms);
    metrics->speedup
        .Add({{"method", method_name}},
             prometheus::Histogram::BucketBoundaries{0.5, 0.75, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6})
        .Observe(stats.estimated_speedup());
  }
  if (load_aware_on) {
    stats.set_load_aware_ar(stats.load_aware_ar_steps() > 0 && stats.drafted_tokens() == 0);
    metrics->load_aware_epoch.Set(std::chrono::duration<double>(load_aware->EpochLength()).count());
    for (int level = 0; level < LoadAwareSpeculation::kLevels; ++level) {
      const char* name = LoadAwareSpeculation::LevelName(level);
      bool seen = false;
      for (auto a : {LoadAwareSpeculation::Arm::kAr, LoadAwareSpeculation::Arm::kSpeculative}) {
        if (load_aware->Epochs(level, a) == 0) continue;
        seen = true;
        metrics->load_aware_rate.Add({{"level", name}, {"arm", LoadAwareSpeculation::ArmName(a)}})
            .Set(load_aware->Rate(level, a));
      }
      if (!seen && load_aware->Unmeasured(level) == 0) continue;
      metrics->load_aware_advantage.Add({{"level", name}}).Set(load_aware->LogAdvantage(level));
      metrics->load_aware_pairs.Add({{"level", name}})
          .Set(static_cast<double>(load_aware->Pairs(level)));
      metrics->load_aware_interval.Add({{"level", name}}).Set(load_aware->ExploreInterval(level));
      metrics->load_aware_unmeasured.Add({{"level", name}})
          .Set(static_cast<double>(load_aware->Unmeasured(level)));
    }
  }
  *sum->mutable_stats() = stats;
  sum->mutable_usage()->set_prompt_tokens(static_cast<int32_t>(prompt.size()));
  sum->mutable_usage()->set_completion_tokens(static_cast<int32_t>(out.size()));
  sum->mutable_usage()->set_draft_tokens(static_cast<int32_t>(stats.drafted_tokens()));
  sum->mutable_usage()->set_target_passes(static_cast<int32_t>(stats.verify_steps() + 1));
  metrics->request_tau
      .Add({{"method", method_name}, {"model", model}},
           prometheus::Histogram::BucketBoundaries{1, 1.5, 2, 3, 4, 5, 6, 8, 10, 12, 16})
      .Observe(stats.tau());
  metrics->ttft.Observe(ttft_ms / 1000.0);
  if (itl_n) metrics->itl.Observe(itl_sum / itl_n / 1000.0);
  for (auto [name, ms] : {std::pair{"prefill", stats.timings().prefill_ms()},
                          std::pair{"policy", stats.timings().policy_ms()},
                          std::pair{"draft", stats.timings().draft_ms()},
                          std::pair{"verify", stats.timings().verify_ms()}}) {
    metrics->stage.Add({{"stage", name}}, LatencyBuckets()).Observe(ms / 1000.0);
  }
  Push(box, std::move(s));
  return absl::OkStatus();
}

absl::StatusOr<v1::ModelInfo> RouterServer::Impl::DrafterInfo(
    size_t i, std::chrono::system_clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(drafter_info_mu);
    if (drafter_info[i]) return *drafter_info[i];
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline);
  v1::ModelInfo info;
  grpc::Status s = drafter_stubs[i]->GetInfo(&ctx, v1::GetInfoRequest(), &info);
  if (!s.ok()) {
    return absl::Status(
        static_cast<absl::StatusCode>(s.error_code()),
        absl::StrCat("drafter ", drafters->address(i), " GetInfo: ", s.error_message()));
  }
  std::lock_guard<std::mutex> lock(drafter_info_mu);
  drafter_info[i] = info;
  return info;
}

RouterServer::RouterServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RouterServer::~RouterServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Start(
    const RouterServerOptions& options) {
  if (SplitAddresses(options.target_address).empty()) {
    return absl::InvalidArgumentError("--target is required: the target service's address");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  LoadAwareSpeculation::Options lo;
  lo.epoch = std::chrono::milliseconds(std::max(1, options.load_aware_epoch_ms));
  lo.max_epoch = std::chrono::milliseconds(std::max(1, options.load_aware_max_epoch_ms));
  lo.max_hold = std::max(0, options.load_aware_max_hold_epochs);
  impl->load_aware = std::make_unique<LoadAwareSpeculation>(lo);
  impl->admission = std::make_unique<AdmissionQueue>(
      AdmissionQueue::Options{options.max_active_requests, std::max(0, options.max_queued_requests),
                              std::chrono::milliseconds(std::max(0, options.queue_timeout_ms))});
  impl->metrics = std::make_unique<RouterMetrics>(impl->metrics_server.registry());
  if (!options.tokenizer_dir.empty()) {
    ASSIGN_OR_RETURN(impl->tokenizer,
                     tokenizer::Tokenizer::FromFile(options.tokenizer_dir + "/tokenizer.json"));
  }
  Impl* raw = impl.get();
  auto replicas = [&](const std::string& list,
                      const char* service) -> absl::StatusOr<std::unique_ptr<ReplicaSet>> {
    ReplicaSet::Options o;
    o.service = service;
    o.addresses = SplitAddresses(list);
    o.probe_interval = std::chrono::milliseconds(std::max(10, options.health_interval_ms));
    o.probe_timeout = std::min(o.probe_interval, std::chrono::milliseconds(500));
    o.on_change = [raw, service, addresses = o.addresses](size_t i, bool healthy) {
      raw->metrics->replica_healthy.Add({{"service", service}, {"address", addresses[i]}})
          .Set(healthy ? 1 : 0);
      if (!healthy && std::string(service) == "drafter") {
        std::lock_guard<std::mutex> lock(raw->drafter_info_mu);
        if (i < raw->drafter_info.size()) raw->drafter_info[i].reset();
      }
    };
    return ReplicaSet::Create(std::move(o));
  };
  ASSIGN_OR_RETURN(impl->targets, replicas(options.target_address, "target"));
  for (size_t i = 0; i < impl->targets->size(); ++i) {
    impl->target_stubs.push_back(v1::Target::NewStub(impl->targets->channel(i)));
  }
  if (!SplitAddresses(options.drafter_address).empty()) {
    ASSIGN_OR_RETURN(impl->drafters, replicas(options.drafter_address, "drafter"));
    {
      std::lock_guard<std::mutex> lock(impl->drafter_info_mu);
      impl->drafter_info.resize(impl->drafters->size());
    }
    for (size_t i = 0; i < impl->drafters->size(); ++i) {
      impl->drafter_stubs.push_back(v1::Drafter::NewStub(impl->drafters->channel(i)));
    }
  }
  if (!SplitAddresses(options.policy_address).empty()) {
    ASSIGN_OR_RETURN(impl->policies, replicas(options.policy_address, "policy"));
    for (size_t i = 0; i < impl->policies->size(); ++i) {
      impl->policy_stubs.push_back(v1::Policy::NewStub(impl->policies->channel(i)));
    }
  }
  for (ReplicaSet* set : {impl->drafters.get(), impl->policies.get()}) {
    if (set) set->ProbeAll();
  }
  // Every target replica that answers must serve the same model; at least one must answer.
  const auto connect_deadline =
      std::chrono::system_clock::now() + std::chrono::milliseconds(options.connect_timeout_ms);
  std::string answered_from, errors;
  impl->hosted_dflash.resize(impl->targets->size());
  for (size_t i = 0; i < impl->targets->size(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(answered_from.empty()
                         ? connect_deadline
                         : std::chrono::system_clock::now() + std::chrono::milliseconds(1000));
    ctx.set_wait_for_ready(answered_from.empty());
    v1::ModelInfo info;
    grpc::Status s = impl->target_stubs[i]->GetInfo(&ctx, v1::GetInfoRequest(), &info);
    if (!s.ok()) {
      absl::StrAppend(&errors, " ", impl->targets->address(i), ": ", s.error_message(), ";");
      impl->targets->MarkUnhealthy(i);
      continue;
    }
    for (const v1::DraftModelInfo& dm : info.draft_models()) {
      if (dm.kind() == v1::DFLASH_DRAFTER && dm.model().block_size() > 0) {
        impl->hosted_dflash[i] = dm.model();
      }
    }
    if (answered_from.empty()) {
      impl->target_info = info;
      answered_from = impl->targets->address(i);
    } else if (info.vocab_size() != impl->target_info.vocab_size() ||
               info.max_context() != impl->target_info.max_context() ||
               info.name() != impl->target_info.name()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "target replicas ", answered_from, " and ", impl->targets->address(i),
          " serve different models (name/vocab/context differ): list replicas of one model"));
    }
  }
  if (answered_from.empty()) {
    return absl::UnavailableError(absl::StrCat("no target replica answered GetInfo:", errors));
  }
  impl->all_hosted = true;
  for (const auto& h : impl->hosted_dflash) {
    impl->any_hosted = impl->any_hosted || h.has_value();
    impl->all_hosted = impl->all_hosted && h.has_value();
  }
  if (impl->drafters) {
    // Best effort: a drafter that is down now may come up later; methods degrade meanwhile.
    for (size_t i = 0; i < impl->drafters->size(); ++i) {
      auto info =
          impl->DrafterInfo(i, std::chrono::system_clock::now() + std::chrono::milliseconds(1000));
      if (info.ok() && info->block_size() > 0) impl->drafter_has_dflash = true;
    }
  }
  impl->service = std::make_unique<RouterServiceImpl>(impl.get());
  if (!options.metrics_address.empty()) {
    RETURN_IF_ERROR(impl->metrics_server.Listen(options.metrics_address));
  }
  ASSIGN_OR_RETURN(impl->server, StartServer(options.address, {impl->service.get()}));
  return std::unique_ptr<RouterServer>(new RouterServer(std::move(impl)));
}

int RouterServer::port() const { return impl_->server.port; }
int RouterServer::metrics_port() const { return impl_->metrics_server.port(); }
prometheus::Registry& RouterServer::registry() { return impl_->metrics_server.registry(); }

void RouterServer::Shutdown() {
  if (!impl_ || !impl_->server.server) return;
  DrainAndShutdown(impl_->server.server.get(), impl_->options.drain_ms);
  impl_->server.server->Wait();
  std::unique_lock<std::mutex> lock(impl_->workers_mu);
  impl_->workers_cv.wait(lock, [&] { return impl_->workers == 0; });
  impl_->server.server.reset();
}

int RunRouterServer(const RouterServerOptions& options) {
  return RunUntilSignal<RouterServer>("specdec-router", options);
}

}  // namespace specdec::services
