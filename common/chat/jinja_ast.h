// Syntax tree of a parsed Jinja template (jinja_parser.h builds it, jinja_render.h evaluates it).
// Immutable once built, so one tree may be rendered by many threads at once.
#ifndef SPECDEC_COMMON_CHAT_JINJA_AST_H_
#define SPECDEC_COMMON_CHAT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/chat/jinja_value.h"

namespace specdec::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using KeywordArgs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // [args...]
    kTuple,      // (args...)
    kDict,       // {args[0]: args[1], args[2]: args[3], ...}
    kAttribute,  // args[0].name
    kItem,       // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]], absent parts null
    kCall,       // args[0](args[1:], keywords)
    kFilter,     // args[0] | name(args[1:], keywords)
    kTest,       // args[0] is [not] name(args[1:], keywords)
    kUnary,      // name ("-", "+", "not") args[0]
    kBinary,     // args[0] name args[1]: + - * / // % ** ~ and or
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
    kCondition,  // args[0] if args[1] else args[2] (args[2] null: Undefined)
  };

  Kind kind = Kind::kLiteral;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  KeywordArgs keywords;
  std::vector<std::string> ops;
  bool negated = false;  // kTest: `is not`.
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,        // text
    kOutput,      // {{ expr }}
    kIf,          // branches (condition, body); else_body
    kFor,         // for targets in expr [if condition]: body; else_body
    kSet,         // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,    // set targets[0]: body; endset
    kMacro,       // macro name(params): body; endmacro
    kBreak,       // break
    kContinue,    // continue
    kWith,        // with params: body; endwith
    kGeneration,  // generation: body; endgeneration (transformers' marker, renders the body)
  };

  Kind kind = Kind::kText;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string attribute;
  std::string name;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  // Macro parameters (default may be null) or `with` assignments.
  KeywordArgs params;
};

struct Template {
  Body body;
};

}  // namespace specdec::chat::jinja

#endif  // SPECDEC_COMMON_CHAT_JINJA_AST_H_
