// The BPE and WordPiece tokenizers: ids derived by hand on tiny tokenizer.json files, the
// pre-tokenizer regexes on hand-checked strings, round trips over any bytes, pair encodings,
// errors, and ids from Hugging Face `tokenizers` (tests/text/gen_tokenizer_golden.py).
#include "tensorgrad/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tensorgrad/errors.h"
#include "text/golden_ids.h"
#include "text/pretokenize.h"

namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string_view>;

const std::string kTokenizerData = std::string(TG_TEST_DATA_DIR) + "/tokenizer";

using tg_test::load_error;
using tg_test::read_file;
using tg_test::write_temp;

// tiny.json: vocabulary Ġ:0 a:1 b:2 c:3 l:4 o:5 w:6 Ġl:7 lo:8 low:9 Ġlow:10 ab:11 bc:13, the
// added special token <|endoftext|>:12, merges by rank 0 "l o", 1 "lo w", 2 "Ġ l", 3 "Ġ low",
// 4 "a b", 5 "b c"; GPT-2's ByteLevel pre-tokenizer without a prefix space.
TEST(Tokenizer, HandDerivedIds) {
  const auto tok = tg::Tokenizer::load(kTokenizerData + "/tiny.json");
  EXPECT_EQ(tok.vocab_size(), 14);
  struct Case {
    const char* text;
    Ids ids;
  };
  const Case cases[] = {
      // One word: l o w; "l o" (rank 0) then "lo w" (rank 1) → low.
      {"low", {9}},
      // " low" is one word (" ?\p{L}+"), spelled Ġlow: pairs Ġl (rank 2) and lo (rank 0): lo
      // first, then "lo w" → Ġ low, then "Ġ low" (rank 3). "Ġ l" never applies.
      {" low", {10}},
      // Words "low" and " lowa": Ġ l o w a → Ġ lo w a → Ġ low a → Ġlow a.
      {"low lowa", {9, 10, 1}},
      // a b c: "a b" (rank 4) beats "b c" (rank 5); "ab c" is no merge.
      {"abc", {11, 3}},
      // b c a: "b c" is the only pair with a merge.
      {"bca", {13, 1}},
      // The added token is split out first; "ab" and "c" are words of their own.
      {"ab<|endoftext|>c", {11, 12, 3}},
      // Characters outside the vocabulary (x, y) are dropped: there is no unk_token.
      {"xay", {1}},
      {"", {}},
  };
  for (const auto& c : cases) EXPECT_EQ(tok.encode(c.text), c.ids) << c.text;
  // No post-processor: add_special adds nothing; <|endoftext|> is the eos and no bos.
  EXPECT_EQ(tok.encode("low", true), Ids({9}));
  EXPECT_EQ(tok.eos_id(), 12);
  EXPECT_FALSE(tok.bos_id().has_value());

  EXPECT_EQ(tok.decode(Ids{9, 10, 1}), "low lowa");
  EXPECT_EQ(tok.decode(Ids{11, 12, 3}), "ab<|endoftext|>c");
  EXPECT_EQ(tok.decode(Ids{11, 12, 3}, /*skip_special=*/true), "abc");
  EXPECT_EQ(tok.token_to_id("Ġlow"), 10);
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 12);
  EXPECT_FALSE(tok.token_to_id("zz").has_value());
  EXPECT_EQ(tok.id_to_token(7), "Ġl");
  EXPECT_TRUE(tok.is_special(12));
  EXPECT_FALSE(tok.is_special(11));
  EXPECT_EQ(tok.added_token_ids(), Ids({12}));
}

// add_prefix_space puts " " before a piece that does not start with one; the folder form of load.
TEST(Tokenizer, PrefixSpaceAndFolder) {
  std::string json = read_file(kTokenizerData + "/tiny.json");
  const std::string off = R"("add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor")";
  const size_t at = json.find(off);
  ASSERT_NE(at, std::string::npos);
  json.replace(at, std::string_view(R"("add_prefix_space": false)").size(), R"("add_prefix_space": true)");
  const fs::path folder = fs::path(testing::TempDir()) / "tok_prefix";
  fs::create_directories(folder);
  std::ofstream(folder / "tokenizer.json") << json;
  const auto tok = tg::Tokenizer::load(folder.string());
  EXPECT_EQ(tok.encode("low"), Ids({10}));  // " low"
  EXPECT_EQ(tok.encode(" low"), Ids({10}));
  // Each segment beside an added token gets its own prefix space: " ab", <|endoftext|>, " low".
  EXPECT_EQ(tok.encode("ab<|endoftext|>low"), Ids({0, 11, 12, 10}));
}

// tiny_sp.json: a SentencePiece-style BPE as Llama 2's files are written (normalizer Prepend("▁")
// + Replace(" ", "▁"), no pre-tokenizer, byte_fallback with all 256 <0xXX> tokens at 3 + byte,
// fuse_unk, <s> prepended by the post-processor, decoder Replace + ByteFallback + Fuse + Strip).
// Vocabulary beyond the bytes: ▁:259 h:260 e:261 l:262 o:263 w:264 r:265 d:266 ▁h:267 ll:268
// ▁he:269 ▁hell:270 ▁hello:271 or:272 ▁w:273 ▁wor:274 ld:275 ▁world:276 é:277; merges by rank
// 0 "▁ h", 1 "l l", 2 "▁h e", 3 "o r", 4 "▁he ll", 5 "▁ w", 6 "▁hell o", 7 "▁w or", 8 "l d",
// 9 "▁wor ld".
TEST(Tokenizer, SentencePieceStyleHandDerivedIds) {
  const auto tok = tg::Tokenizer::load(kTokenizerData + "/tiny_sp.json");
  struct Case {
    const char* text;
    Ids ids;
  };
  const Case cases[] = {
      // "▁hello▁world" is one word; merges in rank order: ▁h, ll, ▁he, or, ▁hell, ▁w, ▁hello,
      // ▁wor, ld, ▁world.
      {"hello world", {271, 276}},
      // é is in the vocabulary; è (C3 A8) is not: its bytes' tokens 3 + 0xC3, 3 + 0xA8.
      {"hé", {267, 277}},
      {"hè", {267, 198, 171}},
      // Two leading spaces: "▁▁▁hello"; the first two ▁ have no merge.
      {"  hello", {259, 259, 271}},
      // The added token is split out before normalization; "hi" then gets its own ▁ (i: 0x69).
      {"<s>hi", {1, 267, 108}},
      {"", {}},
  };
  for (const auto& c : cases) EXPECT_EQ(tok.encode(c.text), c.ids) << c.text;
  EXPECT_EQ(tok.encode("hello world", true), Ids({1, 271, 276}));
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  // ▁ reads as a space, byte tokens as their bytes, one leading space stripped.
  EXPECT_EQ(tok.decode(Ids{271, 276}), "hello world");
  EXPECT_EQ(tok.decode(Ids{1, 271, 276}), "<s> hello world");
  EXPECT_EQ(tok.decode(Ids{1, 271, 276}, /*skip_special=*/true), "hello world");
  EXPECT_EQ(tok.decode(Ids{267, 198, 171}), "hè");
  EXPECT_EQ(tok.decode(Ids{259, 259, 271}), "  hello");
  for (const char* text : {"hello world", "  hello", "hè wörld ✓ 😀", "a\tb\nc", "héllo  "})
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << text;
}

// The same vocabulary with the newer files' Metaspace pre-tokenizer and decoder (no normalizer),
// and without byte fallback (unknown characters to <unk>, runs of them fused).
TEST(Tokenizer, SentencePieceStyleMetaspaceAndUnk) {
  nlohmann::json j = nlohmann::json::parse(read_file(kTokenizerData + "/tiny_sp.json"));
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  auto tok = tg::Tokenizer::load(write_temp("tiny_sp_meta.json", j.dump()));
  EXPECT_EQ(tok.encode("hello world"), Ids({271, 276}));
  // A segment already starting with ▁ gets no second one.
  EXPECT_EQ(tok.encode(" hello"), Ids({271}));
  // "first": only the segment at the start of the text is prefixed; after <s>, h e ll o.
  EXPECT_EQ(tok.encode("<s>hello"), Ids({1, 260, 261, 268, 263}));
  EXPECT_EQ(tok.decode(Ids{271, 276}), "hello world");
  j["pre_tokenizer"]["split"] = true;  // words at each ▁: the same ids here
  tok = tg::Tokenizer::load(write_temp("tiny_sp_split.json", j.dump()));
  EXPECT_EQ(tok.encode("hello world"), Ids({271, 276}));
  EXPECT_EQ(tok.encode("hello  world"), Ids({271, 259, 276}));

  j["model"]["byte_fallback"] = false;
  tok = tg::Tokenizer::load(write_temp("tiny_sp_unk.json", j.dump()));
  EXPECT_EQ(tok.encode("hèè"), Ids({267, 0}));  // ▁ h <unk> <unk> → ▁h <unk>
  j["model"]["fuse_unk"] = false;
  tok = tg::Tokenizer::load(write_temp("tiny_sp_unk2.json", j.dump()));
  EXPECT_EQ(tok.encode("hèè"), Ids({267, 0, 0}));
}

// BPE over a long SentencePiece-style word (a whole line) merges as the quadratic definition
// does: a line of repeated words gives the repeated ids.
TEST(Tokenizer, SentencePieceStyleLongLine) {
  const auto tok = tg::Tokenizer::load(kTokenizerData + "/tiny_sp.json");
  std::string line;
  Ids want;
  for (int i = 0; i < 2000; ++i) {
    line += i == 0 ? "hello" : " hello";
    want.push_back(271);
  }
  EXPECT_EQ(tok.encode(line), want);
  EXPECT_EQ(tok.decode(want), line);
}

// A WordPiece tokenizer.json as BERT's files are, over a small vocabulary: [PAD] [UNK] [CLS]
// [SEP] [MASK] as added special tokens 0-4, then un:5 ##aff:6 ##able:7 aff:8 ##a:9 a:10 b:11
// ##b:12 cafe:13 café:14 !:15 ,:16 中:17; [CLS] $A [SEP] as BertProcessing; words of at most 10
// code points. `cased`: no lowercasing and no accent stripping.
nlohmann::json wordpiece_json(bool cased) {
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  int32_t id = 0;
  for (const char* token : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "aff",
                            "##a", "a", "b", "##b", "cafe", "café", "!", ",", "中"}) {
    if (id < 5) added.push_back({{"id", id}, {"content", token}, {"special", true}, {"normalized", false}});
    vocab[token] = id++;
  }
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "BertNormalizer"},
        {"clean_text", true},
        {"handle_chinese_chars", true},
        {"strip_accents", nullptr},
        {"lowercase", !cased}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor", {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model",
       {{"type", "WordPiece"},
        {"unk_token", "[UNK]"},
        {"continuing_subword_prefix", "##"},
        {"max_input_chars_per_word", 10},
        {"vocab", vocab}}},
  };
}

TEST(Tokenizer, WordPieceHandDerivedIds) {
  const auto uncased = tg::Tokenizer::load(write_temp("wp_uncased.json", wordpiece_json(false).dump()));
  const auto cased = tg::Tokenizer::load(write_temp("wp_cased.json", wordpiece_json(true).dump()));
  struct Case {
    const char* text;
    Ids ids;
  };
  const Case both[] = {
      // Longest match from the left: "un", then "##aff" (not "##a"), then "##able".
      {"unaffable", {5, 6, 7}},
      {"affable", {8, 7}},
      {"unb", {5, 12}},
      // "##c" is no entry: the whole word is unk, not "un" [UNK].
      {"unc", {1}},
      // "b" starts a word; "##b" only continues one: "bb" is b ##b, "ba" b ##a.
      {"bb ba", {11, 12, 11, 9}},
      // Ten code points is the most a word may have: eleven make it unk though every piece exists.
      {"unaffableb", {5, 6, 7, 12}},
      {"unaffablebb", {1}},
      // Punctuation is a word of its own; whitespace (tab, newline, U+3000) only separates.
      {"a,b!", {10, 16, 11, 15}},
      {" a \t b\n\u3000a", {10, 11, 10}},
      // CJK ideographs are spaced out before the split: "a 中 b", not one word "a中b".
      {"a\u4e2db", {10, 17, 11}},
      // Controls dropped; U+00A0 is a space.
      {"a\u0007b\u00a0a", {10, 12, 10}},
      // Added tokens are matched on the raw text, before normalization.
      {"a[MASK]b", {10, 4, 11}},
      {"", {}},
  };
  for (const auto& c : both) {
    EXPECT_EQ(uncased.encode(c.text), c.ids) << c.text;
    EXPECT_EQ(cased.encode(c.text), c.ids) << c.text;
  }
  // Uncased: lowercased, accents stripped (composed or not); cased: kept as they are.
  EXPECT_EQ(uncased.encode("UnAffABLE"), Ids({5, 6, 7}));
  EXPECT_EQ(cased.encode("UnAffABLE"), Ids({1}));
  EXPECT_EQ(uncased.encode("caf\u00e9 CAF\u00c9 cafe\u0301"), Ids({13, 13, 13}));
  EXPECT_EQ(cased.encode("caf\u00e9"), Ids({14}));
  EXPECT_EQ(cased.encode("cafe\u0301"), Ids({1}));      // no NFC either: "cafe" + U+0301 is one word
  EXPECT_EQ(uncased.encode("[mask]"), Ids({1, 1, 1}));  // "[", "mask", "]": none in the vocabulary
  // BertProcessing: [CLS] $A [SEP].
  EXPECT_EQ(uncased.encode("unb!", true), Ids({2, 5, 12, 15, 3}));
  EXPECT_EQ(uncased.bos_id(), 2);
  EXPECT_EQ(uncased.eos_id(), 3);

  // The decoder: "##" pieces joined to the word before, other tokens after a " ", which the
  // cleanup then removes before "!" and ",".
  EXPECT_EQ(uncased.decode(Ids{5, 6, 7, 10, 16, 11, 15}), "unaffable a, b!");
  EXPECT_EQ(uncased.decode(Ids{2, 5, 12, 3}), "[CLS] unb [SEP]");
  EXPECT_EQ(uncased.decode(Ids{2, 5, 12, 3}, /*skip_special=*/true), "unb");
  EXPECT_EQ(uncased.decode(Ids{12, 11}), "##b b");  // the first token keeps its prefix
  nlohmann::json no_cleanup = wordpiece_json(false);
  no_cleanup["decoder"]["cleanup"] = false;
  const auto raw = tg::Tokenizer::load(write_temp("wp_no_cleanup.json", no_cleanup.dump()));
  EXPECT_EQ(raw.decode(Ids{10, 16, 11, 15}), "a , b !");
}

// encode_pair lays a pair out as the file's post-processor says, with its type ids.
TEST(Tokenizer, EncodePair) {
  const std::string a = "Hello world, the [MASK] sat.", b = "Don't stop!";
  const auto concat = [](std::initializer_list<Ids> parts) {
    Ids out;
    for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const auto types = [](std::initializer_list<std::pair<size_t, int32_t>> runs) {
    Ids out;
    for (auto [n, type] : runs) out.insert(out.end(), n, type);
    return out;
  };
  // bert: TemplateProcessing "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1"; bert_cased: BertProcessing,
  // the same layout. Without the special tokens A keeps type 0 and B type 1.
  for (const char* name : {"bert", "bert_cased"}) {
    const auto tok = tg::Tokenizer::load(kTokenizerData + "/" + name);
    const Ids ea = tok.encode(a), eb = tok.encode(b);
    const int32_t cls = *tok.token_to_id("[CLS]"), sep = *tok.token_to_id("[SEP]");
    const tg::Encoding e = tok.encode_pair(a, b);
    EXPECT_EQ(e.ids, concat({{cls}, ea, {sep}, eb, {sep}})) << name;
    EXPECT_EQ(e.type_ids, types({{ea.size() + 2, 0}, {eb.size() + 1, 1}})) << name;
    const tg::Encoding plain = tok.encode_pair(a, b, /*add_special=*/false);
    EXPECT_EQ(plain.ids, concat({ea, eb})) << name;
    EXPECT_EQ(plain.type_ids, types({{ea.size(), 0}, {eb.size(), 1}})) << name;
    EXPECT_EQ(tok.encode_pair("", "").ids, Ids({cls, sep, sep})) << name;
  }
  // llama3: "<|begin_of_text|> $A <|begin_of_text|> $B", every type 0 (B's too, as the template
  // says, with or without the special tokens).
  {
    const auto tok = tg::Tokenizer::load(kTokenizerData + "/llama3");
    const Ids ea = tok.encode(a), eb = tok.encode(b);
    const tg::Encoding e = tok.encode_pair(a, b);
    EXPECT_EQ(e.ids, concat({{0}, ea, {0}, eb}));
    EXPECT_EQ(e.type_ids, types({{ea.size() + eb.size() + 2, 0}}));
    const tg::Encoding plain = tok.encode_pair(a, b, false);
    EXPECT_EQ(plain.ids, concat({ea, eb}));
    EXPECT_EQ(plain.type_ids, types({{ea.size() + eb.size(), 0}}));
  }
  // llama2: "<s>:0 $A:0 <s>:1 $B:1".
  {
    const auto tok = tg::Tokenizer::load(kTokenizerData + "/llama2");
    const Ids ea = tok.encode(a), eb = tok.encode(b);
    const tg::Encoding e = tok.encode_pair(a, b);
    EXPECT_EQ(e.ids, concat({{1}, ea, {1}, eb}));
    EXPECT_EQ(e.type_ids, types({{ea.size() + 1, 0}, {eb.size() + 1, 1}}));
  }
  // gpt2: no pair form (a ByteLevel post-processor): A then B, types 0 and 1, either way.
  {
    const auto tok = tg::Tokenizer::load(kTokenizerData + "/gpt2");
    const Ids ea = tok.encode(a), eb = tok.encode(b);
    for (bool add_special : {true, false}) {
      const tg::Encoding e = tok.encode_pair(a, b, add_special);
      EXPECT_EQ(e.ids, concat({ea, eb}));
      EXPECT_EQ(e.type_ids, types({{ea.size(), 0}, {eb.size(), 1}}));
    }
  }
  // RobertaProcessing: <s> A </s> </s> B </s>, every type 0.
  {
    nlohmann::json j = nlohmann::json::parse(read_file(kTokenizerData + "/tiny.json"));
    j["post_processor"] = {{"type", "RobertaProcessing"},
                           {"sep", {"<|endoftext|>", 12}},
                           {"cls", {"ab", 11}},
                           {"trim_offsets", true},
                           {"add_prefix_space", false}};
    const auto tok = tg::Tokenizer::load(write_temp("tiny_roberta.json", j.dump()));
    EXPECT_EQ(tok.encode("low", true), Ids({11, 9, 12}));
    const tg::Encoding e = tok.encode_pair("low", "bca");
    EXPECT_EQ(e.ids, Ids({11, 9, 12, 12, 13, 1, 12}));
    EXPECT_EQ(e.type_ids, Ids(7, 0));
    const tg::Encoding plain = tok.encode_pair("low", "bca", false);
    EXPECT_EQ(plain.ids, Ids({9, 13, 1}));
    EXPECT_EQ(plain.type_ids, Ids(3, 0));
  }
}

// BERT's special tokens in text: "[MASK]" is the token wherever it stands, "[mask]" is not.
TEST(Tokenizer, BertMaskInText) {
  const auto tok = tg::Tokenizer::load(kTokenizerData + "/bert");
  const int32_t mask = *tok.token_to_id("[MASK]");
  const Ids ids = tok.encode("the [MASK] sat");
  EXPECT_EQ(ids.size(), tok.encode("the").size() + 1 + tok.encode("sat").size());
  EXPECT_EQ(ids[tok.encode("the").size()], mask);
  const Ids lower = tok.encode("the [mask] sat");
  EXPECT_EQ(std::count(lower.begin(), lower.end(), mask), 0);
  EXPECT_EQ(tok.decode(ids), "the [MASK] sat");
}

struct TokSplitCase {
  const char* text;
  Pieces pieces;
};

TEST(Pretokenize, Gpt2Regex) {
  const TokSplitCase cases[] = {
      {"Hello world", {"Hello", " world"}},
      // Contractions are case-sensitive: 'M is "'" then "M".
      {"I'm we'll they're 'M", {"I", "'m", " we", "'ll", " they", "'re", " '", "M"}},
      // \s+(?!\S) leaves the run's last space to lead the next word.
      {"a  b", {"a", " ", " b"}},
      {"x  \n  y", {"x", "  \n ", " y"}},
      {"end   ", {"end", "   "}},
      {"12345 abc", {"12345", " abc"}},
      {"hi!!! ?", {"hi", "!!!", " ?"}},
      {"\tword", {"\t", "word"}},
      {"über naïve 日本語", {"über", " naïve", " 日本語"}},
      {"½² Ⅻ", {"½²", " Ⅻ"}},
      // Bytes that are not UTF-8 are neither letters, numbers nor spaces.
      {"a\xff\xfe b", {"a", "\xff\xfe", " b"}},
  };
  for (const auto& c : cases)
    EXPECT_EQ(tg::text::split(c.text, tg::text::SplitPattern::kGpt2), c.pieces) << c.text;
}

TEST(Pretokenize, Llama3Regex) {
  const TokSplitCase cases[] = {
      // \p{N}{1,3}: numbers in threes from the left; the space before them stands alone.
      {"1 12 123 1234 12345", {"1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45"}},
      // Contractions ignore case.
      {"I'M HERE's", {"I", "'M", " HERE", "'s"}},
      // One character that is no letter, number or newline may lead a word.
      {"!hello (world)", {"!hello", " (", "world", ")"}},
      {"hello\n\nworld", {"hello", "\n\n", "world"}},
      // \s*[\r\n]+ stops after the run's last newline; \s+(?!\S) gives one space to " b".
      {"a  \n  b", {"a", "  \n", " ", " b"}},
      {"x.\n\ny", {"x", ".\n\n", "y"}},
      {"  end  ", {" ", " end", "  "}},
      {"über 日本語", {"über", " 日本語"}},
  };
  for (const auto& c : cases)
    EXPECT_EQ(tg::text::split(c.text, tg::text::SplitPattern::kLlama3), c.pieces) << c.text;
  // Qwen2's regex is Llama 3's with digits taken one at a time.
  const Pieces qwen2 = {"In", " ", "2", "0", "2", "4", ",", " x", "1", "2", "3", "4", "5"};
  EXPECT_EQ(tg::text::split("In 2024, x12345", tg::text::SplitPattern::kQwen2), qwen2);
  EXPECT_EQ(tg::text::split("In 2024, x12345", tg::text::SplitPattern::kLlama3),
            (Pieces{"In", " ", "202", "4", ",", " x", "123", "45"}));
}

// o200k's and tekken's regexes against `tokenizers`' own Split on them (splits.txt, written by
// gen_tokenizer_golden.py: its test texts, texts where case changes, marks, contractions and
// slashes decide the cuts, and 400 lines of the training corpus). Two cuts worked out by hand
// too: a word ends where lower case turns upper, and a mark before an upper-case letter is a
// word of its own (U*L+ gives back the letter, which is not an L, and keeps the mark).
TEST(Tokenizer, O200kAndTekkenSplitAsTokenizers) {
  using Pieces = std::vector<std::string_view>;
  EXPECT_EQ(tg::text::split("camelCase HTTPServer", tg::text::SplitPattern::kO200k),
            (Pieces{"camel", "Case", " HTTPServer"}));
  EXPECT_EQ(tg::text::split("\u0301A", tg::text::SplitPattern::kO200k), (Pieces{"\u0301", "A"}));
  for (const auto& [name, pattern] : {std::pair{"o200k", tg::text::SplitPattern::kO200k},
                                      std::pair{"tekken", tg::text::SplitPattern::kTekken}}) {
    std::ifstream in(kTokenizerData + "/" + name + "/splits.txt");
    ASSERT_TRUE(in) << name << "/splits.txt missing";
    std::string line;
    int texts = 0;
    while (std::getline(in, line)) {
      const size_t tab = line.find('\t');
      ASSERT_NE(tab, std::string::npos) << line;
      const std::string text = tg_test::from_hex(line.substr(0, tab));
      std::vector<std::string> want;
      std::stringstream pieces(line.substr(tab + 1));
      for (std::string hex; std::getline(pieces, hex, ',');) want.push_back(tg_test::from_hex(hex));
      const std::vector<std::string_view> got_views = tg::text::split(text, pattern);
      const std::vector<std::string> got(got_views.begin(), got_views.end());
      EXPECT_EQ(got, want) << name << ": \"" << text << "\"";
      ++texts;
    }
    EXPECT_GT(texts, 400) << name;
  }
}

// A tokenizer.json with the whole byte-level alphabet (ids 0..255) and a few merges, for the
// pre-tokenizer given.
std::string byte_level_json(const std::string& pre_tokenizer) {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string token = tg::text::to_byte_level(std::string(1, static_cast<char>(b)));
    if (token == "\"" || token == "\\") token = "\\" + token;
    vocab += "\"" + token + "\": " + std::to_string(b) + ", ";
  }
  vocab += R"("Ġt": 256, "he": 257, "Ġthe": 258)";
  return R"({"added_tokens": [{"id": 259, "content": "<|endoftext|>", "special": true, "normalized": false}],
    "normalizer": null, "pre_tokenizer": )" +
         pre_tokenizer + R"(, "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {)" +
         vocab + R"(}, "merges": [["Ġ", "t"], ["h", "e"], ["Ġt", "he"]]}})";
}

TEST(Tokenizer, RoundTrips) {
  const std::string llama3_split = R"({"type": "Split", "pattern": {"Regex": ")" +
                                   std::string(tg::text::pattern_source(tg::text::SplitPattern::kLlama3)) +
                                   R"("}, "behavior": "Isolated", "invert": false})";
  std::string escaped;  // the regex's backslashes, escaped for JSON
  for (char c : llama3_split) escaped += c == '\\' ? std::string("\\\\") : std::string(1, c);
  const std::string pre_tokenizers[] = {
      R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})",
      R"({"type": "Sequence", "pretokenizers": [)" + escaped +
          R"(, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})",
  };
  const std::string texts[] = {
      "the cat and the hat",
      "Der Fuchs springt über den Hund; Быстрая лиса; 快速的棕色狐狸; ελληνικά; हिन्दी; العربية",
      "emoji 🙂👍🏽 👨‍👩‍👧 and flags 🇫🇷",
      "invalid \xff\xfe\xc3 bytes \xe2\x82 cut \xed\xa0\x80 surrogate \xc0\xaf overlong \x80",
      "  runs\t\t of   whitespace \n\n\r\n  and newlines\n",
      std::string("a nul \0 byte", 12),
      "<|endoftext|> the end<|endoftext|>",
  };
  for (const auto& pre : pre_tokenizers) {
    const auto tok = tg::Tokenizer::load(write_temp("byte_level.json", byte_level_json(pre)));
    EXPECT_EQ(tok.encode("the"), Ids({'t', 257}));  // t he; "Ġt he" needs the space
    EXPECT_EQ(tok.encode(" the"), Ids({258}));
    for (const auto& s : texts) EXPECT_EQ(tok.decode(tok.encode(s)), s) << pre << "\n" << s;
  }
}

TEST(Tokenizer, Errors) {
  const std::string tiny = read_file(kTokenizerData + "/tiny.json");
  const auto load_text = [](const std::string& text) { tg::Tokenizer::load(write_temp("bad.json", text)); };
  const auto replaced = [&](std::string_view from, std::string_view to) {
    std::string s = tiny;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const auto expect_error = [&](const std::string& text, const std::string& what) {
    try {
      load_text(text);
      ADD_FAILURE() << "no error; wanted " << what;
    } catch (const tg::TokenizerError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    }
  };
  expect_error("not json {", "not valid JSON");
  expect_error(R"({"version": "1.0"})", "no \"model\"");
  expect_error(replaced(R"("type": "BPE")", R"("type": "Unigram")"), "the Unigram model has no vocab array");
  expect_error(replaced(R"("type": "BPE")", R"("type": "Unknown")"),
               "model type \"Unknown\" is not supported");
  expect_error(
      replaced(R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor")",
               R"({"type": "Whitespace"}, "post_processor")"),
      "pre-tokenizer Whitespace");
  expect_error(replaced(R"("normalizer": null)", R"("normalizer": {"type": "NFKC"})"),
               "normalizer NFKC is not supported");
  expect_error(replaced(R"("l o")", R"("l x")"), "\"x\", which is not in the vocab");
  expect_error(replaced(R"("Ġ": 0)", R"("Ġ": "zero")"), "unexpected content");
  EXPECT_THROW(tg::Tokenizer::load(kTokenizerData + "/no_such_file.json"), tg::TokenizerError);

  const auto tok = tg::Tokenizer::load(kTokenizerData + "/tiny.json");
  EXPECT_THROW(tok.decode(Ids{1, 14}), tg::InputError);
  EXPECT_THROW(tok.decode(Ids{-1}), tg::InputError);
  EXPECT_THROW(tok.id_to_token(100), tg::InputError);
}

// A WordPiece file with parts other than BERT's: each named in the error.
TEST(TokenizerErrors, WordPieceUnsupportedParts) {
  const nlohmann::json base = nlohmann::json::parse(R"({"version": "1.0", "added_tokens": [],
    "normalizer": {"type": "BertNormalizer", "clean_text": true, "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": null,
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}})");
  // The file itself loads: "AB a b" is "ab" (a ##b), "a", and "b", which no entry starts.
  const auto tok = tg::Tokenizer::load(write_temp("wordpiece.json", base.dump()));
  EXPECT_EQ(tok.encode("AB a b"), Ids({1, 2, 1, 0}));
  auto error_with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = base;
    j[key] = value;
    return load_error(write_temp("wp_part.json", j.dump()));
  };
  EXPECT_HAS(error_with("normalizer", {{"type", "NFKC"}}),
             "normalizer NFKC with WordPiece is not supported (BertNormalizer, or none)");
  EXPECT_HAS(error_with("normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}}}}),
             "normalizer Sequence with WordPiece is not supported");
  EXPECT_HAS(error_with("pre_tokenizer", {{"type", "Whitespace"}}),
             "pre-tokenizer Whitespace with WordPiece is not supported (BertPreTokenizer)");
  EXPECT_HAS(error_with("pre_tokenizer", nullptr), "pre-tokenizer null with WordPiece is not supported");
  EXPECT_HAS(error_with("decoder", {{"type", "ByteLevel"}}),
             "decoder ByteLevel with WordPiece is not supported (WordPiece)");
  EXPECT_HAS(error_with("post_processor",
                        {{"type", "BertProcessing"}, {"sep", {"[SEP]", 7}}, {"cls", {"[CLS]", 8}}}),
             "the post-processor adds the id 8, which names no token");
  // Without its unk token in the vocab the file loads; a word that needs it cannot be encoded.
  nlohmann::json no_unk = base;
  no_unk["model"]["unk_token"] = "<unk>";
  const auto tok2 = tg::Tokenizer::load(write_temp("wp_no_unk.json", no_unk.dump()));
  EXPECT_EQ(tok2.encode("ab"), Ids({1, 2}));
  try {
    tok2.encode("ab b");
    ADD_FAILURE() << "no error for a word that needs the missing unk token";
  } catch (const tg::TokenizerError& e) {
    EXPECT_HAS(std::string(e.what()), "the word \"b\" needs the WordPiece unk_token \"<unk>\"");
  }
}

// T5's and ALBERT's tokenizer.json: a Unigram model, whose vocab is a list of [piece, score].
// A Unigram model by hand: the segmentation with the highest total score, unknown characters
// at min_score − 10 fused into one unk, and malformed files named.
TEST(Tokenizer, UnigramHandDerivedIds) {
  const std::string json = R"({"version": "1.0", "added_tokens": [],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Precompiled", "precompiled_charsmap": ""},
      {"type": "Strip", "strip_left": false, "strip_right": true},
      {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"}]},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["▁", -2.0], ["a", -3.0], ["b", -3.0],
      ["▁a", -4.0], ["ab", -4.5], ["▁ab", -9.0]]}})";
  const auto tok = tg::Tokenizer::load(write_temp("unigram.json", json));
  // "▁ab": ▁ + ab (−6.5) beats ▁a + b (−7), ▁ + a + b (−8) and ▁ab (−9).
  EXPECT_EQ(tok.encode("ab"), (Ids{1, 5}));
  // "▁ac": c is unknown (−9 − 10): ▁a + unk (−23) beats ▁ + a + unk (−24).
  EXPECT_EQ(tok.encode("ac"), (Ids{4, 0}));
  // Two unknown characters in a row are one unk; trailing spaces go (Strip), a run of spaces is
  // one ▁ (then the start of the next word: "▁a", "▁b").
  EXPECT_EQ(tok.encode("cc  "), (Ids{1, 0}));
  EXPECT_EQ(tok.encode("a  b"), (Ids{4, 1, 3}));
  EXPECT_EQ(tok.decode(Ids{1, 5, 4}), "ab a");

  nlohmann::json base = nlohmann::json::parse(json);
  auto error_with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = base;
    j["model"][key] = value;
    return load_error(write_temp("unigram_bad.json", j.dump()));
  };
  EXPECT_HAS(error_with("vocab", nlohmann::json::array({{"<unk>", 0.0}, {"a"}})),
             "Unigram vocab entry 1 is [\"a\"], not [piece, score]");
  EXPECT_HAS(error_with("unk_id", 7), "unk_id 7 is not an id of the vocab");
  base["model"]["unk_id"] = nullptr;
  const auto no_unk = tg::Tokenizer::load(write_temp("unigram_no_unk.json", base.dump()));
  EXPECT_EQ(no_unk.encode("ab"), (Ids{1, 5}));
  // A repeated piece is its last id, as in `tokenizers`.
  base["model"]["vocab"].push_back({"ab", -1.0});
  EXPECT_EQ(tg::Tokenizer::load(write_temp("unigram_twice.json", base.dump())).encode("ab"), (Ids{1, 7}));
  try {  // even with byte_fallback, `tokenizers` wants the unk_id for a character without a piece
    base["model"]["byte_fallback"] = true;
    tg::Tokenizer::load(write_temp("unigram_bytes_no_unk.json", base.dump())).encode("ac");
    ADD_FAILURE() << "an unknown character without unk_id was encoded";
  } catch (const tg::TokenizerError& e) {
    EXPECT_HAS(std::string(e.what()), "has no piece of its own and the Unigram model has no unk_id");
  }
  try {
    no_unk.encode("ac");
    ADD_FAILURE() << "an unknown character without unk_id was encoded";
  } catch (const tg::TokenizerError& e) {
    EXPECT_HAS(std::string(e.what()), "has no piece of its own and the Unigram model has no unk_id");
  }
}

// A SentencePiece-style file that never spells spaces as "▁" (a Prepend alone) is refused.
TEST(TokenizerErrors, SentencePieceStyleBpeWithoutSpaces) {
  const std::string path = write_temp("sp_bpe.json", R"({"version": "1.0", "added_tokens": [],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}]},
    "pre_tokenizer": null, "decoder": {"type": "Sequence", "decoders": []},
    "model": {"type": "BPE", "byte_fallback": true, "vocab": {"<unk>": 0, "<0x41>": 1}, "merges": []}})");
  EXPECT_HAS(load_error(path), "no normalizer or pre-tokenizer spells spaces as \"▁\"");
}

// Parts of a SentencePiece-style pipeline this tokenizer does not implement, each named.
TEST(TokenizerErrors, SentencePieceStyleUnsupportedParts) {
  const nlohmann::json base = nlohmann::json::parse(read_file(kTokenizerData + "/tiny_sp.json"));
  auto error_with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = base;
    j[key] = value;
    return load_error(write_temp("sp_part.json", j.dump()));
  };
  EXPECT_HAS(error_with("decoder", {{"type", "ByteLevel"}}),
             "decoder {\"type\":\"ByteLevel\"} is not supported");
  EXPECT_HAS(error_with("pre_tokenizer", {{"type", "ByteLevel"}}),
             "pre-tokenizer ByteLevel with SentencePiece-style BPE");
  EXPECT_HAS(
      error_with("normalizer", {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "▁"}}),
      "a Replace with the regex \" +\" is not supported (only \" {2,}\" and \"\\s+\")");
  EXPECT_HAS(error_with("normalizer", {{"type", "Precompiled"}, {"precompiled_charsmap", "A!B"}}),
             "precompiled_charsmap is malformed");
  EXPECT_HAS(error_with("pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "_"}}),
             "a Metaspace replacement other than");
}

// SentencePiece's binary tokenizer.model (a protobuf) given as the tokenizer file.
TEST(TokenizerErrors, SentencePieceModelBinary) {
  // The start of a real one: field 1 (a piece) holding "<unk>", score 0, type 2 (unknown).
  const char model[] = "\x0a\x0e\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02";
  const std::string path = write_temp("tokenizer.model", std::string(model, sizeof model - 1));
  EXPECT_HAS(load_error(path), "a binary file, not JSON (a SentencePiece tokenizer.model?");
  // A folder with tokenizer.model and no tokenizer.json says so.
  const fs::path folder = fs::path(testing::TempDir()) / "tg_sentencepiece_folder";
  fs::create_directories(folder);
  std::ofstream(folder / "tokenizer.model", std::ios::binary) << "\x0a\x0b";
  const std::string e = load_error(folder.string());
  EXPECT_HAS(e, "tokenizer.json: cannot open: No such file or directory");
  EXPECT_HAS(e, "the folder has tokenizer.model, a SentencePiece model, which is not read");
  fs::remove_all(folder);
}

TEST(TokenizerErrors, EmptyFile) {
  EXPECT_HAS(load_error(write_temp("empty.json", "")), "the file is empty");
}

// A download cut short: where the JSON breaks off.
TEST(TokenizerErrors, TruncatedJson) {
  const std::string tiny = read_file(kTokenizerData + "/tiny.json");
  const std::string e = load_error(write_temp("truncated.json", tiny.substr(0, tiny.size() / 2)));
  EXPECT_HAS(e, "not valid JSON: ");
  EXPECT_HAS(e, "unexpected end of input");
}

TEST(TokenizerErrors, JsonThatIsNotAnObject) {
  EXPECT_HAS(load_error(write_temp("array.json", "[1, 2]")), "not a JSON object but array");
  // GPT-2's vocab.json: an object, but not a tokenizer.json.
  EXPECT_HAS(load_error(write_temp("vocab.json", R"({"a": 0, "b": 1})")),
             "no \"model\": not a Hugging Face tokenizer.json");
}

TEST(TokenizerErrors, MissingFileOrADirectory) {
  EXPECT_HAS(load_error(kTokenizerData + "/no_such_file.json"), "cannot open: No such file or directory");
  const fs::path dir = fs::path(testing::TempDir()) / "tg_tokenizer_dir" / "tokenizer.json";
  fs::create_directories(dir);  // a folder whose tokenizer.json is itself a folder
  EXPECT_HAS(load_error(dir.parent_path().string()), "tokenizer.json: not a regular file");
  fs::remove_all(dir.parent_path());
}

// Ids and decodes from `tokenizers` itself, for the tokenizers gen_tokenizer_golden.py trains:
// byte-level (GPT-2's, Llama 3's, Qwen2's, o200k's and tekken's pre-tokenizers), SentencePiece-style (Llama
// 2's normalizer, and the Metaspace pre-tokenizer) and WordPiece (uncased and cased BERT); and the Unigram
// ones gen_unigram_golden.py makes as XLM-RoBERTa's (SentencePiece's nmt_nfkc rules as a Precompiled
// normalizer), without and with byte fallback; and CLIP's, which tests/nn/gen_hf_clip_golden.py makes, its
// decodes transformers' CLIPTokenizer's. (T5's are checked in tokenizer_t5_test.cc.)
TEST(Tokenizer, MatchesHuggingFaceTokenizers) {
  for (const char* name : {"gpt2", "llama3", "llama2", "metaspace", "qwen2", "o200k", "tekken", "bert",
                           "bert_cased", "xlmr", "xlmr_bytes", "clip"}) {
    const std::string folder = kTokenizerData + "/" + name;
    if (!fs::exists(folder + "/golden.txt")) {
      GTEST_SKIP() << folder
                   << "/golden.txt does not exist yet: run python3 tests/text/gen_tokenizer_golden.py "
                   << "where `tokenizers` is installed";
    }
    const auto tok = tg::Tokenizer::load(folder);
    const std::vector<tg_test::GoldenCase> cases = tg_test::read_golden(folder + "/golden.txt");
    for (const tg_test::GoldenCase& c : cases) {
      EXPECT_EQ(tok.encode(c.text, c.add_special), c.ids) << name << ": \"" << c.text << "\"";
      if (c.decoded) {
        EXPECT_EQ(tok.decode(c.ids), *c.decoded) << name << ": \"" << c.text << "\"";
      } else if (!c.add_special) {
        EXPECT_EQ(tok.decode(c.ids), c.text) << name;
      }
    }
    EXPECT_GT(cases.size(), 0u) << folder;
  }
}

}  // namespace
