// Values with Python's semantics: truthiness, equality, ordering, str() and repr(), len(),
// iteration, `in`, arithmetic, subscripts and slices, json.dumps, and the Unicode helpers the
// string methods need.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "tensorgrad/errors.h"
#include "text/jinja.h"
#include "text/unicode.h"

namespace tg::jinja {

void fail(std::string message) { throw RenderFailure{std::move(message)}; }

void check_size(uint64_t size, const char* what) {
  if (size > kMaxProduced)
    fail(std::string(what) + ": the result would be larger than " + std::to_string(kMaxProduced >> 20) +
         " MiB (" + std::to_string(size) + " bytes or items), which templates may not produce");
}

// ---- Construction ----

namespace {

// One more than the deepest of `items`: the depth of a container holding them.
uint16_t depth_of(const ValueList& items) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, v.depth());
  if (d >= kMaxValueDepth)
    fail("values nest more than " + std::to_string(kMaxValueDepth) + " levels deep (lists, dicts or tuples)");
  return static_cast<uint16_t>(d + 1);
}

}  // namespace

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.depth_ = depth_of(items);
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}
Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  int deepest = 0;
  for (const auto& [key, x] : d.items) deepest = std::max({deepest, key.depth(), x.depth()});
  if (deepest >= kMaxValueDepth)
    fail("values nest more than " + std::to_string(kMaxValueDepth) + " levels deep (lists, dicts or tuples)");
  v.depth_ = static_cast<uint16_t>(deepest + 1);
  v.dict_ = std::make_shared<const Dict>(std::move(d));
  return v;
}
Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::kObject;
  v.object_ = std::move(o);
  return v;
}
Value Value::iterator(ValueList items, std::string type) {
  Value v;
  v.kind_ = Kind::kIterator;
  v.depth_ = depth_of(items);
  v.iter_ = std::make_shared<Iterator>(Iterator{std::move(items), 0, std::move(type)});
  return v;
}
Value Value::function(std::string name, std::function<Value(Interp&, CallArgs&)> call, const Value* bound) {
  Value v;
  v.kind_ = Kind::kFunction;
  if (bound) v.depth_ = depth_of({*bound});
  v.fn_ = std::make_shared<const Function>(Function{std::move(name), std::move(call)});
  return v;
}

double Value::number() const {
  if (kind_ == Kind::kFloat) return f_;
  return static_cast<double>(integer());
}

bool Value::same_object(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kNone: return true;
    case Kind::kBool: return b_ == o.b_;
    case Kind::kObject: return object_ == o.object_;
    case Kind::kIterator: return iter_ == o.iter_;
    case Kind::kFunction: return fn_ == o.fn_;
    case Kind::kList:
    case Kind::kTuple: return list_ == o.list_;
    case Kind::kDict: return dict_ == o.dict_;
    default: return false;
  }
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items)
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

// ---- Unicode ----

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Bytes that are not valid UTF-8 become U+DC80 + byte (Python's surrogateescape), so that
// to_utf8(to_u32(s)) == s for every s.
std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = n > 0 && i + n <= s.size();
    for (int k = 1; ok && k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMin[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) {
      out += static_cast<char32_t>(0xDC80 + c);
      ++i;
    } else {
      out += cp;
      i += n;
    }
  }
  return out;
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c >= 0xDC80 && c <= 0xDCFF)
      out += static_cast<char>(c - 0xDC00);
    else
      text::append_utf8(out, c);
  }
  return out;
}

namespace {

// Blocks where upper and lower case alternate: even code point upper, odd lower (or the other
// way round where `odd_upper`).
struct PairBlock {
  char32_t first, last;
  bool odd_upper;
};
constexpr PairBlock kPairBlocks[] = {
    {0x100, 0x12F, false}, {0x132, 0x137, false},   {0x139, 0x148, true},    {0x14A, 0x177, false},
    {0x179, 0x17E, true},  {0x460, 0x481, false},   {0x48A, 0x4BF, false},   {0x4C1, 0x4CE, true},
    {0x4D0, 0x52F, false}, {0x1E00, 0x1E95, false}, {0x1EA0, 0x1EFF, false},
};
// Blocks whose lower case is the upper case plus an offset.
struct OffsetBlock {
  char32_t first, last;  // upper case
  char32_t offset;
};
constexpr OffsetBlock kOffsetBlocks[] = {
    {'A', 'Z', 32},     {0xC0, 0xD6, 32},   {0xD8, 0xDE, 32},     {0x391, 0x3A1, 32},
    {0x3A3, 0x3AB, 32}, {0x388, 0x38A, 37}, {0x38E, 0x38F, 63},   {0x410, 0x42F, 32},
    {0x400, 0x40F, 80}, {0x531, 0x556, 48}, {0xFF21, 0xFF3A, 32},
};

}  // namespace

// One-to-one case mappings for ASCII, Latin-1, Latin Extended-A and Additional, Greek, Cyrillic,
// Armenian and fullwidth Latin; other characters have no case here.
char32_t to_lower(char32_t c) {
  for (const auto& b : kOffsetBlocks)
    if (c >= b.first && c <= b.last) return c + b.offset;
  for (const auto& b : kPairBlocks)
    if (c >= b.first && c <= b.last && ((c & 1) == (b.odd_upper ? 1u : 0u))) return c + 1;
  if (c == 0x386) return 0x3AC;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x178) return 0xFF;
  return c;
}

char32_t to_upper(char32_t c) {
  for (const auto& b : kOffsetBlocks)
    if (c >= b.first + b.offset && c <= b.last + b.offset) return c - b.offset;
  for (const auto& b : kPairBlocks)
    if (c >= b.first && c <= b.last && ((c & 1) != (b.odd_upper ? 1u : 0u))) return c - 1;
  switch (c) {
    case 0x3AC: return 0x386;
    case 0x3CC: return 0x38C;
    case 0x3C2: return 0x3A3;
    case 0xFF: return 0x178;
    case 0xB5: return 0x39C;
    case 0x131: return 'I';
    case 0x17F: return 'S';
    default: return c;
  }
}

bool is_cased_letter(char32_t c) { return to_lower(c) != c || to_upper(c) != c || c == 0xDF; }

// ---- Truthiness, equality, order ----

bool truthy(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined:
    case K::kNone: return false;
    case K::kBool: return v.boolean();
    case K::kInt: return v.integer() != 0;
    case K::kFloat: return v.number() != 0;
    case K::kString: return !v.str().empty();
    case K::kList:
    case K::kTuple: return !v.items().empty();
    case K::kDict: return !v.dict_data().items.empty();
    default: return true;
  }
}

namespace {

// a == b for numbers, exactly (an int64 and a double compare by value, as Python's do).
bool numbers_equal(const Value& a, const Value& b) {
  if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) return a.integer() == b.integer();
  if (a.kind() == Value::Kind::kFloat && b.kind() == Value::Kind::kFloat) return a.number() == b.number();
  const Value& i = a.kind() == Value::Kind::kFloat ? b : a;
  const double f = a.kind() == Value::Kind::kFloat ? a.number() : b.number();
  if (!std::isfinite(f) || f != std::floor(f) || std::fabs(f) > 9.2e18) return false;
  return static_cast<int64_t>(f) == i.integer();
}

int numbers_compare(const Value& a, const Value& b) {
  if (numbers_equal(a, b)) return 0;
  if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat)
    return a.integer() < b.integer() ? -1 : 1;
  const double x = a.number(), y = b.number();
  if (std::isnan(x) || std::isnan(y)) return 2;  // unordered
  return x < y ? -1 : 1;
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) return numbers_equal(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return a.str() == b.str();
    case K::kList:
    case K::kTuple: {
      const ValueList &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case K::kDict: {
      const Dict &x = a.dict_data(), &y = b.dict_data();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !equals(v, *w)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_undefined()) fail(a.str());
  if (b.is_undefined()) fail(b.str());
  if (a.is_number() && b.is_number()) return numbers_compare(a, b);
  if (a.is_string() && b.is_string()) return a.str() < b.str() ? -1 : a.str() == b.str() ? 0 : 1;
  if (a.kind() == b.kind() && a.is_sequence()) {
    const ValueList &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : x.size() == y.size() ? 0 : 1;
  }
  fail("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// ---- str, repr ----

std::string type_name(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined: return "Undefined";
    case K::kNone: return "NoneType";
    case K::kBool: return "bool";
    case K::kInt: return "int";
    case K::kFloat: return "float";
    case K::kString: return "str";
    case K::kList: return "list";
    case K::kTuple: return "tuple";
    case K::kDict: return "dict";
    case K::kObject: return v.object_data().type;
    case K::kIterator: return v.iterator_data().type;
    case K::kFunction: return "function";
  }
  return "object";
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  const std::string s(buf, r.ptr);  // [-]d[.ddd]e±XX, the shortest digits that read back
  const bool negative = s[0] == '-';
  const size_t e = s.find('e');
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  const int exponent = std::stoi(s.substr(e + 1));
  const int decpt = exponent + 1;  // the value is 0.DIGITS × 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp[16];
  std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp;
}

namespace {

// Code points Python's repr() escapes beyond ASCII (str.isprintable is false): controls,
// separators other than the space, format characters, surrogates and private use.
bool printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD || c == 0x1680 || c == 0x180E || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F) return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F))
    return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0xFFFE || c == 0xFFFF)
    return false;
  return !(c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F) || c >= 0xF0000);
}

std::string repr_string(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : to_u32(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (printable(c) && !(c >= 0xDC80 && c <= 0xDCFF)) {
      out += to_utf8(std::u32string(1, c));
    } else {
      if (c < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  return out + quote;
}

}  // namespace

namespace {

// What repr / str are printing: the namespaces open around the current value (one that holds
// itself prints as Python's dict does, "{...}") and how deep the recursion is.
struct ReprState {
  std::vector<const Object*> open;
  int depth = 0;
};

std::string str_of(const Value& v, ReprState& st);

std::string repr_of(const Value& v, ReprState& st) {
  using K = Value::Kind;
  // Containers are capped at kMaxValueDepth; namespaces holding namespaces are not.
  if (st.depth > 2 * kMaxValueDepth)
    fail("maximum recursion depth exceeded while getting the repr of an object");
  ++st.depth;
  std::string out;
  switch (v.kind()) {
    case K::kUndefined: out = "Undefined"; break;
    case K::kString: out = repr_string(v.str()); break;
    case K::kList:
    case K::kTuple: {
      const bool tuple = v.kind() == K::kTuple;
      out = tuple ? "(" : "[";
      for (size_t i = 0; i < v.items().size(); ++i) {
        out += (i ? ", " : "") + repr_of(v.items()[i], st);
        check_size(out.size(), "repr");
      }
      if (tuple && v.items().size() == 1) out += ",";
      out += tuple ? ")" : "]";
      break;
    }
    case K::kDict: {
      out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict_data().items) {
        out += (first ? "" : ", ") + repr_of(k, st) + ": " + repr_of(x, st);
        check_size(out.size(), "repr");
        first = false;
      }
      out += "}";
      break;
    }
    default: out = str_of(v, st);
  }
  --st.depth;
  return out;
}

std::string str_of(const Value& v, ReprState& st) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined: return "";
    case K::kNone: return "None";
    case K::kBool: return v.boolean() ? "True" : "False";
    case K::kInt: return std::to_string(v.integer());
    case K::kFloat: return format_float(v.number());
    case K::kString: return v.str();
    case K::kObject: {
      const Object& o = v.object_data();
      if (o.type != "Namespace") return "<" + o.type + " object>";
      if (std::find(st.open.begin(), st.open.end(), &o) != st.open.end()) return "<Namespace {...}>";
      st.open.push_back(&o);
      std::string attrs = "{";
      for (const auto& [k, x] : o.attrs.items)
        attrs += (attrs.size() > 1 ? ", " : "") + repr_of(k, st) + ": " + repr_of(x, st);
      st.open.pop_back();
      return "<Namespace " + attrs + "}>";
    }
    case K::kIterator: return "<" + v.iterator_data().type + " object>";
    case K::kFunction: return "<function " + v.function_data().name + ">";
    default: return repr_of(v, st);
  }
}

}  // namespace

std::string repr(const Value& v) {
  ReprState st;
  return repr_of(v, st);
}

std::string to_str(const Value& v) {
  ReprState st;
  return str_of(v, st);
}

// ---- Sequences ----

ValueList iterate(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined: return {};
    case K::kList:
    case K::kTuple: return v.items();
    case K::kString: {
      ValueList out;
      for (char32_t c : to_u32(v.str())) out.emplace_back(to_utf8(std::u32string(1, c)));
      return out;
    }
    case K::kDict: {
      ValueList out;
      for (const auto& kv : v.dict_data().items) out.push_back(kv.first);
      return out;
    }
    case K::kIterator: {
      Iterator& it = v.iterator_data();
      ValueList out(it.items.begin() + static_cast<std::ptrdiff_t>(it.pos), it.items.end());
      it.pos = it.items.size();
      return out;
    }
    default: fail("'" + type_name(v) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined: return 0;
    case K::kString: return static_cast<int64_t>(to_u32(v.str()).size());
    case K::kList:
    case K::kTuple: return static_cast<int64_t>(v.items().size());
    case K::kDict: return static_cast<int64_t>(v.dict_data().items.size());
    default: fail("object of type '" + type_name(v) + "' has no len()");
  }
}

void require_hashable(const Value& v) {
  if (v.kind() == Value::Kind::kList || v.is_dict()) fail("unhashable type: '" + type_name(v) + "'");
  if (v.kind() == Value::Kind::kTuple)
    for (const Value& x : v.items()) require_hashable(x);
}

bool contains(const Value& haystack, const Value& needle) {
  using K = Value::Kind;
  switch (haystack.kind()) {
    case K::kUndefined: return false;
    case K::kString:
      if (!needle.is_string())
        fail("'in <string>' requires string as left operand, not " + type_name(needle));
      return haystack.str().find(needle.str()) != std::string::npos;
    case K::kList:
    case K::kTuple:
      for (const Value& x : haystack.items())
        if (equals(x, needle)) return true;
      return false;
    case K::kDict: require_hashable(needle); return haystack.dict_data().find(needle) != nullptr;
    case K::kIterator: {
      Iterator& it = haystack.iterator_data();
      while (it.pos < it.items.size())
        if (equals(it.items[it.pos++], needle)) return true;
      return false;
    }
    default: fail("argument of type '" + type_name(haystack) + "' is not iterable");
  }
}

// ---- JSON ----

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : to_u32(s)) {
    char buf[16];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {
            const char32_t u = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (u >> 10)),
                          static_cast<unsigned>(0xDC00 + (u & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          out += to_utf8(std::u32string(1, c));
        }
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, const JsonStyle& style, int depth);

void json_newline(std::string& out, const JsonStyle& style, int depth) {
  check_grow(out.size(), 1 + style.indent.size() * static_cast<uint64_t>(depth), "tojson");
  out += '\n';
  for (int i = 0; i < depth; ++i) out += style.indent;
}

std::string json_key(const Value& k, const JsonStyle& style) {
  if (k.is_string()) return k.str();
  if (k.is_bool()) return k.boolean() ? "true" : "false";
  if (k.is_none()) return "null";
  if (k.is_int()) return std::to_string(k.integer());
  if (k.kind() == Value::Kind::kFloat) {
    std::string s;
    json_value(s, k, style, 0);
    return s;
  }
  fail("keys must be str, int, float, bool or None, not " + type_name(k));
}

void json_container(std::string& out, const Value& v, const JsonStyle& style, int depth) {
  const bool is_dict = v.is_dict();
  std::vector<std::pair<std::string, const Value*>> members;
  if (is_dict) {
    for (const auto& [k, x] : v.dict_data().items) members.emplace_back(json_key(k, style), &x);
    if (style.sort_keys)
      std::stable_sort(members.begin(), members.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
  } else {
    for (const Value& x : v.items()) members.emplace_back(std::string(), &x);
  }
  out += is_dict ? '{' : '[';
  if (members.empty()) {
    out += is_dict ? '}' : ']';
    return;
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (i) out += style.item_sep;
    if (style.has_indent) json_newline(out, style, depth + 1);
    if (is_dict) {
      json_string(out, members[i].first, style.ensure_ascii);
      out += style.key_sep;
    }
    json_value(out, *members[i].second, style, depth + 1);
  }
  if (style.has_indent) json_newline(out, style, depth);
  out += is_dict ? '}' : ']';
}

void json_value(std::string& out, const Value& v, const JsonStyle& style, int depth) {
  using K = Value::Kind;
  if (depth > 200) fail("tojson: the value nests too deeply");
  switch (v.kind()) {
    case K::kNone: out += "null"; return;
    case K::kBool: out += v.boolean() ? "true" : "false"; return;
    case K::kInt: out += std::to_string(v.integer()); return;
    case K::kFloat: {
      const double f = v.number();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f < 0 ? "-Infinity" : "Infinity") : format_float(f);
      return;
    }
    case K::kString: json_string(out, v.str(), style.ensure_ascii); return;
    case K::kList:
    case K::kTuple:
    case K::kDict: json_container(out, v, style, depth); return;
    default: fail("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_value(out, v, style, 0);
  return out;
}

// ---- Subscripts ----

namespace {

std::string undefined_attr_hint(const Value& obj, const std::string& name) {
  return "'" + type_name(obj) + " object' has no attribute '" + name + "'";
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  using K = Value::Kind;
  if (obj.is_undefined()) fail(obj.str());
  if (!name.empty() && name[0] == '_')
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) +
                            "' object is unsafe.");
  if (obj.kind() == K::kObject) {
    if (const Value* v = obj.object_data().attrs.find(Value(name))) return *v;
    return Value::undefined(undefined_attr_hint(obj, name));
  }
  if (Value m = find_method(obj, name); !m.is_undefined() || !m.str().empty()) return m;
  if (obj.is_dict())
    if (const Value* v = obj.dict_data().find(Value(name))) return *v;
  return Value::undefined(undefined_attr_hint(obj, name));
}

Value get_item(const Value& obj, const Value& key) {
  using K = Value::Kind;
  if (obj.is_undefined()) fail(obj.str());
  if ((obj.is_sequence() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    const int64_t n = length(obj);
    int64_t i = key.integer();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_string())
        return Value(to_utf8(std::u32string(1, to_u32(obj.str())[static_cast<size_t>(i)])));
      return obj.items()[static_cast<size_t>(i)];
    }
    return Value::undefined(type_name(obj) + " object has no element " + std::to_string(key.integer()));
  }
  if (obj.is_dict())
    if (const Value* v = obj.dict_data().find(key)) return *v;
  if (key.is_string()) {
    if (obj.kind() == K::kObject || obj.is_dict() || obj.is_string() || obj.is_sequence())
      return get_attr(obj, key.str());
    return Value::undefined(undefined_attr_hint(obj, key.str()));
  }
  return Value::undefined(type_name(obj) + " object has no element " + repr(key));
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  // Slices are plain Python subscripts in jinja2 (not its lenient getitem): they fail on what
  // cannot be sliced.
  if (obj.is_undefined()) fail(obj.str());
  if (obj.is_dict()) fail("unhashable type: 'slice'");
  if (!obj.is_sequence() && !obj.is_string()) fail("'" + type_name(obj) + "' object is not subscriptable");
  const auto index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) fail(std::string("slice ") + what + " must be an integer or None");
    return v.integer();
  };
  const int64_t n = length(obj);
  const int64_t st = index(step, "step").value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  // Python's PySlice_AdjustIndices.
  const auto adjust = [&](std::optional<int64_t> i, int64_t fallback) {
    if (!i) return fallback;
    int64_t v = *i;
    if (v < 0) {
      v += n;
      if (v < 0) v = st < 0 ? -1 : 0;
    } else if (v >= n) {
      v = st < 0 ? n - 1 : n;
    }
    return v;
  };
  const int64_t lo = adjust(index(start, "start"), st < 0 ? n - 1 : 0);
  const int64_t hi = adjust(index(stop, "stop"), st < 0 ? -1 : n);
  // The number of picks first, in unsigned arithmetic: stepping i past hi could overflow for
  // a huge step (and -st does for INT64_MIN). lo and hi lie in [-1, n], so lo + k * st does not.
  const uint64_t span = st > 0 ? (hi > lo ? static_cast<uint64_t>(hi - lo) : 0)
                               : (lo > hi ? static_cast<uint64_t>(lo - hi) : 0);
  const uint64_t abs_step = st > 0 ? static_cast<uint64_t>(st) : 0 - static_cast<uint64_t>(st);
  const uint64_t count = span == 0 ? 0 : (span - 1) / abs_step + 1;
  std::vector<size_t> picks;
  for (uint64_t k = 0; k < count; ++k)
    picks.push_back(static_cast<size_t>(lo + static_cast<int64_t>(k) * st));
  if (obj.is_string()) {
    const std::u32string u = to_u32(obj.str());
    std::u32string out;
    for (size_t i : picks) out += u[i];
    return Value(to_utf8(out));
  }
  ValueList out;
  for (size_t i : picks) out.push_back(obj.items()[i]);
  return obj.kind() == Value::Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace tg::jinja
