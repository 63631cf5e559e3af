// Jinja's tests (`x is name`, `x is not name(args)`): defined, undefined, none, boolean, true,
// false, integer, float, number, string, mapping, iterable, sequence, callable, odd, even,
// divisibleby, eq / equalto / ==, ne / !=, lt / lessthan / <, le / <=, gt / greaterthan / >,
// ge / >=, in, lower, upper, sameas.
#ifndef SPECDEC_COMMON_CHAT_JINJA_IS_TESTS_H_
#define SPECDEC_COMMON_CHAT_JINJA_IS_TESTS_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "common/chat/jinja_value.h"

namespace specdec::chat::jinja {

bool IsKnownTest(std::string_view name);

// Applies the test `name` to `v`; InvalidArgument for unknown tests and bad arguments.
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const CallArgs& args);

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_IS_TESTS_H_
