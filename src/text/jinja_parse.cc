// The parser: tokens into the statement and expression tree, with jinja2's grammar and
// precedence (lowest first): `x if c else y`, or, and, not, comparisons and `in` (chained),
// + and -, ~, * / // %, **, unary - and +, then filters (|), tests (is) and calls, applied to
// a primary with its attributes, subscripts and calls.
//
// As jinja2's compiler does, a filter or test name that does not exist is an error when the
// template is parsed, except inside an {% if %} (its conditions and bodies) or an inline `if`
// expression, where it is an error only if it runs.
#include <algorithm>
#include <functional>
#include <optional>

#include "tensorgrad/errors.h"
#include "text/jinja.h"

namespace tg::jinja {
namespace {

ExprPtr make(ExprOp op, int line) {
  auto e = std::make_unique<Expr>();
  e->op = op, e->line = line;
  return e;
}

StmtPtr make_stmt(StmtKind kind, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind, s->line = line;
  return s;
}

// Calls `fn` on every name an expression or a body reads.
void visit_names(const Expr* e, const std::function<void(const std::string&)>& fn) {
  if (!e) return;
  if (e->op == ExprOp::kName) fn(e->name);
  for (const ExprPtr& a : e->args) visit_names(a.get(), fn);
}
void visit_names(const Body& body, const std::function<void(const std::string&)>& fn) {
  for (const StmtPtr& s : body) {
    for (const ExprPtr& e : s->exprs) visit_names(e.get(), fn);
    for (const Body& b : s->bodies) visit_names(b, fn);
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_template() {
    Body body = subparse({});
    check_pending();
    return body;
  }

 private:
  struct Pending {
    int line, column;
    std::string what;
  };

  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).type == Tok::kOp && peek(k).text == op; }
  bool is_name(const char* name, size_t k = 0) const {
    return peek(k).type == Tok::kName && peek(k).text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kEof: return "end of template";
      case Tok::kVarEnd: return "end of print statement '}}'";
      case Tok::kBlockEnd: return "end of statement block '%}'";
      case Tok::kVarBegin: return "'{{'";
      case Tok::kBlockBegin: return "'{%'";
      case Tok::kData: return "template text";
      case Tok::kString: return "string";
      default: return "'" + t.text + "'";
    }
  }
  [[noreturn]] void error(const Token& t, const std::string& what) const {
    throw TemplateError("line " + std::to_string(t.line) + ", column " + std::to_string(t.column) + ": " +
                        what);
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(cur(), std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) error(cur(), std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) error(cur(), "expected a name, got " + describe(cur()));
    return next().text;
  }
  void check_pending() {
    if (!pending_.empty())
      throw TemplateError("line " + std::to_string(pending_[0].line) + ", column " +
                          std::to_string(pending_[0].column) + ": " + pending_[0].what);
  }

  // Counts one level of the tree's depth: the parser's recursion plus the left-deep chains its
  // loops build (a.b.c, x|f|g, 1 + 2 + 3). Bounded, so that neither the parser nor the
  // interpreter walking the tree nor the tree's destruction overflows the stack.
  void link() {
    if (++nesting_ > kMaxNesting) error(cur(), "the template nests too deeply");
  }
  struct Chain {  // restores the count on leaving its scope, ending the chains linked there
    explicit Chain(Parser& p) : p(p), saved(p.nesting_) {}
    ~Chain() { p.nesting_ = saved; }
    Parser& p;
    int saved;
  };
  struct Nest : Chain {  // one level of recursion for the scope it lives in
    explicit Nest(Parser& p) : Chain(p) { p.link(); }
  };
  static constexpr int kMaxNesting = 300;

  Body subparse(const std::vector<const char*>& end_names);
  Body parse_statements(const std::vector<const char*>& end_names, bool drop_end);
  StmtPtr parse_statement();
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  StmtPtr parse_macro_or_call(bool macro);
  StmtPtr parse_block_stmt(StmtKind kind, const char* end, int line);
  Target parse_target(bool with_namespace, const char* end_name);
  void parse_signature(Stmt& s);

  ExprPtr parse_tuple(bool with_condexpr = true, const char* end_name = nullptr,
                      bool explicit_parens = false);
  ExprPtr parse_expression(bool with_condexpr = true) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }
  ExprPtr parse_condexpr();
  ExprPtr parse_or() { return parse_logic(true); }
  ExprPtr parse_and() { return parse_logic(false); }
  // `or` chains of `and` chains of parse_not(): left-deep, each link counted (Chain, link()).
  ExprPtr parse_logic(bool is_or);
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_binary(int level);
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_collection(bool dict);
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_slice_or_expr();
  void parse_call_args(Expr& call);
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_filter_chain(ExprPtr node, bool start_inline) {  // a block's filters: a chain of its own
    const Chain chain(*this);
    return parse_filter(std::move(node), start_inline);
  }
  ExprPtr parse_test(ExprPtr node);

  std::vector<Token> toks_;
  size_t i_ = 0;
  bool soft_ = false;             // inside an if: unknown filters and tests fail only when run
  int loop_depth_ = 0;            // for loops around here (break / continue need one)
  int nesting_ = 0;               // recursion depth, bounded so that no template overflows the stack
  std::vector<Pending> pending_;  // unknown filters / tests outside soft parts
  std::vector<std::pair<std::string, int>> open_;  // the blocks being parsed, with their lines
};

Body Parser::subparse(const std::vector<const char*>& end_names) {
  const Nest nest(*this);
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == Tok::kEof) {
      if (!end_names.empty()) {
        std::string names;
        for (const char* n : end_names) names += std::string(names.empty() ? "'" : " or '") + n + "'";
        error(t, "unexpected end of template: expected " + names + " to close the '" + open_.back().first +
                     "' at line " + std::to_string(open_.back().second));
      }
      return body;
    }
    if (t.type == Tok::kData) {
      auto s = make_stmt(StmtKind::kText, t.line);
      s->text = next().text;
      body.push_back(std::move(s));
    } else if (t.type == Tok::kVarBegin) {
      auto s = make_stmt(StmtKind::kOutput, next().line);
      s->exprs.push_back(parse_tuple());
      expect(Tok::kVarEnd, "'}}'");
      check_pending();
      body.push_back(std::move(s));
    } else if (t.type == Tok::kBlockBegin) {
      next();
      for (const char* n : end_names)
        if (is_name(n)) return body;
      body.push_back(parse_statement());
      expect(Tok::kBlockEnd, "'%}'");
      check_pending();
    } else {
      error(t, "unexpected " + describe(t));
    }
  }
}

Body Parser::parse_statements(const std::vector<const char*>& end_names, bool drop_end) {
  skip_op(":");
  expect(Tok::kBlockEnd, "'%}'");
  Body body = subparse(end_names);
  if (drop_end) next();
  return body;
}

StmtPtr Parser::parse_statement() {
  const Token& t = cur();
  if (t.type != Tok::kName) error(t, "expected a tag name, got " + describe(t));
  const std::string name = t.text;
  const int line = t.line;
  if (name == "for") return parse_for();
  if (name == "if") return parse_if();
  if (name == "set") return parse_set();
  if (name == "macro") return parse_macro_or_call(true);
  if (name == "call") return parse_macro_or_call(false);
  if (name == "filter" || name == "with" || name == "generation") {
    const StmtKind kind = name == "filter" ? StmtKind::kFilterBlock
                          : name == "with" ? StmtKind::kWith
                                           : StmtKind::kScope;
    next();
    return parse_block_stmt(kind,
                            name == "filter" ? "endfilter"
                            : name == "with" ? "endwith"
                                             : "endgeneration",
                            line);
  }
  if (name == "print") {
    next();
    auto s = make_stmt(StmtKind::kOutput, line);
    while (cur().type != Tok::kBlockEnd) {
      if (!s->exprs.empty()) expect_op(",");
      s->exprs.push_back(parse_expression());
    }
    return s;
  }
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) error(t, "'" + name + "' outside of a for loop");
    next();
    return make_stmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
  }
  static const char* const kUnsupported[] = {"block", "extends",    "include", "import",
                                             "from",  "autoescape", "do"};
  for (const char* u : kUnsupported)
    if (name == u) error(t, "the {% " + name + " %} tag is not supported in chat templates");
  std::string msg = "unknown tag '" + name + "'";
  if (!open_.empty())
    msg += " (the innermost open block is '" + open_.back().first + "' from line " +
           std::to_string(open_.back().second) + ")";
  error(t, msg);
}

StmtPtr Parser::parse_block_stmt(StmtKind kind, const char* end, int line) {
  auto s = make_stmt(kind, line);
  if (kind == StmtKind::kFilterBlock) {
    s->exprs.push_back(parse_filter_chain(make(ExprOp::kSubject, line), true));
  } else if (kind == StmtKind::kWith) {
    while (cur().type != Tok::kBlockEnd) {
      if (!s->params.empty()) expect_op(",");
      s->params.push_back(expect_name());
      expect_op("=");
      s->exprs.push_back(parse_expression());
    }
  }
  open_.emplace_back(kind == StmtKind::kFilterBlock ? "filter"
                     : kind == StmtKind::kWith      ? "with"
                                                    : "generation",
                     line);
  const bool soft = std::exchange(soft_, false);
  s->bodies.push_back(parse_statements({end}, true));
  soft_ = soft;
  open_.pop_back();
  return s;
}

Target Parser::parse_target(bool with_namespace, const char* end_name) {
  Target target;
  const bool parens = skip_op("(");
  while (true) {
    if (!target.names.empty()) {
      if (!skip_op(",")) break;
      if (cur().type != Tok::kName || (end_name && is_name(end_name))) break;  // a trailing comma
    }
    const Token& t = cur();
    const std::string name = expect_name();
    if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" ||
        name == "None")
      error(t, "cannot assign to '" + name + "'");
    target.names.push_back(name);
    if (with_namespace && target.names.size() == 1 && skip_op(".")) {
      target.attr = expect_name();
      if (is_op(",")) error(cur(), "cannot unpack into a namespace attribute");
      break;
    }
    if (is_op(",")) target.unpack = true;
  }
  if (parens) expect_op(")");
  return target;
}

StmtPtr Parser::parse_for() {
  auto s = make_stmt(StmtKind::kFor, next().line);
  s->target = parse_target(false, "in");
  if (!skip_name("in")) error(cur(), "expected 'in', got " + describe(cur()));
  s->exprs.push_back(parse_tuple(false, "recursive"));
  if (is_name("recursive")) error(cur(), "recursive for loops are not supported");
  const bool soft = std::exchange(soft_, false);
  s->exprs.push_back(skip_name("if") ? parse_expression() : nullptr);
  open_.emplace_back("for", s->line);
  ++loop_depth_;
  s->bodies.push_back(parse_statements({"endfor", "else"}, false));
  --loop_depth_;
  if (next().text == "else")
    s->bodies.push_back(parse_statements({"endfor"}, true));
  else
    s->bodies.emplace_back();
  open_.pop_back();
  soft_ = soft;
  return s;
}

StmtPtr Parser::parse_if() {
  auto s = make_stmt(StmtKind::kIf, next().line);
  const bool soft = std::exchange(soft_, true);
  open_.emplace_back("if", s->line);
  while (true) {
    s->exprs.push_back(parse_tuple(false));
    s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
    const std::string end = next().text;
    if (end == "elif") continue;
    if (end == "else") s->bodies.push_back(parse_statements({"endif"}, true));
    break;
  }
  if (s->bodies.size() == s->exprs.size()) s->bodies.emplace_back();
  open_.pop_back();
  soft_ = soft;
  return s;
}

StmtPtr Parser::parse_set() {
  auto s = make_stmt(StmtKind::kSet, next().line);
  s->target = parse_target(true, nullptr);
  if (skip_op("=")) {
    s->exprs.push_back(parse_tuple());
    return s;
  }
  s->kind = StmtKind::kSetBlock;
  s->exprs.push_back(is_op("|") ? parse_filter_chain(make(ExprOp::kSubject, s->line), false) : nullptr);
  open_.emplace_back("set", s->line);
  const bool soft = std::exchange(soft_, false);
  s->bodies.push_back(parse_statements({"endset"}, true));
  soft_ = soft;
  open_.pop_back();
  return s;
}

void Parser::parse_signature(Stmt& s) {
  expect_op("(");
  while (!is_op(")")) {
    if (!s.params.empty()) expect_op(",");
    const Token& t = cur();
    s.params.push_back(expect_name());
    if (skip_op("="))
      s.exprs.push_back(parse_expression());
    else if (!s.exprs.empty())
      error(t, "non-default argument follows default argument");
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro_or_call(bool macro) {
  auto s = make_stmt(macro ? StmtKind::kMacro : StmtKind::kCallBlock, next().line);
  ExprPtr call;
  if (macro) {
    s->name = expect_name();
    parse_signature(*s);
  } else {
    if (is_op("(")) parse_signature(*s);
    const Token& t = cur();
    call = parse_expression();
    if (call->op != ExprOp::kCall) error(t, "{% call %} expects a call");
  }
  const bool soft = std::exchange(soft_, false);
  const int loops = std::exchange(loop_depth_, 0);
  open_.emplace_back(macro ? "macro" : "call", s->line);
  s->bodies.push_back(parse_statements({macro ? "endmacro" : "endcall"}, true));
  open_.pop_back();
  loop_depth_ = loops;
  soft_ = soft;
  visit_names(s->bodies[0], [&](const std::string& n) {
    s->uses_varargs |= n == "varargs";
    s->uses_kwargs |= n == "kwargs";
    s->uses_caller |= n == "caller";
  });
  for (const ExprPtr& d : s->exprs)
    visit_names(d.get(), [&](const std::string& n) { s->uses_caller |= n == "caller"; });
  if (call) s->exprs.insert(s->exprs.begin(), std::move(call));
  return s;
}

// ---- Expressions ----

ExprPtr Parser::parse_tuple(bool with_condexpr, const char* end_name, bool explicit_parens) {
  const int line = cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    const Tok t = cur().type;
    if (t == Tok::kVarEnd || t == Tok::kBlockEnd || is_op(")") || (end_name && is_name(end_name))) break;
    items.push_back(parse_expression(with_condexpr));
    if (!is_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) error(cur(), "expected an expression, got " + describe(cur()));
  }
  auto e = make(ExprOp::kTuple, line);
  e->args = std::move(items);
  return e;
}

ExprPtr Parser::parse_condexpr() {
  const Nest nest(*this);
  const size_t mark = pending_.size();
  ExprPtr then = parse_or();
  while (is_name("if")) {
    link();
    const int line = next().line;
    const bool soft = std::exchange(soft_, true);
    auto e = make(ExprOp::kCond, line);
    ExprPtr cond = parse_or();
    ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
    soft_ = soft;
    pending_.resize(std::min(pending_.size(), mark));  // the whole inline if is soft
    e->args.push_back(std::move(then));
    e->args.push_back(std::move(cond));
    e->args.push_back(std::move(otherwise));
    then = std::move(e);
  }
  return then;
}

ExprPtr Parser::parse_logic(bool is_or) {
  const Chain chain(*this);
  const auto operand = [&] { return is_or ? parse_and() : parse_not(); };
  ExprPtr left = operand();
  while (is_name(is_or ? "or" : "and")) {
    link();
    auto e = make(is_or ? ExprOp::kOr : ExprOp::kAnd, next().line);
    e->args.push_back(std::move(left));
    e->args.push_back(operand());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  const Nest nest(*this);
  if (is_name("not")) {
    auto e = make(ExprOp::kNot, next().line);
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_binary(0);
  ExprPtr e;
  while (true) {
    CmpOp op = CmpOp::kEq;
    static const std::pair<const char*, CmpOp> kOps[] = {{"==", CmpOp::kEq}, {"!=", CmpOp::kNe},
                                                         {"<", CmpOp::kLt},  {"<=", CmpOp::kLe},
                                                         {">", CmpOp::kGt},  {">=", CmpOp::kGe}};
    bool found = false;
    for (const auto& [text, o] : kOps)
      if (is_op(text)) op = o, found = true;
    if (found) {
      next();
    } else if (is_name("in")) {
      next();
      op = CmpOp::kIn;
    } else if (is_name("not") && is_name("in", 1)) {
      next(), next();
      op = CmpOp::kNotIn;
    } else {
      break;
    }
    if (!e) {
      e = make(ExprOp::kCompare, line);
      e->args.push_back(std::move(first));
    }
    e->cmp.push_back(op);
    e->args.push_back(parse_binary(0));
  }
  return e ? std::move(e) : std::move(first);
}

// Levels: 0: + -, 1: ~, 2: * / // %, 3: **.
ExprPtr Parser::parse_binary(int level) {
  if (level == 4) return parse_unary(true);
  const Chain chain(*this);
  ExprPtr left = parse_binary(level + 1);
  while (true) {
    const Token& t = cur();
    if (t.type != Tok::kOp) break;
    std::optional<BinOp> op;
    if (level == 0 && (t.text == "+" || t.text == "-")) op = t.text == "+" ? BinOp::kAdd : BinOp::kSub;
    if (level == 2 && (t.text == "*" || t.text == "/" || t.text == "//" || t.text == "%"))
      op = t.text == "*"    ? BinOp::kMul
           : t.text == "/"  ? BinOp::kDiv
           : t.text == "//" ? BinOp::kFloorDiv
                            : BinOp::kMod;
    if (level == 3 && t.text == "**") op = BinOp::kPow;
    if (level == 1 && t.text == "~") {
      if (left->op != ExprOp::kConcat) {
        auto e = make(ExprOp::kConcat, t.line);
        e->args.push_back(std::move(left));
        left = std::move(e);
      }
      next();
      left->args.push_back(parse_binary(level + 1));
      continue;
    }
    if (!op) break;
    link();
    auto e = make(ExprOp::kBinary, next().line);
    e->binop = *op;
    e->args.push_back(std::move(left));
    e->args.push_back(parse_binary(level + 1));
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  const Nest nest(*this);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    node = make(is_op("-") ? ExprOp::kNeg : ExprOp::kPos, cur().line);
    next();
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  if (t.type == Tok::kName) {
    next();
    auto e = make(ExprOp::kConst, t.line);
    if (t.text == "true" || t.text == "True")
      e->value = Value(true);
    else if (t.text == "false" || t.text == "False")
      e->value = Value(false);
    else if (t.text == "none" || t.text == "None")
      e->value = Value::none();
    else
      e->op = ExprOp::kName, e->name = t.text;
    return e;
  }
  if (t.type == Tok::kString) {
    auto e = make(ExprOp::kConst, t.line);
    std::string s;
    while (cur().type == Tok::kString) s += next().text;  // adjacent literals join
    e->value = Value(std::move(s));
    return e;
  }
  if (t.type == Tok::kInt || t.type == Tok::kFloat) {
    auto e = make(ExprOp::kConst, t.line);
    e->value = t.type == Tok::kInt ? Value(t.i) : Value(t.f);
    next();
    return e;
  }
  if (is_op("(")) {
    next();
    ExprPtr e = parse_tuple(true, nullptr, true);
    expect_op(")");
    return e;
  }
  if (is_op("[") || is_op("{")) return parse_collection(is_op("{"));
  error(t, "unexpected " + describe(t));
}

ExprPtr Parser::parse_collection(bool dict) {
  auto e = make(dict ? ExprOp::kDict : ExprOp::kList, next().line);
  const char* close = dict ? "}" : "]";
  while (!is_op(close)) {
    if (!e->args.empty()) {
      expect_op(",");
      if (is_op(close)) break;
    }
    e->args.push_back(parse_expression());
    if (dict) {
      expect_op(":");
      e->args.push_back(parse_expression());
    }
  }
  expect_op(close);
  return e;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[") || is_op("(")) link();
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      auto call = make(ExprOp::kCall, cur().line);
      call->args.push_back(std::move(node));
      parse_call_args(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_name("is") || is_op("(")) link();
    if (is_op("|")) {
      node = parse_filter(std::move(node), false);
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      auto call = make(ExprOp::kCall, cur().line);
      call->args.push_back(std::move(node));
      parse_call_args(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  if (t.text == ".") {
    const Token& a = cur();
    if (a.type == Tok::kName) {
      auto e = make(ExprOp::kGetattr, t.line);
      e->name = next().text;
      e->args.push_back(std::move(node));
      return e;
    }
    if (a.type != Tok::kInt) error(a, "expected a name or number after '.', got " + describe(a));
    auto e = make(ExprOp::kGetitem, t.line);
    e->args.push_back(std::move(node));
    auto key = make(ExprOp::kConst, a.line);
    key->value = Value(next().i);
    e->args.push_back(std::move(key));
    return e;
  }
  std::vector<ExprPtr> keys;
  while (!is_op("]")) {
    if (!keys.empty()) expect_op(",");
    keys.push_back(parse_slice_or_expr());
  }
  expect_op("]");
  if (keys.empty()) error(t, "expected a subscript expression");
  auto e = make(ExprOp::kGetitem, t.line);
  e->args.push_back(std::move(node));
  if (keys.size() == 1) {
    e->args.push_back(std::move(keys[0]));
  } else {
    auto tuple = make(ExprOp::kTuple, t.line);
    tuple->args = std::move(keys);
    e->args.push_back(std::move(tuple));
  }
  return e;
}

// An index, or a slice start:stop:step with any part left out.
ExprPtr Parser::parse_slice_or_expr() {
  const int line = cur().line;
  ExprPtr start;
  if (!is_op(":")) {
    start = parse_expression();
    if (!is_op(":")) return start;
  }
  next();
  auto e = make(ExprOp::kSlice, line);
  e->args.push_back(std::move(start));
  e->args.push_back(is_op(":") || is_op("]") || is_op(",") ? nullptr : parse_expression());
  ExprPtr step;
  if (skip_op(":") && !is_op("]") && !is_op(",")) step = parse_expression();
  e->args.push_back(std::move(step));
  return e;
}

void Parser::parse_call_args(Expr& call) {
  const Token& open = cur();
  expect_op("(");
  bool comma = false;
  while (!is_op(")")) {
    if (comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) error(cur(), "*args and **kwargs in calls are not supported");
    if (cur().type == Tok::kName && is_op("=", 1)) {
      call.keywords.push_back(next().text);
      next();
      call.args.push_back(parse_expression());
    } else {
      if (!call.keywords.empty()) error(open, "a positional argument follows a keyword argument");
      call.args.push_back(parse_expression());
    }
    comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    link();
    const Token& t = cur();
    auto e = make(ExprOp::kFilter, t.line);
    e->name = expect_name();
    while (skip_op(".")) e->name += "." + expect_name();
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    e->filter = find_filter(e->name);
    if (!e->filter && !soft_) pending_.push_back({t.line, t.column, "no filter named '" + e->name + "'"});
    node = std::move(e);
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const int line = next().line;
  const bool negated = skip_name("not");
  const Token& t = cur();
  auto e = make(ExprOp::kTest, line);
  e->name = expect_name();
  while (skip_op(".")) e->name += "." + expect_name();
  e->args.push_back(std::move(node));
  const Tok type = cur().type;
  if (is_op("(")) {
    parse_call_args(*e);
  } else if ((type == Tok::kName || type == Tok::kString || type == Tok::kInt || type == Tok::kFloat ||
              is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) error(cur(), "you cannot chain multiple tests with is");
    e->args.push_back(parse_postfix(parse_primary()));
  }
  e->test = find_test(e->name);
  if (!e->test && !soft_) pending_.push_back({t.line, t.column, "no test named '" + e->name + "'"});
  if (!negated) return e;
  auto n = make(ExprOp::kNot, line);
  n->args.push_back(std::move(e));
  return n;
}

}  // namespace

std::shared_ptr<const Template> Template::parse(std::string_view source, const Options& options) {
  auto t = std::make_shared<Template>();
  t->body = Parser(tokenize(source, options)).parse_template();
  return t;
}

}  // namespace tg::jinja
