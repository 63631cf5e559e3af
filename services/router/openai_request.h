// The OpenAI HTTP API's request bodies (POST /v1/completions, /v1/chat/completions) read into
// the router's own GenerateRequest, so that both fronts share one validation (request_limits.h)
// and one step loop. Types are checked here; ranges by ConvertRequest, as for gRPC. What this
// API accepts and refuses is listed in docs/design.md section 1.7.
#ifndef SPECDEC_SERVICES_ROUTER_OPENAI_REQUEST_H_
#define SPECDEC_SERVICES_ROUTER_OPENAI_REQUEST_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "specdec/v1/router.pb.h"

namespace specdec::chat {
class ChatTemplate;
}
namespace specdec::tokenizer {
class Tokenizer;
}

namespace specdec::services {

enum class ApiKind { kCompletion, kChat };

struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletion;
  v1::GenerateRequest request;  // always return_text; request_id left to the caller
  std::string model;            // as the client named it ("" when it named none)
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool return_token_ids = false;  // vLLM's extension: the prompt's token ids in the response
};

// An INVALID_ARGUMENT naming the offending body field; OpenAI's error JSON reports it as `param`.
absl::Status InvalidParam(std::string_view param, std::string_view message);
// The field InvalidParam named, or "".
std::string ParamOf(const absl::Status& status);

// POST /v1/completions. `default_max_tokens` is used when max_tokens is absent or null.
absl::StatusOr<OpenAiRequest> ParseCompletionRequest(std::string_view body,
                                                     int32_t default_max_tokens);

// POST /v1/chat/completions: the messages rendered with `chat_template` (null: the model has
// none, FAILED_PRECONDITION) and tokenized with `tokenizer` without an added BOS (templates write
// their own); a rendering longer than `max_prompt_bytes` (0 = no limit) is refused untokenized.
absl::StatusOr<OpenAiRequest> ParseChatRequest(std::string_view body,
                                               const chat::ChatTemplate* chat_template,
                                               const tokenizer::Tokenizer* tokenizer,
                                               int32_t default_max_tokens,
                                               size_t max_prompt_bytes = 0);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_OPENAI_REQUEST_H_
