// UTF-8 decoding and the Unicode classes the pre-tokenizer regexes ask about (\p{L}, \p{N},
// \s). Decoding never reads past its input and never fails: a byte that does not start a
// well-formed sequence is a unit of its own, marked invalid, so the text's bytes are all kept.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tg::text {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

/// The class of a code point: \p{L} (letter), \p{N} (number), \s (space) or none of them.
CharClass char_class(char32_t cp);

/// The finer letter classes of the o200k regex: \p{Lu} and \p{Lt} (kUpper), \p{Ll} (kLower),
/// \p{Lm} and \p{Lo} (kOtherLetter: neither case), and the marks \p{M} (kMark, which
/// char_class counts as kOther); kNone for every other code point.
enum class LetterCase : uint8_t { kNone, kUpper, kLower, kOtherLetter, kMark };
LetterCase letter_case(char32_t cp);

/// One code point of a UTF-8 string, or one byte that is not valid UTF-8 (valid = false,
/// cp = that byte, classed kOther).
struct Unit {
  char32_t cp;
  uint32_t offset;  // where its bytes start in the string
  uint8_t size;     // how many bytes: 1 to 4
  bool valid;
  CharClass cls;
};

/// The units of `s`, in order; their bytes cover `s` exactly.
std::vector<Unit> decode_utf8(std::string_view s);

/// Appends the UTF-8 bytes of `cp` (a scalar value) to `out`.
void append_utf8(std::string& out, char32_t cp);

/// `s` without the whitespace (\s) at its start (`left`) and end (`right`): Rust's trim_start /
/// trim_end; `python` also strips U+001C..U+001F, as Python's str.strip does.
std::string trim(std::string_view s, bool left, bool right, bool python = false);

}  // namespace tg::text
