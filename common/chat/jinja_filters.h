// Jinja's filters (`value | name(args)`) that chat templates use: abs, attr, capitalize, count,
// d / default, dictsort, first, float, indent, int, items, join, last, length, list, lower, map,
// max, min, reject, rejectattr, replace, reverse, round, safe, select, selectattr, sort, string,
// sum, title, tojson (as Hugging Face transformers defines it), trim, unique, upper.
#ifndef SPECDEC_COMMON_CHAT_JINJA_FILTERS_H_
#define SPECDEC_COMMON_CHAT_JINJA_FILTERS_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "common/chat/jinja_value.h"

namespace specdec::chat::jinja {

bool IsKnownFilter(std::string_view name);

// Applies the filter `name` to `input`; InvalidArgument for unknown filters and bad arguments.
absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& input, const CallArgs& args);

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_FILTERS_H_
