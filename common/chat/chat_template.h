// Chat templates of Hugging Face models (the Jinja `chat_template` of tokenizer_config.json),
// rendered as transformers' apply_chat_template renders them, by the Jinja subset of
// jinja_render.h: turns an OpenAI-style `messages` array into the model's prompt text.
#ifndef SPECDEC_COMMON_CHAT_CHAT_TEMPLATE_H_
#define SPECDEC_COMMON_CHAT_CHAT_TEMPLATE_H_

#include <ctime>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace specdec::chat {

namespace jinja {
struct Template;
}  // namespace jinja

// A parsed chat template; immutable, so Render may be called from any number of threads at once.
class ChatTemplate {
 public:
  // Local time for strftime_now().
  using Clock = std::function<std::tm()>;

  // Reads tokenizer_config.json at `path`. Its "chat_template" is a string, or a list of
  // {"name", "template"} (the one named "default", else the first); when it has none, a
  // chat_template.jinja next to it is used. bos_token and eos_token are strings or objects with a
  // "content" string ("" when absent). NotFound when the file cannot be read or the model has no
  // chat template; InvalidArgument when the JSON is malformed or the template does not parse.
  static absl::StatusOr<ChatTemplate> FromTokenizerConfig(const std::string& path);

  // Parses `source`; InvalidArgument naming the line and column when it does not parse, or uses
  // an unsupported tag, filter or test.
  static absl::StatusOr<ChatTemplate> FromString(std::string source, std::string bos_token,
                                                 std::string eos_token);

  // Renders the OpenAI `messages` array (objects with role, content as a string, and any other
  // fields such as tool_calls, name or reasoning_content, passed to the template as they are).
  // Variables: messages, add_generation_prompt, bos_token, eos_token (`tools` is undefined);
  // functions raise_exception(msg) and strftime_now(format). InvalidArgument when `messages` is
  // not an array or the template fails (raise_exception's message included).
  absl::StatusOr<std::string> Render(const nlohmann::json& messages,
                                     bool add_generation_prompt) const;

  // As above, for JSON parsed as nlohmann::ordered_json, whose objects keep the key order of the
  // request (which `tojson` output shows); `extra_variables`, an object or null, adds template
  // variables such as tools, enable_thinking or date_string (InvalidArgument when it names one of
  // the variables above).
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& messages,
                                     bool add_generation_prompt,
                                     const nlohmann::ordered_json& extra_variables) const;

  // Replaces the local-time source of strftime_now() (tests use a fixed time).
  void set_clock(Clock clock) { clock_ = std::move(clock); }

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  ChatTemplate() = default;

  template <typename Json>
  absl::StatusOr<std::string> RenderJson(const Json& messages, bool add_generation_prompt,
                                         const Json* extra_variables) const;

  std::shared_ptr<const jinja::Template> template_;
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  Clock clock_;
};

}  // namespace specdec::chat

#endif  // SPECDEC_COMMON_CHAT_CHAT_TEMPLATE_H_
