// Dynamic values of the Jinja subset and their Python semantics.
#include "common/chat/jinja_value.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/chat/jinja_strings.h"

namespace specdec::chat::jinja {

Value Value::Undefined(std::string hint) {
  Value v;
  v.str_ = std::move(hint);
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), int_(b ? 1 : 0) {}

Value::Value(int64_t i) : kind_(Kind::kInt), int_(i) {}

Value::Value(double d) : kind_(Kind::kFloat), float_(d) {}

Value::Value(std::string s) : kind_(Kind::kString), str_(std::move(s)) {}

Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::Dict(ValueDict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(dict));
  return v;
}

Value Value::Namespace(ValueDict attributes) {
  Value v = Dict(std::move(attributes));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::Callable(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.str_ = std::move(name);
  v.fn_ = std::make_shared<const Function>(std::move(fn));
  return v;
}

const ValueList& Value::list() const { return *list_; }

const ValueDict& Value::dict() const { return *dict_; }

ValueDict& Value::namespace_attributes() const { return *dict_; }

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !str_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

const Value* ValueDict::Find(std::string_view key) const {
  for (const Entry& e : entries_) {
    if (e.first == key) return &e.second;
  }
  return nullptr;
}

void ValueDict::Set(std::string key, Value value) {
  for (Entry& e : entries_) {
    if (e.first == key) {
      e.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

namespace {

bool DictEquals(const ValueDict& a, const ValueDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [key, value] : a.entries()) {
    const Value* other = b.Find(key);
    if (other == nullptr || !Equals(value, *other)) return false;
  }
  return true;
}

template <typename T>
int Sign(T a, T b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

}  // namespace

bool Equals(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer()) return a.int_value() == b.int_value();
    return a.number_value() == b.number_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.string_value() == b.string_value();
    case Kind::kList:
      if (a.is_tuple() != b.is_tuple()) return false;
      return std::equal(a.list().begin(), a.list().end(), b.list().begin(), b.list().end(),
                        [](const Value& x, const Value& y) { return Equals(x, y); });
    case Kind::kDict:
      return DictEquals(a.dict(), b.dict());
    case Kind::kNamespace:
      return &a.namespace_attributes() == &b.namespace_attributes();
    case Kind::kFunction:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer()) return Sign(a.int_value(), b.int_value());
    return Sign(a.number_value(), b.number_value());
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of UTF-8 is code point order.
    return Sign(a.string_value(), b.string_value());
  }
  if (a.is_list() && b.is_list()) {
    const ValueList& x = a.list();
    const ValueList& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return Sign(x.size(), y.size());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot order ", a.TypeName(), " and ", b.TypeName()));
}

std::string ToStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.string_value();
    default:
      return Repr(v);
  }
}

std::string Repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.bool_value() ? "True" : "False";
    case Value::Kind::kInt:
      return absl::StrCat(v.int_value());
    case Value::Kind::kFloat:
      return PyFloatRepr(v.number_value());
    case Value::Kind::kString:
      return PyStringRepr(v.string_value());
    case Value::Kind::kList: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (const Value& item : v.list()) {
        absl::StrAppend(&out, out.size() > 1 ? ", " : "", Repr(item));
      }
      if (v.is_tuple() && v.list().size() == 1) out += ",";
      return out + (v.is_tuple() ? ")" : "]");
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::string out = v.is_dict() ? "{" : "<Namespace {";
      bool first = true;
      for (const auto& [key, item] : v.dict().entries()) {
        absl::StrAppend(&out, first ? "" : ", ", PyStringRepr(key), ": ", Repr(item));
        first = false;
      }
      return out + (v.is_dict() ? "}" : "}>");
    }
    case Value::Kind::kFunction:
      return absl::StrCat("<function ", v.hint(), ">");
  }
  return "";
}

absl::StatusOr<std::vector<const Value*>> BindArgs(const CallArgs& args, std::string_view function,
                                                   std::initializer_list<std::string_view> params) {
  std::vector<std::string_view> names(params);
  if (args.positional.size() > names.size()) {
    return absl::InvalidArgumentError(absl::StrCat(AV(function), "() takes at most ", names.size(),
                                                   " arguments (", args.positional.size(),
                                                   " given)"));
  }
  std::vector<const Value*> bound(names.size(), nullptr);
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = &args.positional[i];
  for (const auto& [name, value] : args.keyword) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(AV(function), "() got an unexpected keyword argument '", name, "'"));
    }
    const size_t index = it - names.begin();
    if (bound[index] != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(AV(function), "() got multiple values for argument '", name, "'"));
    }
    bound[index] = &value;
  }
  return bound;
}

}  // namespace specdec::chat::jinja
