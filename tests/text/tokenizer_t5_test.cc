// T5's tokenizer.json files: a SentencePiece Unigram model converted by transformers'
// T5Converter (tests/nn/gen_hf_t5_golden.py), in the current layout (the Metaspace
// pre-tokenizer) and in the older Hub files' (t5-small, flan-t5-*: WhitespaceSplit, then
// Metaspace with add_prefix_space). Ids and decodes from Hugging Face `tokenizers`, and the parts
// of the pipeline T5 relies on, derived by hand from the files' vocabulary.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tensorgrad/errors.h"
#include "tensorgrad/tokenizer.h"
#include "text/golden_ids.h"

namespace {

using Ids = std::vector<int32_t>;

const std::string kT5Data = std::string(TG_TEST_DATA_DIR) + "/tokenizer";
const char* const kLayouts[] = {"t5", "t5_legacy"};

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(tg_test::read_file(path)); }

// `j` written to a temporary file and loaded.
tg::Tokenizer load_json(const std::string& name, const nlohmann::json& j) {
  return tg::Tokenizer::load(tg_test::write_temp(name, j.dump()));
}

std::string load_error(const std::string& name, const nlohmann::json& j) {
  return tg_test::load_error(tg_test::write_temp(name, j.dump()));
}

// Each golden.txt line: the ids `tokenizers` gives with and without the template's </s>, and its
// decode of them (skip_special_tokens=False).
TEST(TokenizerT5, MatchesHuggingFaceTokenizers) {
  for (const char* name : kLayouts) {
    const auto tok = tg::Tokenizer::load(kT5Data + "/" + name);
    const std::vector<tg_test::GoldenCase> cases = tg_test::read_golden(kT5Data + "/" + name + "/golden.txt");
    for (const tg_test::GoldenCase& c : cases) {
      EXPECT_EQ(tok.encode(c.text, c.add_special), c.ids) << name << ": \"" << c.text << "\"";
      ASSERT_TRUE(c.decoded) << name;
      EXPECT_EQ(tok.decode(c.ids), *c.decoded) << name << ": \"" << c.text << "\"";
    }
    EXPECT_EQ(cases.size(), 32u) << name;
  }
}

// The vocabulary the cases below use: <pad> 0, </s> 1, <unk> 2, ▁ 3 (−2.13), a 8 (−4.50),
// b 74 (−5.72), ▁c 70, ▁b 226 (−6.03), ▁a 234 (−6.45); <extra_id_9> … <extra_id_0> are 295 … 304,
// added special tokens matched on the raw text. "▁a" is one piece: −6.45 beats ▁ + a (−6.64);
// "▁b" too (−6.03 against −7.86).
TEST(TokenizerT5, ExtraIdsAndTemplate) {
  for (const char* name : kLayouts) {
    const auto tok = tg::Tokenizer::load(kT5Data + "/" + name);
    EXPECT_EQ(tok.encode("a b"), (Ids{234, 226})) << name;
    EXPECT_EQ(tok.encode("<extra_id_0>"), (Ids{304})) << name;
    EXPECT_EQ(tok.encode("<extra_id_9>"), (Ids{295})) << name;
    // Around an added token the text is cut; " b" keeps its space as its ▁ (no second one is
    // prepended), and the trailing space of "a " goes to the Strip normalizer.
    EXPECT_EQ(tok.encode("a <extra_id_0> b"), (Ids{234, 304, 226})) << name;
    EXPECT_EQ(tok.encode("a<extra_id_1>b"), (Ids{234, 303, 226})) << name;
    // The template "$A </s>": only </s> is added, after the text (T5 has no BOS).
    EXPECT_EQ(tok.encode("a b", true), (Ids{234, 226, 1})) << name;
    EXPECT_EQ(tok.encode("", true), (Ids{1})) << name;
    EXPECT_EQ(tok.encode("<extra_id_0>", true), (Ids{304, 1})) << name;
    EXPECT_EQ(tok.eos_id(), 1) << name;
    EXPECT_EQ(tok.pad_id(), 0) << name;
    EXPECT_FALSE(tok.bos_id()) << name;
    EXPECT_TRUE(tok.is_special(304)) << name;
    // "$A </s> $B </s>", every type 0.
    const tg::Encoding pair = tok.encode_pair("a", "b");
    EXPECT_EQ(pair.ids, (Ids{234, 1, 226, 1})) << name;
    EXPECT_EQ(pair.type_ids, (Ids{0, 0, 0, 0})) << name;
    // Extra ids decode as written; the first token's ▁ is dropped, the others' read as spaces.
    EXPECT_EQ(tok.decode(Ids{304}), "<extra_id_0>") << name;
    EXPECT_EQ(tok.decode(Ids{295, 304}), "<extra_id_9><extra_id_0>") << name;
    EXPECT_EQ(tok.decode(Ids{234, 304, 226, 1}), "a<extra_id_0> b</s>") << name;
    EXPECT_EQ(tok.decode(Ids{304, 234, 226}), "<extra_id_0> a b") << name;
    EXPECT_EQ(tok.decode(Ids{234, 304, 226, 1}, /*skip_special=*/true), "a b") << name;
    // Skipped tokens do not count as the first: "▁a" after a skipped <extra_id_0> loses its ▁.
    EXPECT_EQ(tok.decode(Ids{304, 234, 226}, /*skip_special=*/true), "a b") << name;
  }
}

// The older layout's WhitespaceSplit: the text is cut at whitespace (dropped) and each word gets
// its own ▁. With the files' normalizer (nmt_nfkc rules, trailing whitespace stripped, a run of
// spaces one ▁) runs of spaces, tabs and newlines already come out alike in both layouts; U+0085
// (NEL) is whitespace the rules keep, so only WhitespaceSplit separates the words around it.
TEST(TokenizerT5, LegacyWhitespaceSplit) {
  const auto legacy = tg::Tokenizer::load(kT5Data + "/t5_legacy");
  const auto current = tg::Tokenizer::load(kT5Data + "/t5");
  for (const char* text : {"a b", " a \t\n\n  b \n", "a\t\tb", "\n\na\r\nb\n", "a  \t  b   "}) {
    EXPECT_EQ(legacy.encode(text), (Ids{234, 226})) << text;
    EXPECT_EQ(current.encode(text), (Ids{234, 226})) << text;
  }
  EXPECT_EQ(legacy.encode("a\xc2\x85"
                          "b"),
            (Ids{234, 226}));
  // One word "▁a<NEL>b": ▁a, NEL unknown, b.
  EXPECT_EQ(current.encode("a\xc2\x85"
                           "b"),
            (Ids{234, 2, 74}));

  // Without the normalizer the split alone: "a\tb\n c" is the words a, b, c, each ▁-prefixed,
  // against Metaspace's "▁a\tb\n", "▁c" (tab and newline unknown, not fused: b between them).
  nlohmann::json j = read_json(kT5Data + "/t5_legacy/tokenizer.json");
  j["normalizer"] = nullptr;
  EXPECT_EQ(load_json("t5_legacy_raw.json", j).encode("a\tb\n c"), (Ids{234, 226, 70}));
  EXPECT_EQ(load_json("t5_legacy_raw.json", j).encode(" \t\n"), Ids{});
  j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][1];
  EXPECT_EQ(load_json("t5_metaspace_raw.json", j).encode("a\tb\n c"), (Ids{234, 2, 74, 2, 70}));

  // prepend_scheme "first" after WhitespaceSplit: only a word at the very start of the text
  // gets the ▁ ("b" alone is b, 74; "a" after a space is a, 8).
  j = read_json(kT5Data + "/t5_legacy/tokenizer.json");
  j["pre_tokenizer"]["pretokenizers"][1] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}};
  const auto first = load_json("t5_legacy_first.json", j);
  EXPECT_EQ(first.encode("a b"), (Ids{234, 74}));
  EXPECT_EQ(first.encode(" a"), (Ids{8}));
}

// `tokenizers`' Metaspace decoder drops every ▁ of the first token rather than reading them as
// spaces (the prefix its pre-tokenizer added); a piece with a ▁ inside shows it.
TEST(TokenizerT5, MetaspaceDecoderFirstToken) {
  nlohmann::json j = read_json(kT5Data + "/t5_legacy/tokenizer.json");
  j["added_tokens"] = nlohmann::json::array();
  j["post_processor"] = nullptr;
  j["model"]["vocab"] = nlohmann::json::array();
  for (const auto& [piece, score] : {std::pair{"<unk>", 0.0}, {"▁", -2.0}, {"a", -3.0}, {"▁a▁b", -3.0}})
    j["model"]["vocab"].push_back(nlohmann::json::array({piece, score}));
  j["model"]["unk_id"] = 0;
  const auto tok = load_json("t5_inner_meta.json", j);
  EXPECT_EQ(tok.decode(Ids{3}), "ab");
  EXPECT_EQ(tok.decode(Ids{3, 3}), "ab a b");
  EXPECT_EQ(tok.decode(Ids{1, 3}), " a b");
  EXPECT_EQ(tok.decode(Ids{1, 1, 2}), " a");
  // prepend_scheme "never": every ▁ is a space.
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "never"}, {"split", true}};
  EXPECT_EQ(load_json("t5_inner_meta_never.json", j).decode(Ids{3}), " a b");
}

// Pre-tokenizers around Metaspace other than one WhitespaceSplit before it are named.
TEST(TokenizerT5, UnsupportedPreTokenizers) {
  const nlohmann::json base = read_json(kT5Data + "/t5_legacy/tokenizer.json");
  const nlohmann::json split = {{"type", "WhitespaceSplit"}};
  const nlohmann::json meta = base["pre_tokenizer"]["pretokenizers"][1];
  const auto error_with = [&](const nlohmann::json& pre) {
    nlohmann::json j = base;
    j["pre_tokenizer"] = pre;
    return load_error("t5_bad_pre.json", j);
  };
  const std::string supported = "(Metaspace, a Sequence of WhitespaceSplit and Metaspace, or none)";
  for (const nlohmann::json& pre :
       {nlohmann::json{{"type", "Sequence"}, {"pretokenizers", {meta, split}}}, split,
        nlohmann::json{{"type", "Sequence"}, {"pretokenizers", {split, split, meta}}},
        nlohmann::json{{"type", "Whitespace"}}}) {
    const std::string error = error_with(pre);
    EXPECT_HAS(error, "pre-tokenizer ");
    EXPECT_HAS(error, supported);
  }
  EXPECT_HAS(error_with({{"type", "Sequence"}, {"pretokenizers", {meta, split}}}),
             "pre-tokenizer {\"pretokenizers\":[{");
}

}  // namespace
