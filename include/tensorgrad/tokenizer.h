// Tokenizers read from a Hugging Face `tokenizer.json`, encoding and decoding as the
// `tokenizers` library does for GPT-2, Llama 3 and CLIP style (byte-level BPE), Llama 2 style
// (SentencePiece-style BPE), XLM-RoBERTa and T5 style (SentencePiece Unigram) and BERT style
// (WordPiece) models:
//
//   tg::Tokenizer tok = tg::Tokenizer::load("models/gpt2");   // or ".../tokenizer.json"
//   std::vector<int32_t> ids = tok.encode("Hello world");     // {15496, 995} for GPT-2
//   std::string text = tok.decode(ids);                       // "Hello world"
//
// What a file may hold: model "WordPiece" (unk_token, continuing_subword_prefix,
// max_input_chars_per_word) with the BertNormalizer (clean_text, handle_chinese_chars,
// strip_accents, lowercase) or none, the BertPreTokenizer and the WordPiece decoder (prefix,
// cleanup), as BERT, MiniLM, BGE and E5 files have them; or model "BPE" (merges in either form,
// "a b" or ["a", "b"]; ignore_merges; unk_token; continuing_subword_prefix "" or none), and either
//   - byte-level: as normalizer none, or NFC, Replace(regex "\s+" → " ") and Lowercase alone or
//     in a Sequence, applied in the file's order (Qwen2's and Qwen3's: NFC; CLIP's: all three;
//     Lowercase maps each code point by its own lowercase mapping, as `tokenizers` does: "Σ" is
//     always "σ"); the ByteLevel decoder; and as pre-tokenizer either ByteLevel (add_prefix_space,
//     use_regex: GPT-2's regex) or a Sequence of a Split then ByteLevel, the Split on GPT-2's,
//     Llama 3's or Qwen2's regex (behavior Isolated, or Removed with invert) or on CLIP's, with or
//     without its special-token alternatives (behavior Removed, invert: the whitespace between
//     words dropped). The model may have an end_of_word_suffix
//     (CLIP's "</w>"), appended to each word's last character before merging; or
//   - SentencePiece-style (byte_fallback, fuse_unk): spaces spelled "▁" by a normalizer
//     (Prepend("▁") and Replace(" ", "▁"): every segment between added tokens starts with a "▁")
//     or by the Metaspace pre-tokenizer (prepend_scheme always / first / never, split), alone
//     or after WhitespaceSplit in a Sequence (T5's older files: the text cut at Unicode
//     whitespace, which is dropped, and each word given its own "▁"); the decoder Metaspace
//     (which drops every "▁" of the first token, as `tokenizers` does) or Replace("▁", " ")
//     with ByteFallback, Fuse and Strip. A character outside the vocabulary becomes the
//     <0xXX> tokens of its bytes (byte_fallback), else unk;
//     decoding turns <0xXX> tokens back into bytes only where the decoder has a ByteFallback
//     step (a Metaspace decoder leaves them as written, as `tokenizers` does);
// or model "Unigram" (pieces with scores, unk_id, byte_fallback) with the Metaspace pre-tokenizer
// (alone, or after WhitespaceSplit as in the older T5 / Flan-T5 files) and decoder, as
// SentencePiece models converted by transformers (XLM-RoBERTa, multilingual E5, BGE-M3, T5,
// Flan-T5) have it: the normalizer a Sequence of Precompiled (SentencePiece's compiled rules,
// such as nmt_nfkc: applied per grapheme cluster as `tokenizers` applies them), Strip and
// Replace(regex " {2,}"), and each word split into the pieces of highest total score. T5's
// sentinels <extra_id_0> … <extra_id_99> are added special tokens (one id each), and its
// template appends </s> with add_special.
// Anything else is a TokenizerError naming the file and what it found. The file's truncation and
// padding settings are not applied by encode; encode_batch truncates and pads as asked (its
// padding id defaults to the file's).
//
// Added tokens (the file's "added_tokens") are found in the text before anything else, longest
// match first, and become their own ids, as `tokenizers` does: "a<|endoftext|>b" is "a", the
// token, "b". Their lstrip / rstrip flags are honoured; single_word is not.
//
// encode(text, add_special = true) adds what the file's post-processor (TemplateProcessing,
// BertProcessing or RobertaProcessing) puts around a single sequence (Llama 3:
// <|begin_of_text|> first; BERT: [CLS] first, [SEP] last); GPT-2's files add nothing.
// encode_pair(a, b) encodes two sequences as its pair form does, with token type ids (BERT:
// [CLS] a [SEP] b [SEP], types 0 up to the first [SEP], 1 after).
// bos_id() / eos_id() name the template's first / last special token, else an added special
// token called <|begin_of_text|> or <s> / <|end_of_text|>, </s> or <|endoftext|>.
//
// decode returns the bytes the tokens stand for. `tokenizers` replaces bytes that are not valid
// UTF-8 (a multi-byte character cut between ids, or text that was never UTF-8) with U+FFFD;
// here they are kept, so decode(encode(s)) == s for every string s with byte-level files
// without a normalizer, and with SentencePiece-style ones whose encoding keeps every space (the
// Prepend/Replace normalizer's). Text that is not valid UTF-8 is encoded as the bytes it is
// (each invalid byte a symbol that is neither letter, number nor space). WordPiece decoding
// gives what `tokenizers` gives: "##" pieces joined to the word before, other tokens after a
// space, then the decoder's cleanup ("hello , world" → "hello, world"); case, accents and
// spacing lost to normalization stay lost. With an end_of_word_suffix (CLIP's) decode gives
// what transformers' CLIPTokenizer gives: each "</w>" a space, then whitespace at either end
// stripped ("A photo of a CAT." → "a photo of a cat ."); `tokenizers` alone would keep the
// "</w>".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tg {

/// Ids with their token type ids (the segment a BERT-style model embeds each token as).
struct Encoding {
  std::vector<int32_t> ids, type_ids;
};

/// How encode_batch lays several texts out as one [rows, length] input.
struct BatchOptions {
  /// Wrap each text as the file's post-processor says (as encode's add_special).
  bool add_special = true;
  /// At most this many ids a row, special tokens included (0: no limit). A longer text keeps
  /// its first ids and the post-processor's tokens around them, as `tokenizers` truncates.
  int64_t max_length = 0;
  /// Rows as long as max_length (with a limit) rather than as the longest text.
  bool pad_to_max_length = false;
  /// The padding id; default: the file's "padding" pad_id, else its [PAD], <pad> or <|pad|>
  /// token (an InputError when it has none).
  std::optional<int32_t> pad_id = {};
};
/// Texts as one padded batch: ids and mask are [rows, length], row-major, the mask 1 on tokens
/// and 0 on padding (transformers' attention_mask, as nn::Bert::hidden takes it).
struct EncodedBatch {
  int64_t rows = 0, length = 0;
  std::vector<int32_t> ids, mask;
  std::vector<int64_t> lengths;  // tokens of each row before padding
  int64_t truncated = 0;         // rows max_length cut
};

class Tokenizer {
 public:
  /// Reads `path`: a tokenizer.json file, or a folder holding one; or a llama.cpp GGUF file,
  /// whose tokenizer.ggml.* metadata describes a byte-level BPE ("gpt2", with the pre-tokenizer
  /// of GPT-2, Llama 3 or Qwen2) or a SentencePiece BPE ("llama": pieces with scores, the
  /// higher-scoring merge first) and is read as the tokenizer.json it was converted from.
  /// Throws TokenizerError.
  static Tokenizer load(const std::string& path);

  /// The ids of `text`; with `add_special`, wrapped as the file's post-processor says. Throws
  /// TokenizerError for a WordPiece word that needs an unk_token the vocabulary lacks.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  /// The ids of the pair (`a`, `b`), as sentence-pair models (cross-encoders, BERT's next
  /// sentence prediction) take them, laid out and typed as the file's post-processor says for a
  /// pair: TemplateProcessing's "pair", BertProcessing's [CLS] a [SEP] b [SEP] (types 0 to the
  /// first [SEP], 1 after), RobertaProcessing's <s> a </s></s> b </s> (all 0); without a pair
  /// form, a then b with types 0 and 1. Without `add_special` the special tokens are left out
  /// and a and b keep their types (as `tokenizers` does: its template's, else 0 and 1).
  Encoding encode_pair(std::string_view a, std::string_view b, bool add_special = true) const;
  /// Each text encoded (encode), cut to options.max_length and padded to one length, right
  /// side, as `tokenizers`' encode_batch with truncation and padding enabled does.
  EncodedBatch encode_batch(const std::vector<std::string>& texts, const BatchOptions& options = {}) const;
  /// The padding id the file names (its "padding" settings, else a [PAD], <pad> or <|pad|> token).
  std::optional<int32_t> pad_id() const;
  /// The bytes `ids` stand for; with `skip_special`, special added tokens are left out.
  /// Throws InputError for an id that names no token.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  /// One more than the largest id (vocabulary and added tokens).
  int32_t vocab_size() const;
  /// The id of a token as the file spells it ("Ġworld" for " world"), if there is one.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The token with this id as the file spells it; throws InputError when there is none.
  const std::string& id_to_token(int32_t id) const;
  /// Whether `id` is an added token marked special (<|endoftext|>, <|begin_of_text|>, …).
  bool is_special(int32_t id) const;
  /// The ids of the added tokens, in the file's order.
  std::vector<int32_t> added_token_ids() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace tg
