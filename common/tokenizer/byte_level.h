// GPT-2's reversible byte <-> printable-character mapping used by byte-level BPE tokenizers.
#ifndef SPECDEC_COMMON_TOKENIZER_BYTE_LEVEL_H_
#define SPECDEC_COMMON_TOKENIZER_BYTE_LEVEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace specdec::tokenizer {

// Returns the UTF-8 text of the character GPT-2's `bytes_to_unicode` assigns to byte `b`
// (printable Latin-1 bytes map to themselves, the others to U+0100 and up; ' ' -> "Ġ").
std::string_view ByteToUnicode(uint8_t b);

// Appends the byte-level form of every byte of `bytes` to `out`.
void AppendByteLevel(std::string_view bytes, std::string& out);

// Inverse of ByteToUnicode for one code point; nullopt for characters outside the mapping.
std::optional<uint8_t> UnicodeToByte(uint32_t code_point);

// Decodes a byte-level piece back to bytes. Returns false (leaving `out` untouched) when some
// character of `piece` is outside the mapping.
bool AppendFromByteLevel(std::string_view piece, std::string& out);

}  // namespace specdec::tokenizer

#endif  // SPECDEC_COMMON_TOKENIZER_BYTE_LEVEL_H_
