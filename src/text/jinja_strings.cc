// Python's str operations on code points (strip, split, case mappings, replace, padding,
// %-formatting), shared by the string methods and the filters.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cmath>

#include "text/jinja.h"

namespace tg::jinja {

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string u = to_u32(s);
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace && !chars.is_string()) fail("strip arg must be None or str");
  const std::u32string set = whitespace ? std::u32string() : to_u32(chars.str());
  const auto strip = [&](char32_t c) {
    return whitespace ? is_space(c) : set.find(c) != std::u32string::npos;
  };
  size_t lo = 0, hi = u.size();
  if (left)
    while (lo < hi && strip(u[lo])) ++lo;
  if (right)
    while (hi > lo && strip(u[hi - 1])) --hi;
  return to_utf8(std::u32string_view(u).substr(lo, hi - lo));
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) fail("empty separator");
    if (!from_right) {
      size_t pos = 0;
      for (size_t at = s.find(*sep);
           at != std::string::npos && (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit);
           at = s.find(*sep, pos)) {
        out.push_back(s.substr(pos, at - pos));
        pos = at + sep->size();
      }
      out.push_back(s.substr(pos));
      return out;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string::npos) break;
      out.insert(out.begin(), s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.insert(out.begin(), s.substr(0, end));
    return out;
  }
  // Runs of whitespace, none at the ends; past maxsplit the rest is one piece (with its
  // trailing whitespace).
  std::u32string u = to_u32(s);
  if (from_right) std::reverse(u.begin(), u.end());
  size_t i = 0;
  std::vector<std::u32string> parts;
  while (true) {
    while (i < u.size() && is_space(u[i])) ++i;
    if (i >= u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(u.substr(i));
      break;
    }
    size_t j = i;
    while (j < u.size() && !is_space(u[j])) ++j;
    parts.push_back(u.substr(i, j - i));
    i = j;
  }
  if (from_right) {
    std::reverse(parts.begin(), parts.end());
    for (auto& p : parts) std::reverse(p.begin(), p.end());
  }
  for (const auto& p : parts) out.push_back(to_utf8(p));
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  const std::u32string u = to_u32(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    size_t end = i + 1;
    if (c == '\r' && end < u.size() && u[end] == '\n') ++end;
    out.push_back(to_utf8(std::u32string_view(u).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < u.size()) out.push_back(to_utf8(std::u32string_view(u).substr(start)));
  return out;
}

namespace {

constexpr char32_t kSharpS = 0xDF, kCapitalSigma = 0x3A3;

// Upper case (title case where `title`) of one character, with the one-to-many mapping of
// "ß" (upper "SS", title "Ss").
void append_upper(std::u32string& out, char32_t c, bool title = false) {
  if (c == kSharpS)
    out += title ? U"Ss" : U"SS";
  else
    out += to_upper(c);
}

// Lower case of u[i]: a capital sigma at the end of a word (after a cased letter, not before
// one) becomes the final sigma, as Python's str.lower does.
char32_t lower_at(const std::u32string& u, size_t i) {
  if (u[i] != kCapitalSigma) return to_lower(u[i]);
  const bool after_cased = i > 0 && is_cased_letter(u[i - 1]);
  const bool before_cased = i + 1 < u.size() && is_cased_letter(u[i + 1]);
  return after_cased && !before_cased ? 0x3C2 : 0x3C3;
}

}  // namespace

std::string py_upper(const std::string& s) {
  std::u32string out;
  for (char32_t c : to_u32(s)) append_upper(out, c);
  return to_utf8(out);
}

std::string py_lower(const std::string& s) {
  std::u32string u = to_u32(s), out;
  for (size_t i = 0; i < u.size(); ++i) out += lower_at(u, i);
  return to_utf8(out);
}

std::string py_title(const std::string& s) {
  const std::u32string u = to_u32(s);
  std::u32string out;
  bool previous_cased = false;
  for (size_t i = 0; i < u.size(); ++i) {
    if (previous_cased)
      out += lower_at(u, i);
    else
      append_upper(out, u[i], true);
    previous_cased = is_cased_letter(u[i]);
  }
  return to_utf8(out);
}

std::string py_capitalize(const std::string& s) {
  const std::u32string u = to_u32(s);
  std::u32string out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0)
      append_upper(out, u[i], true);
    else
      out += lower_at(u, i);
  }
  return to_utf8(out);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {  // between every character, and at both ends
    const std::u32string u = to_u32(s);
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) out += repl, ++done;
      if (i < u.size()) out += to_utf8(std::u32string(1, u[i]));
      check_size(out.size(), "str.replace");
    }
    return out;
  }
  size_t pos = 0;
  for (size_t at = s.find(old); at != std::string::npos && (count < 0 || done < count);
       at = s.find(old, pos)) {
    out.append(s, pos, at - pos);
    out += repl;
    check_size(out.size(), "str.replace");
    pos = at + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string py_pad(const std::string& s, int64_t width, const std::string& fill, const std::string& how) {
  const int64_t n = static_cast<int64_t>(to_u32(s).size());
  if (to_u32(fill).size() != 1) fail("The fill character must be exactly one character long");
  if (width <= n) return s;
  const int64_t pad = width - n;
  check_size(static_cast<uint64_t>(pad) > kMaxProduced ? static_cast<uint64_t>(pad)
                                                       : s.size() + static_cast<uint64_t>(pad) * fill.size(),
             how.c_str());
  int64_t left = how == "ljust" ? 0 : how == "center" ? pad / 2 + (pad & width & 1) : pad;
  const auto repeat = [&](int64_t k) {
    std::string r;
    for (int64_t i = 0; i < k; ++i) r += fill;
    return r;
  };
  if (how == "zfill" && !s.empty() && (s[0] == '+' || s[0] == '-'))
    return s.substr(0, 1) + repeat(left) + s.substr(1);
  return repeat(left) + s + repeat(pad - left);
}

namespace {

// snprintf(spec, v) into a string of the length it needs.
template <typename T>
std::string c_format(const std::string& spec, T v) {
  const int n = std::snprintf(nullptr, 0, spec.c_str(), v);
  if (n < 0) fail("%-format: the field is too wide");
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), spec.c_str(), v);
  out.resize(static_cast<size_t>(n));
  return out;
}

// The width and precision of a %-spec ("%-08.3"), each at most kMaxProduced: what is wider would
// make a string too large (or overflow snprintf's int).
void check_spec(const std::string& spec) {
  uint64_t number = 0;
  for (char c : spec) {
    if (c >= '0' && c <= '9') {
      number = number * 10 + static_cast<uint64_t>(c - '0');
      if (number > kMaxProduced) check_size(number, "%-format field width or precision");
    } else {
      number = 0;
    }
  }
}

}  // namespace

std::string printf_format(const std::string& fmt, const Value& rhs) {
  const ValueList args = rhs.kind() == Value::Kind::kTuple ? rhs.items() : ValueList{rhs};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    std::string spec = "%";
    while (j < fmt.size() && std::string_view("-0+ #").find(fmt[j]) != std::string_view::npos)
      spec += fmt[j++];
    while (j < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[j])) || fmt[j] == '.'))
      spec += fmt[j++];
    if (j >= fmt.size()) fail("incomplete format");
    const char conv = fmt[j];
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size()) fail("not enough arguments for format string");
    const Value& a = args[next++];
    check_spec(spec);
    std::string piece;
    if (conv == 's' || conv == 'r') {
      const std::string s = conv == 's' ? to_str(a) : repr(a);
      piece = spec == "%" ? s : c_format(spec + "s", s.c_str());
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!a.is_number())
        fail(std::string("%") + conv + " format: a real number is required, not " + type_name(a));
      long long v = 0;
      if (a.kind() == Value::Kind::kFloat) {
        const double f = std::trunc(a.number());
        if (std::isnan(f)) fail("cannot convert float NaN to integer");
        if (std::isinf(f)) fail("cannot convert float infinity to integer");
        // Python prints any integer; here the float must fit in 64 bits.
        if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
          fail(std::string("%") + conv + " format: " + format_float(a.number()) + " does not fit in 64 bits");
        v = static_cast<long long>(f);
      } else {
        v = a.integer();
      }
      piece = c_format(spec + "ll" + (conv == 'i' ? 'd' : conv), v);
    } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'g') {
      if (!a.is_number()) fail(std::string("must be real number, not ") + type_name(a));
      piece = c_format(spec + conv, a.number());
    } else {
      fail(std::string("unsupported format character '") + conv + "'");
    }
    check_grow(out.size(), piece.size(), "%-format");
    out += piece;
  }
  // Python takes anything subscriptable on the right (a list, a dict, an undefined; not a tuple
  // or a string) for a mapping of %(name)s fields: unused, it is no error.
  const bool mapping = rhs.kind() == Value::Kind::kList || rhs.is_dict() || rhs.is_undefined();
  if (next < args.size() && !mapping) fail("not all arguments converted during string formatting");
  return out;
}

}  // namespace tg::jinja
