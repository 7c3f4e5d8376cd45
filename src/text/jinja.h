// A Jinja2 template engine for Hugging Face chat templates: the subset of jinja2's language that
// chat templates use, rendered with the semantics of Python's jinja2 in the environment
// `transformers` builds (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, the
// loopcontrols extension, the default Undefined). See include/tensorgrad/chat.h for the list of
// what is supported.
//
// The pieces: values (Value, with Python's semantics for truthiness, equality, ordering, str,
// repr and json.dumps: jinja_value.cc; str's methods on code points: jinja_strings.cc), the lexer
// and parser (jinja_lex.cc, jinja_parse.cc) that turn source text into the tree below, and the
// interpreter (jinja_eval.cc: scopes, statements, operators) with its filters and tests
// (jinja_builtins.cc), methods and globals (jinja_methods.cc). Errors are tg::TemplateError;
// their messages start with "line L, column C: " (parsing) or "line L: " (rendering).
#pragma once
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tg::jinja {

class Value;
class Interp;
using ValueList = std::vector<Value>;

struct Dict;
struct Object;
struct Iterator;
struct CallArgs;
struct Function;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kObject,
    kIterator,
    kFunction,
  };

  /// Undefined; `hint` is the message for the error an operation on it raises.
  Value() = default;
  static Value undefined(std::string hint);
  static Value none();
  Value(bool b) : kind_(Kind::kBool), b_(b) {}
  Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
  Value(int i) : kind_(Kind::kInt), i_(i) {}
  Value(double f) : kind_(Kind::kFloat), f_(f) {}
  Value(std::string s) : kind_(Kind::kString), s_(std::move(s)) {}
  Value(std::string_view s) : kind_(Kind::kString), s_(s) {}
  Value(const char* s) : kind_(Kind::kString), s_(s) {}
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(Dict d);
  static Value object(std::shared_ptr<Object> o);
  static Value iterator(ValueList items, std::string type = "generator");
  /// A function; `bound` is the value it holds on to (a bound method's object), if any.
  static Value function(std::string name, std::function<Value(Interp&, CallArgs&)> call,
                        const Value* bound = nullptr);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_int() const { return kind_ == Kind::kInt; }  // not bool
  bool is_bool() const { return kind_ == Kind::kBool; }
  /// bool, int or float (Python's numbers; bool is an int).
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }

  bool boolean() const { return b_; }
  /// The int of a bool or int.
  int64_t integer() const { return kind_ == Kind::kBool ? int64_t{b_} : i_; }
  /// The float of any number.
  double number() const;
  /// A string's bytes; an undefined's hint.
  const std::string& str() const { return s_; }
  const ValueList& items() const { return *list_; }
  const Dict& dict_data() const { return *dict_; }
  Object& object_data() const { return *object_; }
  Iterator& iterator_data() const { return *iter_; }
  const Function& function_data() const { return *fn_; }
  /// Whether two values are the same object (namespaces, iterators, functions).
  bool same_object(const Value& o) const;
  /// How deeply lists, tuples, dicts, iterators and bound methods nest inside this value (0 for a
  /// scalar). Construction fails beyond kMaxValueDepth, so that operations recursing into a
  /// value (repr, ==, <, destruction) stay within the stack.
  int depth() const { return depth_; }

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  uint16_t depth_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<const Dict> dict_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<Iterator> iter_;
  std::shared_ptr<const Function> fn_;
};

/// A dict: keys in insertion order, as Python's. Lookups compare keys by Python equality.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  /// Sets `key` (replacing its value in place if present, else appending).
  void set(Value key, Value value);
};

/// A namespace() object or a for loop's `loop`: named attributes that `set ns.attr = ...` may
/// change (namespaces only). Shared: every copy of the Value sees the same attributes.
struct Object {
  std::string type;  // "Namespace" or "LoopContext"
  Dict attrs;
};

/// What a generator or iterator (select, map, reverse, ...) yields: the items are computed up
/// front, `pos` is how many were consumed. Python's generators are always true and can be
/// iterated once; so is this.
struct Iterator {
  ValueList items;
  size_t pos = 0;
  std::string type;  // for str(): "generator" or "list_reverseiterator"
};

struct CallArgs {
  ValueList pos;
  std::vector<std::pair<std::string, Value>> kw;
};

/// Something callable: a global (range, namespace, raise_exception, ...), a bound method
/// ("abc".upper), a macro or a loop's cycle.
struct Function {
  std::string name;
  std::function<Value(Interp&, CallArgs&)> call;
};

/// A run-time error inside the engine (Python's TypeError, UndefinedError, ...): the evaluator
/// adds the template line and turns it into a TemplateError.
struct RenderFailure {
  std::string message;
  bool raised = false;  // from raise_exception(): the message is the template's own text
  int line = 0;         // set by the innermost expression or statement that sees it
};
[[noreturn]] void fail(std::string message);

/// The deepest nesting of containers a value may have (Python's repr and == would hit its
/// recursion limit not much deeper).
constexpr int kMaxValueDepth = 256;
/// The most bytes a string, or items a list, one operation may produce: '%99999999s' % x,
/// 'a' * n, center(n) and the like fail instead of exhausting memory.
constexpr size_t kMaxProduced = size_t{64} << 20;
/// Fails unless `size` (bytes of a string, or items of a list) is within kMaxProduced.
void check_size(uint64_t size, const char* what);
/// Fails unless `size` more bytes (or items) may be added to `have`.
inline void check_grow(size_t have, uint64_t more, const char* what) {
  check_size(more > kMaxProduced ? more : have + more, what);
}

// ---- Python semantics of values (jinja_value.cc) ----
bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);
/// -1, 0 or 1 as Python's < orders a and b; a RenderFailure where Python raises TypeError.
int compare(const Value& a, const Value& b);
/// Python's str(v) (jinja2 prints undefined as "").
std::string to_str(const Value& v);
/// Python's repr(v).
std::string repr(const Value& v);
/// Python's repr of a float: the shortest digits that read back, "1.0", "1e-05", "1e+20".
std::string format_float(double f);
/// The type name Python gives in messages: 'str', 'int', 'list', 'dict', 'NoneType', ...
std::string type_name(const Value& v);
/// The items of an iterable as Python's iter() yields them (a string's characters, a dict's
/// keys); consumes an iterator. Undefined gives none; other values are a RenderFailure.
ValueList iterate(const Value& v);
/// len(v) where Python has it.
int64_t length(const Value& v);
/// Fails as Python does for a dict key or set member that cannot be hashed (a list, a dict, a
/// tuple holding one).
void require_hashable(const Value& v);
/// `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
/// Python's json.dumps(v, ensure_ascii, indent, separators, sort_keys); indent < 0 is None.
struct JsonStyle {
  bool ensure_ascii = false;
  std::string indent;
  bool has_indent = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style);
/// The binary operators of expressions, with Python's semantics.
enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
Value binary(BinOp op, const Value& a, const Value& b);
/// a[key] and a.name as jinja2's sandbox resolves them (item then attribute, or attribute then
/// item); what is missing is undefined.
Value get_item(const Value& obj, const Value& key);
Value get_attr(const Value& obj, const std::string& name);
/// obj[start:stop:step]; absent bounds are undefined values.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// ---- Unicode helpers (jinja_value.cc) ----
/// Python's str.isspace for one code point.
bool is_space(char32_t c);
std::u32string to_u32(std::string_view s);
std::string to_utf8(std::u32string_view s);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_cased_letter(char32_t c);

// ---- Python's str operations (jinja_strings.cc), on code points ----
/// s.strip(chars), lstrip (right = false), rstrip (left = false); chars none or undefined:
/// whitespace.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
/// s.split(sep, maxsplit) or s.rsplit(...); no sep: runs of whitespace.
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
/// str.title(): upper case after a character without case, lower case after one with.
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
/// s.replace(old, new, count); count < 0: all.
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
/// s.center / ljust / rjust / zfill (`how`) to `width` characters.
std::string py_pad(const std::string& s, int64_t width, const std::string& fill, const std::string& how);
/// `fmt % args`: %s %r %d %i %o %x %X %e %f %g %%, with flags, width and precision.
std::string printf_format(const std::string& fmt, const Value& args);

// ---- Syntax tree ----
struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

/// A filter: subject, the call's arguments. A test returns a bool.
using FilterFn = Value (*)(Interp&, const Value&, CallArgs&);
using TestFn = bool (*)(Interp&, const Value&, CallArgs&);
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

enum class ExprOp : uint8_t {
  kConst,
  kName,
  kSubject,  // the value a {% filter %} or {% set %} block's filters apply to
  kList,
  kTuple,
  kDict,     // args: key0, value0, key1, value1, ...
  kGetattr,  // args[0].name
  kGetitem,  // args[0][args[1]]
  kSlice,    // args: start, stop, step (each may be null); only as a kGetitem key
  kCall,     // args[0](args[1:]); the last `keywords.size()` args are keyword arguments
  kFilter,   // args[0] | name(args[1:])
  kTest,     // args[0] is name(args[1:])
  kNeg,
  kPos,
  kNot,
  kAnd,
  kOr,
  kBinary,   // args[0] binop args[1]
  kConcat,   // args joined with ~
  kCompare,  // args[0] cmp[0] args[1] cmp[1] args[2] ... (chained as Python's)
  kCond,     // args: then, condition, else (may be null: undefined)
};
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  ExprOp op;
  int line = 0;
  Value value;       // kConst
  std::string name;  // kName, kGetattr, kFilter, kTest
  std::vector<ExprPtr> args;
  std::vector<std::string> keywords;
  std::vector<CmpOp> cmp;
  BinOp binop = BinOp::kAdd;
  FilterFn filter = nullptr;  // kFilter: null when unknown (only allowed inside an if: fails when run)
  TestFn test = nullptr;      // kTest: likewise
};

/// Where {% for %} and {% set %} put values: one name, names to unpack a tuple into, or a
/// namespace attribute (`set ns.attr`).
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string attr;  // non-empty: names[0].attr
};

enum class StmtKind : uint8_t {
  kText,
  kOutput,       // exprs: printed one after the other
  kIf,           // exprs: one condition per branch; bodies: one per branch, then the else body
  kFor,          // exprs: iterable, filter (may be null); bodies: body, else body
  kSet,          // target = exprs[0]
  kSetBlock,     // target = the body's output, through exprs[0]'s filters if not null
  kMacro,        // name(params with defaults: exprs aligned to the last params); bodies[0]
  kCallBlock,    // exprs[0]: the call; params: caller's; bodies[0]: caller's body
  kFilterBlock,  // exprs[0]: the filter chain; bodies[0]
  kWith,         // params = exprs, then bodies[0] in a new scope
  kScope,        // bodies[0] in a new scope ({% generation %}, a call block in transformers)
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  Target target;
  std::string name;
  std::vector<std::string> params;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};

// ---- Lexer (jinja_lex.cc) ----
enum class Tok : uint8_t {
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};
struct Token {
  Tok type;
  std::string text;  // data, name, operator, or a string literal's value
  int64_t i = 0;
  double f = 0;
  int line = 1, column = 1;
};
/// Options as jinja2's Environment has them; transformers' are the defaults.
struct Options {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};
std::vector<Token> tokenize(std::string_view source, const Options& options);

// ---- Templates ----
/// What a render can read besides its variables: the clock of strftime_now.
struct Environment {
  std::function<std::tm()> now;  // empty: the local time
};

class Template {
 public:
  /// Parses `source`; throws TemplateError ("line L, column C: ...").
  static std::shared_ptr<const Template> parse(std::string_view source, const Options& options = {});
  /// Renders with the variables of `vars` (a dict with string keys); throws TemplateError
  /// ("line L: ...").
  std::string render(const Dict& vars, const Environment& env = {}) const;

  Body body;
};

// ---- Interpreter internals shared by jinja_eval.cc and the builtins ----
/// Binds call arguments to named parameters as Python does: positionals in order, then
/// keywords by name; fails on too many or unknown ones. `what` names the callee in messages.
ValueList bind_args(CallArgs& args, std::initializer_list<const char*> params, const char* what);
/// Calls a callable value (a RenderFailure for anything else).
Value call_value(Interp& in, const Value& callee, CallArgs& args);
/// Applies a test by name (for select / reject); fails for an unknown one.
bool apply_test(Interp& in, const std::string& name, const Value& v, CallArgs& args);
/// Applies a filter by name (for map); fails for an unknown one.
Value apply_filter(Interp& in, const std::string& name, const Value& v, CallArgs& args);
/// Hands a namespace object to the interpreter, which empties it when the render ends (a
/// namespace may hold itself, a cycle its shared pointer would never free).
void own_object(Interp& in, std::shared_ptr<Object> o);
/// The globals every template sees: range, namespace, dict, raise_exception, strftime_now, ...
Value find_global(const std::string& name, const Environment& env);
/// The bound method `name` of a string, dict or list, or undefined.
Value find_method(const Value& obj, const std::string& name);

}  // namespace tg::jinja
