#include "common/tokenizer/utf8.h"

namespace specdec::tokenizer {
namespace {

// Number of bytes announced by a lead byte, or 0 for a byte that cannot start a character.
size_t AnnouncedLength(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Whether the second byte of a multi-byte sequence is in range for lead byte `lead` (rules out
// overlong forms, surrogates and code points above U+10FFFF).
bool SecondByteOk(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return IsContinuation(b);
  }
}

}  // namespace

size_t Utf8CharLength(std::string_view text, size_t pos) {
  const auto lead = static_cast<uint8_t>(text[pos]);
  const size_t n = AnnouncedLength(lead);
  if (n <= 1) return 1;
  if (pos + n > text.size()) return 1;
  if (!SecondByteOk(lead, static_cast<uint8_t>(text[pos + 1]))) return 1;
  for (size_t i = 2; i < n; ++i) {
    if (!IsContinuation(static_cast<uint8_t>(text[pos + i]))) return 1;
  }
  return n;
}

size_t Utf8CompletePrefixLength(std::string_view text) {
  // Only the last (up to) 3 bytes can be an incomplete character.
  const size_t size = text.size();
  const size_t lookback = size < 3 ? size : 3;
  for (size_t back = 1; back <= lookback; ++back) {
    const size_t pos = size - back;
    const auto b = static_cast<uint8_t>(text[pos]);
    if (IsContinuation(b)) continue;
    const size_t n = AnnouncedLength(b);
    if (n <= back) return size;  // Complete, ASCII, or an invalid byte: nothing to wait for.
    // A lead byte announcing more bytes than are present: wait if what is there so far is valid.
    if (back >= 2 && !SecondByteOk(b, static_cast<uint8_t>(text[pos + 1]))) return size;
    return pos;
  }
  return size;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = Utf8CharLength(text, pos);
    if (n == 1 && static_cast<uint8_t>(text[pos]) >= 0x80) return false;
    pos += n;
  }
  return true;
}

std::string ValidUtf8(std::string_view text) {
  if (IsValidUtf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = Utf8CharLength(text, pos);
    const auto lead = static_cast<uint8_t>(text[pos]);
    if (n > 1 || lead < 0x80) {
      out.append(text.substr(pos, n));
      pos += n;
      continue;
    }
    // The maximal subpart: the lead byte and the continuation bytes that still fit it.
    size_t end = pos + 1;
    const size_t announced = AnnouncedLength(lead);
    if (announced > 1 && end < text.size() && SecondByteOk(lead, static_cast<uint8_t>(text[end]))) {
      ++end;
      while (end < pos + announced && end < text.size() &&
             IsContinuation(static_cast<uint8_t>(text[end]))) {
        ++end;
      }
    }
    AppendUtf8(0xFFFD, out);
    pos = end;
  }
  return out;
}

}  // namespace specdec::tokenizer
