// The router's OpenAI-compatible HTTP front: POST /v1/completions and /v1/chat/completions (whole
// responses, or Server-Sent Events), GET /v1/models and GET /health, on its own port. Requests run
// through the same admission, validation, step loop and metrics as gRPC Generate calls: the front
// only translates (openai_request.h, openai_response.h) and hands each request to the router's
// worker through an Outbox. docs/design.md section 1.7 describes the API.
#ifndef SPECDEC_SERVICES_ROUTER_HTTP_FRONT_H_
#define SPECDEC_SERVICES_ROUTER_HTTP_FRONT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "services/common/tls.h"
#include "services/router/outbox.h"
#include "services/router/remote_sides.h"

namespace specdec::chat {
class ChatTemplate;
}
namespace specdec::tokenizer {
class Tokenizer;
}

namespace specdec::services {

struct HttpFrontOptions {
  std::string address = "127.0.0.1:8000";  // host:port; port 0 picks a free one
  int threads = 128;                       // connections served at once
  int request_timeout_ms = 600000;         // a request's deadline unless X-Request-Timeout-Ms
  size_t max_body_bytes = 8 << 20;         // larger bodies get 413
  int32_t default_max_tokens = 128;        // chat without max_tokens (completions: 16, OpenAI's)
  int drain_ms = 2000;                     // Shutdown: wait this long, then cancel what runs
  int idle_timeout_s = 5;  // a kept-alive connection with no new request is closed after this
  int io_timeout_s = 30;   // reading a request or writing a response stalls at most this long
  // HTTPS with cert and key (re-read when they change), requiring a client certificate signed by
  // `ca` when set (services/router/http_tls.h); plaintext without them.
  TlsFiles tls;
};

// What the front needs of the router.
struct HttpBackend {
  // Runs a request on a worker that fills `box` (RouterServer's Spawn); the last argument is the
  // request's Authorization header (its API key).
  std::function<void(std::shared_ptr<Outbox>, v1::GenerateRequest, Deadline, std::string)> spawn;
  // Checks an Authorization header for GET /v1/models; null: no keys are configured.
  std::function<absl::Status(std::string_view)> authenticate;
  std::function<bool()> healthy;                          // a target replica is up
  std::function<std::vector<std::string>()> model_names;  // the first is the default
  int64_t max_context = 0;
  size_t max_prompt_bytes = 0;  // text (and rendered chat) longer than this is refused untokenized
  const tokenizer::Tokenizer* tokenizer = nullptr;    // null: text prompts are refused
  const chat::ChatTemplate* chat_template = nullptr;  // null: chat is refused (400)
};

class HttpFront {
 public:
  static absl::StatusOr<std::unique_ptr<HttpFront>> Start(const HttpFrontOptions& options,
                                                          HttpBackend backend,
                                                          prometheus::Registry& registry);
  ~HttpFront();
  int port() const;
  // Stops accepting connections, lets requests in flight finish for drain_ms, then cancels them.
  void Shutdown();

  struct Impl;

 private:
  explicit HttpFront(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_HTTP_FRONT_H_
