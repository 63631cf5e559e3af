#include "services/router/http_front.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <random>
#include <set>
#include <thread>
#include <variant>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/util/clock.h"
#include "nlohmann/json.hpp"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "services/router/api_keys.h"
#include "services/router/http_tls.h"
#include "services/router/openai_request.h"
#include "services/router/openai_response.h"
#include "services/router/request_conversion.h"

namespace specdec::services {

namespace {

// The HTTP side of one request's Outbox: the handler's thread waits here for what the worker
// produces.
class HttpStream final : public OutboxReader {
 public:
  HttpStream() : box_(std::make_shared<Outbox>()) { box_->reader = this; }
  ~HttpStream() override { Detach(); }
  const std::shared_ptr<Outbox>& box() const { return box_; }
  void Pump() override { cv_.notify_all(); }

  // The next response, or the final status once the worker finished.
  std::variant<v1::GenerateResponse, absl::Status> Pop() {
    std::unique_lock<std::mutex> lock(box_->mu);
    cv_.wait(lock, [&] { return !box_->queue.empty() || box_->finish_requested; });
    if (!box_->queue.empty()) {
      v1::GenerateResponse r = std::move(box_->queue.front());
      box_->queue.pop_front();
      return r;
    }
    box_->finished = true;
    return box_->status;
  }
  // The client is served or gone: the worker's later responses are dropped, and unless it
  // finished, it is cancelled.
  void Detach() {
    std::lock_guard<std::mutex> lock(box_->mu);
    if (box_->reader == nullptr) return;
    box_->reader = nullptr;
    if (!box_->finished) box_->cancel.Cancel();
  }

 private:
  std::shared_ptr<Outbox> box_;
  std::condition_variable cv_;
};

// A streamed response between the handler and httplib's content provider.
struct SseState {
  std::unique_ptr<HttpStream> stream;
  ResponseHeader header;
  bool include_usage = false;
  bool sent_first = false;
  bool done = false;  // [DONE] was written: the response is complete whatever the client does
  std::optional<v1::GenerateResponse> pending;           // popped before the headers were committed
  std::optional<std::vector<int32_t>> prompt_token_ids;  // return_token_ids: in the first chunk
  std::function<void(int code)> on_end;                  // metrics, once
};

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void ReplyJson(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void ReplyError(httplib::Response& res, const absl::Status& status) {
  ReplyJson(res, HttpStatusOf(status), ErrorJson(status));
  if (status.code() == absl::StatusCode::kResourceExhausted ||
      status.code() == absl::StatusCode::kUnavailable) {
    const int64_t ms = RetryAfterMs(status);
    res.set_header("Retry-After", std::to_string(ms > 0 ? (ms + 999) / 1000 : 1));
  }
}

// Writes one popped response as SSE events; false when the client is gone.
bool WriteEvent(SseState& s, const v1::GenerateResponse& r, httplib::DataSink& sink) {
  std::string out;
  if (r.has_chunk()) {
    const bool first = !s.sent_first;
    s.sent_first = true;
    const auto& ids = r.chunk().token_ids();  // the echoed prompt commits none
    const size_t n = r.chunk().prompt() ? 0 : static_cast<size_t>(ids.size());
    out = SseEvent(ChunkJson(s.header, r.chunk().text(), {ids.data(), n}, first,
                             first && s.prompt_token_ids ? &*s.prompt_token_ids : nullptr));
  } else if (r.has_summary()) {
    out = SseEvent(FinalChunkJson(s.header, r.summary()));
    if (s.include_usage) out += SseEvent(UsageChunkJson(s.header, r.summary()));
    out += SseEvent("[DONE]");
  }
  return out.empty() || sink.write(out.data(), out.size());
}

}  // namespace

struct HttpFront::Impl {
  HttpFrontOptions options;
  HttpBackend backend;
  std::unique_ptr<HttpTlsContext> tls;  // null: plaintext; outlives the server
  std::unique_ptr<httplib::Server> server;
  std::thread listener;
  int port = 0;
  const std::string instance = absl::StrFormat("%08x", std::random_device()());
  std::atomic<uint64_t> next_id{0};
  prometheus::Family<prometheus::Counter>* requests = nullptr;
  prometheus::Family<prometheus::Histogram>* durations = nullptr;
  std::mutex active_mu;
  std::set<Outbox*> active;  // boxes of requests in flight, cancelled at the end of a drain

  void Routes();
  void Count(const std::string& endpoint, int code, SteadyClock::time_point t0);
  Deadline DeadlineOf(const httplib::Request& req) const;
  void Generate(ApiKind kind, const httplib::Request& req, httplib::Response& res);
  std::optional<std::vector<int32_t>> PromptIds(const OpenAiRequest& r) const;
  void ReplyWhole(HttpStream& stream, const ResponseHeader& h, Accumulated out,
                  httplib::Response& res);
  void StartStream(std::unique_ptr<HttpStream> stream, const OpenAiRequest& r,
                   const ResponseHeader& h, httplib::Response& res,
                   std::function<void(int)> on_end);
  void Track(Outbox* box, bool add);
};

void HttpFront::Impl::Count(const std::string& endpoint, int code, SteadyClock::time_point t0) {
  requests->Add({{"endpoint", endpoint}, {"code", std::to_string(code)}}).Increment();
  durations
      ->Add({{"endpoint", endpoint}},
            prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                    2.5, 5, 10, 30, 60, 120})
      .Observe(MsSince(t0) / 1000.0);
}

void HttpFront::Impl::Track(Outbox* box, bool add) {
  std::lock_guard<std::mutex> lock(active_mu);
  if (add) {
    active.insert(box);
  } else {
    active.erase(box);
  }
}

Deadline HttpFront::Impl::DeadlineOf(const httplib::Request& req) const {
  int64_t ms = options.request_timeout_ms;
  int64_t asked = 0;
  if (absl::SimpleAtoi(req.get_header_value("X-Request-Timeout-Ms"), &asked) && asked > 0) {
    ms = std::min(ms, asked);
  }
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

void HttpFront::Impl::Generate(ApiKind kind, const httplib::Request& req, httplib::Response& res) {
  const auto t0 = SteadyClock::now();
  const std::string endpoint = req.path;
  absl::StatusOr<OpenAiRequest> parsed =
      kind == ApiKind::kCompletion
          ? ParseCompletionRequest(req.body, 16)
          : ParseChatRequest(req.body, backend.chat_template, backend.tokenizer,
                             options.default_max_tokens, backend.max_prompt_bytes);
  if (!parsed.ok()) {
    ReplyError(res, parsed.status());
    Count(endpoint, res.status, t0);
    return;
  }
  OpenAiRequest& r = *parsed;
  std::string request_id = req.get_header_value("X-Request-Id");
  if (request_id.empty()) request_id = absl::StrFormat("h-%s-%06d", instance, next_id++);
  r.request.set_request_id(request_id);
  const std::vector<std::string> names = backend.model_names();
  ResponseHeader h{kind, absl::StrCat(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-", request_id),
                   UnixSeconds(), r.model.empty() && !names.empty() ? names[0] : r.model};
  auto stream = std::make_unique<HttpStream>();
  Track(stream->box().get(), true);
  backend.spawn(stream->box(), r.request, DeadlineOf(req), req.get_header_value("Authorization"));
  if (!r.stream) {
    Accumulated out;
    out.prompt_token_ids = PromptIds(r);
    ReplyWhole(*stream, h, std::move(out), res);
    Track(stream->box().get(), false);
    Count(endpoint, res.status, t0);
    return;
  }
  Outbox* box = stream->box().get();
  StartStream(std::move(stream), r, h, res, [this, endpoint, t0, box](int code) {
    Track(box, false);
    Count(endpoint, code, t0);
  });
}

std::optional<std::vector<int32_t>> HttpFront::Impl::PromptIds(const OpenAiRequest& r) const {
  if (!r.return_token_ids) return std::nullopt;
  absl::StatusOr<std::vector<int32_t>> ids =
      PromptTokens(r.request, backend.tokenizer, backend.max_prompt_bytes);
  if (!ids.ok()) return std::nullopt;  // the worker reports the error
  return *std::move(ids);
}

void HttpFront::Impl::ReplyWhole(HttpStream& stream, const ResponseHeader& h, Accumulated out,
                                 httplib::Response& res) {
  std::optional<v1::Summary> summary;
  for (;;) {
    auto item = stream.Pop();
    if (auto* status = std::get_if<absl::Status>(&item)) {
      if (!status->ok()) return ReplyError(res, *status);
      break;
    }
    const v1::GenerateResponse& r = std::get<v1::GenerateResponse>(item);
    if (r.has_summary()) summary = r.summary();
    if (!r.has_chunk()) continue;
    out.text += r.chunk().text();
    if (!r.chunk().prompt()) {
      out.token_ids.insert(out.token_ids.end(), r.chunk().token_ids().begin(),
                           r.chunk().token_ids().end());
    }
  }
  if (!summary) return ReplyError(res, absl::InternalError("the request ended without a summary"));
  ReplyJson(res, 200, CompletionJson(h, out, *summary));
}

void HttpFront::Impl::StartStream(std::unique_ptr<HttpStream> stream, const OpenAiRequest& r,
                                  const ResponseHeader& h, httplib::Response& res,
                                  std::function<void(int)> on_end) {
  // Errors before the first token (validation, admission, prefill) keep their HTTP status.
  auto first = stream->Pop();
  if (auto* status = std::get_if<absl::Status>(&first)) {
    ReplyError(res, status->ok() ? absl::InternalError("the request produced nothing") : *status);
    on_end(res.status);
    return;
  }
  auto state = std::make_shared<SseState>();
  state->stream = std::move(stream);
  state->header = h;
  state->include_usage = r.include_usage;
  state->prompt_token_ids = PromptIds(r);
  state->pending = std::move(std::get<v1::GenerateResponse>(first));
  state->on_end = std::move(on_end);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t, httplib::DataSink& sink) {
        std::variant<v1::GenerateResponse, absl::Status> item;
        if (state->pending) {
          item = std::move(*state->pending);
          state->pending.reset();
        } else {
          item = state->stream->Pop();
        }
        if (auto* r = std::get_if<v1::GenerateResponse>(&item)) {
          if (!WriteEvent(*state, *r, sink)) return false;
          if (r->has_summary()) {
            state->done = true;
            sink.done();
          }
          return true;
        }
        // The worker finished without a summary: an error after the stream began.
        const absl::Status& status = std::get<absl::Status>(item);
        std::string out = status.ok() ? "" : SseEvent(ErrorJson(status));
        out += SseEvent("[DONE]");
        if (!sink.write(out.data(), out.size())) return false;
        state->done = true;
        sink.done();
        return true;
      },
      [state](bool success) {
        if (!state->done) state->stream->Detach();  // cancels the worker unless it finished
        state->on_end(success || state->done ? 200 : 499);
      });
}

void HttpFront::Impl::Routes() {
  server->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(ApiKind::kCompletion, req, res);
  });
  server->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(ApiKind::kChat, req, res);
  });
  server->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (backend.authenticate) {
      if (absl::Status s = backend.authenticate(req.get_header_value("Authorization")); !s.ok()) {
        return ReplyError(res, s);
      }
    }
    nlohmann::json data = nlohmann::json::array();
    for (const std::string& name : backend.model_names()) {
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "specdec"},
                      {"max_model_len", backend.max_context}});
    }
    ReplyJson(res, 200, nlohmann::json{{"object", "list"}, {"data", data}}.dump());
  });
  server->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool up = backend.healthy();
    ReplyJson(
        res, up ? 200 : 503,
        up ? R"({"status":"ok"})" : R"({"status":"unavailable","reason":"no healthy target"})");
  });
  server->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const absl::Status s =
        res.status == 404   ? absl::NotFoundError(absl::StrCat("no route ", req.path))
        : res.status == 413 ? absl::InvalidArgumentError("the request body is too large")
                            : absl::InvalidArgumentError(absl::StrCat("HTTP ", res.status));
    res.set_content(ErrorJson(s), "application/json");
  });
}

absl::StatusOr<std::unique_ptr<HttpFront>> HttpFront::Start(const HttpFrontOptions& options,
                                                            HttpBackend backend,
                                                            prometheus::Registry& registry) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->backend = std::move(backend);
  impl->requests = &prometheus::BuildCounter()
                        .Name("specdec_http_requests_total")
                        .Help("OpenAI-compatible HTTP requests by endpoint and status code")
                        .Register(registry);
  impl->durations = &prometheus::BuildHistogram()
                         .Name("specdec_http_request_duration_seconds")
                         .Help("HTTP request duration, to the last byte of a stream")
                         .Register(registry);
  if (!options.tls.cert.empty() || !options.tls.key.empty()) {
    auto tls = HttpTlsContext::Create(options.tls);
    if (!tls.ok()) return tls.status();
    impl->tls = *std::move(tls);
    HttpTlsContext* ctx = impl->tls.get();
    impl->server = std::make_unique<httplib::SSLServer>(
        [ctx](SSL_CTX& ssl_ctx) { return ctx->Configure(&ssl_ctx); });
    if (!impl->server->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the HTTP front cannot use the client CA '", options.tls.ca, "'"));
    }
  } else {
    impl->server = std::make_unique<httplib::Server>();
  }
  const int threads = std::max(1, options.threads);
  impl->server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl->server->set_payload_max_length(options.max_body_bytes);
  impl->server->set_keep_alive_timeout(std::max(1, options.idle_timeout_s));
  impl->server->set_read_timeout(std::max(1, options.io_timeout_s), 0);
  impl->server->set_write_timeout(std::max(1, options.io_timeout_s), 0);
  impl->Routes();
  const size_t colon = options.address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-address must be host:port, got \"", options.address, "\""));
  }
  const std::string host = options.address.substr(0, colon);
  if (port == 0) {
    impl->port = impl->server->bind_to_any_port(host);
  } else if (impl->server->bind_to_port(host, port)) {
    impl->port = port;
  }
  if (impl->port <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind the HTTP front to ", options.address));
  }
  Impl* raw = impl.get();
  impl->listener = std::thread([raw] { raw->server->listen_after_bind(); });
  // stop() is a no-op until the loop runs: a Shutdown right after Start must not miss it.
  while (!impl->server->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<HttpFront>(new HttpFront(std::move(impl)));
}

HttpFront::HttpFront(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpFront::~HttpFront() { Shutdown(); }
int HttpFront::port() const { return impl_->port; }

void HttpFront::Shutdown() {
  if (!impl_ || !impl_->listener.joinable()) return;
  impl_->server->stop();
  const auto until = SteadyClock::now() + std::chrono::milliseconds(impl_->options.drain_ms);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(impl_->active_mu);
      if (impl_->active.empty()) break;
      if (SteadyClock::now() >= until) {
        for (Outbox* box : impl_->active) box->cancel.Cancel();
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  impl_->listener.join();
}

}  // namespace specdec::services
