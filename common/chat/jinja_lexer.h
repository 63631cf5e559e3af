// Splits a Jinja template into text and tag tokens. Applies what Jinja's lexer applies: newline
// normalization and the removal of one trailing newline, `{% raw %}` blocks, comments, the `-`
// and `+` whitespace-control markers, and (as Hugging Face configures Jinja for chat templates)
// trim_blocks and lstrip_blocks.
#ifndef SPECDEC_COMMON_CHAT_JINJA_LEXER_H_
#define SPECDEC_COMMON_CHAT_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace specdec::chat::jinja {

enum class TokenKind {
  kText,           // Literal template text (after whitespace control).
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // Identifier; keywords (if, in, not, ...) are names too.
  kString,         // String literal, escapes decoded.
  kInteger,
  kFloat,
  kOperator,  // + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  kEnd,       // End of the template.
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string value;  // Text, name, decoded string or operator spelling.
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;  // 1-based position of the token's first character.
  int column = 1;
};

struct LexOptions {
  // Remove the first newline after a block tag or comment.
  bool trim_blocks = true;
  // Strip spaces and tabs before a block tag or comment that starts a line.
  bool lstrip_blocks = true;
};

// Tokenizes `source`; InvalidArgument ("line L, column C: ...") for unclosed tags, comments or
// strings and characters that start no token.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, LexOptions options = {});

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_LEXER_H_
