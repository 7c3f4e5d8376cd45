// Hand-written matchers for the pre-tokenizer regexes (GPT-2's; Llama 3's and Qwen2's; CLIP's;
// o200k's and Mistral's tekken).
// Each tries the regex's alternatives in order at one position and returns where the first that
// matches ends, taking the same backtracking choices a regex engine would (noted where it matters).
#include "text/pretokenize.h"

#include "text/unicode.h"

namespace tg::text {
namespace {

// The units of a string with the class tests the regexes use; out-of-range indices are none.
struct Units {
  std::vector<Unit> u;
  size_t size() const { return u.size(); }
  bool is(size_t k, CharClass c) const { return k < u.size() && u[k].cls == c; }
  bool letter(size_t k) const { return is(k, CharClass::kLetter); }
  bool number(size_t k) const { return is(k, CharClass::kNumber); }
  bool space(size_t k) const { return is(k, CharClass::kSpace); }
  bool other(size_t k) const { return is(k, CharClass::kOther); }  // [^\s\p{L}\p{N}]
  bool cp_is(size_t k, char32_t c) const { return k < u.size() && u[k].valid && u[k].cp == c; }
  bool newline(size_t k) const { return cp_is(k, '\r') || cp_is(k, '\n'); }
  // o200k's letter sets: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}].
  LetterCase letter_case_of(size_t k) const {
    return k < u.size() && u[k].valid ? letter_case(u[k].cp) : LetterCase::kNone;
  }
  bool upper(size_t k) const {
    const LetterCase c = letter_case_of(k);
    return c == LetterCase::kUpper || c == LetterCase::kOtherLetter || c == LetterCase::kMark;
  }
  bool lower(size_t k) const {
    const LetterCase c = letter_case_of(k);
    return c == LetterCase::kLower || c == LetterCase::kOtherLetter || c == LetterCase::kMark;
  }
  bool slash_or_newline(size_t k) const { return newline(k) || cp_is(k, '/'); }
  size_t run(size_t k, bool (Units::*test)(size_t) const) const {
    while ((this->*test)(k)) ++k;
    return k;
  }
};

// 's|'t|'re|'ve|'m|'ll|'d at i (ASCII letters; with ignore_case also upper case, and ſ, which
// Unicode case folding makes an s); the end, or i when none matches.
size_t contraction(const Units& t, size_t i, bool ignore_case) {
  if (!t.cp_is(i, '\'')) return i;
  const auto fold = [&](size_t k) -> char32_t {
    if (k >= t.size() || !t.u[k].valid) return 0;
    const char32_t c = t.u[k].cp;
    if (!ignore_case) return c;
    if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
    return c == U'\u017F' ? U's' : c;
  };
  const char32_t a = fold(i + 1), b = fold(i + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return i;
}

// \s+(?!\S) then \s+ at i, a space: the greedy run gives back its last space when a non-space
// follows it, so that space can lead the next word (" word"); a run of one space cannot give
// anything back and is taken by \s+.
size_t spaces(const Units& t, size_t i) {
  const size_t end = t.run(i, &Units::space);
  if (end == t.size() || end - i == 1) return end;
  return end - 1;
}

size_t match_gpt2(const Units& t, size_t i) {
  if (size_t end = contraction(t, i, false); end != i) return end;
  const size_t after_space = t.cp_is(i, ' ') ? i + 1 : i;  // the optional " " of " ?X+"
  if (t.letter(after_space)) return t.run(after_space, &Units::letter);
  if (t.number(after_space)) return t.run(after_space, &Units::number);
  if (t.other(after_space)) return t.run(after_space, &Units::other);
  return spaces(t, i);  // i is a space: the one class left
}

// The alternatives Llama 3's and o200k's regexes end with, at i: \p{N}{1,max_digits},
// ?[^\s\p{L}\p{N}]+ followed by a run of `trail` (Llama 3: [\r\n]*, o200k: [\r\n/]*),
// \s*[\r\n]+, \s+(?!\S), \s+.
size_t numbers_and_rest(const Units& t, size_t i, size_t max_digits, bool (Units::*trail)(size_t) const) {
  if (t.number(i)) {
    size_t end = i + 1;
    while (end < i + max_digits && t.number(end)) ++end;
    return end;
  }
  const size_t after_space = t.cp_is(i, ' ') ? i + 1 : i;
  if (t.other(after_space)) return t.run(t.run(after_space, &Units::other), trail);
  // \s*[\r\n]+: \s* backtracks to the run's last \r or \n, which [\r\n]+ then takes.
  const size_t end = t.run(i, &Units::space);
  for (size_t k = end; k > i; --k) {
    if (t.newline(k - 1)) return k;
  }
  return spaces(t, i);
}

// Llama 3's regex, and Qwen2's, which differs in taking digits one at a time (max_digits 1).
size_t match_llama3(const Units& t, size_t i, size_t max_digits) {
  if (size_t end = contraction(t, i, true); end != i) return end;
  // [^\r\n\p{L}\p{N}]?\p{L}+: one leading character of any other kind, when letters follow.
  const bool may_lead = i < t.size() && !t.letter(i) && !t.number(i) && !t.newline(i);
  if (may_lead && t.letter(i + 1)) return t.run(i + 1, &Units::letter);
  if (t.letter(i)) return t.run(i, &Units::letter);
  return numbers_and_rest(t, i, max_digits, &Units::newline);
}

// o200k's word alternatives from s (after the optional leading character), each followed by an
// optional contraction (with `contractions`); the end, or s when it does not match.
//   first, U*L+: U* greedy to the end e of the run of U; then L+ from the last position p ≤ e
//         that is an L (backtracking U* gives back its tail until L+ can start): from e itself
//         the run of L, from p < e just p (p + 1 … e − 1 are U but not L).
//   second, U+L*: the run of U, then the run of L.
size_t o200k_word(const Units& t, size_t s, bool second, bool contractions) {
  const size_t e = t.run(s, &Units::upper);
  size_t end = s;
  if (second) {
    if (e > s) end = t.run(e, &Units::lower);
  } else if (t.lower(e)) {
    end = t.run(e, &Units::lower);
  } else {
    for (size_t p = e; p > s; --p)
      if (t.lower(p - 1)) {
        end = p;
        break;
      }
  }
  if (end == s) return s;
  return contractions ? contraction(t, end, true) : end;
}

// The o200k regex (max_digits 3, contractions) and tekken's (max_digits 1, none) at i.
size_t match_o200k(const Units& t, size_t i, size_t max_digits, bool contractions) {
  // Each word alternative with the optional [^\r\n\p{L}\p{N}] before it, then without (a mark
  // is such a character and a U and L as well, so the order matters there).
  const bool may_lead = i < t.size() && !t.letter(i) && !t.number(i) && !t.newline(i);
  for (const bool second : {false, true}) {
    if (may_lead) {
      if (size_t end = o200k_word(t, i + 1, second, contractions); end != i + 1) return end;
    }
    if (size_t end = o200k_word(t, i, second, contractions); end != i) return end;
  }
  return numbers_and_rest(t, i, max_digits, &Units::slash_or_newline);  // tekken: \p{N}
}

// CLIP's regex at i: its two special tokens spelled out, the contractions, a run of letters, one
// number, a run of other characters; i itself at whitespace, which no alternative matches.
size_t match_clip(const Units& t, std::string_view text, size_t i, bool specials) {
  for (std::string_view special : {"<|startoftext|>", "<|endoftext|>"}) {
    if (specials && text.substr(t.u[i].offset).starts_with(special))
      return i + special.size();  // ASCII: a unit a byte
  }
  if (size_t end = contraction(t, i, false); end != i) return end;
  if (t.letter(i)) return t.run(i, &Units::letter);
  if (t.number(i)) return i + 1;
  return t.run(i, &Units::other);
}

size_t match(const Units& t, std::string_view text, size_t i, SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2: return match_gpt2(t, i);
    case SplitPattern::kLlama3: return match_llama3(t, i, 3);
    case SplitPattern::kQwen2: return match_llama3(t, i, 1);
    case SplitPattern::kClip: return match_clip(t, text, i, true);
    case SplitPattern::kClipPlain: return match_clip(t, text, i, false);
    case SplitPattern::kO200k: return match_o200k(t, i, 3, true);
    case SplitPattern::kTekken: return match_o200k(t, i, 1, false);
  }
  return i;
}

}  // namespace

std::string_view pattern_source(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    case SplitPattern::kLlama3:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
             R"(\s*[\r\n]+|\s+(?!\S)|\s+)";
    case SplitPattern::kQwen2:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
             R"(\s*[\r\n]+|\s+(?!\S)|\s+)";
    case SplitPattern::kClip:
      return R"(<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+)";
    case SplitPattern::kClipPlain: return R"('s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+)";
    case SplitPattern::kO200k:
      return R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
             R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
             R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case SplitPattern::kTekken:
      return R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
             R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|)"
             R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return {};
}

std::vector<std::string_view> split(std::string_view text, SplitPattern pattern) {
  const Units t{decode_utf8(text)};
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < t.size();) {
    const size_t end = match(t, text, i, pattern);
    if (end <= i) {  // no match here: whitespace, under CLIP's regex only, which is dropped
      ++i;
      continue;
    }
    const size_t begin_byte = t.u[i].offset;
    const size_t end_byte = end < t.size() ? t.u[end].offset : text.size();
    pieces.push_back(text.substr(begin_byte, end_byte - begin_byte));
    i = end;
  }
  return pieces;
}

const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

std::string to_byte_level(std::string_view bytes) {
  const auto& table = byte_to_char();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, table[static_cast<uint8_t>(c)]);
  return out;
}

}  // namespace tg::text
