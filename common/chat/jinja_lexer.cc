// Jinja template tokenizer with Jinja's whitespace handling.
#include "common/chat/jinja_lexer.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/chat/jinja_strings.h"
#include "common/util/status_macros.h"

namespace specdec::chat::jinja {
namespace {

// Python's `\s` on ASCII text.
bool IsSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

bool IsNameStart(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_'; }

bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool IsDigit(char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes a hex or octal escape of up to `max_len` digits at body[i]; returns digits consumed.
size_t ParseDigits(std::string_view body, size_t i, size_t max_len, int base, char32_t& out) {
  size_t n = 0;
  out = 0;
  while (n < max_len && i + n < body.size()) {
    const char c = body[i + n];
    int d = -1;
    if (IsDigit(c)) d = c - '0';
    if (base == 16 && absl::ascii_isxdigit(static_cast<unsigned char>(c)) && !IsDigit(c)) {
      d = absl::ascii_tolower(c) - 'a' + 10;
    }
    if (d < 0 || d >= base) break;
    out = out * base + d;
    ++n;
  }
  return n;
}

// Python's "unicode-escape" decoding of a string literal's body, as Jinja applies it.
std::string Unescape(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    static constexpr std::string_view kSimple = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
    bool done = false;
    for (size_t k = 0; k < kSimple.size(); k += 2) {
      if (kSimple[k] == c) {
        out += kSimple[k + 1];
        done = true;
      }
    }
    if (done || c == '\n') continue;
    char32_t cp = 0;
    const size_t want = c == 'x' ? 2 : (c == 'u' ? 4 : (c == 'U' ? 8 : 0));
    if (want > 0 && ParseDigits(body, i + 1, want, 16, cp) == want) {
      AppendUtf8(cp, out);
      i += want;
    } else if (c >= '0' && c <= '7') {
      i += ParseDigits(body, i, 3, 8, cp) - 1;
      AppendUtf8(cp, out);
    } else {
      absl::StrAppend(&out, "\\", absl::string_view(&c, 1));
    }
  }
  return out;
}

std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, LexOptions options)
      : src_(NormalizeNewlines(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      const size_t open = FindTagOpen(pos_);
      if (open == std::string::npos) {
        PushText(pos_, src_.size());
        break;
      }
      const char kind = src_[open + 1];
      const char modifier = ModifierAt(open + 2);
      PushTextBeforeTag(pos_, open, kind, modifier);
      pos_ = open + 2 + (modifier != 0 ? 1 : 0);
      if (kind == '#') {
        RETURN_IF_ERROR(SkipComment(open));
      } else if (kind == '%' && AtRawBlock()) {
        RETURN_IF_ERROR(LexRaw(open));
      } else {
        RETURN_IF_ERROR(LexTag(kind, open));
      }
    }
    Push(TokenKind::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  size_t FindTagOpen(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  char ModifierAt(size_t i) const {
    return i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i] : 0;
  }

  Token& Push(TokenKind kind, std::string value, size_t at) {
    Token token;
    token.kind = kind;
    token.value = std::move(value);
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at) - 1;
    token.line = static_cast<int>(it - line_starts_.begin()) + 1;
    token.column = static_cast<int>(at - *it) + 1;
    tokens_.push_back(std::move(token));
    return tokens_.back();
  }

  void PushText(size_t begin, size_t end) {
    if (end > begin) Push(TokenKind::kText, src_.substr(begin, end - begin), begin);
  }

  // Text up to a tag: `-` strips all whitespace before it; otherwise lstrip_blocks strips the
  // spaces and tabs before a block tag or comment when nothing else precedes it on its line.
  void PushTextBeforeTag(size_t begin, size_t end, char kind, char modifier) {
    if (modifier == '-') {
      while (end > begin && IsSpace(src_[end - 1])) --end;
    } else if (modifier != '+' && options_.lstrip_blocks && kind != '{') {
      const size_t newline = src_.rfind('\n', end == 0 ? 0 : end - 1);
      const size_t line_start =
          newline == std::string::npos || newline < begin ? begin : newline + 1;
      const bool at_line_start = line_start > begin || begin == 0 || src_[begin - 1] == '\n';
      const bool blank = std::all_of(src_.begin() + line_start, src_.begin() + end,
                                     [](char c) { return IsSpace(c); });
      if (at_line_start && blank) end = line_start;
    }
    PushText(begin, end);
  }

  // After a tag's closing delimiter: `-` strips the whitespace that follows, trim_blocks drops
  // one newline after a block tag or comment, `+` keeps everything.
  void AfterTagEnd(char modifier, bool block_or_comment) {
    if (modifier == '-') {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
    } else if (modifier != '+' && options_.trim_blocks && block_or_comment && pos_ < src_.size() &&
               src_[pos_] == '\n') {
      ++pos_;
    }
  }

  absl::Status SkipComment(size_t open) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) return Error(open, "unclosed comment");
    const char modifier = close > pos_ ? ModifierAt(close - 1) : 0;
    pos_ = close + 2;
    AfterTagEnd(modifier, true);
    return absl::OkStatus();
  }

  // Whether the block tag whose body starts at pos_ is `raw`.
  bool AtRawBlock() const {
    size_t i = pos_;
    while (i < src_.size() && IsSpace(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0 || (i + 3 < src_.size() && IsNameChar(src_[i + 3]))) {
      return false;
    }
    i += 3;
    while (i < src_.size() && IsSpace(src_[i])) ++i;
    if (ModifierAt(i) == '-') ++i;
    return src_.compare(i, 2, "%}") == 0;
  }

  // Matches `{%[-+]? endraw [-+]?%}` at `at`; returns the position after it, or npos.
  size_t MatchEndRaw(size_t at, char& open_modifier, char& close_modifier) const {
    size_t i = at + 2;
    open_modifier = ModifierAt(i);
    if (open_modifier != 0) ++i;
    while (i < src_.size() && IsSpace(src_[i])) ++i;
    if (src_.compare(i, 6, "endraw") != 0) return std::string::npos;
    i += 6;
    while (i < src_.size() && IsSpace(src_[i])) ++i;
    close_modifier = ModifierAt(i);
    if (close_modifier != 0) ++i;
    return src_.compare(i, 2, "%}") == 0 ? i + 2 : std::string::npos;
  }

  // `{% raw %}...{% endraw %}`: the body is text. Jinja applies no trim_blocks after `raw`.
  absl::Status LexRaw(size_t open) {
    const size_t close = src_.find("%}", pos_);
    pos_ = close + 2;
    if (src_[close - 1] == '-') AfterTagEnd('-', true);
    for (size_t at = src_.find("{%", pos_); at != std::string::npos; at = src_.find("{%", at + 1)) {
      char open_modifier = 0;
      char close_modifier = 0;
      const size_t end = MatchEndRaw(at, open_modifier, close_modifier);
      if (end == std::string::npos) continue;
      PushTextBeforeTag(pos_, at, '%', open_modifier);
      pos_ = end;
      AfterTagEnd(close_modifier, true);
      return absl::OkStatus();
    }
    return Error(open, "missing {% endraw %}");
  }

  absl::Status LexTag(char kind, size_t open) {
    const bool block = kind == '%';
    Push(block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "", open);
    const std::string_view close = block ? "%}" : "}}";
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) return Error(open, block ? "unclosed block tag" : "unclosed {{");
      const char modifier = ModifierAt(pos_);
      const size_t close_at = pos_ + (modifier != 0 ? 1 : 0);
      if (depth == 0 && src_.compare(close_at, 2, close) == 0) {
        Push(block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "", pos_);
        pos_ = close_at + 2;
        AfterTagEnd(modifier, block);
        return absl::OkStatus();
      }
      RETURN_IF_ERROR(LexExpressionToken(depth));
    }
  }

  absl::Status LexExpressionToken(int& depth) {
    const char c = src_[pos_];
    if (IsNameStart(c)) {
      size_t end = pos_;
      while (end < src_.size() && IsNameChar(src_[end])) ++end;
      Push(TokenKind::kName, src_.substr(pos_, end - pos_), pos_);
      pos_ = end;
      return absl::OkStatus();
    }
    if (IsDigit(c)) return LexNumber();
    if (c == '\'' || c == '"') return LexString();
    return LexOperator(depth);
  }

  // Digits, with `_` separators; a float has a fraction and/or an exponent. After a `.` (as in
  // `items.0.name`) only integers are read.
  absl::Status LexNumber() {
    const size_t begin = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (IsDigit(src_[pos_]) || src_[pos_] == '_')) ++pos_;
    };
    digits();
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator &&
                           tokens_.back().value == ".";
    bool is_float = false;
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && IsDigit(src_[pos_ + 1])) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t i = pos_ + 1;
      if (i < src_.size() && (src_[i] == '+' || src_[i] == '-')) ++i;
      if (i < src_.size() && IsDigit(src_[i])) {
        pos_ = i;
        digits();
        is_float = true;
      }
    }
    std::string text = src_.substr(begin, pos_ - begin);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token& token = Push(is_float ? TokenKind::kFloat : TokenKind::kInteger, text, begin);
    if (is_float) {
      token.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      token.int_value = std::strtoll(text.c_str(), nullptr, 10);
    }
    return absl::OkStatus();
  }

  absl::Status LexString() {
    const char quote = src_[pos_];
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' ? 2 : 1;
    if (i >= src_.size()) return Error(pos_, "unterminated string literal");
    Push(TokenKind::kString, Unescape(std::string_view(src_).substr(pos_ + 1, i - pos_ - 1)), pos_);
    pos_ = i + 1;
    return absl::OkStatus();
  }

  absl::Status LexOperator(int& depth) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        Push(TokenKind::kOperator, std::string(op), pos_);
        pos_ += 2;
        return absl::OkStatus();
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-*/%~<>()[]{},.:|=").find(c) == std::string_view::npos) {
      return Error(pos_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    Push(TokenKind::kOperator, std::string(1, c), pos_);
    ++pos_;
    return absl::OkStatus();
  }

  absl::Status Error(size_t at, std::string_view message) {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at) - 1;
    return absl::InvalidArgumentError(absl::StrCat("line ", it - line_starts_.begin() + 1,
                                                   ", column ", at - *it + 1, ": ", AV(message)));
  }

  const std::string src_;
  const LexOptions options_;
  std::vector<size_t> line_starts_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, LexOptions options) {
  return Lexer(source, options).Run();
}

}  // namespace specdec::chat::jinja
