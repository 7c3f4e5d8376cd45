// Reads a Hugging Face tokenizer.json into a Tokenizer::Impl, checking that every part of the
// pipeline is one this tokenizer implements (see tokenizer.h) and naming what it found if not.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "io/json.h"
#include "tensorgrad/errors.h"
#include "text/tokenizer_impl.h"

namespace tg {
namespace {

using nlohmann::json;

// Ids above this are taken for a broken file rather than allocated for.
constexpr int64_t kMaxId = int64_t{1} << 24;

[[noreturn]] void tokenizer_fail(const std::string& file, const std::string& what) {
  throw TokenizerError("[Tokenizer::load] " + file + ": " + what);
}

std::string type_of(const json& j) {
  if (j.is_object() && j.contains("type") && j["type"].is_string()) return j["type"].get<std::string>();
  return j.dump().substr(0, 80);
}

// A field that may be missing or null: its value, else `fallback`.
template <typename T>
T value_or(const json& j, const char* key, T fallback) {
  return j.contains(key) && !j[key].is_null() ? j[key].get<T>() : fallback;
}

void set_token(Tokenizer::Impl& t, int64_t id, const std::string& token) {
  if (id < 0 || id >= kMaxId)
    tokenizer_fail(t.file, "token \"" + token + "\" has the id " + std::to_string(id));
  if (static_cast<size_t>(id) >= t.tokens.size()) {
    t.tokens.resize(id + 1);
    t.assigned.resize(id + 1, false);
    t.special.resize(id + 1, false);
  }
  t.tokens[id] = token;
  t.assigned[id] = true;
}

void read_vocab(Tokenizer::Impl& t, const json& model, const std::string& type) {
  if (!model.contains("vocab") || !model["vocab"].is_object())
    tokenizer_fail(t.file, "the " + type + " model has no vocab object");
  for (const auto& [token, id] : model["vocab"].items()) {
    set_token(t, id.get<int64_t>(), token);
    t.ids[token] = id.get<int32_t>();
  }
}

void read_wordpiece(Tokenizer::Impl& t, const json& model) {
  t.wordpiece = true;
  t.unk_token = value_or<std::string>(model, "unk_token", "[UNK]");
  t.continuing_prefix = value_or<std::string>(model, "continuing_subword_prefix", "##");
  const int64_t max_chars = value_or<int64_t>(model, "max_input_chars_per_word", 100);
  if (max_chars < 0) tokenizer_fail(t.file, "max_input_chars_per_word is " + std::to_string(max_chars));
  t.max_word_chars = static_cast<size_t>(max_chars);
  read_vocab(t, model, "WordPiece");
  // A missing unk token is an error only when a word needs it (encode says so), as in `tokenizers`.
  if (auto it = t.ids.find(t.unk_token); it != t.ids.end()) t.unk_id = it->second;
}

// <0xXX> pieces → byte_ids.
void read_byte_pieces(Tokenizer::Impl& t) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (auto it = t.ids.find(name); it != t.ids.end()) t.byte_ids[static_cast<size_t>(b)] = it->second;
  }
}

// A Unigram model: "vocab" [[piece, score], …] in id order, "unk_id", "byte_fallback".
void read_unigram(Tokenizer::Impl& t, const json& model) {
  t.unigram = true;
  if (!model.contains("vocab") || !model["vocab"].is_array() || model["vocab"].empty())
    tokenizer_fail(t.file, "the Unigram model has no vocab array");
  const json& vocab = model["vocab"];
  t.min_score = std::numeric_limits<double>::infinity();
  for (size_t id = 0; id < vocab.size(); ++id) {
    const json& entry = vocab[id];
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number())
      tokenizer_fail(t.file, "Unigram vocab entry " + std::to_string(id) + " is " +
                                 entry.dump().substr(0, 100) + ", not [piece, score]");
    const std::string piece = entry[0].get<std::string>();
    set_token(t, static_cast<int64_t>(id), piece);
    t.ids[piece] = static_cast<int32_t>(id);  // a repeated piece: its last id, as `tokenizers`
    t.scores.push_back(entry[1].get<double>());
    t.min_score = std::min(t.min_score, t.scores.back());
    t.max_piece_bytes = std::max(t.max_piece_bytes, piece.size());
  }
  if (model.contains("unk_id") && !model["unk_id"].is_null()) {
    const int64_t unk = model["unk_id"].get<int64_t>();
    if (unk < 0 || static_cast<size_t>(unk) >= vocab.size())
      tokenizer_fail(t.file, "unk_id " + std::to_string(unk) + " is not an id of the vocab");
    t.unk_id = static_cast<int32_t>(unk);
  }
  t.byte_fallback = value_or<bool>(model, "byte_fallback", false);
  read_byte_pieces(t);
}

void read_model(Tokenizer::Impl& t, const json& model) {
  if (!model.is_object()) tokenizer_fail(t.file, "no \"model\" object");
  const std::string type = value_or<std::string>(model, "type", "BPE");
  if (type == "WordPiece") return read_wordpiece(t, model);
  if (type == "Unigram") return read_unigram(t, model);
  if (type != "BPE")
    tokenizer_fail(t.file,
                   "model type \"" + type +
                       "\" is not supported (only byte-level BPE, as GPT-2's, Llama 3's and CLIP's, "
                       "SentencePiece-style BPE, as Llama 2's, Unigram, as XLM-RoBERTa's, and WordPiece, as "
                       "BERT's)");
  if (value_or<double>(model, "dropout", 0.0) != 0.0) tokenizer_fail(t.file, "BPE dropout is not supported");
  // CLIP's files have continuing_subword_prefix "" (none) and end_of_word_suffix "</w>".
  if (const std::string prefix = value_or<std::string>(model, "continuing_subword_prefix", "");
      !prefix.empty())
    tokenizer_fail(
        t.file, "a BPE continuing_subword_prefix (\"" + prefix + "\") is not supported (only \"\" or none)");
  t.end_of_word_suffix = value_or<std::string>(model, "end_of_word_suffix", "");
  t.byte_fallback = value_or<bool>(model, "byte_fallback", false);
  t.fuse_unk = value_or<bool>(model, "fuse_unk", false);
  t.ignore_merges = value_or<bool>(model, "ignore_merges", false);

  read_vocab(t, model, "BPE");
  if (const std::string unk = value_or<std::string>(model, "unk_token", ""); !unk.empty()) {
    if (auto it = t.ids.find(unk); it != t.ids.end()) t.unk_id = it->second;
  }
  read_byte_pieces(t);

  if (!model.contains("merges") || !model["merges"].is_array())
    tokenizer_fail(t.file, "the BPE model has no merges array");
  const auto id_of = [&](const std::string& token, size_t rank) {
    auto it = t.ids.find(token);
    if (it == t.ids.end())
      tokenizer_fail(t.file,
                     "merge " + std::to_string(rank) + " names \"" + token + "\", which is not in the vocab");
    return it->second;
  };
  const json& merges = model["merges"];
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {  // "left right"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        tokenizer_fail(t.file, "merge " + std::to_string(rank) + " \"" + s + "\" is not two tokens");
      left = s.substr(0, space), right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {  // ["left", "right"]
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      tokenizer_fail(t.file, "merge " + std::to_string(rank) + " is " + m.dump());
    }
    const uint64_t key = Tokenizer::Impl::pair_key(id_of(left, rank), id_of(right, rank));
    t.merges[key] = {.rank = static_cast<int32_t>(rank), .id = id_of(left + right, rank)};
  }
}

void read_added_tokens(Tokenizer::Impl& t, const json& added) {
  if (added.is_null()) return;
  for (const json& a : added) {
    Tokenizer::Impl::AddedToken token{
        .id = a.at("id").get<int32_t>(),
        .content = a.at("content").get<std::string>(),
        .special = value_or<bool>(a, "special", false),
        .lstrip = value_or<bool>(a, "lstrip", false),
        .rstrip = value_or<bool>(a, "rstrip", false),
        .normalized = value_or<bool>(a, "normalized", true),
    };
    if (token.content.empty())
      tokenizer_fail(t.file, "added token " + std::to_string(token.id) + " is empty");
    set_token(t, token.id, token.content);
    t.special[token.id] = token.special;
    t.added.push_back(std::move(token));
  }
}

void read_byte_level(Tokenizer::Impl& t, const json& p) {
  t.add_prefix_space = value_or<bool>(p, "add_prefix_space", false);
  t.byte_level_regex = value_or<bool>(p, "use_regex", true);
}

void read_pre_tokenizer(Tokenizer::Impl& t, const json& p) {
  const std::string type = type_of(p);
  if (type == "ByteLevel") return read_byte_level(t, p);
  const json* steps = type == "Sequence" && p.contains("pretokenizers") ? &p["pretokenizers"] : nullptr;
  if (steps && steps->size() == 2 && type_of((*steps)[0]) == "Split" && type_of((*steps)[1]) == "ByteLevel") {
    const json& split = (*steps)[0];
    const std::string regex =
        split.contains("pattern") ? value_or<std::string>(split["pattern"], "Regex", "") : "";
    for (auto pattern : {text::SplitPattern::kGpt2, text::SplitPattern::kLlama3, text::SplitPattern::kQwen2,
                         text::SplitPattern::kClip, text::SplitPattern::kClipPlain,
                         text::SplitPattern::kO200k, text::SplitPattern::kTekken}) {
      if (regex == text::pattern_source(pattern)) t.split_pattern = pattern;
    }
    if (!t.split_pattern)
      tokenizer_fail(
          t.file,
          "the Split pre-tokenizer's pattern is not GPT-2's, Llama 3's, Qwen2's, CLIP's, o200k's or tekken's "
          "regex: " +
              regex);
    // The pieces text::split gives: the matches, which cover the text but for CLIP's regex.
    // "Removed" with invert keeps exactly the matches; "Isolated" keeps what lies between them
    // too, which is nothing for the covering regexes.
    const std::string behavior = value_or<std::string>(split, "behavior", "");
    const bool invert = value_or<bool>(split, "invert", false);
    const bool covering =
        *t.split_pattern != text::SplitPattern::kClip && *t.split_pattern != text::SplitPattern::kClipPlain;
    if (!(behavior == "Removed" && invert) && !(behavior == "Isolated" && !invert && covering))
      tokenizer_fail(t.file,
                     std::string("a Split pre-tokenizer must have behavior Removed and invert") +
                         (covering ? ", or behavior Isolated and not invert: " : " on CLIP's regex: ") +
                         split.dump().substr(0, 300));
    return read_byte_level(t, (*steps)[1]);
  }
  tokenizer_fail(t.file,
                 "pre-tokenizer " + (type == "Sequence" ? p.dump().substr(0, 200) : type) +
                     " is not supported (ByteLevel, or a Sequence of a Split and ByteLevel; for "
                     "SentencePiece-style models Metaspace, or a Sequence of WhitespaceSplit and Metaspace)");
}

// The pattern string of a Replace normalizer or decoder ({"String": s}; a Regex is not read).
std::string replace_pattern(const Tokenizer::Impl& t, const json& r) {
  if (!r.contains("pattern") || !r["pattern"].contains("String"))
    tokenizer_fail(t.file, "a Replace with a regex pattern is not supported: " + r.dump().substr(0, 200));
  return r["pattern"]["String"].get<std::string>();
}

// The normalizers read: SentencePiece-style Prepend("▁") and Replace(" " → "▁"), alone or in a
// Sequence; and, before those, the steps applied in the file's order: those of Unigram files
// (Precompiled, Strip, Replace of the regex " {2,}"), NFC (also after Prepend and Replace: it
// changes no space and no "▁"), and CLIP's (Replace of the regex "\s+", Lowercase).
void read_normalizer(Tokenizer::Impl& t, const json& n) {
  const std::string type = type_of(n);
  if (type == "Sequence") {
    for (const json& step : n.at("normalizers")) read_normalizer(t, step);
    return;
  }
  using Step = Tokenizer::Impl::NormalizeStep;
  const bool regex = type == "Replace" && n.contains("pattern") && n["pattern"].contains("Regex");
  if (type == "Precompiled" || type == "Strip" || regex || type == "NFC" || type == "Lowercase") {
    if (type != "NFC" && (t.normalize_prepend || t.normalize_replace))
      tokenizer_fail(
          t.file, "normalizer " + type + " after Prepend or Replace(\" \") is not supported (only before)");
    Step step{Step::Kind::kStrip, nullptr, false, false, ""};
    if (type == "NFC" || type == "Lowercase") {
      step.kind = type == "NFC" ? Step::Kind::kNfc : Step::Kind::kLowercase;
    } else if (type == "Precompiled") {
      step.kind = Step::Kind::kPrecompiled;
      const std::string blob = value_or<std::string>(n, "precompiled_charsmap", "");
      if (blob.empty()) return;  // no rules: nothing changes
      try {
        step.charsmap =
            std::make_shared<text::PrecompiledCharsmap>(text::PrecompiledCharsmap::from_base64(blob));
      } catch (const std::invalid_argument& e) {
        tokenizer_fail(
            t.file,
            std::string("the Precompiled normalizer's precompiled_charsmap is malformed: ") + e.what());
      }
    } else if (type == "Strip") {
      step.left = value_or<bool>(n, "strip_left", false);
      step.right = value_or<bool>(n, "strip_right", false);
    } else {
      const std::string pattern = n["pattern"]["Regex"].get<std::string>();
      if (pattern != " {2,}" && pattern != "\\s+")
        tokenizer_fail(t.file, "a Replace with the regex \"" + pattern +
                                   "\" is not supported (only \" {2,}\" and \"\\s+\")");
      step.kind = pattern == " {2,}" ? Step::Kind::kReplaceSpaceRuns : Step::Kind::kReplaceWhitespaceRuns;
      step.content = value_or<std::string>(n, "content", "");
    }
    t.normalize_steps.push_back(std::move(step));
    return;
  }
  if (type == "Prepend" && value_or<std::string>(n, "prepend", "") == t.meta) {
    t.normalize_prepend = true;
    return;
  }
  if (type == "Replace" && replace_pattern(t, n) == " " &&
      value_or<std::string>(n, "content", "") == t.meta) {
    t.normalize_replace = true;
    return;
  }
  tokenizer_fail(t.file,
                 "normalizer " + type_of(n) +
                     " is not supported (NFC, Lowercase, SentencePiece-style Prepend(\"▁\") and "
                     "Replace(\" \", \"▁\"), Precompiled, Strip, Replace(\" {2,}\") and Replace(\"\\s+\"), "
                     "or none): " +
                     n.dump().substr(0, 200));
}

void read_metaspace(Tokenizer::Impl& t, const json& p) {
  t.metaspace = true;
  if (value_or<std::string>(p, "replacement", t.meta) != t.meta)
    tokenizer_fail(t.file,
                   "a Metaspace replacement other than \"▁\" is not supported: " + p.dump().substr(0, 200));
  t.metaspace_split = value_or<bool>(p, "split", true);
  const std::string scheme = value_or<std::string>(
      p, "prepend_scheme", value_or<bool>(p, "add_prefix_space", true) ? "always" : "never");
  using P = Tokenizer::Impl::Prepend;
  if (scheme != "always" && scheme != "first" && scheme != "never")
    tokenizer_fail(t.file, "Metaspace prepend_scheme \"" + scheme + "\" is not always, first or never");
  t.metaspace_prepend = scheme == "always" ? P::kAlways : scheme == "first" ? P::kFirst : P::kNever;
}

// SentencePiece-style decoders: Metaspace, or a Sequence of Replace("▁" → " "), ByteFallback,
// Fuse and Strip(" ", start, 0).
void read_sentencepiece_decoder(Tokenizer::Impl& t, const json& d) {
  const std::string type = type_of(d);
  if (type == "Metaspace") {
    const std::string scheme = value_or<std::string>(
        d, "prepend_scheme", value_or<bool>(d, "add_prefix_space", true) ? "always" : "never");
    t.decode_drop_first_meta = scheme != "never";
    return;
  }
  bool replace = false;
  if (type == "Sequence") {
    for (const json& step : d.at("decoders")) {
      const std::string s = type_of(step);
      if (s == "Replace" && replace_pattern(t, step) == t.meta &&
          value_or<std::string>(step, "content", "") == " ") {
        replace = true;
      } else if (s == "Strip" && value_or<std::string>(step, "content", " ") == " " &&
                 value_or<int>(step, "stop", 0) == 0) {
        t.strip_start = value_or<int>(step, "start", 0);
      } else if (s == "ByteFallback") {
        t.decode_bytes = true;
      } else if (s != "Fuse") {
        tokenizer_fail(t.file, "decoder step " + step.dump().substr(0, 200) + " is not supported");
      }
    }
  }
  if (!replace)
    tokenizer_fail(
        t.file, "decoder " + d.dump().substr(0, 200) +
                    " is not supported for SentencePiece-style BPE (Metaspace, or Replace(\"▁\", \" \") with "
                    "ByteFallback, Fuse, Strip)");
}

// The ids of a TemplateProcessing's special token `item` ({"SpecialToken": {"id": name, …}}).
std::vector<int32_t> template_ids(const Tokenizer::Impl& t, const json& p, const json& item) {
  const std::string name = item.at("SpecialToken").at("id").get<std::string>();
  if (!p.contains("special_tokens") || !p["special_tokens"].contains(name))
    tokenizer_fail(t.file, "the post-processor names the special token \"" + name + "\" without its ids");
  return p["special_tokens"][name].at("ids").get<std::vector<int32_t>>();
}

// TemplateProcessing: "single", the special tokens before and after the sequence $A, and
// "pair", its pieces in order with their type ids.
void read_template(Tokenizer::Impl& t, const json& p) {
  bool after = false;
  for (const json& item : p.at("single")) {
    if (item.contains("Sequence")) {
      after = true;
      continue;
    }
    for (int32_t id : template_ids(t, p, item)) (after ? t.suffix : t.prefix).push_back(id);
  }
  if (!p.contains("pair") || p["pair"].is_null()) return;
  std::vector<Tokenizer::Impl::PairPiece> pair;
  int sequences[2] = {0, 0};  // how often A and B appear
  for (const json& item : p["pair"]) {
    if (!item.contains("Sequence")) {
      pair.push_back({-1, template_ids(t, p, item), item.at("SpecialToken").value("type_id", 0)});
      continue;
    }
    const json& seq = item["Sequence"];
    const std::string id = seq.at("id").get<std::string>();
    if (id != "A" && id != "B") tokenizer_fail(t.file, "the pair template names the sequence \"" + id + "\"");
    ++sequences[id == "B"];
    pair.push_back({id == "B" ? 1 : 0, {}, seq.value("type_id", 0)});
  }
  if (sequences[0] != 1 || sequences[1] != 1)
    tokenizer_fail(t.file,
                   "the pair template does not hold $A and $B once each: " + p["pair"].dump().substr(0, 200));
  t.pair = std::move(pair);
}

// BertProcessing / RobertaProcessing: {"sep": ["[SEP]", id], "cls": ["[CLS]", id]}. Single:
// cls A sep. Pair: BERT's cls A sep B sep with types 0 up to the first sep and 1 after;
// RoBERTa's cls A sep sep B sep, every type 0 (with or without the special tokens).
void read_bert_processing(Tokenizer::Impl& t, const json& p, bool roberta) {
  const auto token_id = [&](const char* key) {
    if (!p.contains(key) || !p[key].is_array() || p[key].size() != 2)
      tokenizer_fail(t.file, "the post-processor's \"" + std::string(key) +
                                 "\" is not [token, id]: " + p.dump().substr(0, 200));
    return p[key][1].get<int32_t>();
  };
  const int32_t cls = token_id("cls"), sep = token_id("sep");
  t.prefix = {cls};
  t.suffix = {sep};
  if (roberta)
    t.pair = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep, sep}, 0}, {1, {}, 0}, {-1, {sep}, 0}};
  else
    t.pair = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}, {1, {}, 1}, {-1, {sep}, 1}};
}

void read_post_processor(Tokenizer::Impl& t, const json& p) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") return read_template(t, p);
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return read_bert_processing(t, p, type == "RobertaProcessing");
  if (type == "Sequence") {
    for (const json& step : p.at("processors")) read_post_processor(t, step);
    return;
  }
  tokenizer_fail(t.file,
                 "post-processor " + type +
                     " is not supported (ByteLevel, TemplateProcessing, BertProcessing, RobertaProcessing)");
}

// WordPiece's pipeline: the BertNormalizer or none, the BertPreTokenizer, the WordPiece decoder.
void read_wordpiece_parts(Tokenizer::Impl& t, const json& normalizer, const json& pre, const json& decoder) {
  if (!normalizer.is_null()) {
    if (type_of(normalizer) != "BertNormalizer")
      tokenizer_fail(t.file, "normalizer " + type_of(normalizer) +
                                 " with WordPiece is not supported (BertNormalizer, or none): " +
                                 normalizer.dump().substr(0, 200));
    text::BertNormalizer n;
    n.clean_text = value_or<bool>(normalizer, "clean_text", true);
    n.handle_chinese_chars = value_or<bool>(normalizer, "handle_chinese_chars", true);
    n.lowercase = value_or<bool>(normalizer, "lowercase", true);
    n.strip_accents = value_or<bool>(normalizer, "strip_accents", n.lowercase);  // null: as lowercase
    t.bert_normalizer = n;
  }
  if (type_of(pre) != "BertPreTokenizer")
    tokenizer_fail(t.file,
                   "pre-tokenizer " + type_of(pre) + " with WordPiece is not supported (BertPreTokenizer)");
  if (type_of(decoder) != "WordPiece")
    tokenizer_fail(t.file, "decoder " + type_of(decoder) + " with WordPiece is not supported (WordPiece)");
  t.decode_prefix = value_or<std::string>(decoder, "prefix", "##");
  t.decode_cleanup = value_or<bool>(decoder, "cleanup", true);
}

// The Metaspace pre-tokenizer of `pre`: `pre` itself, or the second step of a Sequence of
// WhitespaceSplit then Metaspace (T5's older files; whitespace_split says which); else null.
const json* metaspace_of(const json& pre, bool& whitespace_split) {
  whitespace_split = false;
  if (type_of(pre) == "Metaspace") return &pre;
  if (type_of(pre) != "Sequence" || !pre.contains("pretokenizers")) return nullptr;
  const json& steps = pre["pretokenizers"];
  if (!steps.is_array() || steps.size() != 2 || type_of(steps[0]) != "WhitespaceSplit" ||
      type_of(steps[1]) != "Metaspace")
    return nullptr;
  whitespace_split = true;
  return &steps[1];
}

// Byte-level or SentencePiece-style BPE: which one the normalizer, pre-tokenizer and model say,
// and the parts each allows.
void read_bpe_parts(Tokenizer::Impl& t, const json& normalizer, const json& pre, const json& decoder) {
  if (!normalizer.is_null()) read_normalizer(t, normalizer);
  // SentencePiece-style: byte fallback, a normalizer spelling spaces "▁", the Metaspace
  // pre-tokenizer (after WhitespaceSplit, or alone) or none.
  bool whitespace_split = false;
  const json* metaspace = metaspace_of(pre, whitespace_split);
  t.sentencepiece = t.unigram || t.byte_fallback || t.normalize_prepend || t.normalize_replace ||
                    pre.is_null() || metaspace;
  if (t.sentencepiece) {
    if (!pre.is_null() && !metaspace)
      tokenizer_fail(
          t.file, "pre-tokenizer " + (type_of(pre) == "Sequence" ? pre.dump().substr(0, 200) : type_of(pre)) +
                      " with SentencePiece-style BPE (byte_fallback or a normalizer) or Unigram is not "
                      "supported (Metaspace, a Sequence of WhitespaceSplit and Metaspace, or none)");
    if (metaspace) read_metaspace(t, *metaspace);
    t.whitespace_split = whitespace_split;
    if (!t.normalize_replace && !t.metaspace)
      tokenizer_fail(t.file,
                     "no normalizer or pre-tokenizer spells spaces as \"▁\" (not a SentencePiece-style BPE)");
    if (!t.end_of_word_suffix.empty())
      tokenizer_fail(t.file, "a BPE end_of_word_suffix (\"" + t.end_of_word_suffix +
                                 "\") is supported only with byte-level BPE, not SentencePiece-style");
    read_sentencepiece_decoder(t, decoder);
  } else {
    read_pre_tokenizer(t, pre);
    if (type_of(decoder) != "ByteLevel")
      tokenizer_fail(t.file, "decoder " + type_of(decoder) + " is not supported (ByteLevel)");
  }
}

std::optional<int32_t> added_special_named(const Tokenizer::Impl& t,
                                           std::initializer_list<const char*> names) {
  for (const char* name : names) {
    for (const auto& a : t.added) {
      if (a.special && a.content == name) return a.id;
    }
  }
  return std::nullopt;
}

// Why `text` is not a tokenizer.json at all, in words, or "" when it parses as a JSON object.
std::string not_json(const std::string& text, json& root) {
  if (text.empty()) return "the file is empty";
  // A text file is UTF-8 without NUL bytes; SentencePiece's tokenizer.model (a protobuf) is not.
  const bool binary = text.find('\0') != std::string::npos || !io::is_valid_utf8(text);
  if (binary) return "a binary file, not JSON (a SentencePiece tokenizer.model? only tokenizer.json is read)";
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    return std::string("not valid JSON: ") + e.what();
  }
  if (!root.is_object())
    return "not a JSON object but " + std::string(root.type_name()) + " (is it a tokenizer.json?)";
  return "";
}

void read_tokenizer_root(Tokenizer::Impl& t, const json& root) {
  if (!root.contains("model")) tokenizer_fail(t.file, "no \"model\": not a Hugging Face tokenizer.json");
  try {
    read_model(t, root["model"]);  // first: another model type says the most about the file
    const json none;
    const json& normalizer = root.contains("normalizer") ? root["normalizer"] : none;
    const json& pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : none;
    const json decoder = root.contains("decoder") ? root["decoder"] : json();
    if (root.contains("added_tokens")) read_added_tokens(t, root["added_tokens"]);
    if (t.wordpiece) {
      read_wordpiece_parts(t, normalizer, pre, decoder);
    } else {
      read_bpe_parts(t, normalizer, pre, decoder);
    }
    if (root.contains("post_processor")) read_post_processor(t, root["post_processor"]);
  } catch (const json::exception& e) {
    tokenizer_fail(t.file, std::string("unexpected content: ") + e.what());
  }
  t.bos = !t.prefix.empty() ? std::optional(t.prefix.front())
                            : added_special_named(t, {"<|begin_of_text|>", "<s>"});
  t.eos = !t.suffix.empty() ? std::optional(t.suffix.back())
                            : added_special_named(t, {"<|end_of_text|>", "</s>", "<|endoftext|>"});
  if (root.contains("padding") && root["padding"].is_object() && root["padding"].contains("pad_id"))
    t.pad = root["padding"]["pad_id"].get<int32_t>();
  for (const char* name : {"[PAD]", "<pad>", "<|pad|>"}) {
    if (t.pad) break;
    for (const auto& a : t.added)
      if (a.content == name) t.pad = a.id;
    if (auto it = t.ids.find(name); !t.pad && it != t.ids.end()) t.pad = it->second;
  }
  std::vector<int32_t> added = t.prefix;
  added.insert(added.end(), t.suffix.begin(), t.suffix.end());
  for (const auto& piece : t.pair) added.insert(added.end(), piece.ids.begin(), piece.ids.end());
  for (int32_t id : added) {
    if (id < 0 || static_cast<size_t>(id) >= t.tokens.size() || !t.assigned[id])
      tokenizer_fail(t.file,
                     "the post-processor adds the id " + std::to_string(id) + ", which names no token");
  }
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  if (io::is_gguf(path)) {
    auto impl = std::make_shared<Impl>();
    impl->file = path;
    json root;
    try {
      root = text::tokenizer_json_of_gguf(io::read_gguf(path));
    } catch (const CheckpointError& e) {  // the GGUF reader's: "<path>: <what>"
      throw TokenizerError(std::string("[Tokenizer::load] ") + e.what());
    }
    read_tokenizer_root(*impl, root);
    return Tokenizer(std::move(impl));
  }
  std::error_code ec;
  const bool folder = fs::is_directory(path, ec);
  const std::string file = folder ? (fs::path(path) / "tokenizer.json").string() : path;
  const fs::file_status status = fs::status(file, ec);
  if (!fs::exists(status)) {
    std::string why = ec ? ec.message() : "no such file";
    if (folder) {  // what the folder holds instead
      if (fs::exists(fs::path(path) / "tokenizer.model", ec))
        why += "; the folder has tokenizer.model, a SentencePiece model, which is not read";
      else if (fs::exists(fs::path(path) / "vocab.json", ec) && fs::exists(fs::path(path) / "merges.txt", ec))
        why +=
            "; the folder has vocab.json and merges.txt, which are not read: save the tokenizer "
            "with transformers' save_pretrained to get tokenizer.json";
    }
    tokenizer_fail(file, "cannot open: " + why);
  }
  if (!fs::is_regular_file(status)) tokenizer_fail(file, "not a regular file");
  std::ifstream in(file, std::ios::binary);
  if (!in) tokenizer_fail(file, std::string("cannot open: ") + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  auto impl = std::make_shared<Impl>();
  impl->file = file;
  json root;
  if (const std::string why = not_json(text.str(), root); !why.empty()) tokenizer_fail(file, why);
  read_tokenizer_root(*impl, root);
  return Tokenizer(std::move(impl));
}

}  // namespace tg
