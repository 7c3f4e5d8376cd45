// What a loaded tokenizer holds (tg::Tokenizer::Impl), shared by the reader of tokenizer.json
// (tokenizer_load.cc) and the encoder / decoder (tokenizer.cc).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/gguf.h"
#include "tensorgrad/tokenizer.h"
#include "text/bert_normalize.h"
#include "text/precompiled.h"
#include "text/pretokenize.h"

namespace tg {

struct Tokenizer::Impl {
  struct AddedToken {
    int32_t id;
    std::string content;
    bool special;
    bool lstrip, rstrip;  // the match also takes the whitespace before / after it
    bool normalized;      // matched after normalization (a second pass), else on the raw text
  };
  struct Merge {
    int32_t rank;  // its index in the file's merges: lower merges first
    int32_t id;    // the id of the merged token
  };

  std::string file;
  // Tokens by id (model vocabulary, then added tokens); ids that name nothing are unassigned.
  std::vector<std::string> tokens;
  std::vector<bool> assigned, special;
  std::unordered_map<std::string, int32_t> ids;  // model vocabulary only
  std::unordered_map<uint64_t, Merge> merges;    // key: (left id << 32) | right id
  bool ignore_merges = false;                    // a word that is a token is that token, merges or not
  // Appended to a word's last character before merging ("cat" → c, a, t</w>: CLIP's "</w>"), and
  // read as a space when decoding; "" for none.
  std::string end_of_word_suffix;
  std::optional<int32_t> unk_id;
  std::vector<AddedToken> added;

  // Pre-tokenizer: an optional Split on a regex, then ByteLevel.
  std::optional<text::SplitPattern> split_pattern;
  bool add_prefix_space = false;  // a piece that does not start with " " gets one
  bool byte_level_regex = true;   // ByteLevel splits each piece on GPT-2's regex

  // SentencePiece-style BPE (Llama 2, Mistral, TinyLlama) instead of byte-level: words are spelled
  // in their own UTF-8 with spaces as `meta` ("▁"); a character outside the vocabulary becomes
  // the <0xXX> tokens of its bytes (byte_fallback), else unk (consecutive ones fused: fuse_unk).
  bool sentencepiece = false;
  bool byte_fallback = false, fuse_unk = false;
  std::vector<int32_t> byte_ids = std::vector<int32_t>(256, -1);  // <0xXX> → id; -1: none
  std::string meta = "\xe2\x96\x81";                              // "▁"
  // The normalizer (legacy files): `meta` before every non-empty segment, spaces replaced.
  bool normalize_prepend = false, normalize_replace = false;
  // Normalizer steps applied in their order before the flags above (normalize_steps.cc): the
  // precompiled rules, Strip (whitespace at either end) and a Replace of each run of two or more
  // spaces (the regex " {2,}") by `content` (SentencePiece Unigram files, as XLM-RoBERTa's); NFC
  // (Qwen2's); a Replace of each run of whitespace (the regex "\s+") by `content` and Lowercase
  // (CLIP's, after NFC).
  struct NormalizeStep {
    enum class Kind {
      kPrecompiled,
      kStrip,
      kReplaceSpaceRuns,
      kNfc,
      kReplaceWhitespaceRuns,
      kLowercase
    } kind;
    std::shared_ptr<const text::PrecompiledCharsmap> charsmap;
    bool left = false, right = false;
    std::string content;
  };
  std::vector<NormalizeStep> normalize_steps;
  // The Metaspace pre-tokenizer (newer files): spaces replaced, `meta` prepended to a segment
  // not starting with it (always, or only to the one at the text's start), optionally split
  // into words that each begin at a `meta`.
  enum class Prepend { kAlways, kFirst, kNever };
  bool metaspace = false, metaspace_split = false;
  Prepend metaspace_prepend = Prepend::kAlways;
  // WhitespaceSplit before Metaspace (a Sequence of the two, T5's older files): each segment is
  // cut at whitespace (Unicode White_Space, as Rust's char::is_whitespace), which is dropped,
  // and each word then goes through Metaspace on its own, so every word gets its own `meta`.
  bool whitespace_split = false;
  // The decoder: `meta` read as a space, <0xXX> tokens as their byte where it has a
  // ByteFallback step (else they stay as written, as `tokenizers` leaves them), then up to
  // strip_start leading spaces of the text removed (Strip's start) — the prefix encoding added.
  // The Metaspace decoder (prepend_scheme other than never) instead drops every `meta` of the
  // first token (after skipped special tokens), as `tokenizers` does: decode_drop_first_meta.
  bool decode_bytes = false;
  int strip_start = 0;
  bool decode_drop_first_meta = false;

  // Unigram (SentencePiece's, XLM-RoBERTa's) instead of BPE: per word, the segmentation into
  // vocabulary pieces with the highest total score (Viterbi over the word's bytes); a character
  // no piece covers scores min_score − 10 and is unk (runs of them fused), or its <0xXX> pieces
  // with byte_fallback. The SentencePiece-style fields above hold the rest of the pipeline.
  bool unigram = false;
  std::vector<double> scores;  // by id (model vocabulary)
  double min_score = 0;
  size_t max_piece_bytes = 0;

  // WordPiece (BERT-family files) instead of BPE: the BertNormalizer (or none), the
  // BertPreTokenizer, then per word the longest vocabulary entries from the left, those after
  // the first spelled with `continuing_prefix`; a word of more than `max_word_chars` code points,
  // or with a position where no entry matches, is `unk_token`.
  bool wordpiece = false;
  std::string continuing_prefix = "##", unk_token;
  size_t max_word_chars = 100;
  std::optional<text::BertNormalizer> bert_normalizer;
  // The WordPiece decoder: tokens joined, a token after the first losing `decode_prefix` or
  // else getting a leading " "; with cleanup, spaces before punctuation and in contractions
  // removed per token.
  std::string decode_prefix = "##";
  bool decode_cleanup = true;

  // What encode(…, add_special = true) puts around the ids (the post-processor's single form).
  std::vector<int32_t> prefix, suffix;
  std::optional<int32_t> bos, eos;
  std::optional<int32_t> pad;  // the "padding" settings' pad_id, else a [PAD] / <pad> / <|pad|> token
  // The post-processor's pair form: sequences A and B and special tokens in order, each with
  // its type id; without add_special only the sequences are kept, with their type ids.
  struct PairPiece {
    int sequence;  // 0: A, 1: B, -1: the special tokens `ids`
    std::vector<int32_t> ids;
    int32_t type_id;
  };
  std::vector<PairPiece> pair = {{0, {}, 0}, {1, {}, 1}};

  // Byte-pair merges of one word (its byte-level spelling) are the same every time: cached.
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  /// The ids of one SentencePiece-style word under the Unigram model (unigram.cc).
  std::vector<int32_t> unigram_ids(std::string_view word) const;
  /// `s` through normalize_steps, in order.
  std::string apply_normalize_steps(std::string_view s) const;

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
};

namespace text {
/// The tokenizer.json that describes the tokenizer of a GGUF file's metadata
/// (tokenizer_gguf.cc). Throws TokenizerError for one it cannot describe.
nlohmann::json tokenizer_json_of_gguf(const io::GgufFile& g);
/// The other way: the tokenizer.ggml.* key-values that describe a tokenizer.json's tokenizer
/// (`root`, read from `file`): a byte-level BPE with GPT-2's, Llama 3's or Qwen2's
/// pre-tokenizer, or a SentencePiece-style BPE (its merge ranks as scores), its tokens padded
/// to `vocab` (the model's vocabulary; 0: not padded). Throws TokenizerError for one GGUF cannot
/// describe, or ids beyond `vocab`.
std::vector<io::GgufKv> gguf_tokenizer_kvs(const nlohmann::json& root, const std::string& file, int64_t vocab = 0);
}  // namespace text

}  // namespace tg
