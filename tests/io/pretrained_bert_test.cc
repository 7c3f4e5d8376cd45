// BERT-family encoders against transformers 5.17: tiny random folders it wrote with what it
// computed for a padded batch (tests/nn/gen_hf_bert_golden.py, run on the GPU machine):
// tiny_bert (BertForMaskedLM, the erf GELU, the batch its WordPiece tokenizer padded),
// tiny_bert_pooler (BertModel with its pooler, the tanh GELU, a sentence pair: token types 0
// and 1) and tiny_roberta (RobertaForMaskedLM: positions counted past the padding id).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tensorgrad/pretrained.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;

std::string bert_dir(const std::string& folder) { return std::string(TG_TEST_DATA_DIR) + "/" + folder; }

const nn::Bert& bert_of(const pretrained::Model& m) { return static_cast<const nn::Bert&>(*m.module); }

// The model's hidden states, and its head's output (masked-LM logits or the pooler's), for the
// golden batch with its mask and token types, on `device` under `precision`.
std::pair<std::vector<float>, std::vector<float>> outputs(const pretrained::Model& m,
                                                          const std::map<std::string, HostTensor>& g,
                                                          const Device& device, Precision precision) {
  const Shape shape = g.at("ids").shape();
  const nn::Bert& bert = bert_of(m);
  const ForwardOptions options{
      .inputs = {{"ids", shape, DType::kI32}, {"mask", shape, DType::kI32}, {"types", shape, DType::kI32}},
      .device = device,
      .precision = precision};
  const Feeds feeds{{"ids", g.at("ids").i32()}, {"mask", g.at("mask").i32()}, {"types", g.at("types").i32()}};
  Program hidden = compile_forward(
      *m.module, [&](Tensor ids, Tensor mask, Tensor types) { return bert.hidden(ids, mask, types); },
      options);
  Program head = compile_forward(
      *m.module,
      [&](Tensor ids, Tensor mask, Tensor types) {
        const Tensor h = bert.hidden(ids, mask, types);
        return bert.config.labels > 0 ? bert.classify(h)
               : bert.config.qa_head  ? bert.answer_span(h)
               : bert.config.mlm_head ? bert.mlm_logits(h)
                                      : bert.pooled(h);
      },
      options);
  m.upload(hidden);
  return {hidden.run(feeds).f32(), head.run(feeds).f32()};
}

struct BertCase {
  const char* folder;
  const char* architecture;
  int64_t context;
  const char* head;  // the golden file's entry for the head's output
};
const BertCase kBertCases[] = {{"tiny_bert", "BertForMaskedLM", 40, "logits"},
                               {"tiny_bert_pooler", "BertModel", 40, "pooled"},
                               {"tiny_roberta", "RobertaForMaskedLM", 16, "logits"},
                               {"tiny_bert_cls", "BertForSequenceClassification", 40, "logits"},
                               {"tiny_roberta_cls", "RobertaForSequenceClassification", 16, "logits"},
                               {"tiny_bert_token", "BertForTokenClassification", 40, "logits"},
                               {"tiny_bert_qa", "BertForQuestionAnswering", 40, "logits"},
                               {"tiny_roberta_qa", "RobertaForQuestionAnswering", 16, "logits"}};

class BertFamily : public ::testing::TestWithParam<BertCase> {};

TEST_P(BertFamily, ConfigIsTransformers) {
  const BertCase& c = GetParam();
  const pretrained::Model m = pretrained::load(bert_dir(c.folder));
  const std::string name = c.folder;
  const bool roberta = name.starts_with("tiny_roberta");
  EXPECT_EQ(m.architecture, c.architecture);
  EXPECT_EQ(m.context, c.context);
  const nn::BertConfig& b = std::get<nn::BertConfig>(m.config);
  EXPECT_EQ(b.d_model, 32);
  EXPECT_EQ(b.layers, 2);
  EXPECT_EQ(b.heads, 4);
  EXPECT_EQ(b.mlp_hidden, 48);
  EXPECT_EQ(b.vocab, roberta ? 64 : 1000);
  EXPECT_EQ(b.type_vocab, roberta ? 1 : 2);
  EXPECT_EQ(b.gelu, name == "tiny_bert_pooler" ? GeluApprox::kTanh : GeluApprox::kErf);
  EXPECT_EQ(b.roberta_positions, roberta);
  EXPECT_EQ(b.pad_id, roberta ? 1 : 0);
  EXPECT_EQ(b.pooler, name == "tiny_bert_pooler" || name == "tiny_bert_cls");
  EXPECT_EQ(b.mlm_head, name == "tiny_bert" || name == "tiny_roberta");
  EXPECT_EQ(b.labels, name == "tiny_bert_cls"      ? 3
                      : name == "tiny_roberta_cls" ? 2
                      : name == "tiny_bert_token"  ? 5
                                                   : 0);
  EXPECT_EQ(b.per_token, name == "tiny_bert_token");
  EXPECT_EQ(b.qa_head, name.ends_with("_qa"));
  EXPECT_DOUBLE_EQ(b.ln_eps, 1e-12);
  // transformers' defaults, written out by save_pretrained; classifier_dropout null.
  EXPECT_DOUBLE_EQ(b.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(b.attention_dropout, 0.1);
  EXPECT_LT(b.classifier_dropout, 0.0);
  EXPECT_DOUBLE_EQ(b.classifier_p(), 0.1);
}

TEST_P(BertFamily, OutputsEqualTransformersOnEveryBackend) {
  const BertCase& c = GetParam();
  const pretrained::Model m = pretrained::load(bert_dir(c.folder));
  const auto g = read_safetensors(bert_dir(c.folder) + "/logits.safetensors");
  for (const Device& device : tg::testing::all_devices()) {
    const auto [hidden, head] = outputs(m, g, device, Precision::kFp32);
    const double dh = tg::testing::rel_diff(hidden, g.at("hidden").f32());
    const double dy = tg::testing::rel_diff(head, g.at(c.head).f32());
    EXPECT_LT(dh, 1e-4) << c.folder << " hidden on " << device.str();
    EXPECT_LT(dy, 1e-4) << c.folder << " " << c.head << " on " << device.str();
    std::printf("  %s on %s: relative difference to transformers: hidden %.2e, %s %.2e\n", c.folder,
                device.str().c_str(), dh, c.head, dy);
  }
}

// Under bf16 mixed precision the products round their operands to 8 bits: within that of
// transformers' f32 outputs, and not equal to them.
TEST_P(BertFamily, Bf16WithinItsRounding) {
  const BertCase& c = GetParam();
  const pretrained::Model m = pretrained::load(bert_dir(c.folder));
  const auto g = read_safetensors(bert_dir(c.folder) + "/logits.safetensors");
  for (const Device& device : tg::testing::all_devices()) {
    const auto [hidden, head] = outputs(m, g, device, Precision::kBf16);
    const double d = tg::testing::rel_diff(hidden, g.at("hidden").f32());
    EXPECT_GT(d, 1e-5) << c.folder << " on " << device.str();
    EXPECT_LT(d, 3e-2) << c.folder << " on " << device.str();
  }
}

INSTANTIATE_TEST_SUITE_P(Folders, BertFamily, ::testing::ValuesIn(kBertCases),
                         [](const ::testing::TestParamInfo<BertCase>& info) {
                           return std::string(info.param.folder);
                         });

// transformers' loss and the gradient of every parameter (its backward in eval mode): the
// masked-LM loss over chosen positions of tiny_bert's padded batch, and tiny_bert_cls's
// classification loss, on every backend.
TEST(Bert, GradientsEqualTransformers) {
  for (const char* folder : {"tiny_bert", "tiny_bert_cls"}) {
    const pretrained::Model m = pretrained::load(bert_dir(folder));
    const auto g = read_safetensors(bert_dir(folder) + "/logits.safetensors");
    const nn::Bert& bert = bert_of(m);
    const Shape shape = g.at("ids").shape();
    const bool mlm = bert.config.mlm_head;
    for (const Device& device : tg::testing::all_devices()) {
      Program p =
          compile_train(*m.module,
                        [&](Tensor ids, Tensor mask, Tensor types, Tensor labels) {
                          const Tensor h = bert.hidden(ids, mask, types);
                          return mlm ? cross_entropy(reshape(bert.mlm_logits(h), {-1, bert.config.vocab}),
                                                     reshape(labels, {-1}))
                                     : cross_entropy(bert.classify(h), labels);
                        },
                        {.inputs = {{"ids", shape, DType::kI32},
                                    {"mask", shape, DType::kI32},
                                    {"types", shape, DType::kI32},
                                    {"labels", g.at("labels").shape(), DType::kI32}},
                         .training = false,  // the golden gradients are eval mode's
                         .optimizer = GradientsOnly{},
                         .device = device});
      m.upload(p);
      Captures caps;
      const float loss = p.step({{"ids", g.at("ids").i32()},
                                 {"mask", g.at("mask").i32()},
                                 {"types", g.at("types").i32()},
                                 {"labels", g.at("labels").i32()}},
                                {.captures = &caps});
      EXPECT_NEAR(loss, g.at("loss").f32()[0], 1e-5 * std::abs(g.at("loss").f32()[0]))
          << folder << " on " << device.str();
      for (const std::string& name : p.param_names()) {
        const std::string file =
            name.starts_with("cls.") || name.starts_with("classifier") ? name : "bert." + name;
        if (name.ends_with("key.bias")) {
          // Exactly zero: a key bias adds q·b to every score of a query's row, which the softmax
          // takes away. Both sides hold only rounding there.
          for (float v : caps.at("grad/" + name).f32())
            EXPECT_LT(std::abs(v), 1e-6f) << folder << " " << name;
          for (float v : g.at("grad/" + file).f32()) EXPECT_LT(std::abs(v), 1e-6f) << folder << " " << name;
          continue;
        }
        EXPECT_LT(tg::testing::rel_diff(caps.at("grad/" + name).f32(), g.at("grad/" + file).f32()), 1e-4)
            << folder << " on " << device.str() << ": gradient of " << name;
      }
    }
  }
}

// A safetensors file written byte by byte: entries of any format dtype (the library's writer
// holds only its own), in order.
struct RawTensor {
  std::string name, dtype;
  Shape shape;
  std::string bytes;
};
void write_raw_safetensors(const fs::path& path, const std::vector<RawTensor>& tensors) {
  std::string header = "{", data;
  for (const RawTensor& t : tensors) {
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + t.dtype +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + t.bytes.size()) + "]}";
    data += t.bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header << data;
}

// What transformers skips when it loads a checkpoint is skipped here too: bert-base-uncased's
// next-sentence head (cls.seq_relationship), the int64 position_ids buffer of files written
// before transformers 4.31 (BGE's, MiniLM's), and a head bias stored as the decoder's only.
TEST(Bert, LoadsWhatTransformersSkips) {
  const pretrained::Model m = pretrained::load(bert_dir("tiny_bert"));
  const fs::path dir = fs::temp_directory_path() / "tg_bert_hub_layout";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(bert_dir("tiny_bert") + "/config.json", dir / "config.json");
  std::vector<RawTensor> raw;
  for (const auto& [name, t] : read_safetensors(bert_dir("tiny_bert") + "/model.safetensors")) {
    const auto* p = static_cast<const char*>(t.data());
    raw.push_back({name == "cls.predictions.bias" ? "cls.predictions.decoder.bias" : name, "F32", t.shape(),
                   std::string(p, p + t.numel() * 4)});
  }
  std::string positions;
  for (int64_t i = 0; i < 40; ++i)
    for (int b = 0; b < 8; ++b) positions += static_cast<char>(b == 0 ? i : 0);
  raw.push_back({"bert.embeddings.position_ids", "I64", {1, 40}, positions});
  raw.push_back({"cls.seq_relationship.weight", "F32", {2, 32}, std::string(2 * 32 * 4, '\0')});
  raw.push_back({"cls.seq_relationship.bias", "F32", {2}, std::string(2 * 4, '\0')});
  write_raw_safetensors(dir / "model.safetensors", raw);
  const pretrained::Model hub = pretrained::load(dir.string());
  ASSERT_EQ(hub.weights.size(), m.weights.size());
  for (const auto& [name, t] : m.weights) {
    const std::span<const float> a = hub.weights.at(name).f32(), b = t.f32();
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << name;
  }
  // Without the caller's word an int64 tensor is still refused, naming it.
  EXPECT_THROW(read_safetensors((dir / "model.safetensors").string()), CheckpointError);
  fs::remove_all(dir);
}

// The mask's meaning, without transformers: the padded second row of tiny_bert's batch gives
// the hidden states of that row alone, unpadded and unmasked, on its tokens.
TEST(Bert, PaddingMaskedIsTheUnpaddedSequence) {
  const pretrained::Model m = pretrained::load(bert_dir("tiny_bert"));
  const auto g = read_safetensors(bert_dir("tiny_bert") + "/logits.safetensors");
  const nn::Bert& bert = bert_of(m);
  const Shape shape = g.at("ids").shape();
  const int64_t T = shape[1], d = bert.config.d_model;
  const std::span<const int32_t> mask = g.at("mask").i32();
  int64_t row = -1, length = 0;
  for (int64_t b = 0; b < shape[0]; ++b) {
    int64_t n = 0;
    for (int64_t t = 0; t < T; ++t) n += mask[b * T + t] != 0;
    if (n < T) row = b, length = n;
  }
  ASSERT_GE(row, 0) << "the golden batch has a padded row";
  const std::vector<int32_t> alone(g.at("ids").i32().begin() + row * T,
                                   g.at("ids").i32().begin() + row * T + length);
  for (const Device& device : tg::testing::all_devices()) {
    Program p = compile_forward(*m.module, [&](Tensor ids) { return bert.hidden(ids); },
                                {.inputs = {{"ids", {1, length}, DType::kI32}}, .device = device});
    m.upload(p);
    const std::vector<float> got = p.run({{"ids", alone}}).f32();
    const std::vector<float> want(g.at("hidden").f32().begin() + row * T * d,
                                  g.at("hidden").f32().begin() + (row * T + length) * d);
    EXPECT_LT(tg::testing::rel_diff(got, want), 1e-5) << device.str();
  }
}

// transformers' dropouts: none in an evaluation-mode step (the golden gradients above) or with
// every probability 0; each of the three alone changes a training step's loss, draws new masks
// every step, and draws the same ones on every backend for the same seed. RoBERTa's classifier
// has the classifier dropout twice.
TEST(Bert, DropoutWhereTheConfigAsks) {
  const pretrained::Model m = pretrained::load(bert_dir("tiny_roberta_cls"));
  const auto g = read_safetensors(bert_dir("tiny_roberta_cls") + "/logits.safetensors");
  const Shape shape = g.at("ids").shape();
  std::vector<int32_t> labels;
  for (int64_t b = 0; b < shape[0]; ++b) labels.push_back(static_cast<int32_t>(b % 2));
  const Feeds feeds{{"ids", g.at("ids").i32()},
                    {"mask", g.at("mask").i32()},
                    {"types", g.at("types").i32()},
                    {"labels", labels}};
  // Two steps' losses (gradients only: the parameters stay as loaded).
  auto losses = [&](const nn::BertConfig& c, Device device, bool training) {
    nn::Bert bert(c);
    Program p = compile_train(bert,
                              [&](Tensor ids, Tensor mask, Tensor types, Tensor labels) {
                                return cross_entropy(bert.classify(bert.hidden(ids, mask, types)), labels);
                              },
                              {.inputs = {{"ids", shape, DType::kI32},
                                          {"mask", shape, DType::kI32},
                                          {"types", shape, DType::kI32},
                                          {"labels", {shape[0]}, DType::kI32}},
                               .seed = 5,
                               .training = training,
                               .optimizer = GradientsOnly{},
                               .device = device});
    p.upload_params(m.weights);
    const float first = p.step(feeds);
    return std::pair{first, p.step(feeds)};
  };
  const nn::BertConfig loaded = std::get<nn::BertConfig>(m.config);
  const auto [eval, eval_again] = losses(loaded, Device::cpu(), false);
  EXPECT_EQ(eval, eval_again);
  nn::BertConfig none = loaded;
  none.hidden_dropout = none.attention_dropout = none.classifier_dropout = 0.0;
  EXPECT_NEAR(losses(none, Device::cpu(), true).first, eval, 1e-6 * std::abs(eval));
  for (int which = 0; which < 3; ++which) {
    nn::BertConfig c = none;
    (which == 0 ? c.hidden_dropout : which == 1 ? c.attention_dropout : c.classifier_dropout) = 0.3;
    SCOPED_TRACE(which == 0 ? "hidden_dropout" : which == 1 ? "attention_dropout" : "classifier_dropout");
    const auto [first, second] = losses(c, Device::cpu(), true);
    EXPECT_GT(std::abs(first - eval), 1e-4 * std::abs(eval));
    EXPECT_GT(std::abs(second - first), 1e-4 * std::abs(eval));
    for (const Device& device : tg::testing::all_devices()) {
      const auto [a, b] = losses(c, device, true);
      EXPECT_NEAR(a, first, 1e-4 * std::abs(first)) << device.str();
      EXPECT_NEAR(b, second, 1e-4 * std::abs(second)) << device.str();
    }
  }
  nn::BertConfig bad = none;
  bad.attention_dropout = 1.0;
  EXPECT_THROW(nn::Bert{bad}, Error);
}

// Sentence-transformers' pooling: the mean over the tokens the mask marks, then unit length.
TEST(Bert, MeanPoolAndNormalizeByHand) {
  const std::vector<float> h{1, 2, 3, 4, 100, 100, 5, 6, 7, 8, 9, 10};  // [2, 3, 2]
  const std::vector<int32_t> mask{1, 1, 0, 1, 1, 1};
  Module none;
  Program p =
      compile_forward(none, [](Tensor x, Tensor m) { return nn::l2_normalize(nn::mean_pool(x, m)); },
                      {.inputs = {{"h", {2, 3, 2}}, {"m", {2, 3}, DType::kI32}}, .device = Device::cpu()});
  const std::vector<float> got = p.run({{"h", h}, {"m", mask}}).f32();
  // Row 0: mean of (1,2), (3,4) = (2, 3); row 1: mean of (5,6), (7,8), (9,10) = (7, 8).
  const double n0 = std::sqrt(13.0), n1 = std::sqrt(113.0);
  const std::vector<float> want{static_cast<float>(2 / n0), static_cast<float>(3 / n0),
                                static_cast<float>(7 / n1), static_cast<float>(8 / n1)};
  EXPECT_LT(tg::testing::rel_diff(got, want), 1e-6);
}

TEST(Bert, Errors) {
  const pretrained::Model pooler = pretrained::load(bert_dir("tiny_bert_pooler"));
  EXPECT_THROW(pooler.step(), Error);
  const nn::Bert& bert = bert_of(pooler);
  const auto compile = [&](auto fn, Shape shape) {
    return compile_forward(*pooler.module, fn,
                           {.inputs = {{"ids", shape, DType::kI32}}, .device = Device::ref()});
  };
  EXPECT_THROW(compile([&](Tensor ids) { return pooler.logits(ids); }, {1, 4}), Error);  // no masked-LM head
  EXPECT_THROW(compile([&](Tensor ids) { return bert.mlm_logits(bert.hidden(ids)); }, {1, 4}), Error);
  EXPECT_THROW(compile([&](Tensor ids) { return bert.hidden(ids); }, {1, 41}),
               ShapeError);  // past 40 positions
  EXPECT_THROW(compile([&](Tensor ids) { return bert.hidden(ids, ones({1, 5})); }, {1, 4}), ShapeError);
  EXPECT_THROW(compile(
                   [&](Tensor ids) {
                     return bert.hidden(ids, std::nullopt, zeros({2, 4}, DType::kI32));
                   },
                   {1, 4}),
               ShapeError);

  // config.json values nn::Bert does not implement are CheckpointErrors naming the key.
  const auto refused = [](const std::string& key, const std::string& value) {
    const fs::path dir = fs::temp_directory_path() / ("tg_bert_bad_" + key);
    fs::remove_all(dir);
    fs::copy(bert_dir("tiny_bert"), dir);
    std::ifstream in(dir / "config.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    // The key's value replaced where the file has it (up to the end of its line, less a comma),
    // else the key added first.
    const std::string quoted = "\"" + key + "\": ";
    if (const size_t at = text.find(quoted); at != std::string::npos) {
      const size_t from = at + quoted.size(), line_end = text.find('\n', from);
      const size_t to = text[line_end - 1] == ',' ? line_end - 1 : line_end;
      text.replace(from, to - from, value);
    } else {
      text.insert(text.find('{') + 1, "\n  " + quoted + value + ",");
    }
    std::ofstream(dir / "config.json") << text;
    std::string what;
    try {
      pretrained::load(dir.string());
    } catch (const CheckpointError& e) {
      what = e.what();
    }
    fs::remove_all(dir);
    return what;
  };
  EXPECT_NE(refused("position_embedding_type", "\"relative_key\"").find("position_embedding_type"),
            std::string::npos);
  EXPECT_NE(refused("is_decoder", "true").find("is_decoder"), std::string::npos);
  EXPECT_NE(refused("hidden_act", "\"relu\"").find("hidden_act \"relu\""), std::string::npos);
  EXPECT_NE(refused("tie_word_embeddings", "false").find("tie_word_embeddings"), std::string::npos);
}

}  // namespace
