// The lexer: template text into data and tag tokens, with jinja2's whitespace rules.
//
// As jinja2 does: line breaks (\r\n, \r) become \n and one trailing newline of the template is
// dropped (keep_trailing_newline off); a tag opened with a "-" ({%-, {{-, {#-) strips all
// whitespace before it and one closed with a "-" all whitespace after it; trim_blocks drops the
// first newline after a block or comment tag (not after {{ }}); lstrip_blocks drops the spaces
// and tabs between the start of a line and a block or comment tag — where "start of a line"
// also holds when the text before the tag has no newline but the tag before it ended with one
// (a newline that trim_blocks or "-" consumed). A "+" ({%+, +%}) turns either rule off for
// that tag. Inside a tag, "%}" and "}}" close it only where no bracket is open.
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tensorgrad/errors.h"
#include "text/jinja.h"

namespace tg::jinja {
namespace {

class Lexer {
 public:
  Lexer(std::string_view source, const Options& options) : options_(options) {
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!options.keep_trailing_newline && !src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run();

 private:
  [[noreturn]] void error(size_t pos, const std::string& what) const;
  Token make(Tok type, size_t pos, std::string text = {}) const;
  bool at(size_t pos, std::string_view s) const { return src_.compare(pos, s.size(), s) == 0; }
  size_t skip_space(size_t pos) const;
  bool is_space_at(size_t pos, size_t* size) const;
  void emit_data(std::string_view text, size_t pos, char sign, bool variable);
  size_t lex_raw(size_t body);
  size_t lex_comment(size_t start, size_t pos);
  size_t lex_tag(size_t start, size_t pos, bool variable);
  size_t lex_number(size_t pos);
  size_t lex_string(size_t pos);

  const Options options_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;  // the last tag ended with a newline (or nothing came yet)
  mutable struct {
    size_t pos = 0;
    int column = 1;
  } column_cache_;  // the column of the last token made
};

void Lexer::error(size_t pos, const std::string& what) const {
  const Token t = make(Tok::kEof, pos);
  throw TemplateError("line " + std::to_string(t.line) + ", column " + std::to_string(t.column) + ": " +
                      what);
}

Token Lexer::make(Tok type, size_t pos, std::string text) const {
  Token t{.type = type, .text = std::move(text)};
  size_t lo = 0, hi = line_starts_.size();
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    (line_starts_[mid] <= pos ? lo : hi) = mid;
  }
  t.line = static_cast<int>(lo) + 1;
  // The column in characters, not bytes, counted on from the last token's where it is on the
  // same line (tokens come in order: a long one-line template stays linear).
  size_t from = line_starts_[lo];
  int column = 1;
  if (column_cache_.pos >= from && column_cache_.pos <= pos)
    from = column_cache_.pos, column = column_cache_.column;
  for (size_t i = from; i < pos && i < src_.size(); ++i)
    if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++column;
  column_cache_ = {pos, column};
  t.column = column;
  return t;
}

// Whether a whitespace character (Python's \s: str.isspace) starts at `pos`, and its size.
bool Lexer::is_space_at(size_t pos, size_t* size) const {
  if (pos >= src_.size()) return false;
  const auto c = static_cast<unsigned char>(src_[pos]);
  if (c < 0x80) {
    *size = 1;
    return is_space(c);
  }
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  if (pos + n > src_.size()) return false;
  const std::u32string u = to_u32(std::string_view(src_).substr(pos, n));
  *size = n;
  return u.size() == 1 && is_space(u[0]);
}

size_t Lexer::skip_space(size_t pos) const {
  size_t n = 0;
  while (is_space_at(pos, &n)) pos += n;
  return pos;
}

// The text before a tag, after the tag's whitespace rules. `sign` is the tag's '-', '+' or 0.
void Lexer::emit_data(std::string_view text, size_t pos, char sign, bool variable) {
  std::string_view keep = text;
  if (sign == '-') {
    std::u32string u = to_u32(keep);
    size_t end = u.size();
    while (end > 0 && is_space(u[end - 1])) --end;
    keep = keep.substr(0, to_utf8(std::u32string_view(u).substr(0, end)).size());
  } else if (sign != '+' && options_.lstrip_blocks && !variable) {
    const size_t nl = keep.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && l_pos < keep.size()) {
      const std::u32string rest = to_u32(keep.substr(l_pos));
      bool all_space = true;
      for (char32_t c : rest) all_space = all_space && is_space(c);
      if (all_space) keep = keep.substr(0, l_pos);
    }
  }
  if (!keep.empty()) tokens_.push_back(make(Tok::kData, pos, std::string(keep)));
}

std::vector<Token> Lexer::run() {
  size_t pos = 0;
  while (pos < src_.size()) {
    size_t start = pos;
    while (true) {
      start = src_.find('{', start);
      if (start == std::string::npos || start + 1 >= src_.size()) {
        start = std::string::npos;
        break;
      }
      const char c = src_[start + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++start;
    }
    if (start == std::string::npos) {
      tokens_.push_back(make(Tok::kData, pos, src_.substr(pos)));
      break;
    }
    const char kind = src_[start + 1];
    size_t p = start + 2;
    const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
    if (sign) ++p;
    const std::string_view text = std::string_view(src_).substr(pos, start - pos);
    // {% raw %}: the rest up to {% endraw %} is data.
    if (kind == '%') {
      size_t q = skip_space(p);
      if (at(q, "raw")) {
        q = skip_space(q + 3);
        size_t body = std::string::npos;
        if (at(q, "-%}"))
          body = skip_space(q + 3);
        else if (at(q, "%}"))
          body = q + 2;
        if (body != std::string::npos) {
          emit_data(text, pos, sign, false);
          line_starting_ = src_[body - 1] == '\n';
          pos = lex_raw(body);
          continue;
        }
      }
    }
    emit_data(text, pos, sign, kind == '{');
    if (kind == '#') {
      pos = lex_comment(start, p);
    } else {
      tokens_.push_back(make(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, start));
      pos = lex_tag(start, p, kind == '{');
    }
  }
  tokens_.push_back(make(Tok::kEof, src_.size()));
  return std::move(tokens_);
}

size_t Lexer::lex_raw(size_t body) {
  for (size_t q = src_.find("{%", body); q != std::string::npos; q = src_.find("{%", q + 1)) {
    size_t p = q + 2;
    const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
    if (sign) ++p;
    p = skip_space(p);
    if (!at(p, "endraw")) continue;
    p = skip_space(p + 6);
    size_t end;
    if (at(p, "+%}"))
      end = p + 3;
    else if (at(p, "-%}"))
      end = skip_space(p + 3);
    else if (at(p, "%}"))
      end = p + 2 + (options_.trim_blocks && at(p + 2, "\n") ? 1 : 0);
    else
      continue;
    emit_data(std::string_view(src_).substr(body, q - body), body, sign, false);
    line_starting_ = src_[end - 1] == '\n';
    return end;
  }
  error(body, "{% raw %} is never closed by {% endraw %}");
}

size_t Lexer::lex_comment(size_t start, size_t pos) {
  for (size_t q = pos; q < src_.size(); ++q) {
    size_t end = 0;
    if (at(q, "+#}"))
      end = q + 3;
    else if (at(q, "-#}"))
      end = skip_space(q + 3);
    else if (at(q, "#}"))
      end = q + 2 + (options_.trim_blocks && at(q + 2, "\n") ? 1 : 0);
    if (end) {
      line_starting_ = src_[end - 1] == '\n';
      return end;
    }
  }
  error(start, "the comment opened here is never closed with #}");
}

size_t Lexer::lex_tag(size_t start, size_t pos, bool variable) {
  std::vector<char> open;  // closing brackets expected, innermost last
  while (true) {
    if (pos >= src_.size())
      error(start, std::string("the tag opened here with ") + (variable ? "{{" : "{%") + " is never closed");
    if (open.empty()) {
      size_t end = 0;
      if (variable) {
        if (at(pos, "-}}"))
          end = skip_space(pos + 3);
        else if (at(pos, "}}"))
          end = pos + 2;
      } else {
        if (at(pos, "+%}"))
          end = pos + 3;
        else if (at(pos, "-%}"))
          end = skip_space(pos + 3);
        else if (at(pos, "%}"))
          end = pos + 2 + (options_.trim_blocks && at(pos + 2, "\n") ? 1 : 0);
      }
      if (end) {
        tokens_.push_back(make(variable ? Tok::kVarEnd : Tok::kBlockEnd, pos));
        line_starting_ = src_[end - 1] == '\n';
        return end;
      }
    }
    size_t n = 0;
    if (is_space_at(pos, &n)) {
      pos = skip_space(pos);
      continue;
    }
    const char c = src_[pos];
    if (c >= '0' && c <= '9') {
      pos = lex_number(pos);
    } else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      size_t e = pos;
      while (e < src_.size() && (src_[e] == '_' || std::isalnum(static_cast<unsigned char>(src_[e])))) ++e;
      tokens_.push_back(make(Tok::kName, pos, src_.substr(pos, e - pos)));
      pos = e;
    } else if (c == '\'' || c == '"') {
      pos = lex_string(pos);
    } else {
      static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                         "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                         ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
      const char* op = nullptr;
      for (const char* o : kOps)
        if (at(pos, o)) {
          op = o;
          break;
        }
      if (!op) error(pos, "unexpected character '" + std::string(1, c) + "' in a tag");
      if (*op == '(' || *op == '[' || *op == '{') {
        open.push_back(*op == '(' ? ')' : *op == '[' ? ']' : '}');
      } else if (*op == ')' || *op == ']' || *op == '}') {
        if (open.empty()) error(pos, std::string("unexpected '") + op + "'");
        if (open.back() != *op)
          error(pos, std::string("unexpected '") + op + "', expected '" + open.back() + "'");
        open.pop_back();
      }
      tokens_.push_back(make(Tok::kOp, pos, op));
      pos += std::strlen(op);
    }
  }
}

// Digits with single underscores between them, from `pos`; returns the end (pos if none).
size_t digits(const std::string& s, size_t pos, int base = 10) {
  const auto is_digit = [&](char c) {
    if (base == 16) return std::isxdigit(static_cast<unsigned char>(c)) != 0;
    return c >= '0' && c < '0' + base;
  };
  size_t e = pos;
  while (e < s.size()) {
    if (is_digit(s[e]))
      ++e;
    else if (s[e] == '_' && e > pos && e + 1 < s.size() && is_digit(s[e + 1]))
      ++e;
    else
      break;
  }
  return e;
}

size_t Lexer::lex_number(size_t pos) {
  const auto strip = [](std::string s) {
    std::erase(s, '_');
    return s;
  };
  // A float: digits, then a fraction and/or an exponent; not right after a dot (x.0.1).
  if (pos == 0 || src_[pos - 1] != '.') {
    size_t e = digits(src_, pos);
    size_t frac = e;
    if (at(e, ".") && digits(src_, e + 1) > e + 1) frac = digits(src_, e + 1);
    size_t exp = frac;
    if (frac < src_.size() && (src_[frac] == 'e' || src_[frac] == 'E')) {
      size_t d = frac + 1;
      if (d < src_.size() && (src_[d] == '+' || src_[d] == '-')) ++d;
      if (digits(src_, d) > d) exp = digits(src_, d);
    }
    if (exp > e) {
      Token t = make(Tok::kFloat, pos, src_.substr(pos, exp - pos));
      t.f = std::strtod(strip(t.text).c_str(), nullptr);
      tokens_.push_back(std::move(t));
      return exp;
    }
  }
  int base = 10;
  size_t start = pos, end;
  if (src_[pos] == '0' && pos + 1 < src_.size() && std::strchr("bBoOxX", src_[pos + 1]) && src_[pos + 1]) {
    const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos + 1])));
    base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
    start = pos + 2;
    if (at(start, "_")) ++start;
    end = digits(src_, start, base);
    if (end == start) error(pos, "malformed number literal");
  } else if (src_[pos] == '0') {
    end = pos + 1;
    while (end + 1 < src_.size() && (src_[end] == '0' || (src_[end] == '_' && src_[end + 1] == '0'))) ++end;
  } else {
    end = digits(src_, pos);
  }
  Token t = make(Tok::kInt, pos, src_.substr(pos, end - pos));
  errno = 0;
  const std::string d = strip(src_.substr(start, end - start));
  t.i = static_cast<int64_t>(std::strtoull(d.c_str(), nullptr, base));
  if (errno == ERANGE || std::strtoull(d.c_str(), nullptr, base) > static_cast<uint64_t>(INT64_MAX))
    error(pos, "the integer " + t.text + " does not fit in 64 bits");
  tokens_.push_back(std::move(t));
  return end;
}

// A quoted string, its escapes read as Python's unicode-escape codec does; unknown escapes are
// kept as written.
size_t Lexer::lex_string(size_t pos) {
  const char quote = src_[pos];
  std::string out;
  size_t i = pos + 1;
  const auto hex = [&](size_t at_pos, int n) -> char32_t {
    if (at_pos + n > src_.size()) error(at_pos, "truncated escape in a string");
    char32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const char c = src_[at_pos + k];
      if (!std::isxdigit(static_cast<unsigned char>(c))) error(at_pos, "truncated escape in a string");
      v = v * 16 + static_cast<char32_t>(
                       std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
    }
    return v;
  };
  while (true) {
    if (i >= src_.size()) error(pos, "the string opened here is never closed");
    const char c = src_[i];
    if (c == quote) break;
    if (c != '\\') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 >= src_.size()) error(pos, "the string opened here is never closed");
    const char e = src_[i + 1];
    i += 2;
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
        out += to_utf8(std::u32string(1, hex(i, 2)));
        i += 2;
        break;
      case 'u':
        out += to_utf8(std::u32string(1, hex(i, 4)));
        i += 4;
        break;
      case 'U': {
        const char32_t cp = hex(i, 8);
        // Python's unicode-escape codec rejects what is past the last code point (it keeps
        // surrogates, as does this).
        if (cp > 0x10FFFF) error(i - 2, "illegal Unicode character in a \\U escape (above U+10FFFF)");
        out += to_utf8(std::u32string(1, cp));
        i += 8;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
            v = v * 8 + static_cast<char32_t>(src_[i] - '0');
          out += to_utf8(std::u32string(1, v));
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  tokens_.push_back(make(Tok::kString, pos, std::move(out)));
  return i + 1;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source, const Options& options) {
  return Lexer(source, options).run();
}

}  // namespace tg::jinja
