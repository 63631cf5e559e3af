// JSON to values and Python's json.dumps formatting.
#include "common/chat/jinja_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/chat/jinja_strings.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::chat::jinja {
namespace {

template <typename Json>
Value Convert(const Json& json) {
  using Type = nlohmann::json::value_t;
  switch (json.type()) {
    case Type::boolean:
      return Value(json.template get<bool>());
    case Type::number_integer:
      return Value(json.template get<int64_t>());
    case Type::number_unsigned: {
      const auto u = json.template get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value(static_cast<double>(u));
      }
      return Value(static_cast<int64_t>(u));
    }
    case Type::number_float:
      return Value(json.template get<double>());
    case Type::string:
      return Value(json.template get_ref<const std::string&>());
    case Type::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(Convert(item));
      return Value::List(std::move(items));
    }
    case Type::object: {
      ValueDict dict;
      for (auto it = json.begin(); it != json.end(); ++it) dict.Append(it.key(), Convert(*it));
      return Value::Dict(std::move(dict));
    }
    default:
      return Value::None();
  }
}

void AppendJsonString(std::string_view s, std::string& out) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return PyFloatRepr(d);
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonFormat& format)
      : indent_(format.indent),
        item_separator_(format.item_separator.value_or(indent_ ? "," : ", ")),
        key_separator_(format.key_separator.value_or(": ")),
        sort_keys_(format.sort_keys) {}

  absl::Status Write(const Value& v, int depth) {
    switch (v.kind()) {
      case Value::Kind::kNone:
        out_ += "null";
        return absl::OkStatus();
      case Value::Kind::kBool:
        out_ += v.bool_value() ? "true" : "false";
        return absl::OkStatus();
      case Value::Kind::kInt:
        absl::StrAppend(&out_, v.int_value());
        return absl::OkStatus();
      case Value::Kind::kFloat:
        out_ += JsonFloat(v.number_value());
        return absl::OkStatus();
      case Value::Kind::kString:
        AppendJsonString(v.string_value(), out_);
        return absl::OkStatus();
      case Value::Kind::kList:
        return WriteList(v.list(), depth);
      case Value::Kind::kDict:
        return WriteDict(v.dict(), depth);
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
    }
  }

  std::string Take() { return std::move(out_); }

 private:
  void Newline(int depth) {
    if (!indent_) return;
    out_ += '\n';
    out_.append(static_cast<size_t>(*indent_ * depth), ' ');
  }

  absl::Status WriteList(const ValueList& items, int depth) {
    if (items.empty()) {
      out_ += "[]";
      return absl::OkStatus();
    }
    out_ += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += item_separator_;
      Newline(depth + 1);
      RETURN_IF_ERROR(Write(items[i], depth + 1));
    }
    Newline(depth);
    out_ += ']';
    return absl::OkStatus();
  }

  absl::Status WriteDict(const ValueDict& dict, int depth) {
    if (dict.empty()) {
      out_ += "{}";
      return absl::OkStatus();
    }
    std::vector<const ValueDict::Entry*> entries;
    for (const auto& entry : dict.entries()) entries.push_back(&entry);
    if (sort_keys_) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out_ += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out_ += item_separator_;
      Newline(depth + 1);
      AppendJsonString(entries[i]->first, out_);
      out_ += key_separator_;
      RETURN_IF_ERROR(Write(entries[i]->second, depth + 1));
    }
    Newline(depth);
    out_ += '}';
    return absl::OkStatus();
  }

  std::optional<int> indent_;
  std::string item_separator_;
  std::string key_separator_;
  bool sort_keys_;
  std::string out_;
};

}  // namespace

Value FromJson(const nlohmann::json& json) { return Convert(json); }

Value FromJson(const nlohmann::ordered_json& json) { return Convert(json); }

absl::StatusOr<std::string> ToJson(const Value& v, const JsonFormat& format) {
  JsonWriter writer(format);
  RETURN_IF_ERROR(writer.Write(v, 0));
  return writer.Take();
}

}  // namespace specdec::chat::jinja
