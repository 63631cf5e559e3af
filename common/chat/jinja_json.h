// JSON in and out of the Jinja subset: request JSON to values, and Python's json.dumps text (the
// `tojson` filter as Hugging Face transformers defines it: ensure_ascii=False).
#ifndef SPECDEC_COMMON_CHAT_JINJA_JSON_H_
#define SPECDEC_COMMON_CHAT_JINJA_JSON_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/chat/jinja_value.h"
#include "nlohmann/json_fwd.hpp"

namespace specdec::chat::jinja {

// JSON to a value: objects become dicts in the key order the JSON type keeps (sorted for
// nlohmann::json, as written for nlohmann::ordered_json); integers that do not fit int64 become
// floats.
Value FromJson(const nlohmann::json& json);
Value FromJson(const nlohmann::ordered_json& json);

// Options of Python's json.dumps.
struct JsonFormat {
  std::optional<int> indent;  // nullopt: one line.
  // Defaults as json.dumps: ", " and ": ", or "," and ": " with an indent.
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
};

// Python's json.dumps(v, ensure_ascii=False, ...); InvalidArgument for Undefined, callables and
// namespaces, which are not JSON serializable.
absl::StatusOr<std::string> ToJson(const Value& v, const JsonFormat& format);

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_JSON_H_
