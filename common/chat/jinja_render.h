// Evaluates a parsed Jinja template (jinja_parser.h) to text.
//
// The subset: text; {{ expr }}; {% if / elif / else %}; {% for a[, b] in expr [if cond] %} with
// {% else %}, {% break %}, {% continue %} and loop.index, index0, revindex, revindex0, first,
// last, length, previtem, nextitem, cycle(); {% set x = ... %}, {% set a, b = ... %},
// {% set ns.attr = ... %}, {% set x %}...{% endset %}; {% macro %} (positional and keyword
// arguments, defaults); {% with %}; {% generation %}; {% raw %}; comments. Expressions:
// literals (strings with Python escapes, ints, floats, true/false/none, lists, tuples, dicts with
// string keys), names, .attr, [item], slices, calls, filters (jinja_filters.h), tests
// (jinja_is_tests.h), methods (jinja_methods.h), `if else`, or, and, not, in, not in,
// == != < <= > >=, + - * / // % **, ~. Globals: namespace(), range(), dict(). Scoping as
// Jinja's: a loop body's assignments stay in the iteration; macros see the template's top-level
// variables.
#ifndef SPECDEC_COMMON_CHAT_JINJA_RENDER_H_
#define SPECDEC_COMMON_CHAT_JINJA_RENDER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/chat/jinja_ast.h"
#include "common/chat/jinja_value.h"

namespace specdec::chat::jinja {

// An InvalidArgument error with `message` that the renderer passes on unchanged, without the
// template position it adds to other errors (for errors a template raises on purpose).
absl::Status TemplateRaisedError(std::string_view message);

// Renders `tpl` with the variables and functions in `globals`; InvalidArgument "line L: ..."
// when evaluation fails (an Undefined operated on, a type error, a failing filter or call).
absl::StatusOr<std::string> RenderTemplate(const Template& tpl, const ValueDict& globals);

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_RENDER_H_
