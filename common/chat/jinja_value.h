// The dynamic values of the Jinja subset: Jinja's Undefined, Python's None, bool, int, float, str,
// list and dict (insertion-ordered, string keys), namespace() objects and callables; with
// Python's truthiness, equality, ordering and str()/repr() text.
#ifndef SPECDEC_COMMON_CHAT_JINJA_VALUE_H_
#define SPECDEC_COMMON_CHAT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specdec::chat::jinja {

class Value;
class ValueDict;
using ValueList = std::vector<Value>;

// Arguments of a call: positional first, then keyword arguments in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using Function = std::function<absl::StatusOr<Value>(const CallArgs&)>;

// A value; copies share lists, dicts and namespaces (lists and dicts are never changed after
// construction, namespaces are changed through `{% set ns.attr = ... %}`).
class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };

  // An Undefined; Undefined(hint) names the error reported when it is operated on, such as
  // "'x' is undefined".
  Value() = default;
  static Value Undefined(std::string hint);
  static Value None();
  Value(bool b);                                    // NOLINT: implicit by design, as Python values.
  Value(int i) : Value(static_cast<int64_t>(i)) {}  // NOLINT
  Value(int64_t i);                                 // NOLINT
  Value(double d);                                  // NOLINT
  Value(std::string s);                             // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}       // NOLINT
  static Value List(ValueList items);
  // A list that prints as a Python tuple: "(1, 2)", "(1,)".
  static Value Tuple(ValueList items);
  static Value Dict(ValueDict dict);
  static Value Namespace(ValueDict attributes);
  static Value Callable(std::string name, Function fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  // int, float or bool (bool is an int in Python).
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_integer() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }

  bool bool_value() const { return int_ != 0; }
  // int or bool as an integer.
  int64_t int_value() const { return int_; }
  // Any number as a double.
  double number_value() const { return kind_ == Kind::kFloat ? float_ : double(int_); }
  const std::string& string_value() const { return str_; }
  const ValueList& list() const;
  const ValueDict& dict() const;
  // The attributes of a namespace (shared by every copy).
  ValueDict& namespace_attributes() const;
  const Function& function() const { return *fn_; }
  // The message for operating on an Undefined, or the name of a callable.
  const std::string& hint() const { return str_; }

  // Python's bool(): false for Undefined, None, False, 0, 0.0, "", [], {}.
  bool Truthy() const;
  // Python's type name, for error messages ("int", "str", "NoneType", "list", "dict", ...).
  std::string TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const Function> fn_;
};

// A dict keeping insertion order; lookups are linear (template dicts are small).
class ValueDict {
 public:
  using Entry = std::pair<std::string, Value>;

  const Value* Find(std::string_view key) const;
  // Replaces the value of `key` in place, or appends it.
  void Set(std::string key, Value value);
  // Appends `key`, which the caller knows is not in the dict yet.
  void Append(std::string key, Value value) {
    entries_.emplace_back(std::move(key), std::move(value));
  }
  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

 private:
  std::vector<Entry> entries_;
};

// Python's ==: numbers compare by value across int/float/bool, lists element-wise, dicts by keys
// and values; Undefined equals only Undefined; callables and namespaces by identity.
bool Equals(const Value& a, const Value& b);

// Python's <, as -1/0/1: numbers, strings (by code point) and lists; InvalidArgument otherwise.
absl::StatusOr<int> Compare(const Value& a, const Value& b);

// Jinja's output of a value (Python's str()): "" for Undefined, "None", "True", repr() inside
// lists and dicts.
std::string ToStr(const Value& v);

// Python's repr().
std::string Repr(const Value& v);

// Binds `args` to the parameters `params` of `function`: one entry per parameter, nullptr where
// not given; InvalidArgument for too many positional, unknown or repeated keyword arguments.
absl::StatusOr<std::vector<const Value*>> BindArgs(const CallArgs& args, std::string_view function,
                                                   std::initializer_list<std::string_view> params);

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_VALUE_H_
