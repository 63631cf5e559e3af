// String and dict methods for templates.
#include "common/chat/jinja_methods.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/chat/jinja_strings.h"
#include "common/util/status_macros.h"

namespace specdec::chat::jinja {
namespace {

using Method = absl::StatusOr<Value> (*)(const Value& self, const CallArgs& args);

absl::StatusOr<std::optional<std::string>> OptionalString(const Value* v, std::string_view what) {
  if (v == nullptr || v->is_none()) return std::nullopt;
  if (!v->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(what), " must be a str, not ", v->TypeName()));
  }
  return v->string_value();
}

absl::StatusOr<int64_t> OptionalInt(const Value* v, int64_t fallback, std::string_view what) {
  if (v == nullptr) return fallback;
  if (!v->is_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(what), " must be an int, not ", v->TypeName()));
  }
  return v->int_value();
}

// startswith / endswith with a str or a tuple (list) of them.
absl::StatusOr<Value> Affix(const Value& self, const CallArgs& args, bool prefix) {
  const char* name = prefix ? "startswith" : "endswith";
  ASSIGN_OR_RETURN(auto bound, BindArgs(args, name, {"affix"}));
  if (bound[0] == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(name, "() needs 1 argument"));
  ValueList candidates = bound[0]->is_list() ? bound[0]->list() : ValueList{*bound[0]};
  const std::string& s = self.string_value();
  for (const Value& c : candidates) {
    if (!c.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(name, "() takes str or a tuple of str"));
    }
    const std::string& a = c.string_value();
    if (a.size() <= s.size() && s.compare(prefix ? 0 : s.size() - a.size(), a.size(), a) == 0) {
      return Value(true);
    }
  }
  return Value(false);
}

absl::StatusOr<Value> StripMethod(const Value& self, const CallArgs& args, bool left, bool right,
                                  const char* name) {
  ASSIGN_OR_RETURN(auto bound, BindArgs(args, name, {"chars"}));
  ASSIGN_OR_RETURN(auto chars, OptionalString(bound[0], "chars"));
  return Value(Strip(self.string_value(), chars, left, right));
}

absl::StatusOr<Value> SplitMethod(const Value& self, const CallArgs& args) {
  ASSIGN_OR_RETURN(auto bound, BindArgs(args, "split", {"sep", "maxsplit"}));
  ASSIGN_OR_RETURN(auto sep, OptionalString(bound[0], "sep"));
  ASSIGN_OR_RETURN(const int64_t max_split, OptionalInt(bound[1], -1, "maxsplit"));
  if (sep.has_value() && sep->empty()) return absl::InvalidArgumentError("empty separator");
  ValueList out;
  for (std::string& piece : Split(self.string_value(), sep, max_split)) {
    out.emplace_back(std::move(piece));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> ReplaceMethod(const Value& self, const CallArgs& args) {
  ASSIGN_OR_RETURN(auto bound, BindArgs(args, "replace", {"old", "new", "count"}));
  ASSIGN_OR_RETURN(auto from, OptionalString(bound[0], "old"));
  ASSIGN_OR_RETURN(auto to, OptionalString(bound[1], "new"));
  ASSIGN_OR_RETURN(const int64_t count, OptionalInt(bound[2], -1, "count"));
  if (!from.has_value() || !to.has_value()) {
    return absl::InvalidArgumentError("replace() needs 2 arguments");
  }
  return Value(Replace(self.string_value(), *from, *to, count));
}

// find (first code point index or -1) and count (non-overlapping occurrences).
absl::StatusOr<Value> Search(const Value& self, const CallArgs& args, bool count) {
  ASSIGN_OR_RETURN(auto bound, BindArgs(args, count ? "count" : "find", {"sub"}));
  ASSIGN_OR_RETURN(auto sub, OptionalString(bound[0], "sub"));
  if (!sub.has_value()) return absl::InvalidArgumentError("needs a substring argument");
  const std::string& s = self.string_value();
  if (!count) {
    const size_t at = s.find(*sub);
    return at == std::string::npos ? Value(-1) : Value(CodePointCount(s.substr(0, at)));
  }
  if (sub->empty()) return Value(CodePointCount(s) + 1);
  int64_t n = 0;
  for (size_t at = s.find(*sub); at != std::string::npos; at = s.find(*sub, at + sub->size())) {
    ++n;
  }
  return Value(n);
}

absl::StatusOr<Value> JoinMethod(const Value& self, const CallArgs& args) {
  ASSIGN_OR_RETURN(auto bound, BindArgs(args, "join", {"iterable"}));
  if (bound[0] == nullptr || !bound[0]->is_list()) {
    return absl::InvalidArgumentError("join() takes a list of str");
  }
  std::string out;
  bool first = true;
  for (const Value& item : bound[0]->list()) {
    if (!item.is_string()) return absl::InvalidArgumentError("join() takes a list of str");
    absl::StrAppend(&out, first ? "" : self.string_value(), item.string_value());
    first = false;
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> NoArgs(const CallArgs& args, const char* name, Value result) {
  RETURN_IF_ERROR(BindArgs(args, name, {}).status());
  return result;
}

absl::StatusOr<Value> DictGet(const Value& self, const CallArgs& args) {
  ASSIGN_OR_RETURN(auto bound, BindArgs(args, "get", {"key", "default"}));
  if (bound[0] == nullptr) return absl::InvalidArgumentError("get() needs a key");
  if (bound[0]->is_string()) {
    if (const Value* found = self.dict().Find(bound[0]->string_value())) return *found;
  }
  return bound[1] != nullptr ? *bound[1] : Value::None();
}

// items() gives (key, value) pairs, keys() and values() lists.
absl::StatusOr<Value> DictView(const Value& self, const CallArgs& args, int which) {
  const char* names[] = {"items", "keys", "values"};
  ValueList out;
  for (const auto& [key, value] : self.dict().entries()) {
    if (which == 0) {
      out.push_back(Value::Tuple({Value(key), value}));
    } else {
      out.push_back(which == 1 ? Value(key) : value);
    }
  }
  return NoArgs(args, names[which], Value::List(std::move(out)));
}

struct NamedMethod {
  std::string_view name;
  Method method;
};

constexpr NamedMethod kStringMethods[] = {
    {"startswith", [](const Value& s, const CallArgs& a) { return Affix(s, a, true); }},
    {"endswith", [](const Value& s, const CallArgs& a) { return Affix(s, a, false); }},
    {"strip",
     [](const Value& s, const CallArgs& a) { return StripMethod(s, a, true, true, "strip"); }},
    {"lstrip",
     [](const Value& s, const CallArgs& a) { return StripMethod(s, a, true, false, "lstrip"); }},
    {"rstrip",
     [](const Value& s, const CallArgs& a) { return StripMethod(s, a, false, true, "rstrip"); }},
    {"split", SplitMethod},
    {"replace", ReplaceMethod},
    {"find", [](const Value& s, const CallArgs& a) { return Search(s, a, false); }},
    {"count", [](const Value& s, const CallArgs& a) { return Search(s, a, true); }},
    {"join", JoinMethod},
    {"upper", [](const Value& s,
                 const CallArgs& a) { return NoArgs(a, "upper", AsciiUpper(s.string_value())); }},
    {"lower", [](const Value& s,
                 const CallArgs& a) { return NoArgs(a, "lower", AsciiLower(s.string_value())); }},
    {"title",
     [](const Value& s, const CallArgs& a) { return NoArgs(a, "title", Title(s.string_value())); }},
    {"capitalize",
     [](const Value& s, const CallArgs& a) {
       return NoArgs(a, "capitalize", Capitalize(s.string_value()));
     }},
};

constexpr NamedMethod kDictMethods[] = {
    {"get", DictGet},
    {"items", [](const Value& d, const CallArgs& a) { return DictView(d, a, 0); }},
    {"keys", [](const Value& d, const CallArgs& a) { return DictView(d, a, 1); }},
    {"values", [](const Value& d, const CallArgs& a) { return DictView(d, a, 2); }},
};

}  // namespace

std::optional<Value> GetMethod(const Value& receiver, std::string_view name) {
  const NamedMethod* begin = nullptr;
  const NamedMethod* end = nullptr;
  if (receiver.is_string()) {
    begin = std::begin(kStringMethods);
    end = std::end(kStringMethods);
  } else if (receiver.is_dict()) {
    begin = std::begin(kDictMethods);
    end = std::end(kDictMethods);
  }
  for (const NamedMethod* m = begin; m != end; ++m) {
    if (m->name != name) continue;
    const Method method = m->method;
    return Value::Callable(std::string(name), [receiver, method](const CallArgs& args) {
      return method(receiver, args);
    });
  }
  return std::nullopt;
}

}  // namespace specdec::chat::jinja
