// NFC and NFD from the tables scripts/gen_nfc_tables.py writes (Python's unicodedata):
// combining classes, canonical decompositions, and the pairs that compose.
#include "text/nfc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>

#include "text/unicode.h"

namespace tg::text {
namespace {

struct CombiningRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp, first, second;  // second = 0: a one-code-point decomposition
};
struct Composition {
  char32_t first, second, composite;
};
#include "text/nfc_tables.inc"

// Hangul syllables: S = SBase + (L·VCount + V)·TCount + T, from leading consonant L, vowel V
// and optional trailing consonant T (T = 0: none).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = kLCount * kVCount * kTCount;

uint8_t combining_class(char32_t cp) {
  const auto* end = std::end(kCombiningClass);
  const auto* it = std::upper_bound(std::begin(kCombiningClass), end, cp,
                                    [](char32_t c, const CombiningRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClass)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(char32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / (kVCount * kTCount));
    out.push_back(kVBase + (s % (kVCount * kTCount)) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* it = std::lower_bound(std::begin(kDecomposition), std::end(kDecomposition), cp,
                                    [](const Decomposition& d, char32_t c) { return d.cp < c; });
  if (it == std::end(kDecomposition) || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of a starter and the next character, or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* it = std::lower_bound(std::begin(kComposition), std::end(kComposition), std::pair{a, b},
                                    [](const Composition& c, const std::pair<char32_t, char32_t>& key) {
                                      return std::pair{c.first, c.second} < key;
                                    });
  return it != std::end(kComposition) && it->first == a && it->second == b ? it->composite : 0;
}

// A run of code points decomposed canonically, each run of combining marks sorted by class
// (stably): the NFD form.
std::u32string decompose_run(const std::u32string& run) {
  std::u32string d;
  for (char32_t cp : run) decompose(cp, d);
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  return d;
}

// Every character composed with the last starter unless blocked (a character between them of
// class 0 or of a class not below its own): NFD to NFC.
std::u32string compose_run(const std::u32string& d) {
  std::u32string c;
  size_t starter = std::u32string::npos;
  uint8_t last = 0;  // the class of the last character kept after the starter
  for (char32_t cp : d) {
    const uint8_t cls = combining_class(cp);
    if (starter != std::u32string::npos && (c.size() - 1 == starter || last < cls)) {
      if (const char32_t composite = compose(c[starter], cp); composite != 0) {
        c[starter] = composite;
        continue;
      }
    }
    if (cls == 0) starter = c.size();
    last = cls;
    c.push_back(cp);
  }
  return c;
}

// `s` in NFC (composed) or NFD. Bytes that are not valid UTF-8 are kept and end the run
// of code points normalized together.
std::string normalize(std::string_view s, bool composed) {
  if (std::all_of(s.begin(), s.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; }))
    return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::u32string run;
  const auto flush = [&] {
    const std::u32string d = decompose_run(run);
    for (char32_t cp : composed ? compose_run(d) : d) append_utf8(out, cp);
    run.clear();
  };
  for (const Unit& u : decode_utf8(s)) {
    if (u.valid) {
      run.push_back(u.cp);
      continue;
    }
    flush();
    out.push_back(static_cast<char>(u.cp));
  }
  flush();
  return out;
}

}  // namespace

std::string nfc(std::string_view s) { return normalize(s, /*composed=*/true); }

std::string nfd(std::string_view s) { return normalize(s, /*composed=*/false); }

}  // namespace tg::text
