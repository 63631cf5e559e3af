// Python semantics of Jinja's operators, attribute and item access, slices and iteration.
// Errors are InvalidArgument without a template position (the renderer adds it).
#ifndef SPECDEC_COMMON_CHAT_JINJA_OPS_H_
#define SPECDEC_COMMON_CHAT_JINJA_OPS_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/chat/jinja_value.h"

namespace specdec::chat::jinja {

// The error for operating on an Undefined ("'x' is undefined").
absl::Status UndefinedError(const Value& undefined);

// Arithmetic `+ - * / // % **` and string concatenation `~`.
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b);

// Unary `-` and `+`.
absl::StatusOr<Value> UnaryOp(std::string_view op, const Value& v);

// Comparisons `== != < <= > >=`, `in` and `notin`.
absl::StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b);

// Python's `item in container`: substring, list element, dict key; false for Undefined.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

// `v.name`: a method (jinja_methods.h) of strings and dicts first, then a dict's item or a
// namespace's attribute; Undefined when there is none; an error when `v` is Undefined.
absl::StatusOr<Value> GetAttribute(const Value& v, std::string_view name);

// `v[key]`: list and string index (negative from the end), dict key, then attribute; Undefined
// when there is none; an error when `v` is Undefined.
absl::StatusOr<Value> GetItem(const Value& v, const Value& key);

// `v[start:stop:step]` on lists and strings; None or Undefined parts take Python's defaults.
absl::StatusOr<Value> Slice(const Value& v, const Value& start, const Value& stop,
                            const Value& step);

// The items a `for` loop visits: list items, dict keys, string code points; none for Undefined.
absl::StatusOr<ValueList> Iterate(const Value& v);

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_OPS_H_
