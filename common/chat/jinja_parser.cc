// Recursive-descent parser of the Jinja subset, following Jinja's grammar and precedence:
// conditional < or < and < not < comparisons < + - < ~ < * / // % < ** < unary - + < postfix
// (.attr, [item], call) and filters / tests.
#include "common/chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/chat/jinja_filters.h"
#include "common/chat/jinja_is_tests.h"
#include "common/chat/jinja_lexer.h"
#include "common/chat/jinja_strings.h"
#include "common/util/status_macros.h"

namespace specdec::chat::jinja {
namespace {

using EndTags = std::initializer_list<std::string_view>;

// Tags Jinja has that this subset refuses.
constexpr std::string_view kUnsupportedTags[] = {
    "include", "import", "from", "extends", "block", "call", "filter", "autoescape", "do", "trans"};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<std::unique_ptr<const Template>> Run() {
    auto tpl = std::make_unique<Template>();
    ASSIGN_OR_RETURN(tpl->body, ParseBody({}));
    if (Peek().kind != TokenKind::kEnd) {
      return Error(Peek(1), absl::StrCat("unexpected tag '", Peek(1).value, "'"));
    }
    return std::unique_ptr<const Template>(std::move(tpl));
  }

 private:
  // ---- Limits ----
  // Bounds on what one template may nest, so that parsing, rendering and freeing the syntax tree
  // recurse a bounded depth whatever the source: brackets, unary operators, conditional
  // expressions and blocks nest at most kMaxNesting levels; one chain of binary operators,
  // postfixes or filters holds at most kMaxChain of them; an expression's tree is at most
  // kMaxExprDepth deep.
  static constexpr int kMaxNesting = 32;
  static constexpr int kMaxChain = 64;
  static constexpr int kMaxExprDepth = 256;

  // Counts one open recursive construct while it lives.
  class Nested {
   public:
    explicit Nested(Parser& p) : p_(p) { ++p_.nesting_; }
    ~Nested() { --p_.nesting_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Parser& p_;
  };
  absl::Status CheckNesting() {
    if (nesting_ <= kMaxNesting) return absl::OkStatus();
    return Error(Peek(), absl::StrCat("nested deeper than ", kMaxNesting, " levels"));
  }
  absl::Status CheckChain(int links, const Token& at) {
    if (links <= kMaxChain) return absl::OkStatus();
    return Error(
        at, absl::StrCat("more than ", kMaxChain, " operators, filters or postfixes in a row"));
  }
  // The depth of `root`'s tree, walked without recursion.
  absl::Status CheckDepth(const Expr& root) {
    std::vector<std::pair<const Expr*, int>> stack = {{&root, 1}};
    while (!stack.empty()) {
      auto [e, depth] = stack.back();
      stack.pop_back();
      if (depth > kMaxExprDepth) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", e->line, ": expression nested deeper than ", kMaxExprDepth, " levels"));
      }
      for (const ExprPtr& a : e->args) {
        if (a) stack.push_back({a.get(), depth + 1});
      }
      for (const auto& [name, a] : e->keywords) {
        if (a) stack.push_back({a.get(), depth + 1});
      }
    }
    return absl::OkStatus();
  }

  // ---- Token helpers ----
  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool AtOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOperator && Peek(ahead).value == op;
  }
  bool AtName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).value == name;
  }
  bool SkipOp(std::string_view op) { return AtOp(op) && (Next(), true); }
  bool SkipName(std::string_view name) { return AtName(name) && (Next(), true); }

  absl::Status Expect(TokenKind kind, std::string_view op, std::string_view what) {
    const Token& t = Peek();
    if (t.kind != kind || (!op.empty() && t.value != op)) {
      return Error(t, absl::StrCat("expected ", AV(what), ", got ", Describe(t)));
    }
    Next();
    return absl::OkStatus();
  }
  absl::Status ExpectOp(std::string_view op) {
    return Expect(TokenKind::kOperator, op, absl::StrCat("'", AV(op), "'"));
  }
  absl::Status ExpectBlockEnd() { return Expect(TokenKind::kBlockEnd, "", "'%}'"); }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().kind != TokenKind::kName) {
      return Error(Peek(), absl::StrCat("expected a name, got ", Describe(Peek())));
    }
    return Next().value;
  }

  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEnd:
        return "end of template";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kVariableEnd:
        return "'}}'";
      case TokenKind::kString:
        return "a string";
      default:
        return absl::StrCat("'", t.value, "'");
    }
  }

  static absl::Status Error(const Token& at, std::string_view message) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", at.line, ", column ", at.column, ": ", AV(message)));
  }

  template <typename Node>
  static std::unique_ptr<Node> Make(typename Node::Kind kind, const Token& at) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = at.line;
    node->column = at.column;
    return node;
  }

  // ---- Statements ----

  // Parses until end of input or a block tag named in `end_tags`, which is left unconsumed.
  absl::StatusOr<Body> ParseBody(EndTags end_tags) {
    Nested nested(*this);
    RETURN_IF_ERROR(CheckNesting());
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.kind == TokenKind::kEnd) {
        if (end_tags.size() == 0) return body;
        std::string expected;
        for (std::string_view tag : end_tags) {
          absl::StrAppend(&expected, expected.empty() ? "" : " or ", "'", AV(tag), "'");
        }
        return Error(t, absl::StrCat("unexpected end of template, expected ", expected));
      }
      if (t.kind == TokenKind::kText) {
        auto stmt = Make<Stmt>(Stmt::Kind::kText, Next());
        stmt->text = t.value;
        body.push_back(std::move(stmt));
      } else if (t.kind == TokenKind::kVariableBegin) {
        auto stmt = Make<Stmt>(Stmt::Kind::kOutput, Next());
        ASSIGN_OR_RETURN(stmt->expr, ParseExpression());
        RETURN_IF_ERROR(Expect(TokenKind::kVariableEnd, "", "'}}'"));
        body.push_back(std::move(stmt));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token& tag = Peek(1);
        if (tag.kind == TokenKind::kName &&
            std::find(end_tags.begin(), end_tags.end(), tag.value) != end_tags.end()) {
          return body;
        }
        if (end_tags.size() == 0 && IsEndTag(tag)) return body;
        Next();
        ASSIGN_OR_RETURN(StmtPtr stmt, ParseTag());
        body.push_back(std::move(stmt));
      } else {
        return Error(t, absl::StrCat("unexpected ", Describe(t)));
      }
    }
  }

  static bool IsEndTag(const Token& t) {
    return t.kind == TokenKind::kName &&
           (t.value.rfind("end", 0) == 0 || t.value == "elif" || t.value == "else");
  }

  // Consumes `{% name %}`.
  absl::Status ConsumeTag(std::string_view name) {
    RETURN_IF_ERROR(Expect(TokenKind::kBlockBegin, "", "'{%'"));
    RETURN_IF_ERROR(Expect(TokenKind::kName, name, absl::StrCat("'", AV(name), "'")));
    return ExpectBlockEnd();
  }

  // After `{%`: the tag's name and the rest of the statement.
  absl::StatusOr<StmtPtr> ParseTag() {
    const Token& tag = Peek();
    if (tag.kind != TokenKind::kName) {
      return Error(tag, absl::StrCat("expected a tag name, got ", Describe(tag)));
    }
    const std::string& name = tag.value;
    if (name == "if") return ParseIf();
    if (name == "for") return ParseFor();
    if (name == "set") return ParseSet();
    if (name == "macro") return ParseMacro();
    if (name == "with") return ParseWith();
    if (name == "generation") return ParseWrapper(Stmt::Kind::kGeneration, "endgeneration");
    if (name == "break" || name == "continue") return ParseLoopControl();
    for (std::string_view unsupported : kUnsupportedTags) {
      if (name == unsupported) {
        return Error(tag, absl::StrCat("unsupported tag '", name, "'"));
      }
    }
    if (IsEndTag(tag)) return Error(tag, absl::StrCat("unexpected tag '", name, "'"));
    return Error(tag, absl::StrCat("unknown tag '", name, "'"));
  }

  absl::StatusOr<StmtPtr> ParseIf() {
    auto stmt = Make<Stmt>(Stmt::Kind::kIf, Next());
    while (true) {
      ASSIGN_OR_RETURN(ExprPtr condition, ParseExpression());
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}));
      stmt->branches.emplace_back(std::move(condition), std::move(body));
      Next();  // {%
      const std::string tag = Next().value;
      if (tag == "elif") continue;
      if (tag == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(stmt->else_body, ParseBody({"endif"}));
        RETURN_IF_ERROR(ConsumeTag("endif"));
      } else {
        RETURN_IF_ERROR(ExpectBlockEnd());
      }
      return stmt;
    }
  }

  absl::StatusOr<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> targets;
    do {
      ASSIGN_OR_RETURN(std::string target, ExpectName());
      targets.push_back(std::move(target));
    } while (SkipOp(","));
    return targets;
  }

  absl::StatusOr<StmtPtr> ParseFor() {
    auto stmt = Make<Stmt>(Stmt::Kind::kFor, Next());
    ASSIGN_OR_RETURN(stmt->targets, ParseTargets());
    RETURN_IF_ERROR(Expect(TokenKind::kName, "in", "'in'"));
    ASSIGN_OR_RETURN(stmt->expr, ParseExpression(/*with_condition=*/false));
    if (SkipName("if")) {
      ASSIGN_OR_RETURN(stmt->condition, ParseExpression());
    }
    if (AtName("recursive")) return Error(Peek(), "unsupported: recursive loops");
    RETURN_IF_ERROR(ExpectBlockEnd());
    ++loop_depth_;
    ASSIGN_OR_RETURN(stmt->body, ParseBody({"else", "endfor"}));
    --loop_depth_;
    if (AtName("else", 1)) {
      RETURN_IF_ERROR(ConsumeTag("else"));
      ASSIGN_OR_RETURN(stmt->else_body, ParseBody({"endfor"}));
    }
    RETURN_IF_ERROR(ConsumeTag("endfor"));
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseSet() {
    auto stmt = Make<Stmt>(Stmt::Kind::kSet, Next());
    ASSIGN_OR_RETURN(stmt->targets, ParseTargets());
    if (stmt->targets.size() == 1 && SkipOp(".")) {
      ASSIGN_OR_RETURN(stmt->attribute, ExpectName());
    }
    if (SkipOp("=")) {
      ASSIGN_OR_RETURN(stmt->expr, ParseExpression());
      RETURN_IF_ERROR(ExpectBlockEnd());
      return stmt;
    }
    if (stmt->targets.size() != 1 || !stmt->attribute.empty()) {
      return Error(Peek(), absl::StrCat("expected '=', got ", Describe(Peek())));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    stmt->kind = Stmt::Kind::kSetBlock;
    ASSIGN_OR_RETURN(stmt->body, ParseBody({"endset"}));
    RETURN_IF_ERROR(ConsumeTag("endset"));
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseMacro() {
    auto stmt = Make<Stmt>(Stmt::Kind::kMacro, Next());
    ASSIGN_OR_RETURN(stmt->name, ExpectName());
    RETURN_IF_ERROR(ExpectOp("("));
    while (!SkipOp(")")) {
      ASSIGN_OR_RETURN(std::string param, ExpectName());
      ExprPtr default_value;
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(default_value, ParseExpression());
      }
      stmt->params.emplace_back(std::move(param), std::move(default_value));
      if (!AtOp(")")) RETURN_IF_ERROR(ExpectOp(","));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    const int saved_loop_depth = std::exchange(loop_depth_, 0);
    ASSIGN_OR_RETURN(stmt->body, ParseBody({"endmacro"}));
    loop_depth_ = saved_loop_depth;
    RETURN_IF_ERROR(ConsumeTag("endmacro"));
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseWith() {
    auto stmt = Make<Stmt>(Stmt::Kind::kWith, Next());
    while (Peek().kind != TokenKind::kBlockEnd) {
      if (!stmt->params.empty()) RETURN_IF_ERROR(ExpectOp(","));
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      RETURN_IF_ERROR(ExpectOp("="));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      stmt->params.emplace_back(std::move(name), std::move(value));
    }
    Next();
    ASSIGN_OR_RETURN(stmt->body, ParseBody({"endwith"}));
    RETURN_IF_ERROR(ConsumeTag("endwith"));
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseWrapper(Stmt::Kind kind, std::string_view end_tag) {
    auto stmt = Make<Stmt>(kind, Next());
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(stmt->body, ParseBody({end_tag}));
    RETURN_IF_ERROR(ConsumeTag(end_tag));
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseLoopControl() {
    const Token& tag = Next();
    if (loop_depth_ == 0) return Error(tag, absl::StrCat("'", tag.value, "' outside a loop"));
    auto stmt = Make<Stmt>(tag.value == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, tag);
    RETURN_IF_ERROR(ExpectBlockEnd());
    return stmt;
  }

  // ---- Expressions ----

  // An expression; the outermost one of a tag has its tree's depth checked.
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condition = true) {
    const bool outermost = expressions_open_++ == 0;
    absl::StatusOr<ExprPtr> expr = ParseNestedExpression(with_condition);
    --expressions_open_;
    if (outermost && expr.ok() && *expr) RETURN_IF_ERROR(CheckDepth(**expr));
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseNestedExpression(bool with_condition) {
    Nested nested(*this);
    RETURN_IF_ERROR(CheckNesting());
    if (!with_condition) return ParseOr();
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (AtName("if")) {
      auto node = Make<Expr>(Expr::Kind::kCondition, Next());
      ASSIGN_OR_RETURN(ExprPtr condition, ParseOr());
      ExprPtr otherwise;
      if (SkipName("else")) {
        ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      node->args.push_back(std::move(expr));
      node->args.push_back(std::move(condition));
      node->args.push_back(std::move(otherwise));
      expr = std::move(node);
    }
    return expr;
  }

  static ExprPtr MakeBinary(const Token& at, std::string op, ExprPtr left, ExprPtr right) {
    auto node = Make<Expr>(Expr::Kind::kBinary, at);
    node->name = std::move(op);
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    return node;
  }

  // Left-associative binary operators `ops` over operands parsed by `operand`.
  template <typename Operand>
  absl::StatusOr<ExprPtr> ParseLeftAssoc(Operand operand,
                                         std::initializer_list<std::string_view> ops,
                                         bool name_ops) {
    ASSIGN_OR_RETURN(ExprPtr left, (this->*operand)());
    for (int links = 1;; ++links) {
      const Token& t = Peek();
      const bool match = t.kind == (name_ops ? TokenKind::kName : TokenKind::kOperator) &&
                         std::find(ops.begin(), ops.end(), t.value) != ops.end();
      if (!match) return left;
      RETURN_IF_ERROR(CheckChain(links, t));
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, (this->*operand)());
      left = MakeBinary(t, t.value, std::move(left), std::move(right));
    }
  }

  absl::StatusOr<ExprPtr> ParseOr() { return ParseLeftAssoc(&Parser::ParseAnd, {"or"}, true); }
  absl::StatusOr<ExprPtr> ParseAnd() { return ParseLeftAssoc(&Parser::ParseNot, {"and"}, true); }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (!AtName("not")) return ParseCompare();
    Nested nested(*this);
    RETURN_IF_ERROR(CheckNesting());
    auto node = Make<Expr>(Expr::Kind::kUnary, Next());
    node->name = "not";
    ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    node->args.push_back(std::move(operand));
    return node;
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const Token& start = Peek();
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    auto node = Make<Expr>(Expr::Kind::kCompare, start);
    node->args.push_back(std::move(first));
    static constexpr std::string_view kOps[] = {"==", "!=", "<", "<=", ">", ">="};
    while (true) {
      const Token& t = Peek();
      if (t.kind == TokenKind::kOperator &&
          std::find(std::begin(kOps), std::end(kOps), t.value) != std::end(kOps)) {
        node->ops.push_back(Next().value);
      } else if (SkipName("in")) {
        node->ops.push_back("in");
      } else if (AtName("not") && AtName("in", 1)) {
        Next();
        Next();
        node->ops.push_back("notin");
      } else {
        break;
      }
      ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      node->args.push_back(std::move(operand));
    }
    if (node->ops.empty()) return std::move(node->args[0]);
    return node;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    return ParseLeftAssoc(&Parser::ParseConcat, {"+", "-"}, false);
  }
  absl::StatusOr<ExprPtr> ParseConcat() {
    return ParseLeftAssoc(&Parser::ParseMath2, {"~"}, false);
  }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return ParseLeftAssoc(&Parser::ParsePow, {"*", "/", "//", "%"}, false);
  }
  absl::StatusOr<ExprPtr> ParsePow() {
    return ParseLeftAssoc(&Parser::ParseUnaryWithFilter, {"**"}, false);
  }
  absl::StatusOr<ExprPtr> ParseUnaryWithFilter() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    ExprPtr node;
    if (AtOp("-") || AtOp("+")) {
      Nested nested(*this);
      RETURN_IF_ERROR(CheckNesting());
      node = Make<Expr>(Expr::Kind::kUnary, Peek());
      node->name = Next().value;
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->args.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (!with_filter) return node;
    return ParseFilterExpr(std::move(node));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    switch (t.kind) {
      case TokenKind::kName:
        return ParseName();
      case TokenKind::kString: {
        auto node = Make<Expr>(Expr::Kind::kLiteral, t);
        std::string text;
        while (Peek().kind == TokenKind::kString) text += Next().value;
        node->literal = Value(std::move(text));
        return node;
      }
      case TokenKind::kInteger:
      case TokenKind::kFloat: {
        auto node = Make<Expr>(Expr::Kind::kLiteral, Next());
        node->literal = t.kind == TokenKind::kInteger ? Value(t.int_value) : Value(t.float_value);
        return node;
      }
      default:
        break;
    }
    if (AtOp("(")) return ParseParenthesized();
    if (AtOp("[")) return ParseList();
    if (AtOp("{")) return ParseDict();
    return Error(t, absl::StrCat("unexpected ", Describe(t)));
  }

  absl::StatusOr<ExprPtr> ParseName() {
    const Token& t = Next();
    auto node = Make<Expr>(Expr::Kind::kLiteral, t);
    if (t.value == "true" || t.value == "True") {
      node->literal = Value(true);
    } else if (t.value == "false" || t.value == "False") {
      node->literal = Value(false);
    } else if (t.value == "none" || t.value == "None") {
      node->literal = Value::None();
    } else {
      node->kind = Expr::Kind::kName;
      node->name = t.value;
    }
    return node;
  }

  // `(expr)`, or a tuple `()`, `(a,)`, `(a, b)`.
  absl::StatusOr<ExprPtr> ParseParenthesized() {
    const Token& open = Next();
    if (SkipOp(")")) return Make<Expr>(Expr::Kind::kTuple, open);
    ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (SkipOp(")")) return first;
    auto node = Make<Expr>(Expr::Kind::kTuple, open);
    node->args.push_back(std::move(first));
    while (SkipOp(",") && !AtOp(")")) {
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      node->args.push_back(std::move(item));
    }
    RETURN_IF_ERROR(ExpectOp(")"));
    return node;
  }

  absl::StatusOr<ExprPtr> ParseList() {
    auto node = Make<Expr>(Expr::Kind::kList, Next());
    while (!SkipOp("]")) {
      if (!node->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (SkipOp("]")) break;
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      node->args.push_back(std::move(item));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseDict() {
    auto node = Make<Expr>(Expr::Kind::kDict, Next());
    while (!SkipOp("}")) {
      if (!node->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (SkipOp("}")) break;
      ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
      RETURN_IF_ERROR(ExpectOp(":"));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      node->args.push_back(std::move(key));
      node->args.push_back(std::move(value));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    for (int links = 1;; ++links) {
      if (AtOp(".") || AtOp("[") || AtOp("(")) RETURN_IF_ERROR(CheckChain(links, Peek()));
      if (AtOp(".")) {
        ASSIGN_OR_RETURN(node, ParseDot(std::move(node)));
      } else if (AtOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (AtOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  // `.name` is an attribute, `.0` an item.
  absl::StatusOr<ExprPtr> ParseDot(ExprPtr target) {
    const Token& dot = Next();
    const Token& t = Peek();
    ExprPtr node;
    if (t.kind == TokenKind::kName) {
      node = Make<Expr>(Expr::Kind::kAttribute, dot);
      node->name = Next().value;
      node->args.push_back(std::move(target));
    } else if (t.kind == TokenKind::kInteger) {
      node = Make<Expr>(Expr::Kind::kItem, dot);
      auto index = Make<Expr>(Expr::Kind::kLiteral, Next());
      index->literal = Value(t.int_value);
      node->args.push_back(std::move(target));
      node->args.push_back(std::move(index));
    } else {
      return Error(t, absl::StrCat("expected an attribute name, got ", Describe(t)));
    }
    return node;
  }

  // `[index]` or a slice `[start:stop:step]` with any part left out.
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr target) {
    const Token& open = Next();
    ExprPtr parts[3];
    if (!AtOp(":")) {
      ASSIGN_OR_RETURN(parts[0], ParseExpression());
      if (SkipOp("]")) {
        auto node = Make<Expr>(Expr::Kind::kItem, open);
        node->args.push_back(std::move(target));
        node->args.push_back(std::move(parts[0]));
        return node;
      }
    }
    RETURN_IF_ERROR(ExpectOp(":"));
    for (int part = 1; part <= 2; ++part) {
      if (!AtOp(":") && !AtOp("]")) {
        ASSIGN_OR_RETURN(parts[part], ParseExpression());
      }
      if (part == 1 && !SkipOp(":")) break;
    }
    RETURN_IF_ERROR(ExpectOp("]"));
    auto node = Make<Expr>(Expr::Kind::kSlice, open);
    node->args.push_back(std::move(target));
    for (ExprPtr& part : parts) node->args.push_back(std::move(part));
    return node;
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    auto node = Make<Expr>(Expr::Kind::kCall, Peek());
    node->args.push_back(std::move(callee));
    RETURN_IF_ERROR(ParseCallArgs(*node));
    return node;
  }

  // `(positional..., name=value...)` into node.args (after what is there) and node.keywords.
  absl::Status ParseCallArgs(Expr& node) {
    RETURN_IF_ERROR(ExpectOp("("));
    while (!SkipOp(")")) {
      if (Peek().kind == TokenKind::kName && AtOp("=", 1)) {
        std::string name = Next().value;
        Next();
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        node.keywords.emplace_back(std::move(name), std::move(value));
      } else {
        if (!node.keywords.empty()) return Error(Peek(), "positional argument after keyword");
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        node.args.push_back(std::move(value));
      }
      if (!AtOp(")")) RETURN_IF_ERROR(ExpectOp(","));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    for (int links = 1;; ++links) {
      if (AtOp("|") || AtName("is") || AtOp("(")) RETURN_IF_ERROR(CheckChain(links, Peek()));
      if (AtOp("|")) {
        ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
      } else if (AtName("is")) {
        ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (AtOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr input) {
    Next();  // |
    const Token& name = Peek();
    ASSIGN_OR_RETURN(std::string filter, ExpectName());
    if (!IsKnownFilter(filter)) return Error(name, absl::StrCat("unknown filter '", filter, "'"));
    auto node = Make<Expr>(Expr::Kind::kFilter, name);
    node->name = std::move(filter);
    node->args.push_back(std::move(input));
    if (AtOp("(")) RETURN_IF_ERROR(ParseCallArgs(*node));
    return node;
  }

  // `is [not] name`, with arguments in parentheses or one argument without them.
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr subject) {
    Next();  // is
    const bool negated = SkipName("not");
    const Token& name = Peek();
    ASSIGN_OR_RETURN(std::string test, ExpectName());
    if (!IsKnownTest(test)) return Error(name, absl::StrCat("unknown test '", test, "'"));
    auto node = Make<Expr>(Expr::Kind::kTest, name);
    node->name = std::move(test);
    node->negated = negated;
    node->args.push_back(std::move(subject));
    const Token& t = Peek();
    if (AtOp("(")) {
      RETURN_IF_ERROR(ParseCallArgs(*node));
    } else if ((t.kind == TokenKind::kName && t.value != "else" && t.value != "or" &&
                t.value != "and") ||
               t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
               t.kind == TokenKind::kFloat || AtOp("[") || AtOp("{")) {
      ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      node->args.push_back(std::move(arg));
    }
    return node;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;           // recursive constructs open now (Nested)
  int expressions_open_ = 0;  // ParseExpression calls open now
};

}  // namespace

absl::StatusOr<std::unique_ptr<const Template>> ParseTemplate(std::string_view source) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  return Parser(std::move(tokens)).Run();
}

}  // namespace specdec::chat::jinja
