// Small UTF-8 helpers shared by the tokenizer, its decoders and the streaming detokenizer.
#ifndef SPECDEC_COMMON_TOKENIZER_UTF8_H_
#define SPECDEC_COMMON_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace specdec::tokenizer {

// Returns the byte length of the well-formed UTF-8 character starting at `text[pos]`, or 1 when
// the bytes there are not a well-formed character (an invalid byte is its own unit). `pos` must be
// < text.size().
size_t Utf8CharLength(std::string_view text, size_t pos);

// Returns the length of the longest prefix of `text` that does not end inside an incomplete UTF-8
// character: only a trailing lead byte followed by fewer continuation bytes than it announces is
// held back (bytes that can never become valid are counted as complete units).
size_t Utf8CompletePrefixLength(std::string_view text);

// Appends the UTF-8 encoding of `code_point` (must be <= 0x10FFFF) to `out`.
void AppendUtf8(uint32_t code_point, std::string& out);

// Returns true when `text` is entirely well-formed UTF-8.
bool IsValidUtf8(std::string_view text);

// Returns `text` as well-formed UTF-8: each maximal subpart of an ill-formed sequence (the
// longest start of a character that some continuation could have completed, else one byte)
// becomes U+FFFD, as Python's and Transformers' decoding with errors="replace" does. Text
// for a wire that carries only UTF-8 (protobuf strings, JSON).
std::string ValidUtf8(std::string_view text);

}  // namespace specdec::tokenizer

#endif  // SPECDEC_COMMON_TOKENIZER_UTF8_H_
