#include "services/router/openai_response.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace specdec::services {

using Json = nlohmann::json;

namespace {

const char* ObjectName(ApiKind kind, bool chunk) {
  if (kind == ApiKind::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

Json Envelope(const ResponseHeader& h, bool chunk) {
  return Json{{"id", h.id},
              {"object", ObjectName(h.kind, chunk)},
              {"created", h.created},
              {"model", h.model}};
}

const char* FinishReason(const v1::Summary& s) {
  return s.finish_reason() == v1::STOP ? "stop" : "length";
}

Json Usage(const v1::Summary& s) {
  const int64_t prompt = s.usage().prompt_tokens(), completion = s.usage().completion_tokens();
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion}};
}

// The Summary's statistics as JSON with the proto's field names (every field, zeros included).
Json Statistics(const v1::Summary& s) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  std::string text;
  Json stats = Json::object();
  if (google::protobuf::util::MessageToJsonString(s.stats(), &text, o).ok()) {
    stats = Json::parse(text, nullptr, false);
  }
  stats["request_id"] = s.request_id();
  stats["draft_tokens"] = s.usage().draft_tokens();
  stats["target_passes"] = s.usage().target_passes();
  if (!s.stop_string().empty()) stats["stop_string"] = s.stop_string();
  if (s.stop_token_id() >= 0 && s.finish_reason() == v1::STOP && s.stop_string().empty()) {
    stats["stop_token_id"] = s.stop_token_id();
  }
  return stats;
}

Json Choice(const ResponseHeader& h, const std::string& text, bool first, Json finish) {
  Json c{{"index", 0}, {"finish_reason", std::move(finish)}, {"logprobs", nullptr}};
  if (h.kind == ApiKind::kCompletion) {
    c["text"] = text;
  } else {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    c["delta"] = std::move(delta);
  }
  return c;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace

std::string SseEvent(const std::string& payload) { return absl::StrCat("data: ", payload, "\n\n"); }

std::string ChunkJson(const ResponseHeader& h, const std::string& text,
                      std::span<const int32_t> token_ids, bool first,
                      const std::vector<int32_t>* prompt_token_ids) {
  Json j = Envelope(h, true);
  j["choices"] = Json::array({Choice(h, text, first, nullptr)});
  j["specdec"] = Json{{"token_ids", std::vector<int32_t>(token_ids.begin(), token_ids.end())}};
  if (prompt_token_ids != nullptr) j["specdec"]["prompt_token_ids"] = *prompt_token_ids;
  return Dump(j);
}

std::string FinalChunkJson(const ResponseHeader& h, const v1::Summary& summary) {
  Json j = Envelope(h, true);
  j["choices"] = Json::array({Choice(h, "", false, FinishReason(summary))});
  return Dump(j);
}

std::string UsageChunkJson(const ResponseHeader& h, const v1::Summary& summary) {
  Json j = Envelope(h, true);
  j["choices"] = Json::array();
  j["usage"] = Usage(summary);
  j["specdec"] = Statistics(summary);
  return Dump(j);
}

std::string CompletionJson(const ResponseHeader& h, const Accumulated& out,
                           const v1::Summary& summary) {
  Json j = Envelope(h, false);
  Json choice{{"index", 0}, {"finish_reason", FinishReason(summary)}, {"logprobs", nullptr}};
  if (h.kind == ApiKind::kCompletion) {
    choice["text"] = out.text;
  } else {
    choice["message"] = Json{{"role", "assistant"}, {"content", out.text}};
  }
  j["choices"] = Json::array({std::move(choice)});
  j["usage"] = Usage(summary);
  j["specdec"] = Statistics(summary);
  j["specdec"]["token_ids"] = out.token_ids;
  if (out.prompt_token_ids) j["specdec"]["prompt_token_ids"] = *out.prompt_token_ids;
  return Dump(j);
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorJson(const absl::Status& status) {
  const int http = HttpStatusOf(status);
  const char* type = http == 400   ? "invalid_request_error"
                     : http == 401 ? "authentication_error"
                     : http == 403 ? "permission_error"
                     : http == 404 ? "not_found_error"
                     : http == 429 ? "rate_limit_error"
                     : http == 504 ? "timeout_error"
                     : http == 503 ? "service_unavailable_error"
                                   : "server_error";
  const std::string param = ParamOf(status);
  Json error{{"message", std::string(status.message())},
             {"type", type},
             {"param", param.empty() ? Json(nullptr) : Json(param)},
             {"code", http == 404 ? Json("model_not_found")
                                  : Json(absl::StatusCodeToString(status.code()))}};
  return Dump(Json{{"error", std::move(error)}});
}

}  // namespace specdec::services
