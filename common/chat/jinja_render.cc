// Tree-walking evaluator of the Jinja subset.
#include "common/chat/jinja_render.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/chat/jinja_filters.h"
#include "common/chat/jinja_is_tests.h"
#include "common/chat/jinja_ops.h"
#include "common/chat/jinja_strings.h"
#include "common/util/status_macros.h"

namespace specdec::chat::jinja {
namespace {

// Payload marking an error that already names its position (or must not get one).
constexpr char kPositionedPayload[] = "specdec.chat.jinja/positioned";
constexpr int kMaxMacroDepth = 64;
constexpr int64_t kMaxRange = 100000;  // As Jinja's sandbox.

absl::Status Positioned(absl::Status status, int line) {
  if (status.ok() || status.GetPayload(kPositionedPayload).has_value()) return status;
  absl::Status out(status.code(), absl::StrCat("line ", line, ": ", status.message()));
  out.SetPayload(kPositionedPayload, absl::Cord());
  return out;
}

template <typename T>
absl::StatusOr<T> Positioned(absl::StatusOr<T> result, int line) {
  if (result.ok()) return result;
  return Positioned(std::move(result).status(), line);
}

// Jinja's global functions.
absl::StatusOr<Value> Namespace(const CallArgs& args) {
  ValueDict attributes;
  for (const Value& v : args.positional) {
    if (!v.is_dict()) return absl::InvalidArgumentError("namespace() takes a dict or keywords");
    for (const auto& [key, value] : v.dict().entries()) attributes.Set(key, value);
  }
  for (const auto& [key, value] : args.keyword) attributes.Set(key, value);
  return Value::Namespace(std::move(attributes));
}

absl::StatusOr<Value> Range(const CallArgs& args) {
  ASSIGN_OR_RETURN(auto b, BindArgs(args, "range", {"start", "stop", "step"}));
  for (const Value* v : b) {
    if (v != nullptr && !v->is_integer()) return absl::InvalidArgumentError("range() takes ints");
  }
  if (b[0] == nullptr) return absl::InvalidArgumentError("range() needs an argument");
  const int64_t start = b[1] != nullptr ? b[0]->int_value() : 0;
  const int64_t stop = b[1] != nullptr ? b[1]->int_value() : b[0]->int_value();
  const int64_t step = b[2] != nullptr ? b[2]->int_value() : 1;
  if (step == 0) return absl::InvalidArgumentError("range() step must not be zero");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) == kMaxRange) {
      return absl::InvalidArgumentError("range() too big");
    }
    out.emplace_back(i);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Dict(const CallArgs& args) {
  RETURN_IF_ERROR(BindArgs(args, "dict", {}).status());
  ValueDict dict;
  for (const auto& [key, value] : args.keyword) dict.Set(key, value);
  return Value::Dict(std::move(dict));
}

class Renderer {
 public:
  explicit Renderer(const ValueDict& globals) {
    frames_.push_back(Frame{globals, -1});
    ValueDict& builtins = frames_[0].vars;
    if (builtins.Find("namespace") == nullptr)
      builtins.Set("namespace", Value::Callable("namespace", Namespace));
    if (builtins.Find("range") == nullptr) builtins.Set("range", Value::Callable("range", Range));
    if (builtins.Find("dict") == nullptr) builtins.Set("dict", Value::Callable("dict", Dict));
    frames_.push_back(Frame{ValueDict(), 0});
    current_ = 1;
  }

  absl::Status RenderBody(const Body& body, std::string& out) {
    for (const StmtPtr& stmt : body) {
      RETURN_IF_ERROR(RenderStmt(*stmt, out));
      if (jump_ != Jump::kNone) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

 private:
  enum class Jump { kNone, kBreak, kContinue };
  struct Frame {
    ValueDict vars;
    int parent;
  };

  // Pushes a frame on construction and pops it on destruction.
  class ScopedFrame {
   public:
    ScopedFrame(Renderer& r, int parent) : r_(r), saved_(r.current_) {
      r_.frames_.push_back(Frame{ValueDict(), parent});
      r_.current_ = static_cast<int>(r_.frames_.size()) - 1;
    }
    ~ScopedFrame() {
      r_.frames_.pop_back();
      r_.current_ = saved_;
    }

   private:
    Renderer& r_;
    int saved_;
  };

  Value Lookup(const std::string& name) const {
    for (int i = current_; i >= 0; i = frames_[i].parent) {
      if (const Value* v = frames_[i].vars.Find(name)) return *v;
    }
    return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
  }

  void Assign(const std::string& name, Value v) { frames_[current_].vars.Set(name, std::move(v)); }

  // ---- Statements ----

  absl::Status RenderStmt(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        out += s.text;
        return absl::OkStatus();
      case Stmt::Kind::kOutput: {
        ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        out += ToStr(v);
        return absl::OkStatus();
      }
      case Stmt::Kind::kIf:
        return RenderIf(s, out);
      case Stmt::Kind::kFor:
        return RenderFor(s, out);
      case Stmt::Kind::kSet:
        return RenderSet(s);
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        RETURN_IF_ERROR(RenderBody(s.body, captured));
        Assign(s.targets[0], Value(std::move(captured)));
        return absl::OkStatus();
      }
      case Stmt::Kind::kMacro:
        Assign(s.name, Value::Callable(s.name, [this, &s](const CallArgs& args) {
                 return CallMacro(s, args);
               }));
        return absl::OkStatus();
      case Stmt::Kind::kBreak:
      case Stmt::Kind::kContinue:
        jump_ = s.kind == Stmt::Kind::kBreak ? Jump::kBreak : Jump::kContinue;
        return absl::OkStatus();
      case Stmt::Kind::kWith:
        return RenderWith(s, out);
      case Stmt::Kind::kGeneration:
        return RenderBody(s.body, out);
    }
    return absl::OkStatus();
  }

  absl::Status RenderIf(const Stmt& s, std::string& out) {
    for (const auto& [condition, body] : s.branches) {
      ASSIGN_OR_RETURN(Value v, Eval(*condition));
      if (v.Truthy()) return RenderBody(body, out);
    }
    return RenderBody(s.else_body, out);
  }

  // Assigns `item` to the loop or set targets, unpacking it when there are several.
  absl::Status BindTargets(const std::vector<std::string>& targets, const Value& item, int line) {
    if (targets.size() == 1) {
      Assign(targets[0], item);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(ValueList parts, Positioned(Iterate(item), line));
    if (parts.size() != targets.size()) {
      return Positioned(absl::InvalidArgumentError(
                            absl::StrCat(parts.size() > targets.size() ? "too many" : "not enough",
                                         " values to unpack (expected ", targets.size(), ")")),
                        line);
    }
    for (size_t i = 0; i < parts.size(); ++i) Assign(targets[i], parts[i]);
    return absl::OkStatus();
  }

  // The items of a loop, after its `if` filter.
  absl::StatusOr<ValueList> LoopItems(const Stmt& s) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
    ASSIGN_OR_RETURN(ValueList items, Positioned(Iterate(iterable), s.line));
    if (s.condition == nullptr) return items;
    ValueList kept;
    for (Value& item : items) {
      ScopedFrame frame(*this, current_);
      RETURN_IF_ERROR(BindTargets(s.targets, item, s.line));
      ASSIGN_OR_RETURN(Value keep, Eval(*s.condition));
      if (keep.Truthy()) kept.push_back(std::move(item));
    }
    return kept;
  }

  static Value LoopObject(const ValueList& items, size_t i) {
    const auto n = static_cast<int64_t>(items.size());
    const auto index = static_cast<int64_t>(i);
    ValueDict loop;
    loop.Append("index0", Value(index));
    loop.Append("index", Value(index + 1));
    loop.Append("revindex0", Value(n - index - 1));
    loop.Append("revindex", Value(n - index));
    loop.Append("first", Value(i == 0));
    loop.Append("last", Value(index == n - 1));
    loop.Append("length", Value(n));
    loop.Append("depth", Value(1));
    loop.Append("depth0", Value(0));
    loop.Append("previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"));
    loop.Append("nextitem",
                index + 1 < n ? items[i + 1] : Value::Undefined("there is no next item"));
    loop.Append("cycle",
                Value::Callable("cycle", [index](const CallArgs& args) -> absl::StatusOr<Value> {
                  if (args.positional.empty())
                    return absl::InvalidArgumentError("no items for cycling given");
                  return args.positional[index % args.positional.size()];
                }));
    return Value::Dict(std::move(loop));
  }

  absl::Status RenderFor(const Stmt& s, std::string& out) {
    ASSIGN_OR_RETURN(ValueList items, LoopItems(s));
    if (items.empty()) {
      ScopedFrame frame(*this, current_);
      return RenderBody(s.else_body, out);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      ScopedFrame frame(*this, current_);
      RETURN_IF_ERROR(BindTargets(s.targets, items[i], s.line));
      Assign("loop", LoopObject(items, i));
      RETURN_IF_ERROR(RenderBody(s.body, out));
      const Jump jump = std::exchange(jump_, Jump::kNone);
      if (jump == Jump::kBreak) break;
    }
    return absl::OkStatus();
  }

  absl::Status RenderSet(const Stmt& s) {
    ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
    if (s.attribute.empty()) return BindTargets(s.targets, v, s.line);
    const Value target = Lookup(s.targets[0]);
    if (target.kind() != Value::Kind::kNamespace) {
      return Positioned(
          absl::InvalidArgumentError(
              absl::StrCat("cannot assign attribute on non-namespace object '", s.targets[0], "'")),
          s.line);
    }
    target.namespace_attributes().Set(s.attribute, std::move(v));
    return absl::OkStatus();
  }

  absl::Status RenderWith(const Stmt& s, std::string& out) {
    ScopedFrame frame(*this, current_);
    for (const auto& [name, expr] : s.params) {
      ASSIGN_OR_RETURN(Value v, Eval(*expr));
      Assign(name, std::move(v));
    }
    return RenderBody(s.body, out);
  }

  absl::StatusOr<Value> CallMacro(const Stmt& macro, const CallArgs& args) {
    if (macro_depth_ >= kMaxMacroDepth) {
      return Positioned(absl::InvalidArgumentError("macro calls nested too deeply"), macro.line);
    }
    if (args.positional.size() > macro.params.size()) {
      return Positioned(
          absl::InvalidArgumentError(absl::StrCat("macro '", macro.name, "' takes not more than ",
                                                  macro.params.size(), " argument(s)")),
          macro.line);
    }
    ScopedFrame frame(*this, 1);
    ++macro_depth_;
    absl::StatusOr<Value> result = BindAndRunMacro(macro, args);
    --macro_depth_;
    return result;
  }

  absl::StatusOr<Value> BindAndRunMacro(const Stmt& macro, const CallArgs& args) {
    for (const auto& [name, value] : args.keyword) {
      bool known = false;
      for (const auto& param : macro.params) known = known || param.first == name;
      if (!known) {
        return Positioned(absl::InvalidArgumentError(absl::StrCat(
                              "macro '", macro.name, "' has no parameter '", name, "'")),
                          macro.line);
      }
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [name, default_value] = macro.params[i];
      Value v = Value::Undefined(absl::StrCat("parameter '", name, "' was not provided"));
      if (i < args.positional.size()) {
        v = args.positional[i];
      } else if (auto it = FindKeyword(args, name); it != nullptr) {
        v = *it;
      } else if (default_value != nullptr) {
        ASSIGN_OR_RETURN(v, Eval(*default_value));
      }
      Assign(name, std::move(v));
    }
    std::string out;
    RETURN_IF_ERROR(RenderBody(macro.body, out));
    return Value(std::move(out));
  }

  static const Value* FindKeyword(const CallArgs& args, const std::string& name) {
    for (const auto& [key, value] : args.keyword) {
      if (key == name) return &value;
    }
    return nullptr;
  }

  // ---- Expressions ----

  absl::StatusOr<Value> Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple:
        return EvalList(e);
      case Expr::Kind::kDict:
        return EvalDict(e);
      case Expr::Kind::kAttribute: {
        ASSIGN_OR_RETURN(Value target, Eval(*e.args[0]));
        return Positioned(GetAttribute(target, e.name), e.line);
      }
      case Expr::Kind::kItem: {
        ASSIGN_OR_RETURN(Value target, Eval(*e.args[0]));
        ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
        return Positioned(GetItem(target, key), e.line);
      }
      case Expr::Kind::kSlice:
        return EvalSlice(e);
      case Expr::Kind::kCall:
        return EvalCall(e);
      case Expr::Kind::kFilter:
        return EvalFilter(e);
      case Expr::Kind::kTest:
        return EvalTest(e);
      case Expr::Kind::kUnary:
        return EvalUnary(e);
      case Expr::Kind::kBinary:
        return EvalBinary(e);
      case Expr::Kind::kCompare:
        return EvalCompare(e);
      case Expr::Kind::kCondition:
        return EvalCondition(e);
    }
    return Value();
  }

  absl::StatusOr<Value> EvalList(const Expr& e) {
    ValueList items;
    items.reserve(e.args.size());
    for (const ExprPtr& arg : e.args) {
      ASSIGN_OR_RETURN(Value v, Eval(*arg));
      items.push_back(std::move(v));
    }
    if (e.kind == Expr::Kind::kTuple) return Value::Tuple(std::move(items));
    return Value::List(std::move(items));
  }

  absl::StatusOr<Value> EvalDict(const Expr& e) {
    ValueDict dict;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      ASSIGN_OR_RETURN(Value key, Eval(*e.args[i]));
      if (!key.is_string()) {
        return Positioned(absl::InvalidArgumentError("dict keys must be strings"), e.line);
      }
      ASSIGN_OR_RETURN(Value value, Eval(*e.args[i + 1]));
      dict.Set(key.string_value(), std::move(value));
    }
    return Value::Dict(std::move(dict));
  }

  absl::StatusOr<Value> EvalSlice(const Expr& e) {
    Value parts[4];
    for (int i = 0; i < 4; ++i) {
      if (e.args[i] == nullptr) continue;
      ASSIGN_OR_RETURN(parts[i], Eval(*e.args[i]));
    }
    return Positioned(Slice(parts[0], parts[1], parts[2], parts[3]), e.line);
  }

  // Evaluates e.args[first:] and e.keywords.
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [name, expr] : e.keywords) {
      ASSIGN_OR_RETURN(Value v, Eval(*expr));
      args.keyword.emplace_back(name, std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> EvalCall(const Expr& e) {
    ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0]));
    if (callee.is_undefined()) return Positioned(UndefinedError(callee), e.line);
    if (callee.kind() != Value::Kind::kFunction) {
      return Positioned(absl::InvalidArgumentError(
                            absl::StrCat("'", callee.TypeName(), "' object is not callable")),
                        e.line);
    }
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
    return Positioned(callee.function()(args), e.line);
  }

  absl::StatusOr<Value> EvalFilter(const Expr& e) {
    ASSIGN_OR_RETURN(Value input, Eval(*e.args[0]));
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
    return Positioned(ApplyFilter(e.name, input, args), e.line);
  }

  absl::StatusOr<Value> EvalTest(const Expr& e) {
    ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0]));
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
    ASSIGN_OR_RETURN(const bool passed, Positioned(ApplyTest(e.name, subject, args), e.line));
    return Value(passed != e.negated);
  }

  absl::StatusOr<Value> EvalUnary(const Expr& e) {
    ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
    if (e.name == "not") return Value(!v.Truthy());
    return Positioned(UnaryOp(e.name, v), e.line);
  }

  absl::StatusOr<Value> EvalBinary(const Expr& e) {
    ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
    if (e.name == "and" && !left.Truthy()) return left;
    if (e.name == "or" && left.Truthy()) return left;
    ASSIGN_OR_RETURN(Value right, Eval(*e.args[1]));
    if (e.name == "and" || e.name == "or") return right;
    return Positioned(BinaryOp(e.name, left, right), e.line);
  }

  absl::StatusOr<Value> EvalCompare(const Expr& e) {
    ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
    for (size_t i = 0; i < e.ops.size(); ++i) {
      ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
      ASSIGN_OR_RETURN(const bool holds, Positioned(CompareOp(e.ops[i], left, right), e.line));
      if (!holds) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }

  absl::StatusOr<Value> EvalCondition(const Expr& e) {
    ASSIGN_OR_RETURN(Value condition, Eval(*e.args[1]));
    if (condition.Truthy()) return Eval(*e.args[0]);
    if (e.args[2] != nullptr) return Eval(*e.args[2]);
    return Value::Undefined(
        "the inline if-expression evaluated to false and no else section was defined");
  }

  std::vector<Frame> frames_;
  int current_ = 0;
  Jump jump_ = Jump::kNone;
  int macro_depth_ = 0;
};

}  // namespace

absl::Status TemplateRaisedError(std::string_view message) {
  absl::Status status = absl::InvalidArgumentError(AV(message));
  status.SetPayload(kPositionedPayload, absl::Cord());
  return status;
}

absl::StatusOr<std::string> RenderTemplate(const Template& tpl, const ValueDict& globals) {
  Renderer renderer(globals);
  std::string out;
  RETURN_IF_ERROR(renderer.RenderBody(tpl.body, out));
  return out;
}

}  // namespace specdec::chat::jinja
