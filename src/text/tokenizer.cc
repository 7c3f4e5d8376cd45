// Encoding and decoding with a loaded byte-level BPE tokenizer, in the order `tokenizers` runs
// its pipeline: added tokens are split out of the text, each remaining segment is pre-tokenized
// (Split regex, prefix space, ByteLevel regex, bytes spelled in the byte-level alphabet), each
// word is merged by BPE, and the post-processor's special tokens go around the result.
#include <algorithm>
#include <limits>

#include "tensorgrad/errors.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace tg {
namespace {

using Impl = Tokenizer::Impl;

// A stretch of the text: an added token's id, or text still to tokenize.
struct Segment {
  std::string_view text;
  std::optional<int32_t> added_id;
};

bool space_at(std::string_view s, size_t offset) {
  const auto units = text::decode_utf8(s.substr(offset, std::min<size_t>(4, s.size() - offset)));
  return !units.empty() && units.front().cls == text::CharClass::kSpace;
}

// Splits `s` on the added tokens with normalized == `normalized`: scanning left to right, the
// first position where one starts, the longest one there (leftmost-longest). lstrip / rstrip
// widen a match over the whitespace beside it, which the token then swallows.
void split_added(const Impl& t, std::string_view s, bool normalized, std::vector<Segment>& out) {
  size_t done = 0;  // s[0, done) is in `out`
  size_t i = 0;
  while (i < s.size()) {
    const Impl::AddedToken* best = nullptr;
    for (const auto& a : t.added) {
      if (a.normalized == normalized && s.substr(i).starts_with(a.content) &&
          (!best || a.content.size() > best->content.size()))
        best = &a;
    }
    if (!best) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + best->content.size();
    if (best->lstrip) {
      while (begin > done) {
        size_t prev = begin - 1;  // the start of the character before `begin`
        while (prev > done && (static_cast<uint8_t>(s[prev]) & 0xC0) == 0x80) --prev;
        if (!space_at(s.substr(0, begin), prev)) break;
        begin = prev;
      }
    }
    if (best->rstrip) {
      for (auto unit : text::decode_utf8(s.substr(end))) {
        if (unit.cls != text::CharClass::kSpace) break;
        end += unit.size;
      }
    }
    if (begin > done) out.push_back({s.substr(done, begin - done), std::nullopt});
    out.push_back({{}, best->id});
    done = i = end;
  }
  if (done < s.size()) out.push_back({s.substr(done), std::nullopt});
}

// The ids of one word (a byte-level string): start from its characters, then repeatedly merge
// the adjacent pair of lowest rank (the leftmost of equals) until no pair has a merge.
std::vector<int32_t> bpe(const Impl& t, const std::string& word) {
  if (t.ignore_merges) {
    if (auto it = t.ids.find(word); it != t.ids.end()) return {it->second};
  }
  std::vector<int32_t> symbols;
  for (const auto& unit : text::decode_utf8(word)) {
    auto it = t.ids.find(word.substr(unit.offset, unit.size));
    if (it != t.ids.end()) {
      symbols.push_back(it->second);
    } else if (t.unk_id) {
      symbols.push_back(*t.unk_id);
    }  // else dropped, as `tokenizers` does without an unk_token
  }
  while (symbols.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), best_id = -1;
    size_t best_pos = 0;
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      auto it = t.merges.find(Impl::pair_key(symbols[k], symbols[k + 1]));
      if (it != t.merges.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank, best_id = it->second.id, best_pos = k;
      }
    }
    if (best_id < 0) break;
    symbols[best_pos] = best_id;
    symbols.erase(symbols.begin() + best_pos + 1);
  }
  return symbols;
}

void encode_word(const Impl& t, std::string_view bytes, std::vector<int32_t>& ids) {
  const std::string word = text::to_byte_level(bytes);
  {
    std::lock_guard lock(t.cache_mutex);
    if (auto it = t.cache.find(word); it != t.cache.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> word_ids = bpe(t, word);
  ids.insert(ids.end(), word_ids.begin(), word_ids.end());
  std::lock_guard lock(t.cache_mutex);
  if (t.cache.size() >= 100000) t.cache.clear();  // bounded: a long stream of unseen words
  t.cache.emplace(word, std::move(word_ids));
}

// ByteLevel on one piece: the prefix space, then GPT-2's regex (use_regex), then BPE per word.
void encode_piece(const Impl& t, std::string_view piece, std::vector<int32_t>& ids) {
  std::string prefixed;
  if (t.add_prefix_space && !piece.starts_with(' ')) {
    prefixed = " " + std::string(piece);
    piece = prefixed;
  }
  if (!t.byte_level_regex) return encode_word(t, piece, ids);
  for (std::string_view word : text::split(piece, text::SplitPattern::kGpt2)) encode_word(t, word, ids);
}

const Impl& checked(const std::shared_ptr<const Impl>& impl) {
  if (!impl) throw InputError("[Tokenizer] used before Tokenizer::load");
  return *impl;
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const Impl& t = checked(impl_);
  // Added tokens matched on the raw text first, then those matched after normalization (there
  // is no normalizer here, so the second pass sees the same text).
  std::vector<Segment> raw, segments;
  split_added(t, text, /*normalized=*/false, raw);
  for (const Segment& s : raw) {
    if (s.added_id) {
      segments.push_back(s);
    } else {
      split_added(t, s.text, /*normalized=*/true, segments);
    }
  }
  std::vector<int32_t> ids;
  if (add_special) ids = t.prefix;
  for (const Segment& s : segments) {
    if (s.added_id) {
      ids.push_back(*s.added_id);
    } else if (t.split_pattern) {
      for (std::string_view piece : text::split(s.text, *t.split_pattern)) encode_piece(t, piece, ids);
    } else if (!s.text.empty()) {
      encode_piece(t, s.text, ids);
    }
  }
  if (add_special) ids.insert(ids.end(), t.suffix.begin(), t.suffix.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& t = checked(impl_);
  // The byte-level alphabet backwards: character → byte.
  static const std::unordered_map<char32_t, uint8_t> char_to_byte = [] {
    std::unordered_map<char32_t, uint8_t> m;
    for (int b = 0; b < 256; ++b) m[text::byte_to_char()[b]] = static_cast<uint8_t>(b);
    return m;
  }();
  std::string out;
  for (int32_t id : ids) {
    const std::string& token = id_to_token(id);
    if (skip_special && t.special[id]) continue;
    // A token spelled in the byte-level alphabet stands for its bytes; one with any other
    // character (an added token such as "<|эндоftext|>") for its own UTF-8.
    std::string bytes;
    bool byte_level = true;
    for (const auto& unit : text::decode_utf8(token)) {
      auto it = unit.valid ? char_to_byte.find(unit.cp) : char_to_byte.end();
      if (it == char_to_byte.end()) {
        byte_level = false;
        break;
      }
      bytes += static_cast<char>(it->second);
    }
    out += byte_level ? bytes : token;
  }
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(checked(impl_).tokens.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const Impl& t = checked(impl_);
  for (const auto& a : t.added) {
    if (a.content == token) return a.id;
  }
  if (auto it = t.ids.find(std::string(token)); it != t.ids.end()) return it->second;
  return std::nullopt;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  const Impl& t = checked(impl_);
  if (id < 0 || static_cast<size_t>(id) >= t.tokens.size() || !t.assigned[id])
    throw InputError("[Tokenizer] id " + std::to_string(id) + " names no token (vocabulary of " +
                     std::to_string(t.tokens.size()) + ", " + t.file + ")");
  return t.tokens[id];
}

bool Tokenizer::is_special(int32_t id) const {
  const Impl& t = checked(impl_);
  return id >= 0 && static_cast<size_t>(id) < t.special.size() && t.special[id];
}

std::vector<int32_t> Tokenizer::added_token_ids() const {
  std::vector<int32_t> out;
  for (const auto& a : checked(impl_).added) out.push_back(a.id);
  return out;
}

std::optional<int32_t> Tokenizer::bos_id() const { return checked(impl_).bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return checked(impl_).eos; }

}  // namespace tg
