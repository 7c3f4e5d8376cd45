// BertNormalizer and BertPreTokenizer over the code point tables that
// scripts/gen_bert_tables.py reads off `tokenizers` (ranges sorted, looked up by binary search).
#include "text/bert_normalize.h"

#include <algorithm>
#include <iterator>

#include "text/nfc.h"
#include "text/unicode.h"

namespace tg::text {
namespace {

struct CodeRange {
  char32_t first, last;
};
struct LowerCase {
  char32_t cp;
  const char* utf8;  // its lowercase: one code point or more
};
#include "text/bert_tables.inc"

template <size_t N>
bool in_table(const CodeRange (&table)[N], char32_t cp) {
  // The last range that starts at or before cp.
  const CodeRange* it = std::upper_bound(std::begin(table), std::end(table), cp,
                                         [](char32_t c, const CodeRange& r) { return c < r.first; });
  return it != std::begin(table) && cp <= (it - 1)->last;
}

// The lowercase of `cp` as UTF-8, or nullptr when lowercasing leaves it as it is.
const char* lowercase_of(char32_t cp) {
  const LowerCase* it = std::lower_bound(std::begin(kBertLower), std::end(kBertLower), cp,
                                         [](const LowerCase& l, char32_t c) { return l.cp < c; });
  return it != std::end(kBertLower) && it->cp == cp ? it->utf8 : nullptr;
}

// clean_text and handle_chinese_chars, one code point at a time.
std::string clean_and_space_cjk(std::string_view s, const BertNormalizer& options) {
  std::string out;
  out.reserve(s.size());
  for (const Unit& u : decode_utf8(s)) {
    if (!u.valid) {
      out += s.substr(u.offset, u.size);
    } else if (options.clean_text && in_table(kBertRemoved, u.cp)) {
      continue;
    } else if (options.clean_text && in_table(kBertSpace, u.cp)) {
      out += ' ';
    } else if (options.handle_chinese_chars && in_table(kBertCjk, u.cp)) {
      out += ' ';
      out += s.substr(u.offset, u.size);
      out += ' ';
    } else {
      out += s.substr(u.offset, u.size);
    }
  }
  return out;
}

}  // namespace

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const Unit& u : decode_utf8(s)) {
    const char* lower = u.valid ? lowercase_of(u.cp) : nullptr;
    if (lower) {
      out += lower;
    } else {
      out.append(s, u.offset, u.size);
    }
  }
  return out;
}

std::string bert_normalize(std::string_view s, const BertNormalizer& options) {
  std::string text = clean_and_space_cjk(s, options);
  if (options.strip_accents) text = nfd(text);
  if (!options.strip_accents && !options.lowercase) return text;
  // Dropping marks and lowercasing both map one code point at a time, marks first: one pass.
  std::string out;
  out.reserve(text.size());
  for (const Unit& u : decode_utf8(text)) {
    if (u.valid && options.strip_accents && in_table(kBertMark, u.cp)) continue;
    const char* lower = u.valid && options.lowercase ? lowercase_of(u.cp) : nullptr;
    if (lower) {
      out += lower;
    } else {
      out.append(text, u.offset, u.size);
    }
  }
  return out;
}

std::vector<std::string_view> bert_pre_tokenize(std::string_view s) {
  std::vector<std::string_view> words;
  size_t start = 0;  // where the current word begins
  const auto end_word = [&](size_t at) {
    if (at > start) words.push_back(s.substr(start, at - start));
  };
  for (const Unit& u : decode_utf8(s)) {
    if (!u.valid) continue;
    if (in_table(kBertSplit, u.cp)) {
      end_word(u.offset);
      start = u.offset + u.size;
    } else if (in_table(kBertPunct, u.cp)) {
      end_word(u.offset);
      words.push_back(s.substr(u.offset, u.size));
      start = u.offset + u.size;
    }
  }
  end_word(s.size());
  return words;
}

}  // namespace tg::text
