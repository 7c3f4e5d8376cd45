// Tokenizer::encode_batch: texts as one padded [rows, length] batch. Each row must be encode()'s
// ids of its text, cut as `tokenizers` truncates (the text's own ids to what the post-processor's
// tokens leave of max_length, those tokens kept), padded on the right with the file's padding
// token, with a mask of 1 on tokens, as `tokenizers`' encode_batch gives them (golden batches of
// tests/text/gen_batch_golden.py); misuse is an InputError.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

const std::string kBatchData = std::string(TG_TEST_DATA_DIR) + "/tokenizer";
using Ids = std::vector<int32_t>;

Ids row(const tg::EncodedBatch& b, int64_t r) {
  return Ids(b.ids.begin() + r * b.length, b.ids.begin() + (r + 1) * b.length);
}

TEST(TokenizerBatch, CutsAndPadsAsTokenizers) {
  const auto tok = tg::Tokenizer::load(kBatchData + "/bert");
  const std::string longer = "Don't panic: 42 is the answer, isn't it? The cat sat on the mat.";
  const Ids cls_a = tok.encode("Hello world", true), body = tok.encode(longer, false);
  ASSERT_GT(body.size(), 6u);
  const int32_t pad = *tok.token_to_id("[PAD]"), cls = cls_a.front(), sep = cls_a.back();
  EXPECT_EQ(tok.pad_id(), pad);

  const tg::EncodedBatch b = tok.encode_batch({"Hello world", longer}, {.max_length = 8});
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.length, 8);
  EXPECT_EQ(b.truncated, 1);
  EXPECT_EQ(b.lengths, (std::vector<int64_t>{static_cast<int64_t>(cls_a.size()), 8}));
  Ids want0 = cls_a;
  want0.resize(8, pad);
  EXPECT_EQ(row(b, 0), want0);
  Ids want1 = {cls};
  want1.insert(want1.end(), body.begin(), body.begin() + 6);
  want1.push_back(sep);
  EXPECT_EQ(row(b, 1), want1);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t t = 0; t < 8; ++t)
      EXPECT_EQ(b.mask[static_cast<size_t>(r * 8 + t)], t < b.lengths[static_cast<size_t>(r)] ? 1 : 0);

  // Without a limit: as long as the longest text, nothing cut; without special tokens, none added.
  const tg::EncodedBatch all = tok.encode_batch({"Hello world", longer});
  EXPECT_EQ(all.length, static_cast<int64_t>(body.size() + 2));
  EXPECT_EQ(all.truncated, 0);
  const tg::EncodedBatch plain = tok.encode_batch({longer}, {.add_special = false, .max_length = 5});
  EXPECT_EQ(row(plain, 0), Ids(body.begin(), body.begin() + 5));
  // Padded to max_length, with a padding id of one's own.
  const tg::EncodedBatch wide =
      tok.encode_batch({"Hello world"}, {.max_length = 16, .pad_to_max_length = true, .pad_id = -7});
  EXPECT_EQ(wide.length, 16);
  EXPECT_EQ(wide.ids.back(), -7);
}

// Against `tokenizers`' own encode_batch with truncation and padding (gen_batch_golden.py): the
// WordPiece and Unigram files, max_length 4, 8 and 64, an empty text among them.
TEST(TokenizerBatch, MatchesHuggingFaceTokenizers) {
  for (const char* name : {"bert", "xlmr"}) {
    const auto tok = tg::Tokenizer::load(kBatchData + "/" + name);
    std::ifstream golden(kBatchData + "/" + name + "/batch_golden.txt");
    ASSERT_TRUE(golden) << name;
    struct Row {
      std::string text;
      Ids ids, mask;
    };
    std::map<std::pair<int64_t, int32_t>, std::vector<Row>> batches;  // (max_length, pad) → rows
    for (std::string line; std::getline(golden, line);) {
      std::istringstream fields(line);
      std::string max_length, pad, hex, ids, mask;
      std::getline(fields, max_length, '\t');
      std::getline(fields, pad, '\t');
      std::getline(fields, hex, '\t');
      std::getline(fields, ids, '\t');
      std::getline(fields, mask);
      Row r;
      for (size_t i = 0; i + 1 < hex.size(); i += 2)
        r.text += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
      std::istringstream is(ids), ms(mask);
      for (int32_t v; is >> v;) r.ids.push_back(v);
      for (int32_t v; ms >> v;) r.mask.push_back(v);
      batches[{std::stoll(max_length), std::stoi(pad)}].push_back(r);
    }
    ASSERT_EQ(batches.size(), 3u) << name;
    for (const auto& [key, rows] : batches) {
      std::vector<std::string> texts;
      for (const Row& r : rows) texts.push_back(r.text);
      const tg::EncodedBatch b = tok.encode_batch(texts, {.max_length = key.first, .pad_id = key.second});
      ASSERT_EQ(b.rows, static_cast<int64_t>(rows.size()));
      for (size_t r = 0; r < rows.size(); ++r) {
        EXPECT_EQ(row(b, static_cast<int64_t>(r)), rows[r].ids)
            << name << " max_length " << key.first << " row " << r;
        EXPECT_EQ(Ids(b.mask.begin() + static_cast<int64_t>(r) * b.length,
                      b.mask.begin() + static_cast<int64_t>(r + 1) * b.length),
                  rows[r].mask);
      }
    }
  }
}

TEST(TokenizerBatch, Errors) {
  const auto bert = tg::Tokenizer::load(kBatchData + "/bert");
  EXPECT_THROW(bert.encode_batch({"a"}, {.max_length = 2}), tg::InputError);  // only [CLS] and [SEP]
  EXPECT_THROW(bert.encode_batch({"a"}, {.pad_to_max_length = true}), tg::InputError);
  EXPECT_THROW(bert.encode_batch({"a"}, {.max_length = -1}), tg::InputError);
  // GPT-2's file names no padding token: padding needs one given.
  const auto gpt2 = tg::Tokenizer::load(kBatchData + "/gpt2");
  EXPECT_FALSE(gpt2.pad_id().has_value());
  EXPECT_EQ(gpt2.encode_batch({"same", "same"}).length, static_cast<int64_t>(gpt2.encode("same").size()));
  try {
    gpt2.encode_batch({"a", "a much longer text"});
    ADD_FAILURE() << "padded without a padding id";
  } catch (const tg::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("BatchOptions::pad_id"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gpt2.encode_batch({"a", "a much longer text"}, {.pad_id = 0}).rows, 2);
}

}  // namespace
