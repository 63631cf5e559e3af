// Loading and rendering of Hugging Face chat templates.
#include "common/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/chat/jinja_ast.h"
#include "common/chat/jinja_json.h"
#include "common/chat/jinja_parser.h"
#include "common/chat/jinja_render.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::chat {
namespace {

using jinja::CallArgs;
using jinja::Value;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token of tokenizer_config.json: a string, or an object with a "content" string.
std::string SpecialToken(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return "";
}

// The template text of a "chat_template" field: a string, or the "default" (else the first) of a
// list of {"name", "template"}.
absl::StatusOr<std::string> TemplateField(const nlohmann::json& field, const std::string& path) {
  if (field.is_string()) return field.get<std::string>();
  if (field.is_array() && !field.empty()) {
    const nlohmann::json* chosen = &field[0];
    for (const nlohmann::json& entry : field) {
      if (!entry.is_object()) continue;
      const auto name = entry.find("name");
      if (name != entry.end() && name->is_string() && name->get<std::string>() == "default") {
        chosen = &entry;
      }
    }
    const auto text = chosen->is_object() ? chosen->find("template") : chosen->end();
    if (chosen->is_object() && text != chosen->end() && text->is_string()) {
      return text->get<std::string>();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": \"chat_template\" must be a string or a list of {\"name\", \"template\"}"));
}

// The template source for the config at `path`: its "chat_template", else chat_template.jinja in
// the same directory.
absl::StatusOr<std::string> TemplateSource(const nlohmann::json& config, const std::string& path) {
  const auto field = config.find("chat_template");
  if (field != config.end() && !field->is_null()) return TemplateField(*field, path);
  const std::filesystem::path sibling =
      std::filesystem::path(path).parent_path() / "chat_template.jinja";
  if (std::filesystem::exists(sibling)) return ReadFile(sibling.string());
  return absl::NotFoundError(absl::StrCat(
      path,
      " has no \"chat_template\" and there is no chat_template.jinja next to it: the model "
      "ships no chat template. Give it one: add a \"chat_template\" string (Jinja) to "
      "tokenizer_config.json, or put the template in ",
      sibling.string()));
}

std::tm LocalNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  return tm;
}

Value RaiseException() {
  return Value::Callable("raise_exception", [](const CallArgs& args) -> absl::StatusOr<Value> {
    const std::string message = args.positional.empty() ? "" : jinja::ToStr(args.positional[0]);
    return jinja::TemplateRaisedError(message);
  });
}

Value StrftimeNow(ChatTemplate::Clock clock) {
  return Value::Callable("strftime_now", [clock](const CallArgs& args) -> absl::StatusOr<Value> {
    if (args.positional.size() != 1 || !args.positional[0].is_string()) {
      return absl::InvalidArgumentError("strftime_now() takes one format string");
    }
    const std::tm tm = clock ? clock() : LocalNow();
    std::string buf(256, '\0');
    const size_t n =
        std::strftime(buf.data(), buf.size(), args.positional[0].string_value().c_str(), &tm);
    buf.resize(n);
    return Value(std::move(buf));
  });
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  }
  ASSIGN_OR_RETURN(std::string source, TemplateSource(config, path));
  auto result = FromString(std::move(source), SpecialToken(config, "bos_token"),
                           SpecialToken(config, "eos_token"));
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat(path, ": ", result.status().message()));
  }
  return result;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromString(std::string source, std::string bos_token,
                                                      std::string eos_token) {
  auto parsed = jinja::ParseTemplate(source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template does not parse: ", parsed.status().message()));
  }
  ChatTemplate t;
  t.template_ = std::shared_ptr<const jinja::Template>(std::move(parsed).value());
  t.source_ = std::move(source);
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  return t;
}

template <typename Json>
absl::StatusOr<std::string> ChatTemplate::RenderJson(const Json& messages,
                                                     bool add_generation_prompt,
                                                     const Json* extra_variables) const {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be a JSON array");
  jinja::ValueDict globals;
  globals.Set("messages", jinja::FromJson(messages));
  globals.Set("add_generation_prompt", Value(add_generation_prompt));
  globals.Set("bos_token", Value(bos_token_));
  globals.Set("eos_token", Value(eos_token_));
  globals.Set("raise_exception", RaiseException());
  globals.Set("strftime_now", StrftimeNow(clock_));
  if (extra_variables != nullptr && !extra_variables->is_null()) {
    if (!extra_variables->is_object()) {
      return absl::InvalidArgumentError("extra template variables must be a JSON object");
    }
    for (auto it = extra_variables->begin(); it != extra_variables->end(); ++it) {
      if (globals.Find(it.key()) != nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("extra template variable '", it.key(), "' is reserved"));
      }
      globals.Set(it.key(), jinja::FromJson(*it));
    }
  }
  auto rendered = jinja::RenderTemplate(*template_, globals);
  if (!rendered.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", rendered.status().message()));
  }
  return rendered;
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& messages,
                                                 bool add_generation_prompt) const {
  return RenderJson<nlohmann::json>(messages, add_generation_prompt, nullptr);
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const nlohmann::ordered_json& messages, bool add_generation_prompt,
    const nlohmann::ordered_json& extra_variables) const {
  return RenderJson(messages, add_generation_prompt, &extra_variables);
}

}  // namespace specdec::chat
