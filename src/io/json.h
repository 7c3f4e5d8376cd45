// A minimal JSON reader and string quoter, just enough for safetensors headers: objects,
// arrays, strings (all escapes, \u surrogate pairs, UTF-8 checked), numbers (integers kept
// exact as int64), true/false/null. Checkpoint headers come from untrusted files, so the
// parser bounds its recursion depth, never reads past its input and reports every problem
// as a JsonError carrying the byte offset; it keeps object members in file order and keeps
// duplicate keys so that the caller can report them by name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tg::io {

struct JsonError : std::runtime_error {
  JsonError(const std::string& what, size_t offset)
      : std::runtime_error(what + " at byte " + std::to_string(offset)), offset(offset) {}
  size_t offset;
};

struct JsonMember;

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  /// Numbers: `is_integer` when written without fraction or exponent; `integer` is then
  /// exact (literals outside int64 are parse errors), `number` always holds the value.
  bool is_integer = false;
  int64_t integer = 0;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  /// Members in file order; duplicate keys are kept (the caller decides what they mean).
  std::vector<JsonMember> object;

  bool is_object() const { return kind == Kind::kObject; }
  bool is_array() const { return kind == Kind::kArray; }
  bool is_string() const { return kind == Kind::kString; }
  /// The first member named `key`, or nullptr.
  const JsonValue* find(std::string_view key) const;
};

/// An object member (a struct, not std::pair: a vector of pairs of the still-incomplete
/// JsonValue is not allowed to instantiate, and clang's libstdc++ checks refuse it).
struct JsonMember {
  std::string first;
  JsonValue second;
};

/// Parses one JSON value; only whitespace may follow it. Throws JsonError.
JsonValue parse_json(std::string_view text);

/// `s` as a JSON string literal, quotes included, escaped the way serde_json (the official
/// safetensors writer) does: \" \\ \b \f \n \r \t, other control bytes as \u00xx, the rest
/// (UTF-8 included) verbatim.
std::string json_quote(std::string_view s);

/// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace tg::io
