// Extended grapheme clusters (see grapheme.h): each code point's break properties from the
// generated table, then UAX #29's rules between each pair of code points, with the state three
// of them need (GB9c's conjunct, GB11's emoji ZWJ sequence, GB12/13's regional-indicator pairs).
#include "text/grapheme.h"

#include <algorithm>

#include "text/unicode.h"

namespace tg::text {
namespace {

struct BreakRange {
  char32_t first, last;
  uint8_t props;
};
constexpr BreakRange kBreakRanges[] = {
#include "text/grapheme_tables.inc"
};

struct Props {
  GraphemeBreak gcb = GraphemeBreak::kOther;
  bool pictographic = false;
  uint8_t incb = 0;  // Indic_Conjunct_Break: 0 None, 1 Linker, 2 Consonant, 3 Extend
};

Props props_of(char32_t cp) {
  const auto* end = std::end(kBreakRanges);
  const auto* it = std::upper_bound(std::begin(kBreakRanges), end, cp,
                                    [](char32_t c, const BreakRange& r) { return c < r.first; });
  if (it == std::begin(kBreakRanges) || cp > (it - 1)->last) return {};
  const uint8_t p = (it - 1)->props;
  return {static_cast<GraphemeBreak>(p & 15), (p & 16) != 0, static_cast<uint8_t>((p >> 5) & 3)};
}

bool control(GraphemeBreak b) {
  return b == GraphemeBreak::kCR || b == GraphemeBreak::kLF || b == GraphemeBreak::kControl;
}

}  // namespace

std::vector<std::string_view> graphemes(std::string_view s) {
  using B = GraphemeBreak;
  std::vector<std::string_view> out;
  size_t start = 0;
  Props prev;
  bool have_prev = false, prev_valid = true;
  // GB11: an Extended_Pictographic, then Extend*, then ZWJ just before. GB12/13: how many
  // regional indicators end the text so far. GB9c: a consonant, then Extend/Linker with a
  // Linker among them, just before.
  bool pict_run = false, pict_zwj = false, conjunct = false, linked = false;
  int ri_run = 0;
  for (const Unit& u : decode_utf8(s)) {
    const Props p = u.valid ? props_of(u.cp) : Props{B::kControl, false, 0};
    bool cut = true;
    if (have_prev) {
      const B a = prev.gcb, b = p.gcb;
      if (!prev_valid || !u.valid) {
        cut = true;  // an invalid byte stands alone
      } else if (a == B::kCR && b == B::kLF) {
        cut = false;  // GB3
      } else if (control(a) || control(b)) {
        cut = true;  // GB4, GB5
      } else if (a == B::kL && (b == B::kL || b == B::kV || b == B::kLV || b == B::kLVT)) {
        cut = false;  // GB6
      } else if ((a == B::kLV || a == B::kV) && (b == B::kV || b == B::kT)) {
        cut = false;  // GB7
      } else if ((a == B::kLVT || a == B::kT) && b == B::kT) {
        cut = false;  // GB8
      } else if (b == B::kExtend || b == B::kZwj || b == B::kSpacingMark || a == B::kPrepend) {
        cut = false;  // GB9, GB9a, GB9b
      } else if (p.incb == 2 && conjunct && linked) {
        cut = false;  // GB9c
      } else if (pict_zwj && p.pictographic) {
        cut = false;  // GB11
      } else if (a == B::kRegionalIndicator && b == B::kRegionalIndicator && ri_run % 2 == 1) {
        cut = false;  // GB12, GB13
      }
    }
    if (cut && have_prev) {
      out.push_back(s.substr(start, u.offset - start));
      start = u.offset;
    }
    // The states after this code point.
    pict_zwj = pict_run && p.gcb == B::kZwj;
    pict_run = p.pictographic || (pict_run && p.gcb == B::kExtend);
    ri_run = p.gcb == B::kRegionalIndicator ? ri_run + 1 : 0;
    if (p.incb == 2) {
      conjunct = true, linked = false;
    } else if (conjunct && (p.incb == 1 || p.incb == 3)) {
      linked = linked || p.incb == 1;
    } else {
      conjunct = linked = false;
    }
    prev = p, prev_valid = u.valid, have_prev = true;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

}  // namespace tg::text
