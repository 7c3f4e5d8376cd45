// UTF-8 decoding (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF) and the
// code point classes, looked up in the generated range table by binary search.
#include "text/unicode.h"

#include <algorithm>
#include <iterator>
#include <string>

namespace tg::text {
namespace {

struct CategoryRange {
  char32_t first, last;
  CharClass cls;
};

constexpr CategoryRange kCategoryRanges[] = {
#include "text/unicode_tables.inc"
};

struct CaseRange {
  char32_t first, last;
  LetterCase letter_case;
};

constexpr CaseRange kCaseRanges[] = {
#include "text/unicode_case_tables.inc"
};

// The entry of a sorted, disjoint range table holding cp, or nullptr.
template <class Range, size_t N>
const Range* range_of(const Range (&table)[N], char32_t cp) {
  const Range* it = std::upper_bound(std::begin(table), std::end(table), cp,
                                     [](char32_t c, const Range& r) { return c < r.first; });
  if (it == std::begin(table)) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

// The length of the well-formed sequence starting at s[i], with its code point, or 0.
int sequence_at(std::string_view s, size_t i, char32_t& cp) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t lead = byte(i);
  if (lead < 0x80) {
    cp = lead;
    return 1;
  }
  int size;
  char32_t min;
  if (lead >= 0xC2 && lead <= 0xDF) {
    size = 2, min = 0x80, cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    size = 3, min = 0x800, cp = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    size = 4, min = 0x10000, cp = lead & 0x07;
  } else {
    return 0;  // a continuation byte, C0/C1 (overlong) or F5..FF
  }
  if (s.size() - i < static_cast<size_t>(size)) return 0;
  for (int k = 1; k < size; ++k) {
    const uint8_t b = byte(i + k);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return size;
}

}  // namespace

CharClass char_class(char32_t cp) {
  const CategoryRange* r = range_of(kCategoryRanges, cp);
  return r != nullptr ? r->cls : CharClass::kOther;
}

LetterCase letter_case(char32_t cp) {
  const CaseRange* r = range_of(kCaseRanges, cp);
  return r != nullptr ? r->letter_case : LetterCase::kNone;
}

std::vector<Unit> decode_utf8(std::string_view s) {
  std::vector<Unit> units;
  units.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const int size = sequence_at(s, i, cp);
    if (size == 0) {
      units.push_back({static_cast<uint8_t>(s[i]), static_cast<uint32_t>(i), 1, false, CharClass::kOther});
      ++i;
    } else {
      units.push_back({cp, static_cast<uint32_t>(i), static_cast<uint8_t>(size), true, char_class(cp)});
      i += size;
    }
  }
  return units;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string trim(std::string_view s, bool left, bool right, bool python) {
  const auto space = [python](const Unit& u) {
    return u.valid && (u.cls == CharClass::kSpace || (python && u.cp >= 0x1C && u.cp <= 0x1F));
  };
  const std::vector<Unit> units = decode_utf8(s);
  size_t first = 0, last = units.size();
  while (left && first < last && space(units[first])) ++first;
  while (right && last > first && space(units[last - 1])) --last;
  if (first == last) return "";
  return std::string(
      s.substr(units[first].offset, units[last - 1].offset + units[last - 1].size - units[first].offset));
}

}  // namespace tg::text
