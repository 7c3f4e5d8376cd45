// Python's str, dict and list methods as templates call them ("a b".split(), d.get("k"),
// d.items()), argument binding, and the globals (range, namespace, dict, raise_exception,
// strftime_now, joiner). Methods that would change a list or dict are refused, as the
// immutable sandbox does.
#include <algorithm>
#include <cctype>
#include <ctime>
#include <functional>
#include <cstdint>
#include <optional>

#include "text/jinja.h"
#include "text/unicode.h"

namespace tg::jinja {

ValueList bind_args(CallArgs& args, std::initializer_list<const char*> params, const char* what) {
  ValueList out(params.size());
  std::vector<bool> set(params.size(), false);
  if (args.pos.size() > params.size())
    fail(std::string(what) + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
         std::to_string(args.pos.size()) + " given)");
  for (size_t i = 0; i < args.pos.size(); ++i) out[i] = args.pos[i], set[i] = true;
  for (auto& [k, v] : args.kw) {
    size_t i = 0;
    for (const char* p : params) {
      if (k == p) break;
      ++i;
    }
    if (i == params.size()) fail(std::string(what) + "() got an unexpected keyword argument '" + k + "'");
    if (set[i]) fail(std::string(what) + "() got multiple values for argument '" + k + "'");
    out[i] = v, set[i] = true;
  }
  return out;
}

namespace {

bool is_one_of(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

std::string arg_str(const Value& v, const char* what) {
  if (!v.is_string()) fail(std::string(what) + " must be str, not " + type_name(v));
  return v.str();
}

int64_t arg_int(const Value& v, int64_t fallback, const char* what) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_int() && !v.is_bool())
    fail(std::string(what) + ": '" + type_name(v) + "' object cannot be interpreted as an integer");
  return v.integer();
}

// Python's startswith / endswith: a prefix or a tuple of them, within s[start:end].
bool affix(const std::string& self, const Value& what, const Value& start, const Value& end, bool prefix) {
  const Value part = slice(Value(self), start, end, Value());
  const std::string& s = part.str();
  const auto one = [&](const Value& a) {
    const std::string t = arg_str(a, prefix ? "startswith first arg" : "endswith first arg");
    return t.size() <= s.size() &&
           (prefix ? s.compare(0, t.size(), t) == 0 : s.compare(s.size() - t.size(), t.size(), t) == 0);
  };
  if (what.kind() == Value::Kind::kTuple) {
    for (const Value& a : what.items())
      if (one(a)) return true;
    return false;
  }
  return one(what);
}

Value split_result(std::vector<std::string> parts) {
  ValueList out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::list(std::move(out));
}

// "{} {0} {name}".format(...): fields without conversions or format specs.
Value str_format(const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') fail("Single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      fail("str.format: format specs and conversions are not supported");
    if (field.empty() ||
        std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      if (field.size() > 9) fail("Replacement index " + field + " out of range for positional args tuple");
      const size_t k = field.empty() ? auto_index++ : std::stoul(field);
      if (k >= args.pos.size())
        fail("Replacement index " + std::to_string(k) + " out of range for positional args tuple");
      out += to_str(args.pos[k]);
    } else {
      const auto it =
          std::find_if(args.kw.begin(), args.kw.end(), [&](const auto& kv) { return kv.first == field; });
      if (it == args.kw.end()) fail("KeyError: '" + field + "'");
      out += to_str(it->second);
    }
    check_size(out.size(), "str.format");
    i = close;
  }
  return Value(std::move(out));
}

bool str_predicate(const std::string& name, const std::string& self) {
  const std::u32string u = to_u32(self);
  if (u.empty()) return false;
  const auto all = [&](auto pred) { return std::all_of(u.begin(), u.end(), pred); };
  const auto alpha = [](char32_t c) { return text::char_class(c) == text::CharClass::kLetter; };
  const auto digit = [](char32_t c) { return c >= '0' && c <= '9'; };
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return all(digit);
  if (name == "isalpha") return all(alpha);
  if (name == "isalnum") return all([&](char32_t c) { return alpha(c) || digit(c); });
  if (name == "isspace") return all(is_space);
  if (name == "isascii") return all([](char32_t c) { return c < 0x80; });
  bool cased = false;
  for (char32_t c : u) {
    const bool up = to_lower(c) != c, low = to_upper(c) != c;
    if ((name == "islower" && up) || (name == "isupper" && low)) return false;
    cased = cased || up || low;
  }
  return cased;
}

Value string_method(const std::string& self, const std::string& name, CallArgs& args) {
  const std::string what = "str." + name;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const ValueList a = bind_args(args, {"chars"}, what.c_str());
    return Value(py_strip(self, a[0], name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const ValueList a = bind_args(args, {"sep", "maxsplit"}, what.c_str());
    const std::optional<std::string> sep =
        a[0].is_undefined() || a[0].is_none() ? std::nullopt : std::optional(arg_str(a[0], "sep"));
    return split_result(py_split(self, sep, arg_int(a[1], -1, "maxsplit"), name == "rsplit"));
  }
  if (name == "splitlines") {
    const ValueList a = bind_args(args, {"keepends"}, what.c_str());
    return split_result(py_splitlines(self, truthy(a[0])));
  }
  if (name == "startswith" || name == "endswith") {
    const ValueList a = bind_args(args, {"prefix", "start", "end"}, what.c_str());
    return Value(affix(self, a[0], a[1], a[2], name == "startswith"));
  }
  if (name == "upper") return Value(py_upper(self));
  if (name == "lower" || name == "casefold") return Value(py_lower(self));
  if (name == "title") return Value(py_title(self));
  if (name == "capitalize") return Value(py_capitalize(self));
  if (name == "swapcase") {
    std::u32string u = to_u32(self);
    for (char32_t& c : u) c = to_lower(c) != c ? to_lower(c) : to_upper(c);
    return Value(to_utf8(u));
  }
  if (name == "replace") {
    const ValueList a = bind_args(args, {"old", "new", "count"}, what.c_str());
    return Value(py_replace(self, arg_str(a[0], "replace() argument 1"),
                            arg_str(a[1], "replace() argument 2"), arg_int(a[2], -1, "count")));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const ValueList a = bind_args(args, {"sub", "start", "end"}, what.c_str());
    const std::string sub = arg_str(a[0], "must be str");
    const std::u32string hay = to_u32(self), needle = to_u32(sub);
    const int64_t n = static_cast<int64_t>(hay.size());
    int64_t lo = arg_int(a[1], 0, "start"), hi = arg_int(a[2], n, "end");
    if (lo < 0) lo = std::max<int64_t>(0, lo + n);
    if (hi < 0) hi = std::max<int64_t>(0, hi + n);
    hi = std::min(hi, n);
    const std::u32string_view window =
        lo <= hi ? std::u32string_view(hay).substr(static_cast<size_t>(lo), static_cast<size_t>(hi - lo))
                 : std::u32string_view();
    if (name == "count") {
      if (lo > hi) return Value(0);
      if (needle.empty()) return Value(static_cast<int64_t>(window.size()) + 1);
      int64_t count = 0;
      for (size_t p = window.find(needle); p != std::u32string_view::npos;
           p = window.find(needle, p + needle.size()))
        ++count;
      return Value(count);
    }
    const size_t p = lo > hi          ? std::u32string_view::npos
                     : name[0] == 'r' ? window.rfind(needle)
                                      : window.find(needle);
    if (p == std::u32string_view::npos) {
      if (name == "index" || name == "rindex") fail("substring not found");
      return Value(-1);
    }
    return Value(lo + static_cast<int64_t>(p));
  }
  if (name == "join") {
    const ValueList a = bind_args(args, {"iterable"}, what.c_str());
    std::string out;
    size_t i = 0;
    for (const Value& v : iterate(a[0])) {
      if (!v.is_string())
        fail("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(v) + " found");
      out += (i++ ? self : "") + v.str();
      check_size(out.size(), "str.join");
    }
    return Value(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const ValueList a = bind_args(args, {"affix"}, what.c_str());
    const std::string t = arg_str(a[0], what.c_str());
    if (name == "removeprefix" && self.compare(0, t.size(), t) == 0) return Value(self.substr(t.size()));
    if (name == "removesuffix" && !t.empty() && self.size() >= t.size() &&
        self.compare(self.size() - t.size(), t.size(), t) == 0)
      return Value(self.substr(0, self.size() - t.size()));
    return Value(self);
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    const ValueList a = bind_args(args, {"width", "fillchar"}, what.c_str());
    const int64_t width = arg_int(a[0], 0, "width");
    const std::string fill =
        a[1].is_undefined() ? std::string(name == "zfill" ? "0" : " ") : arg_str(a[1], "fillchar");
    return Value(py_pad(self, width, fill, name));
  }
  if (name == "format") return str_format(self, args);
  if (is_one_of(name, {"isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace", "isascii",
                       "islower", "isupper"})) {
    bind_args(args, {}, what.c_str());
    return Value(str_predicate(name, self));
  }
  fail(what + "() is not supported");
}

Value unsafe(const std::string& name, const Value& obj) {
  return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.");
}

}  // namespace

Value find_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    if (!is_one_of(name,
                   {"capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
                    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
                    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
                    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
                    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
                    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
                    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
                    "swapcase",     "title",       "translate", "upper",      "zfill"}))
      return Value();
    const std::string self = obj.str();
    return Value::function("str." + name,
                           [self, name](Interp&, CallArgs& args) { return string_method(self, name, args); });
  }
  if (obj.is_dict()) {
    if (is_one_of(name, {"clear", "pop", "popitem", "setdefault", "update"})) return unsafe(name, obj);
    if (!is_one_of(name, {"get", "items", "keys", "values", "copy", "fromkeys"})) return Value();
    return Value::function(
        "dict." + name,
        [obj, name](Interp&, CallArgs& args) -> Value {
          const Dict& d = obj.dict_data();
          if (name == "get") {
            const ValueList a = bind_args(args, {"key", "default"}, "dict.get");
            require_hashable(a[0]);
            const Value* v = d.find(a[0]);
            return v ? *v : a[1].is_undefined() ? Value::none() : a[1];
          }
          bind_args(args, {}, ("dict." + name).c_str());
          if (name == "copy") return obj;
          ValueList out;
          for (const auto& [k, v] : d.items)
            out.push_back(name == "items" ? Value::tuple({k, v}) : name == "keys" ? k : v);
          if (name == "fromkeys") fail("dict.fromkeys() is not supported");
          return Value::list(std::move(out));
        },
        &obj);
  }
  if (obj.is_sequence()) {
    if (is_one_of(name, {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"}))
      return obj.kind() == Value::Kind::kList ? unsafe(name, obj) : Value();
    if (!is_one_of(name, {"index", "count", "copy"}) || (name == "copy" && obj.kind() == Value::Kind::kTuple))
      return Value();
    return Value::function(
        type_name(obj) + "." + name,
        [obj, name](Interp&, CallArgs& args) -> Value {
          if (name == "copy") {
            bind_args(args, {}, "list.copy");
            return obj;
          }
          const ValueList a = bind_args(args, {"value"}, name.c_str());
          int64_t count = 0;
          for (size_t i = 0; i < obj.items().size(); ++i) {
            if (!equals(obj.items()[i], a[0])) continue;
            if (name == "index") return Value(static_cast<int64_t>(i));
            ++count;
          }
          if (name == "index") fail(repr(a[0]) + " is not in " + type_name(obj));
          return Value(count);
        },
        &obj);
  }
  return Value();
}

// ---- Globals ----

namespace {

Value make_range(Interp&, CallArgs& args) {
  if (!args.kw.empty()) fail("range() takes no keyword arguments");
  if (args.pos.empty() || args.pos.size() > 3)
    fail("range expected at most 3 arguments, got " + std::to_string(args.pos.size()));
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < args.pos.size(); ++i)
    v[args.pos.size() == 1 ? 1 : i] = arg_int(args.pos[i], 0, "range()");
  if (args.pos[0].is_none() || args.pos[0].is_undefined()) fail("range() needs integers");
  const int64_t start = v[0], stop = v[1], step = v[2];
  if (step == 0) fail("range() arg 3 must not be zero");
  // In unsigned arithmetic: stop - start and -step may not fit in an int64, and the items
  // (which do, lying between start and stop) are computed modulo 2^64.
  const auto ustart = static_cast<uint64_t>(start), ustop = static_cast<uint64_t>(stop);
  const uint64_t span = step > 0 ? (stop > start ? ustop - ustart : 0) : (start > stop ? ustart - ustop : 0);
  const uint64_t abs_step = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
  const uint64_t n = span == 0 ? 0 : (span - 1) / abs_step + 1;
  if (n > 100000) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  ValueList out;
  for (uint64_t i = 0; i < n; ++i)
    out.emplace_back(static_cast<int64_t>(ustart + i * static_cast<uint64_t>(step)));
  return Value::list(std::move(out));
}

// dict(*args, **kwargs) as Python's: a mapping or pairs, then keywords.
Dict make_dict(CallArgs& args, const char* what) {
  Dict d;
  if (args.pos.size() > 1)
    fail(std::string(what) + " expected at most 1 argument, got " + std::to_string(args.pos.size()));
  if (!args.pos.empty()) {
    const Value& src = args.pos[0];
    if (src.is_dict()) {
      d = src.dict_data();
    } else {
      for (const Value& pair : iterate(src)) {
        const ValueList kv = iterate(pair);
        if (kv.size() != 2)
          fail(std::string(what) + ": a sequence element has length " + std::to_string(kv.size()) +
               "; 2 is required");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.kw) d.set(Value(k), v);
  return d;
}

}  // namespace

Value find_global(const std::string& name, const Environment& env) {
  if (name == "range") return Value::function("range", make_range);
  if (name == "dict")
    return Value::function("dict", [](Interp&, CallArgs& a) { return Value::dict(make_dict(a, "dict")); });
  if (name == "namespace")
    return Value::function("namespace", [](Interp& in, CallArgs& a) {
      auto ns = std::make_shared<Object>();
      ns->type = "Namespace";
      ns->attrs = make_dict(a, "namespace");
      own_object(in, ns);
      return Value::object(std::move(ns));
    });
  if (name == "raise_exception")
    return Value::function("raise_exception", [](Interp&, CallArgs& a) -> Value {
      const ValueList m = bind_args(a, {"message"}, "raise_exception");
      throw RenderFailure{to_str(m[0]), true};
    });
  if (name == "strftime_now") {
    std::function<std::tm()> now = env.now;
    return Value::function("strftime_now", [now](Interp&, CallArgs& a) {
      const ValueList f = bind_args(a, {"format"}, "strftime_now");
      const std::string format = arg_str(f[0], "strftime() argument 1");
      std::tm tm{};
      if (now) {
        tm = now();
      } else {
        const std::time_t t = std::time(nullptr);
        localtime_r(&t, &tm);
      }
      std::string buf(256 + format.size() * 8, '\0');
      const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
      buf.resize(n);
      return Value(std::move(buf));
    });
  }
  if (name == "joiner")
    return Value::function("joiner", [](Interp&, CallArgs& a) {
      const ValueList s = bind_args(a, {"sep"}, "joiner");
      const std::string sep = s[0].is_undefined() ? ", " : to_str(s[0]);
      auto used = std::make_shared<bool>(false);
      return Value::function("joiner", [sep, used](Interp&, CallArgs&) {
        if (!*used) {
          *used = true;
          return Value("");
        }
        return Value(sep);
      });
    });
  return Value();
}

}  // namespace tg::jinja
