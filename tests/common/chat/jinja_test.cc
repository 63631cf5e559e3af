// Tests of the Jinja subset. Every ExpectRenders case was checked against Python's Jinja2 3.1.6
// configured as Hugging Face transformers configures it (sandboxed, trim_blocks, lstrip_blocks,
// loopcontrols, tojson without HTML escaping): `want` is the text Jinja2 renders for `source` with
// the variables of kVariables.
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "common/chat/jinja_json.h"
#include "common/chat/jinja_lexer.h"
#include "common/chat/jinja_parser.h"
#include "common/chat/jinja_render.h"
#include "common/chat/jinja_strings.h"
#include "common/chat/jinja_value.h"
#include "common/util/status_matchers.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace specdec::chat::jinja {
namespace {

constexpr char kVariables[] = R"json({
  "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!", "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1, "a": [1.5, null, true]}}}]}],
  "d": {"b": 1, "a": 2, "items": "shadowed"},
  "s": "  Hello World  ",
  "n": 7,
  "f": 2.5,
  "names": ["b", "A", "c", "a"],
  "users": [{"name": "ann", "admin": true}, {"name": "bob", "admin": false}, {"name": "cy"}],
  "empty": [],
  "text": "héllo wörld"
})json";

ValueDict Globals() {
  ValueDict globals;
  const Value vars = FromJson(nlohmann::ordered_json::parse(kVariables));
  for (const auto& [name, value] : vars.dict().entries()) globals.Set(name, value);
  globals.Set("raise_exception", Value::Callable("raise_exception", [](const CallArgs& args) {
                return absl::StatusOr<Value>(TemplateRaisedError(ToStr(args.positional.at(0))));
              }));
  return globals;
}

absl::StatusOr<std::string> Render(std::string_view source) {
  auto tpl = ParseTemplate(source);
  if (!tpl.ok()) return tpl.status();
  return RenderTemplate(**tpl, Globals());
}

struct Case {
  const char* source;
  const char* want;
};

void ExpectRenders(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.source);
    const absl::StatusOr<std::string> got = Render(c.source);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c.want);
  }
}

// Literals, arithmetic, concatenation, string escapes and conditional expressions.
TEST(JinjaTest, TextAndExpressions) {
  ExpectRenders({
      {"plain text only", "plain text only"},
      {"a {{ 'b' }} c {{ n }} {{ f }} {{ none }} {{ true }} {{ [1, 'x'] }} {{ {'k': 'v'} }}",
       "a b c 7 2.5 None True [1, 'x'] {'k': 'v'}"},
      {"{{ 1 + 2 * 3 - 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} "
       "{{ 10 - 2 - 3 }}",
       "5.0 3 -4 1 2 1024 5"},
      {"{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' + 'cd' }} {{ [1] + [2] }} {{ 'ab' * 2 }} {{ 0.1 + 0.2 "
       "}} {{ 1e20 }} {{ 1 / 4 }}",
       "a1NoneTrue abcd [1, 2] abab 0.30000000000000004 1e+20 0.25"},
      {"{{ 'single \\'q\\'' }} {{ \"double \\\"q\\\"\" }} {{ 'tab\\there' }} {{ 'nl\\nhere' }} {{ "
       "'\\u00e9\\x41' }} {{ 'back\\\\slash' }} {{ 'con' 'cat' }}",
       "single 'q' double \"q\" tab\there nl\nhere éA back\\slash concat"},
      {"{{ 'yes' if n > 5 else 'no' }} {{ 'yes' if n > 50 else 'no' }} [{{ 'x' if false }}] {{ 1 "
       "if false else 2 if false else 3 }}",
       "yes no [] 3"},
  });
}

// `-` markers, trim_blocks, lstrip_blocks, `+`, and the dropped final newline.
TEST(JinjaTest, WhitespaceControl) {
  ExpectRenders({
      {"a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
      {"a  {{- ' b ' -}}  c\n  {{- 'd' }}", "a b cd"},
      {"  {% if true %}\n  x\n  {% endif %}\n  y  {# comment #}\n  {{ 'v' }}\n", "  x\n  y    v"},
      {"{% for i in [1, 2] %}\n    {{ i }}\n{% endfor %}\nend\n", "    1\n    2\nend"},
      {"  {%+ if true %}kept{% endif %}  ", "  kept  "},
      {"line\n    {#- comment -#}\n    next", "linenext"},
  });
}

TEST(JinjaTest, IfElifElse) {
  ExpectRenders({
      {"{% if n > 10 %}big{% elif n > 5 %}medium{% else %}small{% endif %}", "medium"},
      {"{% if empty %}a{% elif not empty %}b{% endif %}|{% if none %}x{% endif %}|{% if s %}s{% "
       "endif %}",
       "b||s"},
      {"{% if n == 7 and f < 3 %}both{% endif %} {% if n == 1 or f == 2.5 %}either{% endif %} {% "
       "if not n %}never{% else %}else{% endif %}",
       "both either else"},
  });
}

// Loop variables, for-else, unpacking, filtered loops, break and continue.
TEST(JinjaTest, ForLoop) {
  ExpectRenders({
      {"{% for m in messages %}{{ loop.index0 }}/{{ loop.index }}/{{ loop.length }}:{{ m.role }}{% "
       "if loop.first %}(first){% endif %}{% if loop.last %}(last){% endif %} {% endfor %}",
       "0/1/3:system(first) 1/2/3:user 2/3/3:assistant(last) "},
      {"{% for m in messages[::-1] %}{{ m.role }}{{ loop.revindex }}{{ loop.revindex0 }} {% endfor "
       "%}",
       "assistant32 user21 system10 "},
      {"{% for x in empty %}item{% else %}no items{% endfor %}", "no items"},
      {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k, v in d|items %}{{ k }}{% "
       "endfor %} {% for k in d %}{{ k }}{% endfor %}",
       "b=1;a=2;items=shadowed; baitems baitems"},
      {"{% for u in users if u.admin is defined %}{{ u.name }}{{ loop.length }}{% endfor %}",
       "ann2bob2"},
      {"{% for c in 'héj' %}[{{ c }}]{% endfor %}", "[h][é][j]"},
      {"{% for i in [1, 2, 3, 4] %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break "
       "%}{% endif %}{{ i }}{% endfor %}",
       "13"},
      {"{% for i in [1, 2, 3] %}{{ loop.previtem }}>{{ i }}>{{ loop.nextitem }} {{ "
       "loop.cycle('odd', 'even') }};{% endfor %}",
       ">1>2 odd;1>2>3 even;2>3> odd;"},
      {"{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }} {% endfor %}{% endfor %}",
       "10 20 21 "},
  });
}

// Jinja's scoping: loop bodies do not leak assignments; namespace() does.
TEST(JinjaTest, SetAndNamespace) {
  ExpectRenders({
      {"{% set x = n + 1 %}{{ x }} {% set a, b = [1, 2] %}{{ a }}{{ b }} {% set t %}captured {{ n "
       "}}{% endset %}[{{ t }}]",
       "8 12 [captured 7]"},
      {"{% set x = 0 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", "120"},
      {"{% set ns = namespace(total=0, last=none) %}{% for i in [1, 2, 3] %}{% set ns.total = "
       "ns.total + i %}{% set ns.last = i %}{% endfor %}{{ ns.total }} {{ ns.last }}",
       "6 3"},
      {"{% if true %}{% set inner = 'leaks' %}{% endif %}{{ inner }}", "leaks"},
      {"{% set messages = messages[1:] %}{{ messages|length }} {{ messages[0].role }}", "2 user"},
      {"{% with a = 2, b = 3 %}{{ a * b }}{% endwith %}[{{ a }}]", "6[]"},
  });
}

// Macros see the template's top-level variables; defaults and keyword arguments.
TEST(JinjaTest, Macros) {
  ExpectRenders({
      {"{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}{{ suffix }}!{% "
       "endmacro %}{% set suffix = '.' %}{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }} {{ "
       "greet('Cy', 'Yo') }}",
       "Hello, Ann.! Hi, Bob.! Yo, Cy.!"},
      {"{% macro count(k) %}{% if k > 0 %}{{ k }}{{ count(k - 1) }}{% endif %}{% endmacro %}{{ "
       "count(3) }}",
       "321"},
  });
}

TEST(JinjaTest, Filters) {
  ExpectRenders({
      {"[{{ s|trim }}] [{{ 'xxhixx'|trim('x') }}] {{ s|length }} {{ names|length }} {{ d|length }} "
       "{{ text|length }} {{ names|count }}",
       "[Hello World] [hi] 15 4 3 11 4"},
      {"{{ names|first }} {{ names|last }} {{ 'abc'|first }} {{ names|join }} {{ names|join(', ') "
       "}} {{ users|join('/', attribute='name') }}",
       "b a a bAca b, A, c, a ann/bob/cy"},
      {"{{ 'MiXed'|lower }} {{ 'MiXed'|upper }} {{ 'hello world'|title }} {{ 'hELLO'|capitalize }} "
       "{{ 42|string }} {{ none|string }} {{ [1, 'a']|string }}",
       "mixed MIXED Hello World Hello 42 None [1, 'a']"},
      {"{{ missing|default('dflt') }} {{ none|default('dflt') }} [{{ ''|default('dflt') }}] {{ "
       "''|default('dflt', true) }} {{ n|d(0) }}",
       "dflt None [] dflt 7"},
      {"{{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ names|sort }} {{ "
       "names|sort(reverse=true) }} {{ names|reverse|list }} {{ 'abc'|reverse }}",
       "a+b+c bba ['A', 'a', 'b', 'c'] ['c', 'b', 'A', 'a'] ['a', 'c', 'A', 'b'] cba"},
      {"{{ users|selectattr('admin')|map(attribute='name')|list }} {{ "
       "users|rejectattr('admin')|map(attribute='name')|list }} {{ users|selectattr('name', "
       "'equalto', 'cy')|list|length }}",
       "['ann'] ['bob', 'cy'] 1"},
      {"{{ [1, 2, 3, 4]|select('even')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ ['a', "
       "'b']|map('upper')|join }} {{ ['x', 'code', 'y']|reject('equalto', 'code')|join(', ') }}",
       "[2, 4] [2, 4] AB x, y"},
      // select, reject and map visit nothing of a falsy input, None included.
      {"{{ none|selectattr('type', 'equalto', 'x')|list }} {{ none|map('upper')|list|length }} "
       "{{ []|reject('odd')|list }}",
       "[] 0 []"},
      {"{{ d|items|list }} {{ d|dictsort }} {{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} {{ [1, 2, "
       "3]|sum }} {{ [1, 1, 2]|unique|list }} {{ -3|abs }}",
       "[('b', 1), ('a', 2), ('items', 'shadowed')] [('a', 2), ('b', 1), ('items', 'shadowed')] 3 "
       "1 6 [1, 2] 3"},
      {"{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 3|float }} {{ '2.5'|float }} {{ "
       "2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, 'ceil') }}",
       "43 4 0 3.0 2.5 2.0 3.14 3.0"},
      {"{{ messages[2].tool_calls[0].function.arguments|tojson }} {{ 'é \"q\" \\n'|tojson }} {{ "
       "none|tojson }} {{ [1.0, true]|tojson }}",
       "{\"b\": 1, \"a\": [1.5, null, true]} \"é \\\"q\\\" \\n\" null [1.0, true]"},
      {"{{ messages[2].tool_calls[0].function.arguments|tojson(indent=2) }}\n{{ d|tojson(indent=4, "
       "sort_keys=true) }}\n{{ d|tojson(separators=(',', ':')) }}",
       "{\n  \"b\": 1,\n  \"a\": [\n    1.5,\n    null,\n    true\n  ]\n}\n{\n    \"a\": 2,\n    "
       "\"b\": 1,\n    \"items\": \"shadowed\"\n}\n{\"b\":1,\"a\":2,\"items\":\"shadowed\"}"},
      {"{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ d|attr('b') is defined "
       "}}{{ d|attr('get') is defined }}|{{ '<b>'|safe }}",
       "a\n  b\n\n  c|  a\n  b|FalseTrue|<b>"},
  });
}

TEST(JinjaTest, Tests) {
  ExpectRenders({
      {"{{ n is defined }} {{ missing is defined }} {{ missing is undefined }} {{ none is none }} "
       "{{ n is not none }} {{ s is string }} {{ n is string }}",
       "True False True True True True False"},
      {"{{ d is mapping }} {{ names is mapping }} {{ names is iterable }} {{ s is iterable }} {{ n "
       "is iterable }} {{ names is sequence }} {{ d is sequence }}",
       "True False True True False True True"},
      {"{{ n is number }} {{ f is number }} {{ s is number }} {{ n is integer }} {{ f is float }} "
       "{{ true is boolean }} {{ true is true }} {{ false is false }} {{ 0 is false }}",
       "True True False True True True True True False"},
      {"{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ n is divisibleby(2) }} {{ 'a' "
       "is in 'abc' }} {{ n is eq 7 }} {{ n is ne 7 }} {{ n is gt 5 }} {{ n is lt(5) }} {{ 'abc' "
       "is lower }} {{ 'ABC' is upper }}",
       "True False True False True True False True False True True"},
  });
}

TEST(JinjaTest, Operators) {
  ExpectRenders({
      {"{{ 'ell' in 'hello' }} {{ 'x' not in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in d }} {{ 'z' in "
       "d }} {{ 3 not in [1, 2] }}",
       "True True True True False True"},
      {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 2 >= 2.0 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'b' > 'a' "
       "}} {{ [1, 2] < [1, 3] }} {{ [1, 2] == [1, 2] }} {{ 1 != '1' }}",
       "True False True True True True True True True"},
      {"{{ 1 and 'x' }} {{ 0 and 'x' }} {{ 0 or 'y' }} {{ none or [] }} {{ not none }} {{ not 1 == "
       "2 }} {{ -n }} {{ -2 ** 2 }} {{ 'a' ~ 'b'|upper ~ 'c' }}",
       "x 0 y [] True True -7 4 aBc"},
      {"{{ messages|length - 1 }} {{ 'x' + s|trim + 'y' }} {{ (1 + 2) * 3 }} {{ 1 + true }} {{ 4 / "
       "2 }}",
       "2 xHello Worldy 9 2 2.0"},
  });
}

// Indexes, slices, attribute and item access on dicts (methods first for `.`).
TEST(JinjaTest, SubscriptsAndSlices) {
  ExpectRenders({
      {"{{ names[0] }} {{ names[-1] }} {{ names[1:3] }} {{ names[:-1] }} {{ names[::2] }} {{ "
       "names[::-1] }} {{ names[10:] }} [{{ names[10] }}]",
       "b a ['A', 'c'] ['b', 'A', 'c'] ['b', 'c'] ['a', 'c', 'A', 'b'] [] []"},
      {"{{ text[1] }} {{ text[-1] }} {{ text[:5] }} {{ text[::-1] }} {{ 'abcdef'[4:1:-1] }} {{ "
       "messages.0.role }}",
       "é d héllo dlröw olléh edc system"},
      {"{{ d.b }} {{ d['b'] }} {{ d.items()|list|length }} {{ d['items'] }} {{ d.get('a') }} {{ "
       "d.get('zz') }} {{ d.get('zz', 'fb') }} [{{ d.zz }}] [{{ d['zz'] }}]",
       "1 1 3 shadowed 2 None fb [] []"},
      {"{{ messages[0]['role'] }} {{ messages[1].content }} {{ "
       "messages[2]['tool_calls'][0]['function']['name'] }} {{ messages[0].missing is defined }} "
       "[{{ none.x }}]",
       "system Hi f False []"},
  });
}

TEST(JinjaTest, StringAndDictMethods) {
  ExpectRenders({
      {"{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ "
       "'\\n\\nx\\n'.lstrip('\\n') }}|{{ 'x.'.rstrip('.') }}",
       "Hello World|Hello World  |  Hello World|a|x\n|x"},
      {"{{ 'a,b,,c'.split(',') }} {{ s.split() }} {{ 'a b c'.split(' ', 1) }} {{ "
       "'a</think>b'.split('</think>')[-1] }} {{ 'a b'.split()[0] }}",
       "['a', 'b', '', 'c'] ['Hello', 'World'] ['a', 'b c'] b a"},
      {"{{ s.upper() }} {{ s.lower() }} {{ 'abc'.startswith('ab') }} {{ 'abc'.startswith(('x', "
       "'a')) }} {{ 'abc'.endswith('bc') }} {{ 'abc'.endswith('x') }} {{ 'a-b'.replace('-', '+') "
       "}} {{ 'hi you'.title() }} {{ 'abc'.find('c') }} {{ ', '.join(names) }}",
       "  HELLO WORLD     hello world   True True True False a+b Hi You 2 b, A, c, a"},
      {"{{ d.keys()|list }} {{ d.values()|list }} {% for k, v in d.items() %}{{ k }}:{{ v }} {% "
       "endfor %}",
       "['b', 'a', 'items'] [1, 2, 'shadowed'] b:1 a:2 items:shadowed "},
  });
}

TEST(JinjaTest, CommentsAndRaw) {
  ExpectRenders({
      {"a{# a comment #}b{#- trimmed -#}  c", "abc"},
      {"{% raw %}{{ not rendered }}{% if %}{% endraw %} after", "{{ not rendered }}{% if %} after"},
      {"{% raw -%}\n  {{ x }}  {%- endraw %}\nz", "{{ x }}z"},
  });
}

TEST(JinjaTest, ParseErrorsNameTheProblemAndPosition) {
  SPECDEC_EXPECT_STATUS(ParseTemplate("line one\n{{ x | frobnicate }}"),
                        absl::StatusCode::kInvalidArgument,
                        "line 2, column 8: unknown filter 'frobnicate'");
  SPECDEC_EXPECT_STATUS(ParseTemplate("a\nb\n  {% include 'other.jinja' %}"),
                        absl::StatusCode::kInvalidArgument,
                        "line 3, column 6: unsupported tag 'include'");
  SPECDEC_EXPECT_STATUS(ParseTemplate("{% frob %}"), absl::StatusCode::kInvalidArgument,
                        "line 1, column 4: unknown tag 'frob'");
  SPECDEC_EXPECT_STATUS(ParseTemplate("{{ x is frob }}"), absl::StatusCode::kInvalidArgument,
                        "unknown test 'frob'");
  SPECDEC_EXPECT_STATUS(ParseTemplate("{% if x %}never closed"), absl::StatusCode::kInvalidArgument,
                        "expected 'elif' or 'else' or 'endif'");
  SPECDEC_EXPECT_STATUS(ParseTemplate("{% endfor %}"), absl::StatusCode::kInvalidArgument,
                        "unexpected tag 'endfor'");
  SPECDEC_EXPECT_STATUS(ParseTemplate("{{ 'open }}"), absl::StatusCode::kInvalidArgument,
                        "line 1, column 4: unterminated string literal");
  SPECDEC_EXPECT_STATUS(ParseTemplate("{{ 1 + }}"), absl::StatusCode::kInvalidArgument,
                        "unexpected '}}'");
  SPECDEC_EXPECT_STATUS(ParseTemplate("{{ x"), absl::StatusCode::kInvalidArgument, "unclosed {{");
  SPECDEC_EXPECT_STATUS(ParseTemplate("{% break %}"), absl::StatusCode::kInvalidArgument,
                        "'break' outside a loop");
  SPECDEC_EXPECT_STATUS(ParseTemplate("{% for x in y recursive %}{% endfor %}"),
                        absl::StatusCode::kInvalidArgument, "recursive");
}

TEST(JinjaTest, RenderErrorsNameTheLine) {
  SPECDEC_EXPECT_STATUS(Render("ok\n{{ nope + 1 }}"), absl::StatusCode::kInvalidArgument,
                        "line 2: 'nope' is undefined");
  SPECDEC_EXPECT_STATUS(Render("{{ nope.attr }}"), absl::StatusCode::kInvalidArgument,
                        "'nope' is undefined");
  SPECDEC_EXPECT_STATUS(Render("\n\n{{ 'a' + 1 }}"), absl::StatusCode::kInvalidArgument,
                        "line 3: can only concatenate str");
  SPECDEC_EXPECT_STATUS(Render("{{ 1 // 0 }}"), absl::StatusCode::kInvalidArgument,
                        "division by zero");
  SPECDEC_EXPECT_STATUS(Render("{% for a, b in [[1, 2, 3]] %}{% endfor %}"),
                        absl::StatusCode::kInvalidArgument, "too many values to unpack");
  SPECDEC_EXPECT_STATUS(Render("{% for x in none %}{% endfor %}"),
                        absl::StatusCode::kInvalidArgument, "'NoneType' object is not iterable");
  SPECDEC_EXPECT_STATUS(Render("{{ missing|tojson }}"), absl::StatusCode::kInvalidArgument,
                        "filter 'tojson': Object of type Undefined is not JSON serializable");
  SPECDEC_EXPECT_STATUS(Render("{% set n.x = 1 %}"), absl::StatusCode::kInvalidArgument,
                        "non-namespace");
  SPECDEC_EXPECT_STATUS(Render("{{ 'abc'() }}"), absl::StatusCode::kInvalidArgument,
                        "'str' object is not callable");
  SPECDEC_EXPECT_STATUS(Render("{{ '%s' % 1 }}"), absl::StatusCode::kInvalidArgument,
                        "string formatting with % is not supported");
  SPECDEC_EXPECT_STATUS(Render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
                        absl::StatusCode::kInvalidArgument, "nested too deeply");
}

TEST(JinjaTest, RaisedErrorsPassThroughUnchanged) {
  const absl::StatusOr<std::string> got = Render(
      "{% if messages|length > 1 %}\n{{ raise_exception('Only one message, please.') }}"
      "{% endif %}");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(), "Only one message, please.");
}

TEST(JinjaTest, LexerAppliesWhitespaceControlAndPositions) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::vector<Token> tokens,
                               Tokenize("a \n  {%- if x -%}\n b{# c #}\n{{ 'q' }}\n"));
  ASSERT_EQ(tokens.size(), 10u);
  EXPECT_EQ(tokens[0].kind, TokenKind::kText);
  EXPECT_EQ(tokens[0].value, "a");
  EXPECT_EQ(tokens[1].kind, TokenKind::kBlockBegin);
  EXPECT_EQ(tokens[2].value, "if");
  EXPECT_EQ(tokens[2].line, 2);
  EXPECT_EQ(tokens[2].column, 7);
  EXPECT_EQ(tokens[4].kind, TokenKind::kBlockEnd);
  EXPECT_EQ(tokens[5].value, "b");  // "-%}" ate "\n ", trim_blocks ate the comment's newline.
  EXPECT_EQ(tokens[6].kind, TokenKind::kVariableBegin);
  EXPECT_EQ(tokens[7].kind, TokenKind::kString);
  EXPECT_EQ(tokens[7].value, "q");
  // The final newline is dropped as Jinja drops it, so no text follows "}}".
  EXPECT_EQ(tokens[8].kind, TokenKind::kVariableEnd);
  EXPECT_EQ(tokens[9].kind, TokenKind::kEnd);
}

TEST(JinjaTest, PythonFloatRepr) {
  EXPECT_EQ(PyFloatRepr(1.0), "1.0");
  EXPECT_EQ(PyFloatRepr(-0.0), "-0.0");
  EXPECT_EQ(PyFloatRepr(0.1), "0.1");
  EXPECT_EQ(PyFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PyFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(PyFloatRepr(1.5e-5), "1.5e-05");
  EXPECT_EQ(PyFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PyFloatRepr(123456.789), "123456.789");
  EXPECT_EQ(PyFloatRepr(1.0 / 0.0), "inf");
}

TEST(JinjaTest, JsonKeepsKeyOrderOfOrderedJson) {
  const Value v = FromJson(nlohmann::ordered_json::parse(R"({"z": 1, "a": [true, null, 2.0]})"));
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string one_line, ToJson(v, JsonFormat()));
  EXPECT_EQ(one_line, R"({"z": 1, "a": [true, null, 2.0]})");
  const Value sorted = FromJson(nlohmann::json::parse(R"({"z": 1, "a": 2})"));
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string sorted_text, ToJson(sorted, JsonFormat()));
  EXPECT_EQ(sorted_text, R"({"a": 2, "z": 1})");
  JsonFormat indented;
  indented.indent = 2;
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string pretty, ToJson(v, indented));
  EXPECT_EQ(pretty, "{\n  \"z\": 1,\n  \"a\": [\n    true,\n    null,\n    2.0\n  ]\n}");
}

TEST(JinjaTest, OneParsedTemplateRendersWithDifferentGlobals) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto tpl,
                               ParseTemplate("{{ greeting }}, {{ name|default('you') }}"));
  ValueDict first;
  first.Set("greeting", Value("Hi"));
  ValueDict second = first;
  second.Set("name", Value("Ann"));
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string a, RenderTemplate(*tpl, first));
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string b, RenderTemplate(*tpl, second));
  EXPECT_EQ(a, "Hi, you");
  EXPECT_EQ(b, "Hi, Ann");
}

}  // namespace
}  // namespace specdec::chat::jinja

namespace specdec::chat::jinja {
namespace {

std::string Repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// A fuzzer found that 10,000 unary '+' overflowed the parser's stack; every way of nesting deep
// is now refused with a status, and real templates stay far inside the bounds.
TEST(JinjaLimitsTest, DeepNestingIsRefusedNotACrash) {
  const std::vector<std::string> deep = {
      "{{ " + Repeat("+", 10000) + "x }}",
      "{{ " + Repeat("(", 10000) + "x" + Repeat(")", 10000) + " }}",
      "{{ " + Repeat("[", 10000) + Repeat("]", 10000) + " }}",
      "{{ " + Repeat("not ", 10000) + "x }}",
      "{{ x" + Repeat(" + x", 10000) + " }}",
      "{{ x" + Repeat("|lower", 10000) + " }}",
      "{{ x" + Repeat(".a", 10000) + " }}",
      Repeat("{% if x %}", 10000) + Repeat("{% endif %}", 10000),
      "{{ " + Repeat("x if y else ", 10000) + "z }}",
  };
  for (const std::string& source : deep) {
    auto tpl = ParseTemplate(source);
    ASSERT_FALSE(tpl.ok()) << source.substr(0, 40);
    EXPECT_EQ(tpl.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(tpl.status().message(), "deeper than") ||
                absl::StrContains(tpl.status().message(), "in a row"))
        << tpl.status();
  }
  // Within the bounds: 30 brackets, a chain of 60 operators.
  EXPECT_TRUE(ParseTemplate("{{ " + Repeat("(", 30) + "1" + Repeat(")", 30) + " }}").ok());
  EXPECT_TRUE(ParseTemplate("{{ 1" + Repeat(" + 1", 60) + " }}").ok());
}

}  // namespace
}  // namespace specdec::chat::jinja
