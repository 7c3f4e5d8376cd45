// jinja2's filters and tests, with the arguments and results jinja2 3.1 gives them (tojson is
// transformers' own: json.dumps with ensure_ascii off). Filters that jinja2 implements as
// generators (select, reject, selectattr, rejectattr, map, unique, items, reverse of a list)
// return an iterator value, which is always true and can be iterated once, as in Python.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "text/jinja.h"
#include "text/unicode.h"

namespace tg::jinja {
namespace {

int64_t int_arg(const Value& v, int64_t fallback, const char* what) {
  if (v.is_undefined()) return fallback;
  if (!v.is_int() && !v.is_bool()) fail(std::string(what) + ": expected an integer, got " + type_name(v));
  return v.integer();
}

// jinja2's attribute getter for filters: "a.b.0" looks up each part as a subscript (an item,
// else an attribute); a `fallback` replaces an undefined result.
Value lookup_path(const Value& item, const Value& attribute, const Value& fallback = Value()) {
  Value v = item;
  if (attribute.is_int()) {
    v = get_item(v, attribute);
  } else {
    const std::string path = to_str(attribute);
    size_t pos = 0;
    while (true) {
      const size_t dot = path.find('.', pos);
      const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
      const bool digits =
          !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      // jinja2 turns a part of digits into an int; one too large for 64 bits indexes nothing.
      const size_t significant =
          digits ? part.size() - std::min(part.find_first_not_of('0'), part.size()) : 0;
      const bool fits = digits && significant <= 18;
      if (digits && !fits)
        v = Value::undefined(type_name(v) + " object has no element " + part);
      else
        v = get_item(v, fits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
      if (dot == std::string::npos) break;
      pos = dot + 1;
    }
  }
  if (v.is_undefined() && !fallback.is_undefined() && !fallback.is_none()) return fallback;
  return v;
}

Value ignore_case(const Value& v) { return v.is_string() ? Value(py_lower(v.str())) : v; }

// Python's sorted(items, key=key, reverse=reverse): stable either way.
void sort_by(std::vector<std::pair<Value, Value>>& keyed, bool reverse) {
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first) == -1 : compare(a.first, b.first) == -1;
  });
}

Value f_abs(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "abs");
  if (v.kind() == Value::Kind::kFloat) return Value(std::fabs(v.number()));
  if (v.is_int() || v.is_bool())
    return v.integer() < 0 ? binary(BinOp::kSub, Value(0), v) : Value(v.integer());
  fail("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"name"}, "attr");
  if (v.is_dict()) return find_method(v, to_str(a[0]));
  return get_attr(v, to_str(a[0]));
}

Value f_capitalize(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "capitalize");
  return Value(py_capitalize(to_str(v)));
}

Value f_center(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"width"}, "center");
  return Value(py_pad(to_str(v), int_arg(a[0], 80, "center"), " ", "center"));
}

Value f_default(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"default_value", "boolean"}, "default");
  if (v.is_undefined() || (truthy(a[1]) && !truthy(v))) return a[0].is_undefined() ? Value("") : a[0];
  return v;
}

Value f_dictsort(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"case_sensitive", "by", "reverse"}, "dictsort");
  if (!v.is_dict()) fail("dictsort: expected a dict, got " + type_name(v));
  const std::string by = a[1].is_undefined() ? "key" : to_str(a[1]);
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, x] : v.dict_data().items) {
    const Value& key = by == "key" ? k : x;
    keyed.emplace_back(truthy(a[0]) ? key : ignore_case(key), Value::tuple({k, x}));
  }
  sort_by(keyed, truthy(a[2]));
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_escape(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "escape");
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

Value f_first(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "first");
  if (v.kind() == Value::Kind::kIterator) {
    Iterator& it = v.iterator_data();
    if (it.pos < it.items.size()) return it.items[it.pos++];
  } else if (const ValueList items = iterate(v); !items.empty()) {
    return items[0];
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "last");
  if (v.kind() == Value::Kind::kIterator) fail("'" + type_name(v) + "' object is not reversible");
  const ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

// Python's float(str): surrounding whitespace, underscores between digits, inf and nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s = py_strip(text, Value(), true, true);
  std::erase(s, '_');
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  const std::string low = py_lower(s);
  if (low.find("0x") != std::string::npos) return std::nullopt;
  if (low.find("inf") != std::string::npos && low != "inf" && low != "+inf" && low != "-inf" &&
      low != "infinity" && low != "+infinity" && low != "-infinity")
    return std::nullopt;
  return d;
}

Value f_float(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"default"}, "float");
  const Value fallback = a[0].is_undefined() ? Value(0.0) : a[0];
  if (v.is_undefined()) fail(v.str());
  if (v.is_number()) return Value(v.number());
  if (v.is_string())
    if (const auto d = parse_float(v.str())) return Value(*d);
  return fallback;
}

Value f_int(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"default", "base"}, "int");
  const Value fallback = a[0].is_undefined() ? Value(0) : a[0];
  const int64_t base = int_arg(a[1], 10, "int");
  if (v.is_undefined()) fail(v.str());
  if (v.is_int() || v.is_bool()) return Value(v.integer());
  if (v.kind() == Value::Kind::kFloat) {
    if (!std::isfinite(v.number()) || std::fabs(v.number()) > 9.2e18) return fallback;
    return Value(static_cast<int64_t>(std::trunc(v.number())));
  }
  if (!v.is_string()) return fallback;
  std::string s = py_strip(v.str(), Value(), true, true);
  std::erase(s, '_');
  if (!s.empty()) {
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (end == s.c_str() + s.size() && errno == 0 && std::isalnum(static_cast<unsigned char>(s.back())))
      return Value(static_cast<int64_t>(i));
  }
  if (const auto d = parse_float(v.str()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
    return Value(static_cast<int64_t>(std::trunc(*d)));
  return fallback;
}

Value f_indent(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"width", "first", "blank"}, "indent");
  const int64_t width = a[0].is_string() ? 0 : std::max<int64_t>(0, int_arg(a[0], 4, "indent"));
  check_size(static_cast<uint64_t>(width), "indent");
  const std::string indent = a[0].is_string() ? a[0].str() : std::string(static_cast<size_t>(width), ' ');
  const std::vector<std::string> lines = py_splitlines(to_str(v) + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    check_grow(out.size(), 1 + indent.size() + lines[i].size(), "indent");
    if (i) out += "\n";
    if (i > 0 && (truthy(a[2]) || !lines[i].empty())) out += indent;
    out += lines[i];
  }
  return Value(truthy(a[1]) ? indent + out : out);
}

Value f_items(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "items");
  if (v.is_undefined()) return Value::iterator({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, x] : v.dict_data().items) out.push_back(Value::tuple({k, x}));
  return Value::iterator(std::move(out));
}

Value f_join(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"d", "attribute"}, "join");
  const std::string sep = a[0].is_undefined() ? "" : to_str(a[0]);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    out +=
        (first ? "" : sep) + to_str(a[1].is_undefined() || a[1].is_none() ? item : lookup_path(item, a[1]));
    check_size(out.size(), "join");
    first = false;
  }
  return Value(std::move(out));
}

Value f_length(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "length");
  return Value(length(v));
}

Value f_list(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "list");
  return Value::list(iterate(v));
}

Value f_lower(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "lower");
  return Value(py_lower(to_str(v)));
}

Value f_upper(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "upper");
  return Value(py_upper(to_str(v)));
}

Value f_map(Interp& in, const Value& v, CallArgs& args) {
  ValueList out;
  if (!truthy(v)) return Value::iterator({});
  if (args.pos.empty()) {
    Value attribute, fallback;
    for (auto& [k, x] : args.kw) {
      if (k == "attribute")
        attribute = x;
      else if (k == "default")
        fallback = x;
      else
        fail("Unexpected keyword argument '" + k + "'");
    }
    if (attribute.is_undefined()) fail("map requires a filter argument");
    for (const Value& item : iterate(v)) out.push_back(lookup_path(item, attribute, fallback));
  } else {
    const std::string name = to_str(args.pos[0]);
    CallArgs rest{ValueList(args.pos.begin() + 1, args.pos.end()), args.kw};
    for (const Value& item : iterate(v)) {
      CallArgs each = rest;
      out.push_back(apply_filter(in, name, item, each));
    }
  }
  return Value::iterator(std::move(out));
}

Value min_max(const Value& v, CallArgs& args, bool max) {
  const ValueList a = bind_args(args, {"case_sensitive", "attribute"}, max ? "max" : "min");
  const ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const auto key = [&](const Value& item) {
    const Value k = a[1].is_undefined() || a[1].is_none() ? item : lookup_path(item, a[1]);
    return truthy(a[0]) ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (compare(k, best_key) == (max ? 1 : -1)) best = i, best_key = std::move(k);
  }
  return items[best];
}
Value f_max(Interp&, const Value& v, CallArgs& args) { return min_max(v, args, true); }
Value f_min(Interp&, const Value& v, CallArgs& args) { return min_max(v, args, false); }

// select / reject / selectattr / rejectattr.
Value select(Interp& in, const Value& v, CallArgs& args, bool by_attr, bool keep) {
  ValueList out;
  if (!truthy(v)) return Value::iterator({});
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (args.pos.empty()) fail("Missing parameter for attribute name");
    attribute = args.pos[next++];
  }
  const bool has_test = next < args.pos.size();
  const std::string test = has_test ? to_str(args.pos[next++]) : "";
  const CallArgs rest{ValueList(args.pos.begin() + static_cast<std::ptrdiff_t>(next), args.pos.end()),
                      args.kw};
  for (const Value& item : iterate(v)) {
    const Value subject = by_attr ? lookup_path(item, attribute) : item;
    CallArgs each = rest;
    const bool pass = has_test ? apply_test(in, test, subject, each) : truthy(subject);
    if (pass == keep) out.push_back(item);
  }
  return Value::iterator(std::move(out));
}
Value f_select(Interp& in, const Value& v, CallArgs& a) { return select(in, v, a, false, true); }
Value f_reject(Interp& in, const Value& v, CallArgs& a) { return select(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, CallArgs& a) { return select(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, CallArgs& a) { return select(in, v, a, true, false); }

Value f_replace(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"old", "new", "count"}, "replace");
  return Value(
      py_replace(to_str(v), to_str(a[0]), to_str(a[1]), a[2].is_none() ? -1 : int_arg(a[2], -1, "replace")));
}

Value f_reverse(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "reverse");
  if (v.is_string()) return slice(v, Value(), Value(), Value(-1));
  ValueList items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.kind() == Value::Kind::kIterator) return Value::list(std::move(items));
  return Value::iterator(std::move(items), v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
}

// Python's round(x, n): the float nearest to x rounded to n decimals, ties to even on the
// exact binary value (what printf's correctly rounded %.*f gives).
Value f_round(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"precision", "method"}, "round");
  const int64_t precision = int_arg(a[0], 0, "round");
  const std::string method = a[1].is_undefined() ? "common" : to_str(a[1]);
  if (method != "common" && method != "ceil" && method != "floor")
    fail("method must be common, ceil or floor");
  if (v.is_undefined()) fail(v.str());
  if (!v.is_number()) fail("type " + type_name(v) + " doesn't define __round__ method");
  const double x = v.number();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  if (method != "common")
    return Value((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  if (v.kind() != Value::Kind::kFloat) return Value(v.integer());  // round(int, n) stays an int
  if (!std::isfinite(x) || precision > 300) return Value(x);
  if (precision < 0)
    return Value(std::nearbyint(x / std::pow(10.0, static_cast<double>(-precision))) *
                 std::pow(10.0, static_cast<double>(-precision)));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
  return Value(std::strtod(buf, nullptr));
}

Value f_safe(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "safe");
  return v.is_undefined() ? Value("") : v;
}

Value f_sort(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"reverse", "case_sensitive", "attribute"}, "sort");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : iterate(v)) {
    const Value k = a[2].is_undefined() || a[2].is_none() ? item : lookup_path(item, a[2]);
    keyed.emplace_back(truthy(a[1]) ? k : ignore_case(k), item);
  }
  sort_by(keyed, truthy(a[0]));
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_string(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "string");
  return Value(to_str(v));
}

Value f_sum(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"attribute", "start"}, "sum");
  Value total = a[1].is_undefined() ? Value(0) : a[1];
  for (const Value& item : iterate(v))
    total =
        binary(BinOp::kAdd, total, a[0].is_undefined() || a[0].is_none() ? item : lookup_path(item, a[0]));
  return total;
}

// jinja2's title filter: words start after "-", whitespace, "(", "{", "[" or "<".
Value f_title(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "title");
  std::u32string u = to_u32(to_str(v));
  bool start = true;
  for (char32_t& c : u) {
    const bool boundary = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (boundary) {
      start = true;
      continue;
    }
    c = start ? to_upper(c) : to_lower(c);
    start = false;
  }
  return Value(to_utf8(u));
}

Value f_tojson(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  JsonStyle style;
  style.ensure_ascii = truthy(a[0]);
  style.sort_keys = truthy(a[3]);
  if (!a[1].is_undefined() && !a[1].is_none()) {
    style.has_indent = true;
    const int64_t width = a[1].is_string() ? 0 : std::max<int64_t>(0, int_arg(a[1], 0, "tojson indent"));
    check_size(static_cast<uint64_t>(width), "tojson indent");
    style.indent = a[1].is_string() ? a[1].str() : std::string(static_cast<size_t>(width), ' ');
    style.item_sep = ",";
  }
  if (!a[2].is_undefined() && !a[2].is_none()) {
    const ValueList seps = iterate(a[2]);
    if (seps.size() != 2) fail("tojson: separators must be a pair of strings");
    style.item_sep = to_str(seps[0]);
    style.key_sep = to_str(seps[1]);
  }
  return Value(to_json(v, style));
}

Value f_trim(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"chars"}, "trim");
  return Value(py_strip(to_str(v), a[0], true, true));
}

Value f_truncate(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"length", "killwords", "end", "leeway"}, "truncate");
  const std::string s = to_str(v);
  const int64_t len = int_arg(a[0], 255, "truncate"), leeway = int_arg(a[3], 5, "truncate");
  const std::string end = a[2].is_undefined() ? "..." : to_str(a[2]);
  const int64_t n = static_cast<int64_t>(to_u32(s).size()), end_n = static_cast<int64_t>(to_u32(end).size());
  if (len < end_n) fail("expected length >= " + std::to_string(end_n) + ", got " + std::to_string(len));
  if (leeway < 0) fail("expected leeway >= 0, got " + std::to_string(leeway));
  if (len > INT64_MAX - leeway || n <= len + leeway) return Value(s);
  const std::string head = slice(Value(s), Value(), Value(len - end_n), Value()).str();
  if (truthy(a[1])) return Value(head + end);
  return Value(py_split(head, std::string(" "), 1, true)[0] + end);
}

Value f_unique(Interp&, const Value& v, CallArgs& args) {
  const ValueList a = bind_args(args, {"case_sensitive", "attribute"}, "unique");
  ValueList out, seen;
  for (const Value& item : iterate(v)) {
    Value k = a[1].is_undefined() || a[1].is_none() ? item : lookup_path(item, a[1]);
    if (!truthy(a[0])) k = ignore_case(k);
    require_hashable(k);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(std::move(k));
    out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

// Runs of Python's \w (letters, numbers and "_").
Value f_wordcount(Interp&, const Value& v, CallArgs& args) {
  bind_args(args, {}, "wordcount");
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : to_u32(to_str(v))) {
    const text::CharClass cls = text::char_class(c);
    const bool w = c == '_' || cls == text::CharClass::kLetter || cls == text::CharClass::kNumber;
    if (w && !in_word) ++words;
    in_word = w;
  }
  return Value(words);
}

Value f_format(Interp&, const Value& v, CallArgs& args) {
  if (!args.kw.empty()) fail("format: keyword arguments are not supported");
  return Value(printf_format(to_str(v), Value::tuple(args.pos)));
}

struct NamedFilter {
  const char* name;
  FilterFn fn;
};
constexpr NamedFilter kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

// ---- Tests ----

const Value& arg0(CallArgs& args, const char* what) {
  if (args.pos.size() + args.kw.size() != 1) fail(std::string("the test '") + what + "' takes one argument");
  return args.pos.empty() ? args.kw[0].second : args.pos[0];
}

using K = Value::Kind;
bool t_defined(Interp&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interp&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interp&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_false(Interp&, const Value& v, CallArgs&) { return v.is_bool() && !v.boolean(); }
bool t_true(Interp&, const Value& v, CallArgs&) { return v.is_bool() && v.boolean(); }
bool t_integer(Interp&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Interp&, const Value& v, CallArgs&) { return v.kind() == K::kFloat; }
bool t_number(Interp&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interp&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interp&, const Value& v, CallArgs&) { return v.is_dict(); }
bool t_iterable(Interp&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict() || v.kind() == K::kIterator;
}
bool t_sequence(Interp&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}
bool t_callable(Interp&, const Value& v, CallArgs&) { return v.kind() == K::kFunction || v.is_undefined(); }
bool t_sameas(Interp&, const Value& v, CallArgs& a) {
  const Value& o = arg0(a, "sameas");
  if (v.is_none() || v.is_bool()) return v.kind() == o.kind() && (v.is_none() || v.boolean() == o.boolean());
  if (v.is_int() && o.is_int()) return v.integer() == o.integer() && v.integer() >= -5 && v.integer() <= 256;
  return v.same_object(o);
}
bool t_eq(Interp&, const Value& v, CallArgs& a) { return equals(v, arg0(a, "eq")); }
bool t_ne(Interp&, const Value& v, CallArgs& a) { return !equals(v, arg0(a, "ne")); }
bool t_lt(Interp&, const Value& v, CallArgs& a) { return compare(v, arg0(a, "lt")) == -1; }
bool t_le(Interp&, const Value& v, CallArgs& a) {
  const int c = compare(v, arg0(a, "le"));
  return c == -1 || c == 0;
}
bool t_gt(Interp&, const Value& v, CallArgs& a) { return compare(v, arg0(a, "gt")) == 1; }
bool t_ge(Interp&, const Value& v, CallArgs& a) {
  const int c = compare(v, arg0(a, "ge"));
  return c == 1 || c == 0;
}
bool t_in(Interp&, const Value& v, CallArgs& a) { return contains(arg0(a, "in"), v); }
bool t_odd(Interp&, const Value& v, CallArgs&) { return equals(binary(BinOp::kMod, v, Value(2)), Value(1)); }
bool t_even(Interp&, const Value& v, CallArgs&) { return equals(binary(BinOp::kMod, v, Value(2)), Value(0)); }
bool t_divisibleby(Interp&, const Value& v, CallArgs& a) {
  return equals(binary(BinOp::kMod, v, arg0(a, "divisibleby")), Value(0));
}
bool t_lower(Interp&, const Value& v, CallArgs&) {
  const std::string s = to_str(v);
  return py_lower(s) == s && py_upper(s) != s;
}
bool t_upper(Interp&, const Value& v, CallArgs&) {
  const std::string s = to_str(v);
  return py_upper(s) == s && py_lower(s) != s;
}
bool t_escaped(Interp&, const Value&, CallArgs&) { return false; }
bool t_filter(Interp&, const Value& v, CallArgs&) { return v.is_string() && find_filter(v.str()) != nullptr; }
bool t_test(Interp&, const Value& v, CallArgs&) { return v.is_string() && find_test(v.str()) != nullptr; }

struct NamedTest {
  const char* name;
  TestFn fn;
};
constexpr NamedTest kTests[] = {
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"none", t_none},
    {"boolean", t_boolean},
    {"false", t_false},
    {"true", t_true},
    {"integer", t_integer},
    {"float", t_float},
    {"number", t_number},
    {"string", t_string},
    {"mapping", t_mapping},
    {"iterable", t_iterable},
    {"sequence", t_sequence},
    {"callable", t_callable},
    {"sameas", t_sameas},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"ne", t_ne},
    {"!=", t_ne},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<", t_lt},
    {"le", t_le},
    {"<=", t_le},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {">", t_gt},
    {"ge", t_ge},
    {">=", t_ge},
    {"in", t_in},
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"lower", t_lower},
    {"upper", t_upper},
    {"escaped", t_escaped},
    {"filter", t_filter},
    {"test", t_test},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (name == f.name) return f.fn;
  return nullptr;
}

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (name == t.name) return t.fn;
  return nullptr;
}

bool apply_test(Interp& in, const std::string& name, const Value& v, CallArgs& args) {
  const TestFn fn = find_test(name);
  if (!fn) fail("No test named '" + name + "'.");
  return fn(in, v, args);
}

Value apply_filter(Interp& in, const std::string& name, const Value& v, CallArgs& args) {
  const FilterFn fn = find_filter(name);
  if (!fn) fail("No filter named '" + name + "'.");
  return fn(in, v, args);
}

}  // namespace tg::jinja
