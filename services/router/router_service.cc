#include "services/router/router_service.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/chat/chat_template.h"
#include "common/engine/block_cost_model.h"
#include "common/engine/cost_aware_hook.h"
#include "common/engine/step_loop.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "common/util/clock.h"
#include "common/util/status_macros.h"
#include "services/common/log.h"
#include "services/common/run_server.h"
#include "services/common/server.h"
#include "services/router/admission.h"
#include "services/router/api_keys.h"
#include "services/router/backends.h"
#include "services/router/generate_reactor.h"
#include "services/router/http_front.h"
#include "services/router/load_aware.h"
#include "services/router/load_aware_hook.h"
#include "services/router/remote_sides.h"
#include "services/router/request_conversion.h"
#include "services/router/router_metrics.h"
#include "services/router/warmup.h"
#include "specdec/v1/router.grpc.pb.h"

namespace specdec::services {

struct RouterServer::Impl {
  RouterServerOptions options;
  MetricsServer metrics_server;
  std::unique_ptr<RouterMetrics> metrics;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<Backends> backends;
  std::unique_ptr<grpc::Service> service;
  StartedServer server;
  std::mutex workers_mu;
  std::condition_variable workers_cv;
  int workers = 0;
  std::atomic<double> ar_step_ms{0};                 // running mean of single-token target steps
  std::atomic<int64_t> in_flight{0};                 // requests being served
  std::unique_ptr<LoadAwareSpeculation> load_aware;  // set in Start
  engine::BlockCostModel block_model;         // fed by the steps of every DFLASH_ADAPTIVE request
  std::unique_ptr<AdmissionQueue> admission;  // set in Start
  std::unique_ptr<chat::ChatTemplate> chat_template;  // null: chat requests get 400
  std::unique_ptr<HttpFront> http;                    // null when --http-address is empty
  std::unique_ptr<ApiKeys> api_keys;                  // null: no key is required
  size_t max_prompt_bytes = 0;                        // text prompts: refused before tokenizing

  const std::string instance = absl::StrFormat("%08x", std::random_device()());
  std::atomic<uint64_t> next_request{0};

  // What the request log line of a request says besides its status.
  struct RequestRecord {
    std::string request_id;
    std::string key_id = "-";
    std::string method = "-";
    size_t prompt_tokens = 0;
    engine::DecodeResult result;
  };
  // Runs one request on its own worker thread: admission, Serve, the outcome, its log line.
  void Spawn(std::shared_ptr<Outbox> box, v1::GenerateRequest request, Deadline deadline,
             std::string authorization);
  // The API key check, admission and Serve; tokens are charged to the key.
  absl::Status Authorized(const v1::GenerateRequest& request, Deadline deadline,
                          const std::string& authorization, Outbox& box, RequestRecord* record);
  absl::Status Admitted(const v1::GenerateRequest& request, Deadline deadline, Outbox& box,
                        RequestRecord* record);
  // One admitted request, start to finish.
  absl::Status Serve(const v1::GenerateRequest& request, Deadline deadline, Outbox& box,
                     RequestRecord* record);
  void LogRequest(const RequestRecord& record, const absl::Status& status, double total_ms) const;
  // The prompt as the first chunk (GenerateRequest.echo).
  void Echo(const v1::GenerateRequest& request, std::span<const int32_t> prompt, Outbox& box);
  RequestDefaults Defaults() const;
  // Streams each step's tokens (and text) as a chunk and counts the step.
  engine::CommitCallback Streamer(const v1::GenerateRequest& request,
                                  const engine::DecodeOptions& options, Outbox& box);
  v1::GenerateResponse Summary(const RequestRecord& record, bool load_aware_on,
                               int64_t in_flight_at_start);
  absl::Status StartHttp();
  // The warm-up request (warmup.h), logged; a failure only means the first requests explore.
  void WarmUp();
};

namespace {

class RouterServiceImpl final : public v1::Router::CallbackService {
 public:
  explicit RouterServiceImpl(RouterServer::Impl* impl) : impl_(impl) {}
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req) override {
    auto box = std::make_shared<Outbox>();
    auto* reactor = new GenerateReactor(box, ctx);
    auto auth = ctx->client_metadata().find("authorization");
    impl_->Spawn(box, *req, ctx->deadline(),
                 auth == ctx->client_metadata().end()
                     ? std::string()
                     : std::string(auth->second.data(), auth->second.size()));
    return reactor;
  }
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const v1::GetInfoRequest*,
                                    v1::RouterInfo* info) override {
    impl_->backends->FillInfo(info);
    info->set_default_max_new_tokens(impl_->options.default_max_new_tokens);
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  RouterServer::Impl* impl_;
};

}  // namespace

void RouterServer::Impl::Spawn(std::shared_ptr<Outbox> box, v1::GenerateRequest request,
                               Deadline deadline, std::string authorization) {
  {
    std::lock_guard<std::mutex> lock(workers_mu);
    ++workers;
  }
  std::thread([this, box, request = std::move(request), deadline,
               authorization = std::move(authorization)] {
    const auto t0 = SteadyClock::now();
    RequestRecord record;
    record.request_id = request.request_id().empty()
                            ? absl::StrFormat("r-%s-%06d", instance, next_request++)
                            : request.request_id();
    absl::Status s = Authorized(request, deadline, authorization, *box, &record);
    metrics->outcomes.Add({{"code", absl::StatusCodeToString(s.code())}}).Increment();
    metrics->e2e.Observe(MsSince(t0) / 1000.0);
    LogRequest(record, s, MsSince(t0));
    FinishBox(*box, std::move(s));
    std::lock_guard<std::mutex> lock(workers_mu);
    --workers;
    workers_cv.notify_all();
  }).detach();
}

absl::Status RouterServer::Impl::Authorized(const v1::GenerateRequest& request, Deadline deadline,
                                            const std::string& authorization, Outbox& box,
                                            RequestRecord* record) {
  if (!api_keys) return Admitted(request, deadline, box, record);
  ASSIGN_OR_RETURN(ApiKeys::Grant grant, api_keys->Admit(authorization));
  record->key_id = grant.key_id();
  absl::Status s = Admitted(request, deadline, box, record);
  grant.Charge(static_cast<int64_t>(record->prompt_tokens + record->result.tokens.size()));
  return s;
}

absl::Status RouterServer::Impl::Admitted(const v1::GenerateRequest& request, Deadline deadline,
                                          Outbox& box, RequestRecord* record) {
  metrics->queued.Increment();
  double waited = 0;
  absl::Status s = admission->Admit(
      deadline, [&box] { return box.cancel.cancelled(); }, &waited);
  metrics->queued.Decrement();
  metrics->queue_wait.Observe(waited);
  if (!s.ok()) return s;
  metrics->active.Increment();
  ++in_flight;
  const auto started = SteadyClock::now();
  load_aware->RequestStarted(started);
  s = Serve(request, deadline, box, record);
  --in_flight;
  const auto now = SteadyClock::now();
  load_aware->RequestFinished(now, s.ok() ? now - started : SteadyClock::duration::zero());
  metrics->active.Decrement();
  admission->Release();
  return s;
}

RequestDefaults RouterServer::Impl::Defaults() const {
  const v1::ModelInfo& target = backends->target_info();
  RequestDefaults d;
  d.method = backends->DefaultMethod();
  d.max_new_tokens = options.default_max_new_tokens;
  d.eos_token_ids.assign(target.eos_token_ids().begin(), target.eos_token_ids().end());
  d.limits = {target.vocab_size(), target.max_context()};
  d.model_names = {target.name()};
  if (options.model_name != target.name()) d.model_names.push_back(options.model_name);
  return d;
}

void RouterServer::Impl::LogRequest(const RequestRecord& r, const absl::Status& status,
                                    double total_ms) const {
  if (!LogEnabled(LogLevel::kInfo)) return;
  const engine::DecodeStats& st = r.result.stats;
  std::string fields = absl::StrCat(
      " request_id=", LogValue(r.request_id), " key_id=", LogValue(r.key_id), " method=", r.method,
      " status=", absl::StatusCodeToString(status.code()), " prompt_tokens=", r.prompt_tokens,
      " completion_tokens=", r.result.tokens.size(), " tau=", absl::StrFormat("%.2f", st.tau()),
      " block_size=", st.block_size, " ttft_ms=", absl::StrFormat("%.1f", st.ttft_ms),
      " total_ms=", absl::StrFormat("%.1f", total_ms));
  std::vector<std::string> fallbacks;
  if (st.drafter_fallback || st.hosted_draft_failures > 0) fallbacks.push_back("drafter");
  if (st.policy_fallback) fallbacks.push_back("policy");
  if (st.planned_ar_steps > 0) fallbacks.push_back("load_aware_ar");
  if (st.speculation_skipped) fallbacks.push_back("drafter_skipped");
  absl::StrAppend(&fields,
                  " fallbacks=", fallbacks.empty() ? "none" : absl::StrJoin(fallbacks, ","));
  if (!status.ok()) absl::StrAppend(&fields, " message=", LogValue(status.message()));
  Log(status.ok() ? LogLevel::kInfo : LogLevel::kWarning, "request", fields);
}

void RouterServer::Impl::WarmUp() {
  const auto t0 = SteadyClock::now();
  auto result = services::WarmUp(*backends, block_model, tokenizer.get(), Defaults(),
                                 {.max_new_tokens = options.warmup_tokens});
  const std::string ms = absl::StrFormat("%.1f", MsSince(t0));
  if (result.ok()) {
    Log(LogLevel::kInfo, "warmup",
        absl::StrCat(" completion_tokens=", result->tokens.size(),
                     " tau=", absl::StrFormat("%.2f", result->stats.tau()), " total_ms=", ms));
  } else {
    // Nothing to choose (no DFlash drafter) is no failure; anything else leaves the first
    // requests to explore.
    const bool skipped = absl::IsFailedPrecondition(result.status());
    Log(skipped ? LogLevel::kInfo : LogLevel::kWarning, "warmup",
        absl::StrCat(" status=", absl::StatusCodeToString(result.status().code()), " total_ms=", ms,
                     " message=", LogValue(result.status().message())));
  }
}

void RouterServer::Impl::Echo(const v1::GenerateRequest& request, std::span<const int32_t> prompt,
                              Outbox& box) {
  v1::GenerateResponse r;
  v1::TokenChunk* c = r.mutable_chunk();
  c->set_prompt(true);
  for (int32_t t : prompt) c->add_token_ids(t);
  if (request.return_text() && tokenizer)
    c->set_text(tokenizer::ValidUtf8(tokenizer->Decode(prompt)));
  Push(box, std::move(r));
}

absl::Status RouterServer::Impl::Serve(const v1::GenerateRequest& request, Deadline deadline,
                                       Outbox& box, RequestRecord* record) {
  // Every field is validated before any backend is touched.
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                   PromptTokens(request, tokenizer.get(), max_prompt_bytes));
  record->prompt_tokens = prompt.size();
  ASSIGN_OR_RETURN(engine::DecodeOptions options, ConvertRequest(request, prompt, Defaults()));
  record->method = engine::MethodName(options.method);
  if (request.echo()) Echo(request, prompt, box);
  const int64_t load = in_flight.load();
  // Load awareness: each step of an adaptive request may run as plain AR when AR steps were
  // measured to decode faster at the current load (LoadAwareSpeculation).
  const bool load_aware_on = options.method == engine::Method::kDflashAdaptive &&
                             this->options.load_aware && options.block_size == 0 &&
                             (backends->drafters() || backends->TargetDrafting());
  RemoteSides sides = ConnectSides(*backends, {deadline, &box.cancel}, options);
  LoadAwareHook hook(*load_aware, block_model, *metrics, this->options.load_aware_block);
  // Otherwise an adaptive request's blocks follow the predicted throughput at this load.
  engine::CostAwareHook cost_aware(block_model,
                                   {.sessions = static_cast<int>(std::max<int64_t>(1, load))});
  const bool cost_aware_on = !load_aware_on && options.method == engine::Method::kDflashAdaptive &&
                             options.block_size == 0;
  engine::LoopParts parts = sides.Parts(*backends);
  parts.hook = load_aware_on   ? static_cast<engine::PlanningHook*>(&hook)
               : cost_aware_on ? &cost_aware
                               : nullptr;
  parts.cancelled = [&box] { return box.cancel.cancelled(); };
  parts.tokenizer = tokenizer.get();
  parts.decode_text = request.return_text();
  parts.on_commit = Streamer(request, options, box);
  ASSIGN_OR_RETURN(record->result, engine::RunStepLoop(parts, prompt, options));
  Push(box, Summary(*record, load_aware_on, load));
  return absl::OkStatus();
}

engine::CommitCallback RouterServer::Impl::Streamer(const v1::GenerateRequest& request,
                                                    const engine::DecodeOptions& options,
                                                    Outbox& box) {
  auto emitted = std::make_shared<int32_t>(0);
  const std::string method = engine::MethodName(options.method);
  const bool return_text = request.return_text();
  return [this, &box, emitted, method, return_text](std::span<const int32_t> tokens,
                                                    const engine::StepInfo& step) {
    if (step.step > 0) {
      metrics->ObserveStep(method, this->options.model_name, step);
      if (step.drafted == 0) {
        const double prev = ar_step_ms.load();
        ar_step_ms.store(prev == 0 ? step.verify_ms : 0.95 * prev + 0.05 * step.verify_ms);
      }
    }
    if (tokens.empty() && (!return_text || step.text.empty())) return;
    // Every request's output counts for the load-aware epoch it lands in (its throughput).
    if (this->options.load_aware && !tokens.empty()) {
      load_aware->Committed(SteadyClock::now(), static_cast<int64_t>(tokens.size()));
    }
    v1::GenerateResponse r;
    v1::TokenChunk* c = r.mutable_chunk();
    c->set_index(*emitted);
    *emitted += static_cast<int32_t>(tokens.size());
    for (int32_t t : tokens) c->add_token_ids(t);
    // A protobuf string carries UTF-8 only (clients refuse anything else): bytes that form no
    // character reach the client as U+FFFD.
    if (return_text) c->set_text(tokenizer::ValidUtf8(step.text));
    if (step.step > 0) {
      v1::StepStats* s = c->mutable_step();
      s->set_drafted(step.drafted);
      s->set_accepted(step.accepted);
      s->set_committed(step.accepted + 1);
      s->set_block_size(step.block_size);
      s->set_draft_ms(step.draft_ms);
      s->set_verify_ms(step.verify_ms);
      s->set_network_ms(step.network_ms);
      s->set_batch_size(step.batch_size);
    }
    Push(box, std::move(r));
  };
}

v1::GenerateResponse RouterServer::Impl::Summary(const RequestRecord& record, bool load_aware_on,
                                                 int64_t in_flight_at_start) {
  const engine::DecodeResult& result = record.result;
  const engine::DecodeStats& st = result.stats;
  v1::GenerateResponse r;
  v1::Summary* sum = r.mutable_summary();
  sum->set_finish_reason(result.stopped ? v1::STOP : v1::LENGTH);
  sum->set_stop_token_id(result.stop_token);
  sum->set_stop_string(result.stop_string);
  sum->set_request_id(record.request_id);
  *sum->mutable_stats() = ToProto(st);
  sum->mutable_stats()->set_estimated_speedup(EstimatedSpeedup(st, ar_step_ms.load()));
  if (load_aware_on) {
    sum->mutable_stats()->set_in_flight_at_start(static_cast<int32_t>(in_flight_at_start));
    if (sum->stats().load_aware_ar() && sum->stats().note().empty()) {
      sum->mutable_stats()->set_note(
          "load-aware speculation ran every step as AR: AR steps were measured faster at this "
          "load (no drafter session, no policy call)");
    }
  }
  v1::Usage* usage = sum->mutable_usage();
  usage->set_prompt_tokens(static_cast<int32_t>(record.prompt_tokens));
  usage->set_completion_tokens(static_cast<int32_t>(result.tokens.size()));
  usage->set_draft_tokens(static_cast<int32_t>(st.drafted_tokens));
  usage->set_target_passes(static_cast<int32_t>(st.verify_steps + 1));
  const std::string method = engine::MethodName(st.method);
  metrics->ObserveRequest(method, options.model_name, st, sum->stats().estimated_speedup());
  if (load_aware_on) metrics->ObserveLoadAware(*load_aware);
  return r;
}

namespace {

// --chat-template's file (BOS and EOS spelled as the tokenizer's), else tokenizer_config.json's
// chat_template; null when neither exists.
absl::StatusOr<std::unique_ptr<chat::ChatTemplate>> LoadChatTemplate(
    const RouterServerOptions& options, const tokenizer::Tokenizer* tokenizer) {
  if (options.chat_template_path.empty()) {
    if (options.tokenizer_dir.empty()) return nullptr;
    absl::StatusOr<chat::ChatTemplate> t =
        chat::ChatTemplate::FromTokenizerConfig(options.tokenizer_dir + "/tokenizer_config.json");
    if (absl::IsNotFound(t.status())) return nullptr;
    if (!t.ok()) return t.status();
    return std::make_unique<chat::ChatTemplate>(*std::move(t));
  }
  std::ifstream in(options.chat_template_path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("--chat-template: cannot read ", options.chat_template_path));
  }
  std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto piece = [tokenizer](std::optional<int32_t> id) {
    return tokenizer && id ? std::string(tokenizer->IdToPiece(*id)) : std::string();
  };
  absl::StatusOr<chat::ChatTemplate> t = chat::ChatTemplate::FromString(
      std::move(source), piece(tokenizer ? tokenizer->bos_id() : std::nullopt),
      piece(tokenizer ? tokenizer->eos_id() : std::nullopt));
  if (!t.ok())
    return absl::InvalidArgumentError(absl::StrCat("--chat-template: ", t.status().message()));
  return std::make_unique<chat::ChatTemplate>(*std::move(t));
}

}  // namespace

absl::Status RouterServer::Impl::StartHttp() {
  ASSIGN_OR_RETURN(chat_template, LoadChatTemplate(options, tokenizer.get()));
  if (options.http_address.empty()) return absl::OkStatus();
  HttpFrontOptions ho;
  ho.address = options.http_address;
  ho.threads = options.http_threads;
  ho.request_timeout_ms = options.http_request_timeout_ms;
  ho.default_max_tokens = options.default_max_new_tokens;
  ho.drain_ms = options.drain_ms;
  ho.tls = options.tls;  // the client port's certificate, and client CA, on both fronts
  HttpBackend hb;
  hb.spawn = [this](std::shared_ptr<Outbox> box, v1::GenerateRequest request, Deadline deadline,
                    std::string authorization) {
    Spawn(std::move(box), std::move(request), deadline, std::move(authorization));
  };
  if (api_keys) {
    hb.authenticate = [this](std::string_view authorization) {
      return api_keys->Authenticate(authorization);
    };
  }
  hb.healthy = [this] { return backends->targets().healthy_count() > 0; };
  hb.model_names = [this] { return Defaults().model_names; };
  hb.max_context = backends->target_info().max_context();
  hb.max_prompt_bytes = max_prompt_bytes;
  hb.tokenizer = tokenizer.get();
  hb.chat_template = chat_template.get();
  ASSIGN_OR_RETURN(http, HttpFront::Start(ho, std::move(hb), metrics_server.registry()));
  return absl::OkStatus();
}

RouterServer::RouterServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RouterServer::~RouterServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Start(
    const RouterServerOptions& options) {
  if (!tokenizer::IsValidUtf8(options.model_name)) {
    return absl::InvalidArgumentError(
        "--model-name must be UTF-8: it is a metrics label, the id that /v1/models lists, and "
        "the name clients send in GenerateRequest.model");
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
  if (!options.api_keys_path.empty()) {
    ASSIGN_OR_RETURN(impl->api_keys,
                     ApiKeys::Load(options.api_keys_path, impl->metrics_server.registry()));
  }
  if (!options.tokenizer_dir.empty()) {
    ASSIGN_OR_RETURN(impl->tokenizer,
                     tokenizer::Tokenizer::FromFile(options.tokenizer_dir + "/tokenizer.json"));
  }
  ASSIGN_OR_RETURN(impl->backends, Backends::Connect(options, impl->metrics.get()));
  impl->max_prompt_bytes = options.max_prompt_bytes;
  if (impl->max_prompt_bytes == 0 && impl->tokenizer) {
    impl->max_prompt_bytes =
        MaxPromptBytes(*impl->tokenizer, impl->backends->target_info().max_context());
  }
  if (options.warmup_tokens > 0) impl->WarmUp();
  impl->service = std::make_unique<RouterServiceImpl>(impl.get());
  if (!options.metrics_address.empty()) {
    RETURN_IF_ERROR(impl->metrics_server.Listen(options.metrics_address));
  }
  RETURN_IF_ERROR(impl->StartHttp());
  ASSIGN_OR_RETURN(impl->server, StartServer(options.address, {impl->service.get()},
                                             {v1::Router::service_full_name()}, options.tls));
  return std::unique_ptr<RouterServer>(new RouterServer(std::move(impl)));
}

int RouterServer::port() const { return impl_->server.port; }
int RouterServer::metrics_port() const { return impl_->metrics_server.port(); }
int RouterServer::http_port() const { return impl_->http ? impl_->http->port() : 0; }
prometheus::Registry& RouterServer::registry() { return impl_->metrics_server.registry(); }

void RouterServer::Shutdown() {
  if (!impl_ || !impl_->server.server) return;
  // Both fronts drain at once; the HTTP front's requests run on the same workers.
  std::thread http_drain([this] {
    if (impl_->http) impl_->http->Shutdown();
  });
  DrainAndShutdown(impl_->server.server.get(), impl_->options.drain_ms);
  http_drain.join();
  impl_->server.server->Wait();
  std::unique_lock<std::mutex> lock(impl_->workers_mu);
  impl_->workers_cv.wait(lock, [&] { return impl_->workers == 0; });
  impl_->server.server.reset();
}

int RunRouterServer(const RouterServerOptions& options) {
  return RunUntilSignal<RouterServer>("specdec-router", options);
}

}  // namespace specdec::services
