// Methods callable on values from templates, as Python has them: on strings startswith,
// endswith, strip, lstrip, rstrip, split, upper, lower, title, capitalize, replace, find, count,
// join; on dicts get, items, keys, values. Lists expose none (the sandbox forbids mutation).
#ifndef SPECDEC_COMMON_CHAT_JINJA_METHODS_H_
#define SPECDEC_COMMON_CHAT_JINJA_METHODS_H_

#include <optional>
#include <string_view>

#include "common/chat/jinja_value.h"

namespace specdec::chat::jinja {

// The method `name` of `receiver` bound to it as a callable, or nullopt when it has none.
std::optional<Value> GetMethod(const Value& receiver, std::string_view name);

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_METHODS_H_
