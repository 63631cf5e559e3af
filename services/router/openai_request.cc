#include "services/router/openai_request.h"

#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/chat/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::services {

// Ordered, so that a template's `tojson` shows the request's key order.
using Json = nlohmann::ordered_json;

namespace {

constexpr char kParamPayload[] = "type.specdec.dev/openai.param";

// The body's fields as optional typed values: absent and null read as unset.
class Fields {
 public:
  explicit Fields(const Json& object, std::string prefix = "")
      : object_(object), prefix_(std::move(prefix)) {}

  const Json* Get(std::string_view key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string Name(std::string_view key) const { return prefix_ + std::string(key); }

  absl::StatusOr<std::optional<double>> Number(std::string_view key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) return InvalidParam(Name(key), "must be a number");
    return v->get<double>();
  }
  absl::StatusOr<std::optional<int64_t>> Integer(std::string_view key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
        std::abs(v->get<double>()) < 9e15) {
      return static_cast<int64_t>(v->get<double>());
    }
    if (!v->is_number_integer()) return InvalidParam(Name(key), "must be an integer");
    if (v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX) {
      return InvalidParam(Name(key), "is out of range");
    }
    return v->get<int64_t>();
  }
  absl::StatusOr<std::optional<int32_t>> Int32(std::string_view key) const {
    ASSIGN_OR_RETURN(std::optional<int64_t> v, Integer(key));
    if (v && (*v < INT32_MIN || *v > INT32_MAX)) return InvalidParam(Name(key), "is out of range");
    if (!v) return std::nullopt;
    return static_cast<int32_t>(*v);
  }
  absl::StatusOr<std::optional<bool>> Bool(std::string_view key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) return InvalidParam(Name(key), "must be true or false");
    return v->get<bool>();
  }
  absl::StatusOr<std::optional<std::string>> String(std::string_view key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) return InvalidParam(Name(key), "must be a string");
    return v->get<std::string>();
  }

 private:
  const Json& object_;
  std::string prefix_;
};

absl::StatusOr<Json> ParseBody(std::string_view body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the request body is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  return j;
}

// Fields whose meaning specdec does not implement: refused rather than silently ignored.
absl::Status RefuseUnsupported(const Fields& f, ApiKind kind) {
  ASSIGN_OR_RETURN(std::optional<int64_t> n, f.Integer("n"));
  if (n && *n != 1)
    return InvalidParam("n", "must be 1: one choice per request (send one request per choice)");
  ASSIGN_OR_RETURN(std::optional<int64_t> best_of, f.Integer("best_of"));
  if (best_of && *best_of != 1)
    return InvalidParam("best_of", "must be 1: one candidate per request");
  for (const char* key : {"presence_penalty", "frequency_penalty", "repetition_penalty"}) {
    ASSIGN_OR_RETURN(std::optional<double> v, f.Number(key));
    if (v && *v != (std::string_view(key) == "repetition_penalty" ? 1.0 : 0.0)) {
      return InvalidParam(key,
                          "must be neutral (0; 1 for repetition_penalty): penalties would change "
                          "the distribution speculative decoding preserves");
    }
  }
  const Json* bias = f.Get("logit_bias");
  if (bias != nullptr && !(bias->is_object() && bias->empty())) {
    return InvalidParam("logit_bias", "must be absent or empty: logit bias is not supported");
  }
  const Json* logprobs = f.Get("logprobs");
  if (logprobs != nullptr && !(logprobs->is_boolean() && !logprobs->get<bool>())) {
    return InvalidParam("logprobs", "must be absent or false: log probabilities are not returned");
  }
  if (f.Get("suffix") != nullptr)
    return InvalidParam("suffix", "must be absent: insertion is not supported");
  if (kind == ApiKind::kChat) {
    const Json* tools = f.Get("tools");
    if (tools != nullptr && !(tools->is_array() && tools->empty())) {
      return InvalidParam("tools", "must be absent or empty: tool calling is not supported");
    }
    const Json* format = f.Get("response_format");
    if (format != nullptr && (!format->is_object() || format->value("type", "") != "text")) {
      return InvalidParam("response_format",
                          "must be {\"type\": \"text\"}: structured output is not supported");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadSampling(const Fields& f, v1::SamplingParams* s) {
  ASSIGN_OR_RETURN(std::optional<double> temperature, f.Number("temperature"));
  ASSIGN_OR_RETURN(std::optional<double> top_p, f.Number("top_p"));
  ASSIGN_OR_RETURN(std::optional<int32_t> top_k, f.Int32("top_k"));
  ASSIGN_OR_RETURN(std::optional<int64_t> seed, f.Integer("seed"));
  // OpenAI's defaults: temperature 1, top_p 1. top_k -1 is vLLM's "off".
  s->set_temperature(static_cast<float>(temperature.value_or(1.0)));
  s->set_top_p(static_cast<float>(top_p.value_or(1.0)));
  if (top_p && *top_p == 0) return InvalidParam("top_p", "must be in (0, 1]");
  if (top_k && *top_k == -1) top_k = 0;
  s->set_top_k(top_k.value_or(0));
  s->set_seed(static_cast<uint64_t>(seed.value_or(0)));
  return absl::OkStatus();
}

absl::Status ReadStop(const Fields& f, v1::GenerateRequest* r) {
  const Json* stop = f.Get("stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    r->add_stop(stop->get<std::string>());
    return absl::OkStatus();
  }
  if (!stop->is_array()) return InvalidParam("stop", "must be a string or an array of strings");
  for (const Json& s : *stop) {
    if (!s.is_string()) return InvalidParam("stop", "must be a string or an array of strings");
    r->add_stop(s.get<std::string>());
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Method> MethodByName(std::string name) {
  absl::AsciiStrToUpper(&name);
  v1::Method m;
  if (name == "METHOD_UNSPECIFIED" || !v1::Method_Parse(name, &m)) {
    return InvalidParam(
        "speculative.method",
        "must be one of AR, DRAFT_CHAIN, DYSPEC_TREE, DFLASH, DFLASH_ADAPTIVE, NGRAM");
  }
  return m;
}

// The `speculative` extension object: method, block_size, draft_length and the tree's budget.
absl::Status ReadSpeculative(const Fields& f, v1::GenerateRequest* r) {
  const Json* spec = f.Get("speculative");
  if (spec == nullptr) return absl::OkStatus();
  if (!spec->is_object()) return InvalidParam("speculative", "must be an object");
  Fields s(*spec, "speculative.");
  ASSIGN_OR_RETURN(std::optional<std::string> method, s.String("method"));
  if (method) {
    ASSIGN_OR_RETURN(v1::Method m, MethodByName(*method));
    r->set_method(m);
  }
  ASSIGN_OR_RETURN(std::optional<int32_t> block_size, s.Int32("block_size"));
  ASSIGN_OR_RETURN(std::optional<int32_t> draft_length, s.Int32("draft_length"));
  ASSIGN_OR_RETURN(std::optional<int32_t> tree_budget, s.Int32("tree_budget"));
  ASSIGN_OR_RETURN(std::optional<int32_t> tree_max_depth, s.Int32("tree_max_depth"));
  ASSIGN_OR_RETURN(std::optional<double> tree_threshold, s.Number("tree_threshold"));
  r->set_block_size(block_size.value_or(0));
  r->set_draft_length(draft_length.value_or(0));
  r->set_tree_budget(tree_budget.value_or(0));
  r->set_tree_max_depth(tree_max_depth.value_or(0));
  r->set_tree_threshold(static_cast<float>(tree_threshold.value_or(0)));
  return absl::OkStatus();
}

// Everything both endpoints share: model, sampling, limits, stop, streaming, extensions.
absl::Status ReadCommon(const Fields& f, ApiKind kind, int32_t default_max_tokens,
                        OpenAiRequest* out) {
  RETURN_IF_ERROR(RefuseUnsupported(f, kind));
  ASSIGN_OR_RETURN(std::optional<std::string> model, f.String("model"));
  out->model = model.value_or("");
  out->request.set_model(out->model);
  RETURN_IF_ERROR(ReadSampling(f, out->request.mutable_sampling()));
  ASSIGN_OR_RETURN(std::optional<int32_t> max_tokens, f.Int32("max_tokens"));
  if (kind == ApiKind::kChat) {
    ASSIGN_OR_RETURN(std::optional<int32_t> max_completion, f.Int32("max_completion_tokens"));
    if (max_completion) max_tokens = max_completion;
  }
  const char* max_name = f.Get("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (max_tokens && *max_tokens < 1) return InvalidParam(max_name, "must be at least 1");
  out->request.set_max_new_tokens(max_tokens.value_or(default_max_tokens));
  RETURN_IF_ERROR(ReadStop(f, &out->request));
  ASSIGN_OR_RETURN(std::optional<bool> stream, f.Bool("stream"));
  out->stream = stream.value_or(false);
  if (const Json* so = f.Get("stream_options"); so != nullptr) {
    if (!so->is_object()) return InvalidParam("stream_options", "must be an object");
    ASSIGN_OR_RETURN(std::optional<bool> usage,
                     Fields(*so, "stream_options.").Bool("include_usage"));
    out->include_usage = usage.value_or(false);
  }
  ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, f.Bool("ignore_eos"));
  out->request.set_ignore_eos(ignore_eos.value_or(false));
  ASSIGN_OR_RETURN(std::optional<bool> return_token_ids, f.Bool("return_token_ids"));
  out->return_token_ids = return_token_ids.value_or(false);
  ASSIGN_OR_RETURN(std::optional<std::string> user, f.String("user"));  // accepted, not used
  RETURN_IF_ERROR(ReadSpeculative(f, &out->request));
  out->request.set_return_text(true);
  return absl::OkStatus();
}

// `prompt`: a string, an array of token ids, or an array holding exactly one of those.
absl::Status ReadPrompt(const Fields& f, v1::GenerateRequest* r) {
  const Json* prompt = f.Get("prompt");
  if (prompt == nullptr) return InvalidParam("prompt", "is required");
  if (prompt->is_array() && prompt->size() == 1 && !(*prompt)[0].is_number()) {
    prompt = &(*prompt)[0];
  }
  if (prompt->is_string()) {
    r->set_text(prompt->get<std::string>());
    return absl::OkStatus();
  }
  constexpr std::string_view kShape = "must be a string or an array of token ids";
  if (!prompt->is_array()) return InvalidParam("prompt", kShape);
  for (const Json& t : *prompt) {
    if (t.is_string() || t.is_array()) {
      return InvalidParam(
          "prompt",
          "must hold one prompt: batched prompts are not supported (send one per request)");
    }
    if (!t.is_number_integer() || t.get<int64_t>() < INT32_MIN || t.get<int64_t>() > INT32_MAX) {
      return InvalidParam("prompt", kShape);
    }
    r->mutable_token_ids()->add_ids(t.get<int32_t>());
  }
  return absl::OkStatus();
}

// A message's content as text: a string, or an array of {"type": "text", "text": ...} parts.
absl::StatusOr<std::string> ContentText(const Json& content, size_t index) {
  const std::string param = absl::StrCat("messages[", index, "].content");
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return InvalidParam(param, "must be a string or an array of parts");
  std::string text;
  for (const Json& part : content) {
    const bool text_part = part.is_object() && part.contains("type") && part["type"] == "text" &&
                           part.contains("text") && part["text"].is_string();
    if (!text_part) {
      return InvalidParam(param, "must hold text parts only ({\"type\": \"text\", \"text\": ...})");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// The messages as the template reads them: every field kept, content flattened to text.
absl::StatusOr<Json> TemplateMessages(const Fields& f) {
  const Json* messages = f.Get("messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    return InvalidParam("messages", "must be a non-empty array of messages");
  }
  Json out = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return InvalidParam(absl::StrCat("messages[", i, "]"), "must be an object with a role");
    }
    Json copy = m;
    ASSIGN_OR_RETURN(copy["content"], ContentText(m.value("content", Json()), i));
    out.push_back(std::move(copy));
  }
  return out;
}

}  // namespace

absl::Status InvalidParam(std::string_view param, std::string_view message) {
  const std::string p(param);
  absl::Status s = absl::InvalidArgumentError(p + " " + std::string(message));
  s.SetPayload(kParamPayload, absl::Cord(p));
  return s;
}

std::string ParamOf(const absl::Status& status) {
  auto p = status.GetPayload(kParamPayload);
  return p ? std::string(*p) : std::string();
}

absl::StatusOr<OpenAiRequest> ParseCompletionRequest(std::string_view body,
                                                     int32_t default_max_tokens) {
  ASSIGN_OR_RETURN(Json j, ParseBody(body));
  Fields f(j);
  OpenAiRequest out;
  out.kind = ApiKind::kCompletion;
  RETURN_IF_ERROR(ReadCommon(f, out.kind, default_max_tokens, &out));
  RETURN_IF_ERROR(ReadPrompt(f, &out.request));
  ASSIGN_OR_RETURN(std::optional<bool> echo, f.Bool("echo"));
  out.request.set_echo(echo.value_or(false));
  return out;
}

absl::StatusOr<OpenAiRequest> ParseChatRequest(std::string_view body,
                                               const chat::ChatTemplate* chat_template,
                                               const tokenizer::Tokenizer* tokenizer,
                                               int32_t default_max_tokens,
                                               size_t max_prompt_bytes) {
  ASSIGN_OR_RETURN(Json j, ParseBody(body));
  Fields f(j);
  OpenAiRequest out;
  out.kind = ApiKind::kChat;
  RETURN_IF_ERROR(ReadCommon(f, out.kind, default_max_tokens, &out));
  ASSIGN_OR_RETURN(Json messages, TemplateMessages(f));
  ASSIGN_OR_RETURN(std::optional<bool> add_generation_prompt, f.Bool("add_generation_prompt"));
  const Json* kwargs = f.Get("chat_template_kwargs");  // vLLM's: e.g. {"enable_thinking": false}
  if (kwargs != nullptr && !kwargs->is_object()) {
    return InvalidParam("chat_template_kwargs", "must be an object");
  }
  if (chat_template == nullptr || tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        "this model has no chat template (tokenizer_config.json's chat_template): use "
        "/v1/completions, or start the router with --chat-template FILE");
  }
  ASSIGN_OR_RETURN(std::string text,
                   chat_template->Render(messages, add_generation_prompt.value_or(true),
                                         kwargs != nullptr ? *kwargs : Json()));
  if (max_prompt_bytes > 0 && text.size() > max_prompt_bytes) {
    return InvalidParam("messages", absl::StrCat("render to ", text.size(), " bytes; at most ",
                                                 max_prompt_bytes, " can fit the model's context"));
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer->Encode(text, /*add_bos=*/false));
  for (int32_t id : ids) out.request.mutable_token_ids()->add_ids(id);
  return out;
}

}  // namespace specdec::services
