// The JSON reader behind safetensors headers (see json.h). A recursive-descent parser over a
// string_view: every read goes through peek()/next(), which check the bound, so malformed or
// truncated input can only end in a JsonError, never in a read past the end. Nesting is
// capped because a header of a million '[' would otherwise overflow the stack.
#include "io/json.h"

#include <charconv>
#include <system_error>

#include "text/unicode.h"

namespace tg::io {

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

namespace {

// Safetensors headers nest three levels deep; anything near this is an attack or garbage.
constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  JsonValue parse_document() {
    JsonValue v = parse_value(0);
    skip_ws();
    if (pos_ != text_.size()) fail("unexpected data after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw JsonError(what, pos_); }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const {
    if (at_end()) fail("unexpected end of input");
    return text_[pos_];
  }
  char next() {
    char c = peek();
    ++pos_;
    return c;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void skip_ws() {
    while (!at_end() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  JsonValue parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    skip_ws();
    JsonValue v;
    switch (peek()) {
      case '{': parse_object(v, depth); break;
      case '[': parse_array(v, depth); break;
      case '"':
        v.kind = JsonValue::Kind::kString;
        v.string = parse_string();
        break;
      case 't':
        parse_literal("true");
        v.kind = JsonValue::Kind::kBool;
        v.boolean = true;
        break;
      case 'f':
        parse_literal("false");
        v.kind = JsonValue::Kind::kBool;
        break;
      case 'n': parse_literal("null"); break;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9'))
          parse_number(v);
        else
          fail(std::string("unexpected character '") + peek() + "'");
    }
    return v;
  }

  void parse_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  void parse_object(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::kObject;
    expect('{');
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    for (;;) {
      skip_ws();
      if (peek() != '"') fail("expected a string key");
      std::string key = parse_string();
      skip_ws();
      expect(':');
      JsonValue member = parse_value(depth + 1);
      v.object.push_back({std::move(key), std::move(member)});
      skip_ws();
      if (next() == '}') return;
      --pos_;
      expect(',');
    }
  }

  void parse_array(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::kArray;
    expect('[');
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    for (;;) {
      v.array.push_back(parse_value(depth + 1));
      skip_ws();
      if (next() == ']') return;
      --pos_;
      expect(',');
    }
  }

  uint32_t parse_hex4() {
    uint32_t cp = 0;
    for (int i = 0; i < 4; ++i) {
      char c = next();
      cp <<= 4;
      if (c >= '0' && c <= '9')
        cp |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        cp |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        cp |= static_cast<uint32_t>(c - 'A' + 10);
      else
        fail("invalid \\u escape");
    }
    return cp;
  }

  std::string parse_string() {
    const size_t start = pos_;
    expect('"');
    std::string out;
    for (;;) {
      const char c = next();
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) fail("unescaped control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      switch (next()) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = parse_hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("unpaired low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            // A high surrogate must be followed by an escaped low one (UTF-16 pair).
            if (next() != '\\' || next() != 'u') fail("unpaired high surrogate in \\u escape");
            const uint32_t lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired high surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          text::append_utf8(out, static_cast<char32_t>(cp));
          break;
        }
        default: --pos_; fail("invalid escape");
      }
    }
    if (!is_valid_utf8(out)) {
      pos_ = start;
      fail("string is not valid UTF-8");
    }
    return out;
  }

  void parse_number(JsonValue& v) {
    // Check the JSON grammar first (from_chars alone would accept "01", "1." or "+1" forms).
    const size_t start = pos_;
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (at_end() || !is_digit(text_[pos_])) fail("invalid number");
    if (text_[pos_] == '0')
      ++pos_;
    else
      while (!at_end() && is_digit(text_[pos_])) ++pos_;
    if (!at_end() && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (at_end() || !is_digit(text_[pos_])) fail("invalid number");
      while (!at_end() && is_digit(text_[pos_])) ++pos_;
    }
    if (!at_end() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (!at_end() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (at_end() || !is_digit(text_[pos_])) fail("invalid number");
      while (!at_end() && is_digit(text_[pos_])) ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    v.kind = JsonValue::Kind::kNumber;
    v.is_integer = integral;
    if (integral) {
      auto [ptr, ec] = std::from_chars(first, last, v.integer);
      if (ec != std::errc() || ptr != last) {
        pos_ = start;
        fail("integer out of range");
      }
      v.number = static_cast<double>(v.integer);
    } else {
      // from_chars, unlike strtod, ignores the C locale's decimal point.
      auto [ptr, ec] = std::from_chars(first, last, v.number);
      if (ec != std::errc() || ptr != last) {
        pos_ = start;
        fail("number out of range");
      }
    }
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

JsonValue parse_json(std::string_view text) { return Parser(text).parse_document(); }

std::string json_quote(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0, min = 0;
    if ((b0 & 0xE0) == 0xC0) {
      len = 2;
      cp = b0 & 0x1F;
      min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      len = 3;
      cp = b0 & 0x0F;
      min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      len = 4;
      cp = b0 & 0x07;
      min = 0x10000;
    } else
      return false;
    if (s.size() - i < static_cast<size_t>(len)) return false;
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

}  // namespace tg::io
