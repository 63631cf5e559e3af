// Jinja's filters with Jinja 3.1's semantics.
#include "common/chat/jinja_filters.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/chat/jinja_is_tests.h"
#include "common/chat/jinja_json.h"
#include "common/chat/jinja_methods.h"
#include "common/chat/jinja_ops.h"
#include "common/chat/jinja_strings.h"
#include "common/util/status_macros.h"

namespace specdec::chat::jinja {
namespace {

using FilterFn = absl::StatusOr<Value> (*)(const Value& input, const CallArgs& args);
using Bound = std::vector<const Value*>;

Value Or(const Value* v, Value fallback) { return v != nullptr ? *v : std::move(fallback); }
bool Flag(const Value* v) { return v != nullptr && v->Truthy(); }

absl::Status Error(std::string_view message) { return absl::InvalidArgumentError(AV(message)); }

// Jinja's attribute getter: "a.b.0" looks up each dotted part (digits as an index).
absl::StatusOr<Value> LookUpPath(const Value& v, const Value* path) {
  if (path == nullptr) return v;
  if (path->is_integer()) return GetItem(v, *path);
  Value current = v;
  for (absl::string_view part : absl::StrSplit(ToStr(*path), '.')) {
    int64_t index = 0;
    const Value key = absl::SimpleAtoi(part, &index) ? Value(index) : Value(std::string(part));
    ASSIGN_OR_RETURN(current, GetItem(current, key));
  }
  return current;
}

// The sort key of `v`: the item at `attribute`, lower-cased when a string and not
// `case_sensitive`.
absl::StatusOr<Value> SortKey(const Value& v, const Value* attribute, bool case_sensitive) {
  ASSIGN_OR_RETURN(Value key, LookUpPath(v, attribute));
  if (key.is_string() && !case_sensitive) return Value(AsciiLower(key.string_value()));
  return key;
}

absl::StatusOr<Value> Abs(const Value& in, const CallArgs& args) {
  RETURN_IF_ERROR(BindArgs(args, "abs", {}).status());
  if (in.is_integer()) return Value(std::abs(in.int_value()));
  if (in.is_number()) return Value(std::fabs(in.number_value()));
  return Error(absl::StrCat("bad operand type for abs(): '", in.TypeName(), "'"));
}

absl::StatusOr<Value> Attr(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "attr", {"name"}));
  if (b[0] == nullptr || !b[0]->is_string()) return Error("attr needs a name");
  // Python's getattr: methods and namespace attributes, not dict items.
  if (in.kind() == Value::Kind::kNamespace || GetMethod(in, b[0]->string_value()).has_value()) {
    return GetAttribute(in, b[0]->string_value());
  }
  return Value::Undefined(
      absl::StrCat("'", in.TypeName(), " object' has no attribute '", b[0]->string_value(), "'"));
}

absl::StatusOr<Value> Default(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "default", {"default_value", "boolean"}));
  const bool use_default = in.is_undefined() || (Flag(b[1]) && !in.Truthy());
  return use_default ? Or(b[0], Value("")) : in;
}

absl::StatusOr<Value> Length(const Value& in, const CallArgs& args) {
  RETURN_IF_ERROR(BindArgs(args, "length", {}).status());
  switch (in.kind()) {
    case Value::Kind::kUndefined:
      return Value(0);
    case Value::Kind::kString:
      return Value(CodePointCount(in.string_value()));
    case Value::Kind::kList:
      return Value(static_cast<int64_t>(in.list().size()));
    case Value::Kind::kDict:
      return Value(static_cast<int64_t>(in.dict().size()));
    default:
      return Error(absl::StrCat("object of type '", in.TypeName(), "' has no len()"));
  }
}

absl::StatusOr<Value> FirstOrLast(const Value& in, const CallArgs& args, bool first) {
  RETURN_IF_ERROR(BindArgs(args, first ? "first" : "last", {}).status());
  ASSIGN_OR_RETURN(ValueList items, Iterate(in));
  if (items.empty()) {
    return Value::Undefined(first ? "No first item, sequence was empty."
                                  : "No last item, sequence was empty.");
  }
  return first ? items.front() : items.back();
}

absl::StatusOr<Value> Float(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "float", {"default"}));
  if (in.is_number()) return Value(in.number_value());
  double d = 0;
  if (in.is_string() && absl::SimpleAtod(Strip(in.string_value(), std::nullopt, true, true), &d)) {
    return Value(d);
  }
  return Or(b[0], Value(0.0));
}

absl::StatusOr<Value> Int(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "int", {"default", "base"}));
  if (in.is_integer()) return Value(in.int_value());
  if (in.is_number() && std::isfinite(in.number_value())) {
    return Value(static_cast<int64_t>(in.number_value()));
  }
  if (in.is_string()) {
    const std::string text = Strip(in.string_value(), std::nullopt, true, true);
    const int base =
        b[1] != nullptr && b[1]->is_integer() ? static_cast<int>(b[1]->int_value()) : 10;
    char* end = nullptr;
    const int64_t i = std::strtoll(text.c_str(), &end, base);
    if (!text.empty() && end == text.c_str() + text.size()) return Value(i);
    double d = 0;
    if (absl::SimpleAtod(text, &d) && std::isfinite(d)) return Value(static_cast<int64_t>(d));
  }
  return Or(b[0], Value(0));
}

absl::StatusOr<Value> Items(const Value& in, const CallArgs& args) {
  RETURN_IF_ERROR(BindArgs(args, "items", {}).status());
  if (in.is_undefined()) return Value::List({});
  if (!in.is_dict()) return Error("Can only get item pairs from a mapping.");
  ValueList pairs;
  for (const auto& [key, value] : in.dict().entries()) {
    pairs.push_back(Value::Tuple({Value(key), value}));
  }
  return Value::List(std::move(pairs));
}

absl::StatusOr<Value> Join(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "join", {"d", "attribute"}));
  ASSIGN_OR_RETURN(ValueList items, Iterate(in));
  const std::string separator = b[0] != nullptr ? ToStr(*b[0]) : "";
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(Value item, LookUpPath(items[i], b[1]));
    absl::StrAppend(&out, i > 0 ? separator : "", ToStr(item));
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> List(const Value& in, const CallArgs& args) {
  RETURN_IF_ERROR(BindArgs(args, "list", {}).status());
  ASSIGN_OR_RETURN(ValueList items, Iterate(in));
  return Value::List(std::move(items));
}

// The items of a select/reject/map input: Jinja visits none of a falsy input (None included).
absl::StatusOr<ValueList> ItemsIfAny(const Value& in) {
  if (!in.Truthy()) return ValueList{};
  return Iterate(in);
}

absl::StatusOr<Value> Map(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(ValueList items, ItemsIfAny(in));
  ValueList out;
  if (args.positional.empty()) {
    ASSIGN_OR_RETURN(Bound b, BindArgs(args, "map", {"attribute", "default"}));
    if (b[0] == nullptr) return Error("map needs a filter name or attribute=");
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value v, LookUpPath(item, b[0]));
      out.push_back(v.is_undefined() && b[1] != nullptr ? *b[1] : v);
    }
    return Value::List(std::move(out));
  }
  if (!args.positional[0].is_string()) return Error("map needs a filter name");
  CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value v, ApplyFilter(args.positional[0].string_value(), item, rest));
    out.push_back(std::move(v));
  }
  return Value::List(std::move(out));
}

// select / reject (attribute null) and selectattr / rejectattr: keeps the items whose value
// (or attribute) passes the test named by the first remaining argument (truthiness without one).
absl::StatusOr<Value> Select(const Value& in, const CallArgs& args, bool by_attribute, bool keep) {
  ASSIGN_OR_RETURN(ValueList items, ItemsIfAny(in));
  size_t next = 0;
  const Value* attribute = nullptr;
  if (by_attribute) {
    if (args.positional.empty()) return Error("selectattr/rejectattr need an attribute");
    attribute = &args.positional[next++];
  }
  std::optional<std::string> test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return Error("the test name must be a string");
    test = args.positional[next++].string_value();
  }
  CallArgs test_args{{args.positional.begin() + next, args.positional.end()}, args.keyword};
  ValueList out;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value v, LookUpPath(item, attribute));
    bool passed = v.Truthy();
    if (test.has_value()) {
      ASSIGN_OR_RETURN(passed, ApplyTest(*test, v, test_args));
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MinMax(const Value& in, const CallArgs& args, bool max) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, max ? "max" : "min", {"case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(ValueList items, Iterate(in));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  ASSIGN_OR_RETURN(Value best_key, SortKey(items[0], b[1], Flag(b[0])));
  for (size_t i = 1; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(Value key, SortKey(items[i], b[1], Flag(b[0])));
    ASSIGN_OR_RETURN(const int order, Compare(key, best_key));
    if (max ? order > 0 : order < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

absl::StatusOr<Value> ReplaceFilter(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "replace", {"old", "new", "count"}));
  if (b[0] == nullptr || b[1] == nullptr) return Error("replace needs old and new");
  const int64_t count = b[2] != nullptr && b[2]->is_integer() ? b[2]->int_value() : -1;
  return Value(Replace(ToStr(in), ToStr(*b[0]), ToStr(*b[1]), count));
}

absl::StatusOr<Value> Reverse(const Value& in, const CallArgs& args) {
  RETURN_IF_ERROR(BindArgs(args, "reverse", {}).status());
  ASSIGN_OR_RETURN(ValueList items, Iterate(in));
  std::reverse(items.begin(), items.end());
  if (!in.is_string()) return Value::List(std::move(items));
  std::string out;
  for (const Value& c : items) out += c.string_value();
  return Value(std::move(out));
}

absl::StatusOr<Value> Round(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "round", {"precision", "method"}));
  if (!in.is_number()) return Error(absl::StrCat("cannot round '", in.TypeName(), "'"));
  const int64_t precision = b[0] != nullptr && b[0]->is_integer() ? b[0]->int_value() : 0;
  const std::string method = b[1] != nullptr ? ToStr(*b[1]) : "common";
  if (in.is_integer() && method == "common") return Value(in.int_value());
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = in.number_value() * scale;
  double r = 0;
  if (method == "common") {
    r = std::nearbyint(x);
  } else if (method == "ceil" || method == "floor") {
    r = method == "ceil" ? std::ceil(x) : std::floor(x);
  } else {
    return Error("method must be common, ceil or floor");
  }
  return Value(r / scale);
}

absl::StatusOr<Value> Sort(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "sort", {"reverse", "case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(ValueList items, Iterate(in));
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(Value key, SortKey(items[i], b[2], Flag(b[1])));
    keyed.emplace_back(std::move(key), i);
  }
  absl::Status status;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    auto order = Compare(x.first, y.first);
    if (!order.ok()) status = order.status();
    return order.ok() && (Flag(b[0]) ? *order > 0 : *order < 0);
  });
  RETURN_IF_ERROR(status);
  ValueList out;
  for (const auto& entry : keyed) out.push_back(items[entry.second]);
  return Value::List(std::move(out));
}

// dictsort(by="key" or "value", reverse, case_sensitive): (key, value) pairs in order.
absl::StatusOr<Value> DictSort(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "dictsort", {"case_sensitive", "by", "reverse"}));
  if (!in.is_dict()) return Error("dictsort needs a mapping");
  const bool by_value = b[1] != nullptr && ToStr(*b[1]) == "value";
  ASSIGN_OR_RETURN(Value pairs, Items(in, CallArgs()));
  const Value position(by_value ? 1 : 0);
  CallArgs sort_args;
  sort_args.keyword = {{"reverse", Or(b[2], Value(false))},
                       {"case_sensitive", Or(b[0], Value(false))},
                       {"attribute", position}};
  return Sort(pairs, sort_args);
}

absl::StatusOr<Value> Sum(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "sum", {"attribute", "start"}));
  ASSIGN_OR_RETURN(ValueList items, Iterate(in));
  Value total = Or(b[1], Value(0));
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value v, LookUpPath(item, b[0]));
    ASSIGN_OR_RETURN(total, BinaryOp("+", total, v));
  }
  return total;
}

absl::StatusOr<Value> ToJsonFilter(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b,
                   BindArgs(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}));
  if (Flag(b[0])) return Error("tojson: ensure_ascii=True is not supported");
  JsonFormat format;
  if (b[1] != nullptr && b[1]->is_integer()) format.indent = static_cast<int>(b[1]->int_value());
  if (b[2] != nullptr && b[2]->is_list() && b[2]->list().size() == 2) {
    format.item_separator = ToStr(b[2]->list()[0]);
    format.key_separator = ToStr(b[2]->list()[1]);
  }
  format.sort_keys = Flag(b[3]);
  ASSIGN_OR_RETURN(std::string text, ToJson(in, format));
  return Value(std::move(text));
}

absl::StatusOr<Value> Trim(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "trim", {"chars"}));
  std::optional<std::string> chars;
  if (b[0] != nullptr && !b[0]->is_none()) chars = ToStr(*b[0]);
  return Value(Strip(ToStr(in), chars, true, true));
}

absl::StatusOr<Value> Unique(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "unique", {"case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(ValueList items, Iterate(in));
  ValueList seen;
  ValueList out;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value key, SortKey(item, b[1], Flag(b[0])));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); })) {
      continue;
    }
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Indent(const Value& in, const CallArgs& args) {
  ASSIGN_OR_RETURN(Bound b, BindArgs(args, "indent", {"width", "first", "blank"}));
  std::string indentation(4, ' ');
  if (b[0] != nullptr) {
    indentation = b[0]->is_string() ? b[0]->string_value()
                                    : std::string(std::max<int64_t>(0, b[0]->int_value()), ' ');
  }
  const std::vector<std::string> lines = Split(ToStr(in) + "\n", std::string("\n"), -1);
  std::string out;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    if (i > 0) out += '\n';
    const bool indent_line = i == 0 ? Flag(b[1]) : (Flag(b[2]) || !lines[i].empty());
    absl::StrAppend(&out, indent_line ? indentation : "", lines[i]);
  }
  return Value(std::move(out));
}

// A filter of one string argument and no parameters: lower, upper, title, capitalize, string.
template <std::string (*Transform)(std::string_view)>
absl::StatusOr<Value> StringFilter(const Value& in, const CallArgs& args) {
  RETURN_IF_ERROR(BindArgs(args, "filter", {}).status());
  return Value(Transform(ToStr(in)));
}

std::string Identity(std::string_view s) { return std::string(s); }

absl::StatusOr<Value> Safe(const Value& in, const CallArgs& args) {
  RETURN_IF_ERROR(BindArgs(args, "safe", {}).status());
  return in;
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr NamedFilter kFilters[] = {
    {"abs", Abs},
    {"attr", Attr},
    {"capitalize", StringFilter<Capitalize>},
    {"count", Length},
    {"d", Default},
    {"default", Default},
    {"dictsort", DictSort},
    {"first", [](const Value& in, const CallArgs& a) { return FirstOrLast(in, a, true); }},
    {"float", Float},
    {"indent", Indent},
    {"int", Int},
    {"items", Items},
    {"join", Join},
    {"last", [](const Value& in, const CallArgs& a) { return FirstOrLast(in, a, false); }},
    {"length", Length},
    {"list", List},
    {"lower", StringFilter<AsciiLower>},
    {"map", Map},
    {"max", [](const Value& in, const CallArgs& a) { return MinMax(in, a, true); }},
    {"min", [](const Value& in, const CallArgs& a) { return MinMax(in, a, false); }},
    {"reject", [](const Value& in, const CallArgs& a) { return Select(in, a, false, false); }},
    {"rejectattr", [](const Value& in, const CallArgs& a) { return Select(in, a, true, false); }},
    {"replace", ReplaceFilter},
    {"reverse", Reverse},
    {"round", Round},
    {"safe", Safe},
    {"select", [](const Value& in, const CallArgs& a) { return Select(in, a, false, true); }},
    {"selectattr", [](const Value& in, const CallArgs& a) { return Select(in, a, true, true); }},
    {"sort", Sort},
    {"string", StringFilter<Identity>},
    {"sum", Sum},
    {"title", StringFilter<Title>},
    {"tojson", ToJsonFilter},
    {"trim", Trim},
    {"unique", Unique},
    {"upper", StringFilter<AsciiUpper>},
};

const NamedFilter* Find(std::string_view name) {
  for (const NamedFilter& f : kFilters) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return Find(name) != nullptr; }

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& input, const CallArgs& args) {
  const NamedFilter* filter = Find(name);
  if (filter == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown filter '", AV(name), "'"));
  }
  auto result = filter->fn(input, args);
  if (!result.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("filter '", AV(name), "': ", result.status().message()));
  }
  return result;
}

}  // namespace specdec::chat::jinja
