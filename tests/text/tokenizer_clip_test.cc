// CLIP's tokenizer.json (tests/data/tokenizer/clip, from transformers 5.17; its golden ids are
// checked with the other files' in tokenizer_test.cc): the split regex in both spellings, the
// end-of-word suffix, the normalizers and transformers' decode.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensorgrad/errors.h"
#include "tensorgrad/tokenizer.h"
#include "text/golden_ids.h"
#include "text/pretokenize.h"

namespace {

using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string_view>;

const std::string kClipData = std::string(TG_TEST_DATA_DIR) + "/tokenizer";

using tg_test::load_error;
using tg_test::read_file;
using tg_test::write_temp;

struct SplitCase {
  const char* text;
  Pieces pieces;
};

// CLIP's regex: whitespace is dropped, numbers are one digit each, its special tokens are whole,
// and contractions are lower case only (the text is lowercased before).
TEST(Pretokenize, ClipRegex) {
  const SplitCase cases[] = {
      {"  a\tphoto\n\n of  ", {"a", "photo", "of"}},
      {"<|startoftext|>it's 2024!!'s 'M",
       {"<|startoftext|>", "it", "'s", "2", "0", "2", "4", "!!'", "s", "'", "M"}},
      {"x<|endoftext|>y <|end", {"x", "<|endoftext|>", "y", "<|", "end"}},
      {"über ½ 日本語\u00a0\u3000ok", {"über", "½", "日本語", "ok"}},
      {"a\xff\xfe b", {"a", "\xff\xfe", "b"}},
  };
  for (const auto& c : cases)
    EXPECT_EQ(tg::text::split(c.text, tg::text::SplitPattern::kClip), c.pieces) << c.text;
}

// The spelling transformers 4's converter wrote (openai/clip-*'s files): no special-token
// alternatives, so a literal "<|endoftext|>" falls apart into its punctuation and letters, and
// punctuation after it joins its "|>".
TEST(Pretokenize, ClipPlainRegex) {
  const SplitCase cases[] = {
      {"<|startoftext|>it's 2024", {"<|", "startoftext", "|>", "it", "'s", "2", "0", "2", "4"}},
      {"x<|endoftext|>'s", {"x", "<|", "endoftext", "|>'", "s"}},
  };
  for (const auto& c : cases)
    EXPECT_EQ(tg::text::split(c.text, tg::text::SplitPattern::kClipPlain), c.pieces) << c.text;
}

// Both spellings give the same ids: the special tokens are taken out of the text before the
// split, and what is left splits alike.
TEST(Tokenizer, ClipPlainSpellingEncodesAlike) {
  const auto tok = tg::Tokenizer::load(kClipData + "/clip");
  nlohmann::json plain = nlohmann::json::parse(read_file(kClipData + "/clip/tokenizer.json"));
  plain["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      std::string(tg::text::pattern_source(tg::text::SplitPattern::kClipPlain));
  plain["pre_tokenizer"]["pretokenizers"][1].erase("use_regex");  // the converter left the default
  const auto converted = tg::Tokenizer::load(write_temp("clip_plain.json", plain.dump()));
  for (const std::string text : {"A photo of a CAT.  Two\tdogs!!", "<|startoftext|>x<|endoftext|>'s y",
                                 "don't stop: it's 2024", "Ünïcödé Café İstanbul"}) {
    EXPECT_EQ(converted.encode(text), tok.encode(text)) << text;
    EXPECT_EQ(converted.encode(text, true), tok.encode(text, true)) << text;
  }
}

// CLIP's file: case and whitespace normalized away, each word's last symbol spelled with "</w>",
// which decode reads as a space; a nonempty continuing_subword_prefix and a Split on CLIP's
// regex that keeps the whitespace are refused.
TEST(Tokenizer, ClipEndOfWordSuffix) {
  const auto tok = tg::Tokenizer::load(kClipData + "/clip");
  // a</w> p h o to</w> of</w> a</w> c a t</w> .</w> (tests/data/tokenizer/clip/golden.txt)
  const Ids ids = {320, 79, 592, 83, 334, 515, 320, 66, 64, 339, 269};
  EXPECT_EQ(tok.encode("a photo of a cat."), ids);
  EXPECT_EQ(tok.encode("A photo of a CAT."), ids);
  EXPECT_EQ(tok.encode(" \tA  PHOTO\nof a\u3000Cat. "), ids);
  EXPECT_EQ(tok.id_to_token(ids.back()), ".</w>");
  EXPECT_EQ(tok.decode(ids), "a photo of a cat .");
  Ids wrapped = {747};
  wrapped.insert(wrapped.end(), ids.begin(), ids.end());
  wrapped.push_back(748);
  EXPECT_EQ(tok.encode("A photo of a CAT.", true), wrapped);
  EXPECT_EQ(tok.decode(wrapped), "<|startoftext|>a photo of a cat . <|endoftext|>");
  EXPECT_EQ(tok.decode(wrapped, /*skip_special=*/true), "a photo of a cat .");
  EXPECT_EQ(tok.bos_id(), 747);
  EXPECT_EQ(tok.eos_id(), 748);
  // Lowercase maps each code point alone, as `tokenizers` does: a final Σ is σ, not ς.
  EXPECT_EQ(tok.encode("ΟΔΟΣ"), tok.encode("οδοσ"));
  EXPECT_NE(tok.encode("ΟΔΟΣ"), tok.encode("οδος"));
  const nlohmann::json base = nlohmann::json::parse(read_file(kClipData + "/clip/tokenizer.json"));
  nlohmann::json prefixed = base;
  prefixed["model"]["continuing_subword_prefix"] = "##";
  EXPECT_HAS(load_error(write_temp("clip_prefix.json", prefixed.dump())),
             "a BPE continuing_subword_prefix (\"##\") is not supported (only \"\" or none)");
  nlohmann::json isolated = base;
  isolated["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Isolated";
  isolated["pre_tokenizer"]["pretokenizers"][0]["invert"] = false;
  EXPECT_HAS(load_error(write_temp("clip_isolated.json", isolated.dump())),
             "a Split pre-tokenizer must have behavior Removed and invert on CLIP's regex");
}

}  // namespace
