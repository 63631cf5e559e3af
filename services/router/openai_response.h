// The OpenAI HTTP API's response bodies built from the router's Generate stream: the whole
// completion, streamed chunks (Server-Sent Events), the usage chunk, and the error body with its
// HTTP status. specdec's statistics travel in an extension field, `specdec`.
#ifndef SPECDEC_SERVICES_ROUTER_OPENAI_RESPONSE_H_
#define SPECDEC_SERVICES_ROUTER_OPENAI_RESPONSE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "services/router/openai_request.h"
#include "specdec/v1/router.pb.h"

namespace specdec::services {

// What every body of one response names: its id, creation time and model.
struct ResponseHeader {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// The text and token ids a stream has produced so far.
struct Accumulated {
  std::string text;
  std::vector<int32_t> token_ids;
  std::optional<std::vector<int32_t>> prompt_token_ids;  // return_token_ids
};

// One SSE event: "data: <payload>\n\n".
std::string SseEvent(const std::string& payload);

// A streamed chunk with `text` and the `token_ids` it commits. `first` marks a chat stream's first
// delta, which carries the role (and, when asked for, the prompt's token ids).
std::string ChunkJson(const ResponseHeader& h, const std::string& text,
                      std::span<const int32_t> token_ids, bool first,
                      const std::vector<int32_t>* prompt_token_ids = nullptr);
// The chunk that ends the choice: no text, its finish_reason.
std::string FinalChunkJson(const ResponseHeader& h, const v1::Summary& summary);
// stream_options.include_usage: no choices, the usage and specdec's statistics.
std::string UsageChunkJson(const ResponseHeader& h, const v1::Summary& summary);
// The whole non-streamed response.
std::string CompletionJson(const ResponseHeader& h, const Accumulated& out,
                           const v1::Summary& summary);

// OpenAI's error body, {"error": {"message", "type", "param", "code"}}, and its HTTP status:
// 400 invalid request, 401/403 keys, 404 unknown model, 429 over capacity, 499 cancelled by the
// client, 503 no backend, 504 deadline, 500 otherwise.
int HttpStatusOf(const absl::Status& status);
std::string ErrorJson(const absl::Status& status);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_OPENAI_RESPONSE_H_
