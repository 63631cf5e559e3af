#include "common/tokenizer/byte_level.h"

#include <array>

#include "common/tokenizer/utf8.h"

namespace specdec::tokenizer {
namespace {

struct ByteTables {
  std::array<uint32_t, 256> code_point{};
  std::array<std::string, 256> utf8;
  std::array<int16_t, 324> byte_of_code_point{};  // All mapped code points are < 0x144.
};

const ByteTables& Tables() {
  static const ByteTables* const kTables = [] {
    auto* t = new ByteTables();
    t->byte_of_code_point.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t->code_point[b] = printable ? b : next++;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      AppendUtf8(t->code_point[b], t->utf8[b]);
      t->byte_of_code_point[t->code_point[b]] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *kTables;
}

// Decodes the well-formed UTF-8 character at `pos` (length `n`).
uint32_t DecodeCodePoint(std::string_view s, size_t pos, size_t n) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (n == 1) return b0;
  uint32_t cp = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3F);
  return cp;
}

}  // namespace

std::string_view ByteToUnicode(uint8_t b) { return Tables().utf8[b]; }

void AppendByteLevel(std::string_view bytes, std::string& out) {
  const ByteTables& t = Tables();
  for (char c : bytes) out += t.utf8[static_cast<uint8_t>(c)];
}

std::optional<uint8_t> UnicodeToByte(uint32_t code_point) {
  const ByteTables& t = Tables();
  if (code_point >= t.byte_of_code_point.size()) return std::nullopt;
  const int16_t b = t.byte_of_code_point[code_point];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

bool AppendFromByteLevel(std::string_view piece, std::string& out) {
  const size_t start = out.size();
  for (size_t pos = 0; pos < piece.size();) {
    const size_t n = Utf8CharLength(piece, pos);
    if (n == 1 && static_cast<uint8_t>(piece[pos]) >= 0x80) {
      out.resize(start);
      return false;
    }
    const std::optional<uint8_t> b = UnicodeToByte(DecodeCodePoint(piece, pos, n));
    if (!b.has_value()) {
      out.resize(start);
      return false;
    }
    out.push_back(static_cast<char>(*b));
    pos += n;
  }
  return true;
}

}  // namespace specdec::tokenizer
