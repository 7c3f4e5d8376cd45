// Extended grapheme clusters (Unicode's UAX #29, rules GB3 to GB13 with GB9c): what a reader
// sees as one character, such as "e" + U+0301, a Hangul syllable spelled in jamo, an emoji ZWJ
// sequence or a flag. SentencePiece's precompiled normalizer, as `tokenizers` runs it, maps a
// whole cluster at a time (precompiled.h).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace tg::text {

/// Grapheme_Cluster_Break (0: Other), in scripts/gen_grapheme_tables.py's order.
enum class GraphemeBreak : uint8_t {
  kOther,
  kCR,
  kLF,
  kControl,
  kExtend,
  kZwj,
  kRegionalIndicator,
  kPrepend,
  kSpacingMark,
  kL,
  kV,
  kT,
  kLV,
  kLVT
};

/// The clusters of `s`, in order, covering it exactly. A byte that is not valid UTF-8 is a
/// cluster of its own.
std::vector<std::string_view> graphemes(std::string_view s);

}  // namespace tg::text
