// Python `str` behavior on UTF-8 text for the Jinja subset.
#include "common/chat/jinja_strings.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace specdec::chat::jinja {
namespace {

// Length of the UTF-8 sequence starting at s[i] (1 when it is not a valid sequence start).
size_t SequenceLength(std::string_view s, size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  size_t n = 1;
  if ((lead & 0xE0) == 0xC0) {
    n = 2;
  } else if ((lead & 0xF0) == 0xE0) {
    n = 3;
  } else if ((lead & 0xF8) == 0xF0) {
    n = 4;
  }
  if (n == 1 || i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

char32_t Decode(std::string_view cp) {
  const auto b0 = static_cast<unsigned char>(cp[0]);
  if (cp.size() == 1) return b0;
  char32_t value = b0 & (0x7F >> cp.size());
  for (size_t k = 1; k < cp.size(); ++k) value = (value << 6) | (cp[k] & 0x3F);
  return value;
}

// Python's str.isspace for one code point.
bool IsSpace(std::string_view cp) {
  const char32_t c = Decode(cp);
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool InSet(std::string_view cp, const std::optional<std::vector<std::string_view>>& set) {
  if (!set.has_value()) return IsSpace(cp);
  for (std::string_view c : *set) {
    if (c == cp) return true;
  }
  return false;
}

std::vector<std::string> SplitOnWhitespace(std::string_view s, int64_t max_split) {
  std::vector<std::string> out;
  const std::vector<std::string_view> cps = CodePoints(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsSpace(cps[i])) ++i;
    if (i == cps.size()) break;
    const size_t begin = cps[i].data() - s.data();
    if (max_split >= 0 && static_cast<int64_t>(out.size()) == max_split) {
      out.emplace_back(s.substr(begin));
      break;
    }
    while (i < cps.size() && !IsSpace(cps[i])) ++i;
    const size_t end = i < cps.size() ? cps[i].data() - s.data() : s.size();
    out.emplace_back(s.substr(begin, end - begin));
  }
  return out;
}

}  // namespace

std::vector<std::string_view> CodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceLength(s, i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

int64_t CodePointCount(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); i += SequenceLength(s, i)) ++n;
  return n;
}

std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  std::optional<std::vector<std::string_view>> set;
  if (chars.has_value()) set = CodePoints(*chars);
  const std::vector<std::string_view> cps = CodePoints(s);
  size_t begin = 0;
  size_t end = cps.size();
  while (left && begin < end && InSet(cps[begin], set)) ++begin;
  while (right && end > begin && InSet(cps[end - 1], set)) --end;
  if (begin == end) return "";
  const size_t from = cps[begin].data() - s.data();
  const size_t to = cps[end - 1].data() + cps[end - 1].size() - s.data();
  return std::string(s.substr(from, to - from));
}

std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t max_split) {
  if (!sep.has_value()) return SplitOnWhitespace(s, max_split);
  std::vector<std::string> out;
  size_t pos = 0;
  while (max_split < 0 || static_cast<int64_t>(out.size()) < max_split) {
    const size_t hit = s.find(*sep, pos);
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(pos, hit - pos));
    pos = hit + sep->size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    for (std::string_view cp : CodePoints(s)) {
      if (count < 0 || done < count) {
        out.append(to);
        ++done;
      }
      out.append(cp);
    }
    if (count < 0 || done < count) out.append(to);
    return out;
  }
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    absl::StrAppend(&out, AV(s.substr(pos, hit - pos)), AV(to));
    pos = hit + from.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::string AsciiUpper(std::string_view s) { return absl::AsciiStrToUpper(AV(s)); }

std::string AsciiLower(std::string_view s) { return absl::AsciiStrToLower(AV(s)); }

std::string Title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    const bool cased = absl::ascii_isalpha(static_cast<unsigned char>(c));
    if (cased) c = previous_cased ? absl::ascii_tolower(c) : absl::ascii_toupper(c);
    previous_cased = cased;
  }
  return out;
}

std::string Capitalize(std::string_view s) {
  std::string out = absl::AsciiStrToLower(AV(s));
  if (!out.empty()) out[0] = absl::ascii_toupper(out[0]);
  return out;
}

std::string PyStringRepr(std::string_view s) {
  const bool double_quoted =
      s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char quote = double_quoted ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      absl::StrAppend(&out, "\\", absl::string_view(&c, 1));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string_view sci(buf, result.ptr - buf);
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) digits += c;
  }
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  const std::string sign = std::signbit(d) ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&mantissa, ".", digits.substr(1));
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return absl::StrCat(sign, mantissa, exp_buf);
  }
  if (exponent < 0) {
    return absl::StrCat(sign, "0.", std::string(-exponent - 1, '0'), digits);
  }
  const size_t int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) {
    return absl::StrCat(sign, digits, std::string(int_len - digits.size(), '0'), ".0");
  }
  return absl::StrCat(sign, digits.substr(0, int_len), ".", digits.substr(int_len));
}

}  // namespace specdec::chat::jinja
