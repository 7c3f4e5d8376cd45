// Encoding and decoding with a loaded tokenizer, in the order `tokenizers` runs its pipeline:
// added tokens are split out of the text, each remaining segment is normalized and
// pre-tokenized (byte-level: Split regex, prefix space, ByteLevel regex, bytes spelled in the
// byte-level alphabet; SentencePiece-style: "▁" for spaces; WordPiece: BERT's normalizer and
// pre-tokenizer), each word becomes ids (BPE merges, or WordPiece's longest matches), and the
// post-processor's special tokens go around the result.
#include <cctype>
#include <algorithm>
#include <deque>
#include <functional>
#include <limits>

#include "tensorgrad/errors.h"
#include "text/bert_normalize.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace tg {
namespace {

using Impl = Tokenizer::Impl;

// A stretch of the text: an added token's id, or text still to tokenize (at_start: it begins
// the text, for Metaspace's prepend_scheme "first").
struct Segment {
  std::string_view text;
  std::optional<int32_t> added_id;
  bool at_start = false;
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

// Merges `symbols` by BPE: repeatedly the adjacent pair of lowest rank (the leftmost of
// equals) becomes its merged token, until no pair has a merge. A heap of candidate pairs over a
// linked list of the symbols, entries checked when popped: O(n log n) in the word's length (a
// SentencePiece-style file makes a whole line one word).
void merge(const Impl& t, std::vector<int32_t>& symbols) {
  const auto n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;
  std::vector<int32_t> next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) next[k] = k + 1 < n ? k + 1 : -1, prev[k] = k - 1;
  struct Candidate {
    int32_t rank, pos, left, right;  // the pair (left, right) starting at symbol `pos`
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Candidate> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = t.merges.find(Impl::pair_key(symbols[pos], symbols[next[pos]]));
    if (it == t.merges.end()) return;
    heap.push_back({it->second.rank, pos, symbols[pos], symbols[next[pos]]});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t k = 0; k + 1 < n; ++k) push(k);
  std::vector<bool> dead(static_cast<size_t>(n), false);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    const int32_t right = next[c.pos];
    if (dead[c.pos] || right < 0 || symbols[c.pos] != c.left || symbols[right] != c.right) continue;
    symbols[c.pos] = t.merges.at(Impl::pair_key(c.left, c.right)).id;
    dead[right] = true;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  std::vector<int32_t> out;
  for (int32_t k = 0; k >= 0; k = next[k]) out.push_back(symbols[k]);
  symbols = std::move(out);
}

// The ids of one word (its byte-level spelling, or SentencePiece-style UTF-8 with "▁" for
// spaces): each character its token (the last one spelled with the end_of_word_suffix), else
// the <0xXX> tokens of its bytes (byte_fallback, when all exist), else unk (a run of them fused
// into one with fuse_unk; dropped without an unk_token, as `tokenizers` does), then merged.
std::vector<int32_t> bpe(const Impl& t, const std::string& word) {
  if (t.ignore_merges) {
    if (auto it = t.ids.find(word); it != t.ids.end()) return {it->second};
  }
  std::vector<int32_t> symbols;
  const std::vector<text::Unit> units = text::decode_utf8(word);
  for (const auto& unit : units) {
    std::string symbol = word.substr(unit.offset, unit.size);
    if (&unit == &units.back()) symbol += t.end_of_word_suffix;
    if (auto it = t.ids.find(symbol); it != t.ids.end()) {
      symbols.push_back(it->second);
      continue;
    }
    bool bytes = t.byte_fallback;
    for (uint32_t b = 0; bytes && b < unit.size; ++b)
      bytes = t.byte_ids[static_cast<uint8_t>(word[unit.offset + b])] >= 0;
    if (bytes) {
      for (uint32_t b = 0; b < unit.size; ++b)
        symbols.push_back(t.byte_ids[static_cast<uint8_t>(word[unit.offset + b])]);
    } else if (t.unk_id && !(t.fuse_unk && !symbols.empty() && symbols.back() == *t.unk_id)) {
      symbols.push_back(*t.unk_id);
    }
  }
  merge(t, symbols);
  return symbols;
}

void encode_word(const Impl& t, std::string_view bytes, std::vector<int32_t>& ids) {
  const std::string word = t.sentencepiece ? std::string(bytes) : text::to_byte_level(bytes);
  const bool cached = word.size() <= 256;  // a SentencePiece-style line is one word: not kept
  if (cached) {
    std::lock_guard lock(t.cache_mutex);
    if (auto it = t.cache.find(word); it != t.cache.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> word_ids = t.unigram ? t.unigram_ids(word) : bpe(t, word);
  ids.insert(ids.end(), word_ids.begin(), word_ids.end());
  if (!cached) return;
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

// `s` with every " " spelled as `meta`.
std::string replace_spaces(const Impl& t, std::string_view s) {
  std::string out;
  for (char c : s) c == ' ' ? out += t.meta : out += c;
  return out;
}

// The Metaspace pre-tokenizer on one segment (spaces as "▁", the prefix, the split into words
// that each begin at a "▁"), then BPE or Unigram per word.
void encode_metaspace(const Impl& t, std::string_view segment, bool at_start, std::vector<int32_t>& ids) {
  std::string s = replace_spaces(t, segment);
  using P = Impl::Prepend;
  const bool prepend = t.metaspace_prepend == P::kAlways || (t.metaspace_prepend == P::kFirst && at_start);
  if (prepend && !s.starts_with(t.meta)) s = t.meta + s;
  if (!t.metaspace_split) return encode_word(t, s, ids);
  size_t begin = 0;
  for (size_t at = s.find(t.meta, 1); at != std::string::npos; at = s.find(t.meta, at + t.meta.size())) {
    encode_word(t, std::string_view(s).substr(begin, at - begin), ids);
    begin = at;
  }
  if (begin < s.size()) encode_word(t, std::string_view(s).substr(begin), ids);
}

// A SentencePiece-style segment: through Metaspace, first cut at whitespace (dropped) with
// WhitespaceSplit, each word on its own ("first" prepends only to a word at the text's very
// start). Without Metaspace the normalizer has already spelled the segment and it is one word.
void encode_sentencepiece(const Impl& t, std::string_view segment, bool at_start, std::vector<int32_t>& ids) {
  if (!t.metaspace) return encode_word(t, segment, ids);
  if (!t.whitespace_split) return encode_metaspace(t, segment, at_start, ids);
  size_t begin = 0;  // where the current word starts
  const auto flush = [&](size_t end) {
    if (end > begin) encode_metaspace(t, segment.substr(begin, end - begin), at_start && begin == 0, ids);
  };
  for (const text::Unit& u : text::decode_utf8(segment)) {
    if (u.cls != text::CharClass::kSpace) continue;
    flush(u.offset);
    begin = u.offset + u.size;
  }
  flush(segment.size());
}

// WordPiece on one word: unk when it has more than max_word_chars code points; else from the
// left the longest vocabulary entry (after the first, spelled with the continuing prefix), and
// unk for the whole word if some position has none.
void encode_wordpiece(const Impl& t, std::string_view word, std::vector<int32_t>& ids) {
  std::vector<size_t> bounds;  // where each code point (or invalid byte) starts, then the end
  for (const auto& unit : text::decode_utf8(word)) bounds.push_back(unit.offset);
  const size_t n = bounds.size();
  bounds.push_back(word.size());
  const size_t first = ids.size();
  bool matched = n <= t.max_word_chars;
  std::string piece;
  for (size_t start = 0; matched && start < n;) {
    size_t end = n;
    for (; end > start; --end) {
      piece = start > 0 ? t.continuing_prefix : std::string();
      piece += word.substr(bounds[start], bounds[end] - bounds[start]);
      if (auto it = t.ids.find(piece); it != t.ids.end()) {
        ids.push_back(it->second);
        break;
      }
    }
    matched = end > start;
    start = end;
  }
  if (matched) return;
  ids.resize(first);
  if (!t.unk_id)
    throw TokenizerError("[Tokenizer::encode] " + t.file + ": the word \"" + std::string(word) +
                         "\" needs the WordPiece unk_token \"" + t.unk_token +
                         "\", which is not in the vocab");
  ids.push_back(*t.unk_id);
}

const Impl& checked(const std::shared_ptr<const Impl>& impl) {
  if (!impl) throw InputError("[Tokenizer] used before Tokenizer::load");
  return *impl;
}

// The ids of `text` without the post-processor's special tokens. Added tokens are matched on
// the raw text first, then, after each remaining segment is normalized (normalize_steps, as NFC
// or CLIP's whitespace and Lowercase; SentencePiece-style files: "▁" prepended, spaces spelled
// "▁"; WordPiece: BERT's normalizer), those matched on that.
std::vector<int32_t> encode_text(const Impl& t, std::string_view text) {
  std::vector<Segment> raw, segments;
  split_added(t, text, /*normalized=*/false, raw);
  std::deque<std::string> normalized;  // the normalized segments' storage (stable addresses)
  for (const Segment& s : raw) {
    if (s.added_id) {
      segments.push_back(s);
      continue;
    }
    std::string_view view = s.text;
    if (t.bert_normalizer) {
      view = normalized.emplace_back(text::bert_normalize(s.text, *t.bert_normalizer));
    } else if (!t.normalize_steps.empty() || t.normalize_prepend || t.normalize_replace) {
      std::string& n = normalized.emplace_back(t.apply_normalize_steps(s.text));
      if (t.normalize_replace) n = replace_spaces(t, n);
      if (t.normalize_prepend && !n.empty()) n = t.meta + n;
      view = n;
    }
    const size_t first = segments.size();
    split_added(t, view, /*normalized=*/true, segments);
    const bool at_start = s.text.data() == text.data();
    for (size_t k = first; k < segments.size(); ++k)
      segments[k].at_start = at_start && !segments[k].added_id && segments[k].text.data() == view.data();
  }
  std::vector<int32_t> ids;
  for (const Segment& s : segments) {
    if (s.added_id) {
      ids.push_back(*s.added_id);
    } else if (t.wordpiece) {
      for (std::string_view word : text::bert_pre_tokenize(s.text)) encode_wordpiece(t, word, ids);
    } else if (t.sentencepiece) {
      if (!s.text.empty()) encode_sentencepiece(t, s.text, s.at_start, ids);
    } else if (t.split_pattern) {
      for (std::string_view piece : text::split(s.text, *t.split_pattern)) encode_piece(t, piece, ids);
    } else if (!s.text.empty()) {
      encode_piece(t, s.text, ids);
    }
  }
  return ids;
}

// `body` with the post-processor's single-sequence tokens around it (add_special), or as it is.
std::vector<int32_t> wrapped(const Impl& t, const std::vector<int32_t>& body, bool add_special) {
  std::vector<int32_t> ids = add_special ? t.prefix : std::vector<int32_t>();
  ids.insert(ids.end(), body.begin(), body.end());
  if (add_special) ids.insert(ids.end(), t.suffix.begin(), t.suffix.end());
  return ids;
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const Impl& t = checked(impl_);
  return wrapped(t, encode_text(t, text), add_special);
}

// Truncation follows `tokenizers`: the text's own ids are cut to what the post-processor's
// tokens leave of max_length, then wrapped; rows are padded on the right.
EncodedBatch Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                     const BatchOptions& options) const {
  const Impl& t = checked(impl_);
  const int64_t specials = options.add_special ? static_cast<int64_t>(t.prefix.size() + t.suffix.size()) : 0;
  if (options.max_length < 0 || (options.max_length > 0 && options.max_length <= specials))
    throw InputError("[Tokenizer::encode_batch] max_length " + std::to_string(options.max_length) +
                     " leaves no room for a text beside the " + std::to_string(specials) + " special tokens");
  if (options.pad_to_max_length && options.max_length == 0)
    throw InputError("[Tokenizer::encode_batch] pad_to_max_length needs a max_length");
  EncodedBatch out;
  out.rows = static_cast<int64_t>(texts.size());
  std::vector<std::vector<int32_t>> rows;
  for (const std::string& text : texts) {
    std::vector<int32_t> body = encode_text(t, text);
    if (options.max_length > 0 && static_cast<int64_t>(body.size()) > options.max_length - specials) {
      body.resize(static_cast<size_t>(options.max_length - specials));
      ++out.truncated;
    }
    std::vector<int32_t> ids = wrapped(t, body, options.add_special);
    out.lengths.push_back(static_cast<int64_t>(ids.size()));
    out.length = std::max(out.length, out.lengths.back());
    rows.push_back(std::move(ids));
  }
  if (options.pad_to_max_length) out.length = options.max_length;
  const std::optional<int32_t> pad = options.pad_id ? options.pad_id : t.pad;
  const bool padded =
      std::any_of(out.lengths.begin(), out.lengths.end(), [&](int64_t n) { return n < out.length; });
  if (padded && !pad)
    throw InputError("[Tokenizer::encode_batch] " + t.file +
                     " names no padding token ([PAD], <pad>, <|pad|> or a \"padding\" pad_id): pass "
                     "BatchOptions::pad_id");
  for (const std::vector<int32_t>& ids : rows) {
    const auto n = static_cast<int64_t>(ids.size());
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.mask.insert(out.mask.end(), static_cast<size_t>(n), 1);
    out.ids.insert(out.ids.end(), static_cast<size_t>(out.length - n), pad.value_or(0));
    out.mask.insert(out.mask.end(), static_cast<size_t>(out.length - n), 0);
  }
  return out;
}

std::optional<int32_t> Tokenizer::pad_id() const { return checked(impl_).pad; }

Encoding Tokenizer::encode_pair(std::string_view a, std::string_view b, bool add_special) const {
  const Impl& t = checked(impl_);
  const std::vector<int32_t> sequences[2] = {encode_text(t, a), encode_text(t, b)};
  Encoding out;
  for (const Impl::PairPiece& piece : t.pair) {
    if (piece.sequence < 0 && !add_special) continue;
    const std::vector<int32_t>& ids = piece.sequence < 0 ? piece.ids : sequences[piece.sequence];
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.type_ids.insert(out.type_ids.end(), ids.size(), piece.type_id);
  }
  return out;
}

namespace {

// `s` with every `from` replaced by `to`, left to right (as Rust's str::replace).
std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string_view::npos; at = hit + from.size()) {
    out += s.substr(at, hit - at);
    out += to;
  }
  out += s.substr(at);
  return out;
}

// The WordPiece decoder: a token after the first loses the prefix ("##") or gets a leading " ";
// with cleanup each token (its space included) then loses the spaces `tokenizers`' cleanup
// removes before punctuation and in contractions.
std::string decode_wordpiece(const Tokenizer& tok, const Impl& t, std::span<const int32_t> ids,
                             bool skip_special) {
  static constexpr std::pair<std::string_view, std::string_view> kCleanup[] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},    {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    const std::string& token = tok.id_to_token(id);
    if (skip_special && t.special[id]) continue;
    std::string piece = first                                ? token
                        : token.starts_with(t.decode_prefix) ? token.substr(t.decode_prefix.size())
                                                             : " " + token;
    first = false;
    if (t.decode_cleanup) {
      for (const auto& [from, to] : kCleanup) piece = replace_all(piece, from, to);
    }
    out += piece;
  }
  return out;
}

// SentencePiece-style decoding: "▁" read as a space (the Metaspace decoder: dropped from the
// first token), <0xXX> tokens as their byte (when the decoder has a ByteFallback step), then the
// leading spaces the encoder's prefix added stripped (a Strip step).
std::string decode_sentencepiece(const Tokenizer& tok, const Impl& t, std::span<const int32_t> ids,
                                 bool skip_special) {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    const std::string& token = tok.id_to_token(id);
    if (skip_special && t.special[id]) continue;
    const bool drop_meta = first && t.decode_drop_first_meta;
    first = false;
    if (t.decode_bytes && token.size() == 6 && token.starts_with("<0x") && token.back() == '>' &&
        std::isxdigit(static_cast<unsigned char>(token[3])) &&
        std::isxdigit(static_cast<unsigned char>(token[4]))) {
      const int b = std::stoi(token.substr(3, 2), nullptr, 16);
      if (t.byte_ids[static_cast<size_t>(b)] == id) {
        out += static_cast<char>(b);
        continue;
      }
    }
    for (size_t at = 0; at < token.size();) {
      if (token.compare(at, t.meta.size(), t.meta) == 0) {
        if (!drop_meta) out += ' ';
        at += t.meta.size();
      } else {
        out += token[at++];
      }
    }
  }
  size_t strip = 0;
  while (strip < static_cast<size_t>(t.strip_start) && strip < out.size() && out[strip] == ' ') ++strip;
  return out.substr(strip);
}

// What transformers' CLIPTokenizer makes of the ByteLevel decoder's text: each end-of-word
// suffix a space, then whitespace at either end stripped (Python's str.strip: Unicode
// White_Space and U+001C..U+001F).
std::string suffix_as_space(std::string_view decoded, std::string_view suffix) {
  return text::trim(replace_all(decoded, suffix, " "), true, true, /*python=*/true);
}

}  // namespace

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& t = checked(impl_);
  if (t.wordpiece) return decode_wordpiece(*this, t, ids, skip_special);
  if (t.sentencepiece) return decode_sentencepiece(*this, t, ids, skip_special);
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
  return t.end_of_word_suffix.empty() ? out : suffix_as_space(out, t.end_of_word_suffix);
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
