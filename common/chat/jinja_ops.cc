// Python semantics of Jinja's operators, subscripts and iteration.
#include "common/chat/jinja_ops.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/chat/jinja_methods.h"
#include "common/chat/jinja_strings.h"
#include "common/util/status_macros.h"

namespace specdec::chat::jinja {
namespace {

absl::Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", AV(op), ": '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

// `text` or `list` repeated `count` times.
Value Repeat(const Value& seq, int64_t count) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < count; ++i) out += seq.string_value();
    return Value(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < count; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Add(const Value& a, const Value& b) {
  if (a.is_string() && b.is_string()) return Value(a.string_value() + b.string_value());
  if (a.is_list() && b.is_list()) {
    ValueList out = a.list();
    out.insert(out.end(), b.list().begin(), b.list().end());
    return Value::List(std::move(out));
  }
  if (a.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
  }
  return Unsupported("+", a, b);
}

absl::StatusOr<Value> Multiply(const Value& a, const Value& b) {
  if ((a.is_string() || a.is_list()) && b.is_integer()) return Repeat(a, b.int_value());
  if ((b.is_string() || b.is_list()) && a.is_integer()) return Repeat(b, a.int_value());
  return Unsupported("*", a, b);
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

absl::StatusOr<Value> IntegerOp(std::string_view op, int64_t x, int64_t y) {
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if ((op == "/" || op == "//" || op == "%") && y == 0) {
    return absl::InvalidArgumentError("division by zero");
  }
  if (op == "/") return Value(static_cast<double>(x) / static_cast<double>(y));
  if (op == "//") return Value(FloorDiv(x, y));
  if (op == "%") return Value(x - FloorDiv(x, y) * y);
  if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
  int64_t result = 1;
  for (int64_t i = 0; i < y; ++i) result *= x;
  return Value(result);
}

absl::StatusOr<Value> FloatOp(std::string_view op, double x, double y) {
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0) return absl::InvalidArgumentError("float division by zero");
  if (op == "/") return Value(x / y);
  if (op == "//") return Value(std::floor(x / y));
  double mod = std::fmod(x, y);
  if (mod != 0 && ((mod < 0) != (y < 0))) mod += y;
  return Value(mod);
}

// Python's slice.indices() bound for one end.
int64_t ClampSliceEnd(const Value& v, int64_t len, int64_t step, bool is_start) {
  const int64_t lower = step < 0 ? -1 : 0;
  const int64_t upper = step < 0 ? len - 1 : len;
  if (!v.is_integer()) return (step < 0) == is_start ? upper : lower;
  int64_t i = v.int_value();
  if (i < 0) i += len;
  return i < lower ? lower : (i > upper ? upper : i);
}

}  // namespace

absl::Status UndefinedError(const Value& undefined) {
  return absl::InvalidArgumentError(undefined.hint().empty() ? "value is undefined"
                                                             : undefined.hint());
}

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value(ToStr(a) + ToStr(b));
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_integer() && b.is_integer()) return IntegerOp(op, a.int_value(), b.int_value());
  if (a.is_number() && b.is_number()) return FloatOp(op, a.number_value(), b.number_value());
  if (op == "+") return Add(a, b);
  if (op == "*") return Multiply(a, b);
  if (op == "%" && a.is_string()) {
    return absl::InvalidArgumentError("string formatting with % is not supported");
  }
  return Unsupported(op, a, b);
}

absl::StatusOr<Value> UnaryOp(std::string_view op, const Value& v) {
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_integer()) return op == "-" ? Value(-v.int_value()) : Value(v.int_value());
  if (v.is_number()) return op == "-" ? Value(-v.number_value()) : v;
  return absl::InvalidArgumentError(
      absl::StrCat("bad operand type for unary ", AV(op), ": '", v.TypeName(), "'"));
}

absl::StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return Equals(a, b);
  if (op == "!=") return !Equals(a, b);
  if (op == "in" || op == "notin") {
    ASSIGN_OR_RETURN(const bool found, Contains(b, a));
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  auto order = Compare(a, b);
  if (!order.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("'", AV(op), "' not supported between '",
                                                   a.TypeName(), "' and '", b.TypeName(), "'"));
  }
  if (op == "<") return *order < 0;
  if (op == "<=") return *order <= 0;
  if (op == ">") return *order > 0;
  return *order >= 0;
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.string_value().find(item.string_value()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& element : container.list()) {
        if (Equals(element, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.dict().Find(item.string_value()) != nullptr;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

absl::StatusOr<Value> GetAttribute(const Value& v, std::string_view name) {
  if (v.is_undefined()) return UndefinedError(v);
  if (std::optional<Value> method = GetMethod(v, name)) return *std::move(method);
  if (v.is_dict() || v.kind() == Value::Kind::kNamespace) {
    if (const Value* found = v.dict().Find(name)) return *found;
  }
  return Value::Undefined(
      absl::StrCat("'", v.TypeName(), " object' has no attribute '", AV(name), "'"));
}

absl::StatusOr<Value> GetItem(const Value& v, const Value& key) {
  if (v.is_undefined()) return UndefinedError(v);
  if ((v.is_list() || v.is_string()) && key.is_integer()) {
    const bool is_list = v.is_list();
    std::vector<std::string_view> cps;
    if (!is_list) cps = CodePoints(v.string_value());
    const int64_t len =
        is_list ? static_cast<int64_t>(v.list().size()) : static_cast<int64_t>(cps.size());
    int64_t i = key.int_value();
    if (i < 0) i += len;
    if (i >= 0 && i < len) return is_list ? v.list()[i] : Value(cps[i]);
  } else if (v.is_dict() && key.is_string()) {
    if (const Value* found = v.dict().Find(key.string_value())) return *found;
  }
  if (key.is_string()) return GetAttribute(v, key.string_value());
  return Value::Undefined(absl::StrCat("'", v.TypeName(), " object' has no element ", Repr(key)));
}

absl::StatusOr<Value> Slice(const Value& v, const Value& start, const Value& stop,
                            const Value& step) {
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_list() && !v.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("'", v.TypeName(), "' is not subscriptable"));
  }
  const int64_t by = step.is_integer() ? step.int_value() : 1;
  if (by == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  std::vector<std::string_view> cps;
  if (v.is_string()) cps = CodePoints(v.string_value());
  const int64_t len =
      v.is_list() ? static_cast<int64_t>(v.list().size()) : static_cast<int64_t>(cps.size());
  const int64_t from = ClampSliceEnd(start, len, by, true);
  const int64_t to = ClampSliceEnd(stop, len, by, false);
  ValueList items;
  std::string text;
  for (int64_t i = from; by > 0 ? i < to : i > to; i += by) {
    if (v.is_list()) {
      items.push_back(v.list()[i]);
    } else {
      text.append(cps[i]);
    }
  }
  return v.is_list() ? Value::List(std::move(items)) : Value(std::move(text));
}

absl::StatusOr<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& entry : v.dict().entries()) keys.emplace_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (std::string_view cp : CodePoints(v.string_value())) chars.emplace_back(cp);
      return chars;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

}  // namespace specdec::chat::jinja
