// Parses Jinja template text into the syntax tree of jinja_ast.h: the statements and expressions
// chat templates use (jinja_render.h lists them). Unsupported tags (include, extends, block,
// call, filter, ...), unknown filters and unknown tests are refused here, before any rendering.
#ifndef SPECDEC_COMMON_CHAT_JINJA_PARSER_H_
#define SPECDEC_COMMON_CHAT_JINJA_PARSER_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/chat/jinja_ast.h"

namespace specdec::chat::jinja {

// Tokenizes (jinja_lexer.h, with trim_blocks and lstrip_blocks) and parses `source`;
// InvalidArgument "line L, column C: ..." when it does not parse.
absl::StatusOr<std::unique_ptr<const Template>> ParseTemplate(std::string_view source);

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_PARSER_H_
