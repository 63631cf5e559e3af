// Python `str` behavior the Jinja subset needs on UTF-8 text: code points, whitespace, strip,
// split, replace, case changes, repr() of strings and floats.
#ifndef SPECDEC_COMMON_CHAT_JINJA_STRINGS_H_
#define SPECDEC_COMMON_CHAT_JINJA_STRINGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

namespace specdec::chat::jinja {

// Debian's abseil has its own string_view type; absl::StrCat and the status constructors take it.
inline absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Splits `s` into its code points (each a view of 1-4 bytes); a byte that does not start a valid
// UTF-8 sequence is a code point of its own.
std::vector<std::string_view> CodePoints(std::string_view s);

// Number of code points in `s` (as CodePoints(s).size()).
int64_t CodePointCount(std::string_view s);

// Python's str.strip / lstrip / rstrip: removes leading and/or trailing code points that are in
// `chars`, or whitespace (Python's str.isspace set) when `chars` is nullopt.
std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);

// Python's str.split: on `sep` (nullopt: runs of whitespace, empty pieces dropped) at most
// `max_split` times (negative: no limit). `sep` must not be empty.
std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t max_split);

// Python's str.replace: the first `count` occurrences (negative: all) of `from` by `to`.
std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);

// ASCII letters change case; other bytes are kept.
std::string AsciiUpper(std::string_view s);
std::string AsciiLower(std::string_view s);
// Python's str.title and str.capitalize on ASCII letters.
std::string Title(std::string_view s);
std::string Capitalize(std::string_view s);

// Python's repr() of a str: single quotes unless the text holds ' and no ", backslash escapes for
// the quote, backslash and control characters.
std::string PyStringRepr(std::string_view s);

// Python's repr() of a float: shortest round-trip digits, "1.0", "1e-05", "1.5e+20", "inf",
// "nan".
std::string PyFloatRepr(double d);

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_STRINGS_H_
