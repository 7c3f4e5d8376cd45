// BERT's normalizer and pre-tokenizer, as the BertNormalizer and BertPreTokenizer of Hugging
// Face `tokenizers` apply them in WordPiece tokenizer.json files (bert-base-uncased and -cased,
// MiniLM, BGE, E5, …), and the Lowercase normalizer (CLIP's), which lowercases as BERT's does.
// Which code points are controls, whitespace, punctuation, marks or CJK, and how each
// lowercases, comes from tables read off `tokenizers` itself (bert_tables.inc,
// scripts/gen_bert_tables.py), so the ids agree with it.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tg::text {

/// The steps of a BertNormalizer, applied in this order.
struct BertNormalizer {
  bool clean_text = true;            // NUL, U+FFFD and controls dropped; whitespace made " "
  bool handle_chinese_chars = true;  // " " before and after each CJK ideograph
  bool strip_accents = true;         // NFD, then nonspacing marks (Mn) dropped
  bool lowercase = true;             // each code point by its own lowercase mapping
};

/// `s` normalized as `options` say. Bytes that are not valid UTF-8 are kept as they are.
std::string bert_normalize(std::string_view s, const BertNormalizer& options);

/// `s` lowercased as `tokenizers`' Lowercase normalizer (and BertNormalizer's lowercase) does it:
/// each code point by its own full lowercase mapping, which may be several code points
/// ("İ" → "i̇"), with no context ("Σ" is "σ" at a word's end too: Rust's char::to_lowercase, not
/// str::to_lowercase). Bytes that are not valid UTF-8 are kept as they are.
std::string lowercase(std::string_view s);

/// The words of `s` as BertPreTokenizer splits it: at whitespace (which is dropped), and with
/// every punctuation character a word of its own. Views into `s`; none is empty.
std::vector<std::string_view> bert_pre_tokenize(std::string_view s);

}  // namespace tg::text
