// SentencePiece's compiled normalization rules (see precompiled.h).
#include "text/precompiled.h"

#include <stdexcept>

#include "text/grapheme.h"
#include "text/unicode.h"

namespace tg::text {

std::string decode_base64(std::string_view text) {
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+')
      v = 62;
    else if (c == '/')
      v = 63;
    else if (c == '=')
      break;
    else
      throw std::invalid_argument("a character that is not base64");
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if ((count += 6) >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xFF);
    }
  }
  return out;
}

PrecompiledCharsmap PrecompiledCharsmap::from_base64(std::string_view text) {
  const std::string blob = decode_base64(text);
  if (blob.size() < 4) throw std::invalid_argument("shorter than its 4-byte header");
  const uint32_t trie_bytes = static_cast<uint32_t>(static_cast<uint8_t>(blob[0])) |
                              static_cast<uint32_t>(static_cast<uint8_t>(blob[1])) << 8 |
                              static_cast<uint32_t>(static_cast<uint8_t>(blob[2])) << 16 |
                              static_cast<uint32_t>(static_cast<uint8_t>(blob[3])) << 24;
  if (trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    throw std::invalid_argument("its trie size (" + std::to_string(trie_bytes) +
                                " bytes) does not fit the blob");
  PrecompiledCharsmap m;
  for (size_t i = 4; i < 4 + trie_bytes; i += 4) {
    uint32_t u = 0;
    for (size_t b = 0; b < 4; ++b) u |= static_cast<uint32_t>(static_cast<uint8_t>(blob[i + b])) << (8 * b);
    m.units_.push_back(u);
  }
  if (m.units_.empty()) throw std::invalid_argument("an empty trie");
  m.pool_ = blob.substr(4 + trie_bytes);
  return m;
}

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  // darts-clone's units: the label (the byte a transition reads, bit 31 set on a leaf), whether
  // a leaf hangs below, the offset to the children (10 bits up, scaled by 2^8 when bit 9 is set),
  // and a leaf's value (31 bits).
  const auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
  size_t pos = offset(units_[0]);
  for (char ch : chunk) {
    const auto c = static_cast<uint8_t>(ch);
    if (c == 0) break;
    pos ^= c;
    if (pos >= units_.size()) return std::nullopt;
    const uint32_t u = units_[pos];
    if ((u & 0x800000FFu) != c) return std::nullopt;
    pos ^= offset(u);
    if (pos >= units_.size()) return std::nullopt;
    if ((u >> 8) & 1) {  // the shortest match: its value is where the replacement starts
      const size_t start = units_[pos] & 0x7FFFFFFFu;
      if (start > pool_.size()) return std::nullopt;
      const size_t end = pool_.find('\0', start);
      return std::string_view(pool_).substr(start, (end == std::string::npos ? pool_.size() : end) - start);
    }
  }
  return std::nullopt;
}

std::string PrecompiledCharsmap::normalize(std::string_view s) const {
  std::string out;
  out.reserve(s.size());
  for (std::string_view cluster : graphemes(s)) {
    if (cluster.size() < 6) {
      if (const auto r = transform(cluster)) {
        out += *r;
        continue;
      }
    }
    for (const Unit& u : decode_utf8(cluster)) {
      const std::string_view c = cluster.substr(u.offset, u.size);
      const auto r = u.valid ? transform(c) : std::nullopt;
      out += r ? *r : c;
    }
  }
  return out;
}

}  // namespace tg::text
