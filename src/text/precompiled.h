// SentencePiece's compiled normalization rules (a tokenizer.json's Precompiled normalizer, the
// normalizer_spec.precompiled_charsmap of a SentencePiece model, base64 in the JSON): a
// double-array trie (darts-clone's unit layout) over UTF-8 byte strings whose values are offsets
// of replacement strings in a pool of NUL-terminated strings. The blob is
//   uint32 (little-endian) trie bytes | the trie's uint32 units | the replacement pool.
// Applied as `tokenizers` applies it: per extended grapheme cluster of under 6 bytes, the
// replacement of the shortest rule matching a prefix of the cluster replaces the whole cluster;
// otherwise (no rule, or a longer cluster) per code point, the shortest rule matching a prefix of
// it, or the code point as it is.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tg::text {

class PrecompiledCharsmap {
 public:
  /// From the blob's base64 text; throws std::invalid_argument saying what is malformed.
  static PrecompiledCharsmap from_base64(std::string_view text);
  std::string normalize(std::string_view s) const;

 private:
  /// The replacement of the shortest rule matching a prefix of `chunk`, if any.
  std::optional<std::string_view> transform(std::string_view chunk) const;
  std::vector<uint32_t> units_;
  std::string pool_;
};

/// The bytes of base64 `text` (standard alphabet, '=' padding optional); throws
/// std::invalid_argument on another character.
std::string decode_base64(std::string_view text);

}  // namespace tg::text
