// Jinja's tests with Python semantics.
#include "common/chat/jinja_is_tests.h"

#include "absl/strings/str_cat.h"
#include "common/chat/jinja_ops.h"
#include "common/chat/jinja_strings.h"
#include "common/util/status_macros.h"

namespace specdec::chat::jinja {
namespace {

using Kind = Value::Kind;
using TestFn = absl::StatusOr<bool> (*)(const Value& v, const CallArgs& args);

// The single argument of a test that compares with another value.
absl::StatusOr<Value> Other(const CallArgs& args, std::string_view test) {
  ASSIGN_OR_RETURN(auto bound, BindArgs(args, test, {"other"}));
  if (bound[0] == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(AV(test), " needs 1 argument"));
  return *bound[0];
}

template <bool (*Predicate)(const Value&)>
absl::StatusOr<bool> Unary(const Value& v, const CallArgs& args) {
  RETURN_IF_ERROR(BindArgs(args, "test", {}).status());
  return Predicate(v);
}

// A comparison test (eq, lt, in, ...) as the operator `op`.
template <const char* Op>
absl::StatusOr<bool> Comparison(const Value& v, const CallArgs& args) {
  ASSIGN_OR_RETURN(Value other, Other(args, Op));
  return CompareOp(Op, v, other);
}

absl::StatusOr<bool> Parity(const Value& v, const CallArgs& args, int64_t divisor, bool want_zero) {
  if (!v.is_integer()) {
    if (v.is_undefined()) return UndefinedError(v);
    return absl::InvalidArgumentError(absl::StrCat("expected an int, got ", v.TypeName()));
  }
  if (divisor == 0) return absl::InvalidArgumentError("division by zero");
  const int64_t mod = v.int_value() % divisor;
  return (mod == 0) == want_zero;
}

absl::StatusOr<bool> DivisibleBy(const Value& v, const CallArgs& args) {
  ASSIGN_OR_RETURN(Value other, Other(args, "divisibleby"));
  if (!other.is_integer()) return absl::InvalidArgumentError("divisibleby takes an int");
  return Parity(v, args, other.int_value(), true);
}

absl::StatusOr<bool> CaseTest(const Value& v, const CallArgs& args, bool upper) {
  RETURN_IF_ERROR(BindArgs(args, upper ? "upper" : "lower", {}).status());
  const std::string text = ToStr(v);
  return text == (upper ? AsciiUpper(text) : AsciiLower(text));
}

absl::StatusOr<bool> SameAs(const Value& v, const CallArgs& args) {
  ASSIGN_OR_RETURN(Value other, Other(args, "sameas"));
  return v.kind() == other.kind() && Equals(v, other);
}

constexpr char kEq[] = "==";
constexpr char kNe[] = "!=";
constexpr char kLt[] = "<";
constexpr char kLe[] = "<=";
constexpr char kGt[] = ">";
constexpr char kGe[] = ">=";
constexpr char kIn[] = "in";

struct NamedTest {
  std::string_view name;
  TestFn fn;
};

constexpr NamedTest kTests[] = {
    {"defined", Unary<[](const Value& v) { return !v.is_undefined(); }>},
    {"undefined", Unary<[](const Value& v) { return v.is_undefined(); }>},
    {"none", Unary<[](const Value& v) { return v.is_none(); }>},
    {"boolean", Unary<[](const Value& v) { return v.kind() == Kind::kBool; }>},
    {"true", Unary<[](const Value& v) { return v.kind() == Kind::kBool && v.bool_value(); }>},
    {"false", Unary<[](const Value& v) { return v.kind() == Kind::kBool && !v.bool_value(); }>},
    {"integer", Unary<[](const Value& v) { return v.kind() == Kind::kInt; }>},
    {"float", Unary<[](const Value& v) { return v.kind() == Kind::kFloat; }>},
    {"number", Unary<[](const Value& v) { return v.is_number(); }>},
    {"string", Unary<[](const Value& v) { return v.is_string(); }>},
    {"mapping", Unary<[](const Value& v) { return v.is_dict(); }>},
    {"iterable", Unary<[](const Value& v) {
       return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
     }>},
    {"sequence", Unary<[](const Value& v) {
       return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
     }>},
    {"callable", Unary<[](const Value& v) { return v.kind() == Kind::kFunction; }>},
    {"odd", [](const Value& v, const CallArgs& a) { return Parity(v, a, 2, false); }},
    {"even", [](const Value& v, const CallArgs& a) { return Parity(v, a, 2, true); }},
    {"divisibleby", DivisibleBy},
    {"eq", Comparison<kEq>},
    {"equalto", Comparison<kEq>},
    {"==", Comparison<kEq>},
    {"ne", Comparison<kNe>},
    {"!=", Comparison<kNe>},
    {"lt", Comparison<kLt>},
    {"lessthan", Comparison<kLt>},
    {"<", Comparison<kLt>},
    {"le", Comparison<kLe>},
    {"<=", Comparison<kLe>},
    {"gt", Comparison<kGt>},
    {"greaterthan", Comparison<kGt>},
    {">", Comparison<kGt>},
    {"ge", Comparison<kGe>},
    {">=", Comparison<kGe>},
    {"in", Comparison<kIn>},
    {"lower", [](const Value& v, const CallArgs& a) { return CaseTest(v, a, false); }},
    {"upper", [](const Value& v, const CallArgs& a) { return CaseTest(v, a, true); }},
    {"sameas", SameAs},
};

const NamedTest* Find(std::string_view name) {
  for (const NamedTest& t : kTests) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace

bool IsKnownTest(std::string_view name) { return Find(name) != nullptr; }

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const CallArgs& args) {
  const NamedTest* test = Find(name);
  if (test == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("unknown test '", AV(name), "'"));
  auto result = test->fn(v, args);
  if (!result.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("test '", AV(name), "': ", result.status().message()));
  }
  return result;
}

}  // namespace specdec::chat::jinja
