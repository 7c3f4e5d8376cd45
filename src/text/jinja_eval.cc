// The interpreter: runs the tree with jinja2's scoping and Python's operators.
//
// Scopes as jinja2 compiles them: the template's top level is one scope (the render's variables
// and the template's {% set %}s); every iteration of a for loop, a macro call, a {% with %},
// a {% filter %} and a {% set %} block body is a new scope whose parent is where it was written,
// so a {% set %} inside a loop does not outlive its iteration (namespace() objects are how
// templates carry values out: they are shared, not copied). {% if %} opens no scope.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <new>
#include <optional>
#include <stdexcept>

#include "tensorgrad/errors.h"
#include "text/jinja.h"

namespace tg::jinja {

// A template's variable scopes (outside the unnamed namespace: Interp, declared in jinja.h,
// holds them).
struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  ScopePtr parent;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get())
      for (const auto& [k, v] : s->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, x] : vars)
      if (k == name) {
        x = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

namespace {

ScopePtr child(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { kNormal, kBreak, kContinue };

constexpr int kMaxCallDepth = 256;
// How deeply exec and eval may nest (statements in statements, expressions in expressions,
// macro bodies in macro calls), as Python's recursion limit: a bound on the C++ stack the
// render uses, small enough for 8 MB with AddressSanitizer's larger frames.
constexpr int kMaxEvalDepth = 600;

// Appends to the output, within kMaxProduced.
void emit(std::string& out, const std::string& s) {
  check_grow(out.size(), s.size(), "the rendered output");
  out += s;
}

}  // namespace

// Values may refer to each other in cycles (a macro captures the scope that holds it; a
// namespace may hold itself), so the interpreter owns what could close a cycle: macros keep
// their scope by a weak pointer while the interpreter keeps the scope alive, and namespaces are
// emptied when the render ends. Loop objects and loop.changed's memories are emptied too, one
// after the other: chains of them (a loop's previtem an earlier loop object, ...) of any length
// are then freed without a recursion as deep as the chain.
class Interp {
 public:
  explicit Interp(const Environment& env) : env_(env) {}
  ~Interp() {
    for (const auto& o : objects_) o->attrs.items.clear();
    for (const auto& c : changed_cells_) c->reset();
  }
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  void own(std::shared_ptr<Object> o) { objects_.push_back(std::move(o)); }

  Flow exec(const Body& body, const ScopePtr& scope);
  Value eval(const Expr& e, const ScopePtr& scope);
  /// Runs `body` in `scope` and returns what it printed.
  [[gnu::noinline]] std::string capture(const Body& body, const ScopePtr& scope);
  Value call_macro(const Stmt& m, const ScopePtr& defined_in, CallArgs& args);

  std::string* out = nullptr;

 private:
  Flow exec_stmt(const Stmt& s, const ScopePtr& scope);
  // Not inlined into the recursive exec_stmt and eval_expr, whose frames stay small (every
  // level of a template's nesting costs one of each).
  [[gnu::noinline]] Flow exec_for(const Stmt& s, const ScopePtr& scope);
  [[gnu::noinline]] void assign(const Target& t, const Value& v, const ScopePtr& scope);
  Value eval_expr(const Expr& e, const ScopePtr& scope);
  [[gnu::noinline]] Value eval_call(const Expr& e, const ScopePtr& scope, const Value* caller = nullptr);
  [[gnu::noinline]] CallArgs eval_args(const Expr& e, const ScopePtr& scope, size_t first);
  [[gnu::noinline]] bool eval_compare(const Expr& e, const ScopePtr& scope);
  [[gnu::noinline]] Value make_macro(const Stmt& s, const ScopePtr& scope);
  [[gnu::noinline]] ScopePtr bind_macro_args(const Stmt& m, const ScopePtr& defined_in, CallArgs& args);
  [[gnu::noinline]] Value eval_name(const Expr& e, const ScopePtr& scope);
  [[gnu::noinline]] Value eval_collection(const Expr& e, const ScopePtr& scope);
  [[gnu::noinline]] Value eval_getitem(const Expr& e, const ScopePtr& scope);
  [[gnu::noinline]] Value eval_filter_or_test(const Expr& e, const ScopePtr& scope);
  [[gnu::noinline]] Value eval_unary(const Expr& e, const ScopePtr& scope);
  [[gnu::noinline]] Value eval_concat(const Expr& e, const ScopePtr& scope);
  [[gnu::noinline]] static Value missing_else(const Expr& e);

  const Environment& env_;
  Value subject_;  // what a filter block's or set block's filters apply to
  int depth_ = 0;
  std::vector<ScopePtr> macro_scopes_;                                // the scopes macros were defined in
  std::vector<std::shared_ptr<Object>> objects_;                      // namespaces and loop objects
  std::vector<std::shared_ptr<std::optional<Value>>> changed_cells_;  // what loop.changed saw last
  int eval_depth_ = 0;
};

namespace {

// Counts one level of exec / eval nesting while it lives.
class DepthGuard {
 public:
  explicit DepthGuard(int& depth) : depth_(depth) {
    if (++depth_ > kMaxEvalDepth) {
      --depth_;
      fail(
          "maximum recursion depth exceeded: the template nests expressions, statements and macro calls "
          "more than " +
          std::to_string(kMaxEvalDepth) + " deep");
    }
  }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

// A C++ exception from a library call (out of memory, a conversion out of range) as a
// RenderFailure of the template line that ran it.
[[noreturn]] void library_failure(const std::exception& e, int line) {
  RenderFailure f;
  f.message = dynamic_cast<const std::bad_alloc*>(&e) ? std::string("out of memory")
                                                      : std::string("internal error: ") + e.what();
  f.line = line;
  throw f;
}

}  // namespace

void own_object(Interp& in, std::shared_ptr<Object> o) { in.own(std::move(o)); }

Flow Interp::exec(const Body& body, const ScopePtr& scope) {
  for (const StmtPtr& s : body) {
    Flow f;
    try {
      const DepthGuard guard(eval_depth_);
      f = exec_stmt(*s, scope);
    } catch (RenderFailure& failure) {
      if (!failure.line) failure.line = s->line;
      throw;
    } catch (const std::exception& e) {
      library_failure(e, s->line);
    }
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

std::string Interp::capture(const Body& body, const ScopePtr& scope) {
  std::string buf;
  std::string* saved = std::exchange(out, &buf);
  try {
    exec(body, scope);
  } catch (...) {
    out = saved;
    throw;
  }
  out = saved;
  return buf;
}

void Interp::assign(const Target& t, const Value& v, const ScopePtr& scope) {
  if (!t.attr.empty()) {
    const Value* ns = scope->find(t.names[0]);
    if (!ns || ns->kind() != Value::Kind::kObject || ns->object_data().type != "Namespace")
      fail("cannot assign attribute on non-namespace object");
    ns->object_data().attrs.set(Value(t.attr), v);
    return;
  }
  if (!t.unpack) {
    scope->set(t.names[0], v);
    return;
  }
  const ValueList parts = iterate(v);
  if (parts.size() < t.names.size())
    fail("not enough values to unpack (expected " + std::to_string(t.names.size()) + ", got " +
         std::to_string(parts.size()) + ")");
  if (parts.size() > t.names.size())
    fail("too many values to unpack (expected " + std::to_string(t.names.size()) + ")");
  for (size_t i = 0; i < parts.size(); ++i) scope->set(t.names[i], parts[i]);
}

Flow Interp::exec_stmt(const Stmt& s, const ScopePtr& scope) {
  switch (s.kind) {
    case StmtKind::kText: emit(*out, s.text); break;
    case StmtKind::kOutput:
      for (const ExprPtr& e : s.exprs) emit(*out, to_str(eval(*e, scope)));
      break;
    case StmtKind::kIf:
      for (size_t i = 0; i < s.exprs.size(); ++i)
        if (truthy(eval(*s.exprs[i], scope))) return exec(s.bodies[i], scope);
      return exec(s.bodies.back(), scope);
    case StmtKind::kFor: return exec_for(s, scope);
    case StmtKind::kSet: assign(s.target, eval(*s.exprs[0], scope), scope); break;
    case StmtKind::kSetBlock: {
      Value v(capture(s.bodies[0], child(scope)));
      if (s.exprs[0]) {
        subject_ = std::move(v);
        v = eval(*s.exprs[0], scope);
      }
      assign(s.target, v, scope);
      break;
    }
    case StmtKind::kMacro: scope->set(s.name, make_macro(s, scope)); break;
    case StmtKind::kCallBlock: {
      const Value caller = make_macro(s, scope);
      emit(*out, to_str(eval_call(*s.exprs[0], scope, &caller)));
      break;
    }
    case StmtKind::kFilterBlock:
      subject_ = Value(capture(s.bodies[0], child(scope)));
      emit(*out, to_str(eval(*s.exprs[0], scope)));
      break;
    case StmtKind::kWith: {
      ScopePtr inner = child(scope);
      for (size_t i = 0; i < s.params.size(); ++i) inner->set(s.params[i], eval(*s.exprs[i], scope));
      return exec(s.bodies[0], inner);
    }
    case StmtKind::kScope: return exec(s.bodies[0], child(scope));
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

namespace {

// The `loop` of iteration i over `items` (a function of its own: its many temporaries stay off
// the stack while the loop body runs).
[[gnu::noinline]] std::shared_ptr<Object> loop_object(
    const ValueList& items, int64_t i, const std::shared_ptr<std::optional<Value>>& last_changed) {
  const auto n = static_cast<int64_t>(items.size());
  auto loop = std::make_shared<Object>();
  loop->type = "LoopContext";
  Dict& a = loop->attrs;
  a.set("index", Value(i + 1));
  a.set("index0", Value(i));
  a.set("revindex", Value(n - i));
  a.set("revindex0", Value(n - i - 1));
  a.set("first", Value(i == 0));
  a.set("last", Value(i == n - 1));
  a.set("length", Value(n));
  a.set("depth", Value(1));
  a.set("depth0", Value(0));
  a.set("previtem",
        i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
  a.set("nextitem",
        i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
  a.set("cycle", Value::function("loop.cycle", [i](Interp&, CallArgs& args) {
          if (args.pos.empty()) fail("no items for cycling given");
          return args.pos[static_cast<size_t>(i) % args.pos.size()];
        }));
  a.set("changed", Value::function("loop.changed", [last_changed](Interp&, CallArgs& args) {
          Value now = Value::list(args.pos);
          if (*last_changed && equals(**last_changed, now)) return Value(false);
          *last_changed = std::move(now);
          return Value(true);
        }));
  return loop;
}

}  // namespace

Flow Interp::exec_for(const Stmt& s, const ScopePtr& scope) {
  ValueList items = iterate(eval(*s.exprs[0], scope));
  if (s.exprs[1]) {  // for x in xs if cond: the loop sees only the items that pass
    ValueList kept;
    for (Value& item : items) {
      ScopePtr probe = child(scope);
      assign(s.target, item, probe);
      if (truthy(eval(*s.exprs[1], probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(s.bodies[1], child(scope));
    return Flow::kNormal;
  }
  const auto n = static_cast<int64_t>(items.size());
  auto last_changed = std::make_shared<std::optional<Value>>();
  changed_cells_.push_back(last_changed);
  for (int64_t i = 0; i < n; ++i) {
    ScopePtr iteration = child(scope);
    assign(s.target, items[static_cast<size_t>(i)], iteration);
    auto loop = loop_object(items, i, last_changed);
    own(loop);  // its previtem may be an earlier loop object: a chain to free without recursing
    iteration->set("loop", Value::object(loop));
    if (exec(s.bodies[0], iteration) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Interp::make_macro(const Stmt& s, const ScopePtr& scope) {
  const Stmt* m = &s;
  const std::string name = s.kind == StmtKind::kMacro ? s.name : "caller";
  macro_scopes_.push_back(scope);
  std::weak_ptr<Scope> where = scope;
  return Value::function(
      name, [m, where](Interp& in, CallArgs& args) { return in.call_macro(*m, where.lock(), args); });
}

// A macro call as jinja2 binds it: positionals, then keywords, then defaults (evaluated in the
// macro's scope, so they may read earlier parameters); missing ones are undefined. Extra
// arguments are an error unless the body reads `varargs` / `kwargs`.
Value Interp::call_macro(const Stmt& m, const ScopePtr& defined_in, CallArgs& args) {
  if (depth_ >= kMaxCallDepth) fail("macro calls nest more than " + std::to_string(kMaxCallDepth) + " deep");
  const ScopePtr scope = bind_macro_args(m, defined_in, args);
  ++depth_;
  std::string text;
  try {
    text = capture(m.bodies[0], scope);
  } catch (...) {
    --depth_;
    throw;
  }
  --depth_;
  return Value(std::move(text));
}

ScopePtr Interp::bind_macro_args(const Stmt& m, const ScopePtr& defined_in, CallArgs& args) {
  const std::string name = m.kind == StmtKind::kMacro ? m.name : "caller";
  ScopePtr scope = child(defined_in);
  const size_t np = m.params.size();
  const size_t first_default = m.kind == StmtKind::kCallBlock ? 1 : 0;  // a call block's exprs[0] is its call
  const size_t nd = m.exprs.size() - first_default;
  std::vector<bool> bound(np, false);
  for (size_t i = 0; i < args.pos.size() && i < np; ++i)
    scope->set(m.params[i], args.pos[i]), bound[i] = true;
  if (args.pos.size() > np) {
    if (!m.uses_varargs)
      fail("macro '" + name + "' takes not more than " + std::to_string(np) + " argument(s)");
    scope->set("varargs",
               Value::tuple(ValueList(args.pos.begin() + static_cast<std::ptrdiff_t>(np), args.pos.end())));
  } else if (m.uses_varargs) {
    scope->set("varargs", Value::tuple({}));
  }
  Dict extra;
  for (auto& [k, v] : args.kw) {
    size_t i = 0;
    while (i < np && m.params[i] != k) ++i;
    if (i < np) {
      if (bound[i]) fail("macro '" + name + "' got multiple values for argument '" + k + "'");
      scope->set(k, v), bound[i] = true;
    } else if (k == "caller" && m.uses_caller) {
      scope->set("caller", v);
    } else if (m.uses_kwargs) {
      extra.set(Value(k), v);
    } else {
      fail("macro '" + name + "' takes no keyword argument '" + k + "'");
    }
  }
  if (m.uses_kwargs) scope->set("kwargs", Value::dict(std::move(extra)));
  if (m.uses_caller && !scope->find("caller"))
    scope->set("caller", Value::undefined("'caller' is undefined"));
  for (size_t i = 0; i < np; ++i) {
    if (bound[i]) continue;
    if (i + nd >= np)
      scope->set(m.params[i], eval(*m.exprs[first_default + i + nd - np], scope));
    else
      scope->set(m.params[i], Value::undefined("parameter '" + m.params[i] + "' was not provided"));
  }
  return scope;
}

Value Interp::eval(const Expr& e, const ScopePtr& scope) {
  try {
    const DepthGuard guard(eval_depth_);
    return eval_expr(e, scope);
  } catch (RenderFailure& failure) {
    if (!failure.line) failure.line = e.line;
    throw;
  } catch (const std::exception& ex) {
    library_failure(ex, e.line);
  }
}

CallArgs Interp::eval_args(const Expr& e, const ScopePtr& scope, size_t first) {
  CallArgs args;
  const size_t nkw = e.keywords.size();
  const size_t npos = e.args.size() - nkw;
  for (size_t i = first; i < npos; ++i) args.pos.push_back(eval(*e.args[i], scope));
  for (size_t i = 0; i < nkw; ++i) args.kw.emplace_back(e.keywords[i], eval(*e.args[npos + i], scope));
  return args;
}

Value Interp::eval_call(const Expr& e, const ScopePtr& scope, const Value* caller) {
  const Value callee = eval(*e.args[0], scope);
  CallArgs args = eval_args(e, scope, 1);
  if (caller) args.kw.emplace_back("caller", *caller);
  return call_value(*this, callee, args);
}

bool Interp::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.args[0], scope);
  for (size_t i = 0; i < e.cmp.size(); ++i) {
    Value right = eval(*e.args[i + 1], scope);
    bool ok;
    switch (e.cmp[i]) {
      case CmpOp::kEq: ok = equals(left, right); break;
      case CmpOp::kNe: ok = !equals(left, right); break;
      case CmpOp::kIn: ok = contains(right, left); break;
      case CmpOp::kNotIn: ok = !contains(right, left); break;
      default: {
        const int c = compare(left, right);  // 2: unordered (NaN)
        ok = e.cmp[i] == CmpOp::kLt   ? c == -1
             : e.cmp[i] == CmpOp::kLe ? (c == -1 || c == 0)
             : e.cmp[i] == CmpOp::kGt ? c == 1
                                      : (c == 1 || c == 0);
      }
    }
    if (!ok) return false;
    left = std::move(right);
  }
  return true;
}

// The recursion of evaluation passes through here once per level of an expression: the cases
// with many temporaries are functions of their own, so that this frame stays small (which
// matters most under AddressSanitizer, which gives every temporary its own stack slot).
Value Interp::eval_expr(const Expr& e, const ScopePtr& scope) {
  switch (e.op) {
    case ExprOp::kConst: return e.value;
    case ExprOp::kName: return eval_name(e, scope);
    case ExprOp::kSubject: return subject_;
    case ExprOp::kList:
    case ExprOp::kTuple:
    case ExprOp::kDict: return eval_collection(e, scope);
    case ExprOp::kGetattr: return get_attr(eval(*e.args[0], scope), e.name);
    case ExprOp::kGetitem: return eval_getitem(e, scope);
    case ExprOp::kSlice: fail("a slice is only allowed inside []");
    case ExprOp::kCall: return eval_call(e, scope);
    case ExprOp::kFilter:
    case ExprOp::kTest: return eval_filter_or_test(e, scope);
    case ExprOp::kNeg:
    case ExprOp::kPos: return eval_unary(e, scope);
    case ExprOp::kNot: return Value(!truthy(eval(*e.args[0], scope)));
    case ExprOp::kAnd:
    case ExprOp::kOr: {
      Value left = eval(*e.args[0], scope);
      if (truthy(left) == (e.op == ExprOp::kOr)) return left;
      return eval(*e.args[1], scope);
    }
    case ExprOp::kBinary: {
      const Value left = eval(*e.args[0], scope);
      return binary(e.binop, left, eval(*e.args[1], scope));
    }
    case ExprOp::kConcat: return eval_concat(e, scope);
    case ExprOp::kCompare: return Value(eval_compare(e, scope));
    case ExprOp::kCond:
      if (truthy(eval(*e.args[1], scope))) return eval(*e.args[0], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return missing_else(e);
  }
  fail("unknown expression");
}

Value Interp::eval_name(const Expr& e, const ScopePtr& scope) {
  if (const Value* v = scope->find(e.name)) return *v;
  Value g = find_global(e.name, env_);
  return g.is_undefined() ? Value::undefined("'" + e.name + "' is undefined") : g;
}

Value Interp::eval_collection(const Expr& e, const ScopePtr& scope) {
  if (e.op != ExprOp::kDict) {
    ValueList items;
    for (const ExprPtr& a : e.args) items.push_back(eval(*a, scope));
    return e.op == ExprOp::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  Dict d;
  for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
    Value k = eval(*e.args[i], scope);
    require_hashable(k);
    d.set(std::move(k), eval(*e.args[i + 1], scope));
  }
  return Value::dict(std::move(d));
}

Value Interp::eval_getitem(const Expr& e, const ScopePtr& scope) {
  const Value obj = eval(*e.args[0], scope);
  const Expr& key = *e.args[1];
  if (key.op != ExprOp::kSlice) return get_item(obj, eval(key, scope));
  Value parts[3];
  for (int i = 0; i < 3; ++i)
    if (key.args[i]) parts[i] = eval(*key.args[i], scope);
  return slice(obj, parts[0], parts[1], parts[2]);
}

Value Interp::eval_filter_or_test(const Expr& e, const ScopePtr& scope) {
  const bool filter = e.op == ExprOp::kFilter;
  if (filter ? !e.filter : !e.test)
    fail(std::string("no ") + (filter ? "filter" : "test") + " named '" + e.name + "'");
  const Value subject = eval(*e.args[0], scope);
  CallArgs args = eval_args(e, scope, 1);
  return filter ? e.filter(*this, subject, args) : Value(e.test(*this, subject, args));
}

Value Interp::eval_unary(const Expr& e, const ScopePtr& scope) {
  const Value v = eval(*e.args[0], scope);
  if (v.is_undefined()) fail(v.str());
  if (!v.is_number())
    fail(std::string("bad operand type for unary ") + (e.op == ExprOp::kNeg ? "-" : "+") + ": '" +
         type_name(v) + "'");
  if (v.kind() == Value::Kind::kFloat) return e.op == ExprOp::kPos ? v : Value(-v.number());
  return e.op == ExprOp::kPos ? Value(v.integer()) : binary(BinOp::kSub, Value(0), v);
}

Value Interp::eval_concat(const Expr& e, const ScopePtr& scope) {
  std::string s;
  for (const ExprPtr& a : e.args) {
    const std::string part = to_str(eval(*a, scope));
    check_grow(s.size(), part.size(), "string concatenation");
    s += part;
  }
  return Value(std::move(s));
}

Value Interp::missing_else(const Expr& e) {
  return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                          " evaluated to false and no else section was defined.");
}

Value call_value(Interp& in, const Value& callee, CallArgs& args) {
  if (callee.kind() == Value::Kind::kFunction) return callee.function_data().call(in, args);
  if (callee.is_undefined()) fail(callee.str().empty() ? "calling an undefined value" : callee.str());
  fail("'" + type_name(callee) + "' object is not callable");
}

std::string Template::render(const Dict& vars, const Environment& env) const {
  Interp in(env);
  auto top = std::make_shared<Scope>();
  for (const auto& [k, v] : vars.items) top->set(to_str(k), v);
  std::string out;
  in.out = &out;
  try {
    in.exec(body, top);
  } catch (RenderFailure& f) {
    const std::string where = "line " + std::to_string(f.line) + ": ";
    throw TemplateError(where + (f.raised ? "the template raised an error: " : "") + f.message);
  } catch (const std::bad_alloc&) {
    throw TemplateError("the template used more memory than there is");
  } catch (const TemplateError&) {
    throw;
  } catch (const std::exception& e) {
    // A bug of the engine rather than of the template; still an error of this render.
    throw TemplateError(std::string("the template failed to render: ") + e.what());
  }
  return out;
}

// ---- Operators ----

namespace {

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  fail(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
       type_name(b) + "'");
}

[[noreturn]] void overflow() { fail("integer overflow: the result does not fit in 64 bits"); }

// Python's float divmod: the floor quotient and a remainder with the divisor's sign.
std::pair<double, double> float_divmod(double x, double y) {
  if (y == 0) fail("float division by zero");
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

Value repeat(const Value& seq, int64_t n) {
  const uint64_t unit = seq.is_string() ? seq.str().size() : seq.items().size();
  if (n > 0 && unit > 0)
    check_size(
        static_cast<uint64_t>(n) > kMaxProduced ? static_cast<uint64_t>(n) : unit * static_cast<uint64_t>(n),
        "sequence repetition");
  if (seq.is_string()) {
    std::string s;
    for (int64_t i = 0; i < n; ++i) s += seq.str();
    return Value(std::move(s));
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.kind() == Value::Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if ((exp & 1) && __builtin_mul_overflow(result, base, &result)) overflow();
    exp >>= 1;
    if (exp && __builtin_mul_overflow(base, base, &base)) overflow();
  }
  return Value(result);
}

}  // namespace

Value binary(BinOp op, const Value& a, const Value& b) {
  if (op == BinOp::kMod && a.is_string()) return Value(printf_format(a.str(), b));
  if (a.is_undefined()) fail(a.str());
  if (b.is_undefined()) fail(b.str());
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat);
  int64_t r = 0;
  switch (op) {
    case BinOp::kAdd:
      if (floats) return Value(a.number() + b.number());
      if (numbers) {
        if (__builtin_add_overflow(a.integer(), b.integer(), &r)) overflow();
        return Value(r);
      }
      if (a.is_string() && b.is_string()) {
        check_grow(a.str().size(), b.str().size(), "string concatenation");
        return Value(a.str() + b.str());
      }
      if (a.kind() == b.kind() && a.is_sequence()) {
        check_grow(a.items().size(), b.items().size(), "list concatenation");
        ValueList out = a.items();
        out.insert(out.end(), b.items().begin(), b.items().end());
        return a.kind() == Value::Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
      }
      if (a.is_string() || a.is_sequence())
        fail("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
      unsupported("+", a, b);
    case BinOp::kSub:
      if (floats) return Value(a.number() - b.number());
      if (numbers) {
        if (__builtin_sub_overflow(a.integer(), b.integer(), &r)) overflow();
        return Value(r);
      }
      unsupported("-", a, b);
    case BinOp::kMul:
      if (floats) return Value(a.number() * b.number());
      if (numbers) {
        if (__builtin_mul_overflow(a.integer(), b.integer(), &r)) overflow();
        return Value(r);
      }
      if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool())) return repeat(a, b.integer());
      if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool())) return repeat(b, a.integer());
      unsupported("*", a, b);
    case BinOp::kDiv:
      if (!numbers) unsupported("/", a, b);
      if (b.number() == 0) fail("division by zero");
      return Value(a.number() / b.number());
    case BinOp::kFloorDiv:
    case BinOp::kMod: {
      if (!numbers) unsupported(op == BinOp::kMod ? "%" : "//", a, b);
      if (floats) {
        const auto [div, mod] = float_divmod(a.number(), b.number());
        return Value(op == BinOp::kMod ? mod : div);
      }
      const int64_t x = a.integer(), y = b.integer();
      if (y == 0) fail("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) q -= 1, m += y;
      return Value(op == BinOp::kMod ? m : q);
    }
    case BinOp::kPow:
      if (!numbers) unsupported("** or pow()", a, b);
      if (!floats && b.integer() >= 0) return int_pow(a.integer(), b.integer());
      if (a.number() == 0 && b.number() < 0) fail("0.0 cannot be raised to a negative power");
      if (a.number() < 0 && b.number() != std::floor(b.number()))
        fail("a negative number to a fractional power is a complex number, which is not supported");
      const double p = std::pow(a.number(), b.number());
      if (std::isinf(p) && std::isfinite(a.number()) && std::isfinite(b.number()))
        fail("(34, 'Numerical result out of range')");
      return Value(p);
  }
  fail("unknown operator");
}

}  // namespace tg::jinja
