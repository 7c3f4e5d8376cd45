// DistilBERT and XLM-RoBERTa folders (tests/data/tiny_distilbert*, tiny_xlm_roberta, made by
// tests/nn/gen_hf_distilbert_golden.py with transformers' own classes) load as nn::Bert: the
// hidden states and every head's output equal transformers' for a padded batch on every backend,
// the loss and every parameter's gradient equal its backward, the dropouts come from config.json,
// and what DistilBERT lacks (token types) or the loader does not implement is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tensorgrad/bert.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;

std::string distil_dir(const std::string& folder) { return std::string(TG_TEST_DATA_DIR) + "/" + folder; }
const nn::Bert& distilbert_of(const pretrained::Model& m) { return static_cast<const nn::Bert&>(*m.module); }

struct DistilCase {
  const char* folder;
  const char* architecture;
};
const DistilCase kDistilCases[] = {{"tiny_distilbert", "DistilBertForMaskedLM"},
                                   {"tiny_distilbert_base", "DistilBertModel"},
                                   {"tiny_distilbert_cls", "DistilBertForSequenceClassification"},
                                   {"tiny_distilbert_token", "DistilBertForTokenClassification"},
                                   {"tiny_distilbert_qa", "DistilBertForQuestionAnswering"},
                                   {"tiny_xlm_roberta", "XLMRobertaForMaskedLM"}};

class Encoders : public ::testing::TestWithParam<DistilCase> {};

TEST_P(Encoders, ConfigIsTransformers) {
  const DistilCase& c = GetParam();
  const pretrained::Model m = pretrained::load(distil_dir(c.folder));
  EXPECT_EQ(m.architecture, c.architecture);
  const nn::BertConfig& b = std::get<nn::BertConfig>(m.config);
  const bool distil = std::string(c.folder).starts_with("tiny_distilbert");
  EXPECT_EQ(b.distil, distil);
  EXPECT_EQ(b.d_model, 32);
  EXPECT_EQ(b.layers, 2);
  EXPECT_EQ(b.heads, 4);
  EXPECT_EQ(b.mlp_hidden, 48);
  EXPECT_EQ(b.type_vocab, distil ? 0 : 1);
  EXPECT_EQ(b.roberta_positions, !distil);
  EXPECT_EQ(m.context, distil ? 40 : 16);
  EXPECT_FALSE(b.pooler);
  if (!distil) return;
  // dropout, attention_dropout, and the head's: seq_classif_dropout or (tokens) dropout; qa_dropout.
  EXPECT_DOUBLE_EQ(b.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(b.attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(b.classifier_p(), std::string(c.folder) == "tiny_distilbert_token" ? 0.1 : 0.2);
  EXPECT_DOUBLE_EQ(b.qa_dropout, 0.1);
  EXPECT_EQ(b.labels, std::string(c.folder) == "tiny_distilbert_cls"     ? 3
                      : std::string(c.folder) == "tiny_distilbert_token" ? 5
                                                                         : 0);
}

// The hidden states and the head's output for the golden padded batch, to 1e-4 on every backend.
TEST_P(Encoders, OutputsEqualTransformersOnEveryBackend) {
  const DistilCase& c = GetParam();
  const pretrained::Model m = pretrained::load(distil_dir(c.folder));
  const auto g = read_safetensors(distil_dir(c.folder) + "/logits.safetensors");
  const nn::Bert& bert = distilbert_of(m);
  const Shape shape = g.at("ids").shape();
  const Feeds feeds{{"ids", g.at("ids").i32()}, {"mask", g.at("mask").i32()}};
  for (const Device& device : tg::testing::all_devices()) {
    const ForwardOptions options{.inputs = {{"ids", shape, DType::kI32}, {"mask", shape, DType::kI32}},
                                 .device = device};
    Program hidden = compile_forward(
        *m.module, [&](Tensor ids, Tensor mask) { return bert.hidden(ids, mask); }, options);
    m.upload(hidden);
    EXPECT_LT(tg::testing::rel_diff(hidden.run(feeds).f32(), g.at("hidden").f32()), 1e-4)
        << c.folder << " on " << device.str();
    if (!g.count("logits")) continue;
    Program head = compile_forward(
        *m.module,
        [&](Tensor ids, Tensor mask) {
          const Tensor h = bert.hidden(ids, mask);
          return bert.config.labels > 0 ? bert.classify(h)
                 : bert.config.qa_head  ? bert.answer_span(h)
                                        : bert.mlm_logits(h);
        },
        options);
    m.upload(head);
    EXPECT_LT(tg::testing::rel_diff(head.run(feeds).f32(), g.at("logits").f32()), 1e-4)
        << c.folder << " on " << device.str();
  }
}

INSTANTIATE_TEST_SUITE_P(Folders, Encoders, ::testing::ValuesIn(kDistilCases),
                         [](const auto& info) { return std::string(info.param.folder); });

// transformers' loss and the gradient of every parameter (eval mode: training = false), through
// the renamed parameters: ours "encoder.layer.0.attention.self.query.weight" is the file's
// "distilbert.transformer.layer.0.attention.q_lin.weight".
TEST(DistilBert, GradientsEqualTransformers) {
  const std::map<std::string, std::string> renamed = {
      {"encoder.layer.0.attention.self.query.weight",
       "distilbert.transformer.layer.0.attention.q_lin.weight"},
      {"encoder.layer.1.output.LayerNorm.bias", "distilbert.transformer.layer.1.output_layer_norm.bias"},
      {"embeddings.position_embeddings.weight", "distilbert.embeddings.position_embeddings.weight"}};
  for (const char* folder : {"tiny_distilbert", "tiny_distilbert_cls"}) {
    const pretrained::Model m = pretrained::load(distil_dir(folder));
    const auto g = read_safetensors(distil_dir(folder) + "/logits.safetensors");
    const nn::Bert& bert = distilbert_of(m);
    const Shape shape = g.at("ids").shape();
    const bool mlm = bert.config.mlm_head;
    for (const Device& device : tg::testing::all_devices()) {
      Program p =
          compile_train(*m.module,
                        [&](Tensor ids, Tensor mask, Tensor labels) {
                          const Tensor h = bert.hidden(ids, mask);
                          return mlm ? cross_entropy(reshape(bert.mlm_logits(h), {-1, bert.config.vocab}),
                                                     reshape(labels, {-1}))
                                     : cross_entropy(bert.classify(h), labels);
                        },
                        {.inputs = {{"ids", shape, DType::kI32},
                                    {"mask", shape, DType::kI32},
                                    {"labels", g.at("labels").shape(), DType::kI32}},
                         .training = false,
                         .optimizer = GradientsOnly{},
                         .device = device});
      m.upload(p);
      Captures caps;
      const float loss =
          p.step({{"ids", g.at("ids").i32()}, {"mask", g.at("mask").i32()}, {"labels", g.at("labels").i32()}},
                 {.captures = &caps});
      EXPECT_NEAR(loss, g.at("loss").f32()[0], 1e-5 * std::abs(g.at("loss").f32()[0])) << folder;
      int compared = 0;
      for (const std::string& name : p.param_names()) {
        // The file's name of each gradient: the masked-LM projector's bias and the heads as named there.
        std::string file =
            name == "cls.predictions.bias"                            ? "vocab_projector.bias"
            : name.starts_with("cls.predictions.transform.dense")     ? "vocab_transform" + name.substr(31)
            : name.starts_with("cls.predictions.transform.LayerNorm") ? "vocab_layer_norm" + name.substr(35)
            : name.starts_with("pre_classifier") || name.starts_with("classifier") ? name
                                                                                   : "";
        if (auto it = renamed.find(name); it != renamed.end()) file = it->second;
        if (file.empty()) continue;
        const std::string key = "grad/" + file;
        ASSERT_TRUE(g.count(key)) << key;
        EXPECT_LT(tg::testing::rel_diff(caps.at("grad/" + name).f32(), g.at(key).f32()), 1e-4)
            << folder << " " << name << " on " << device.str();
        ++compared;
      }
      EXPECT_GE(compared, mlm ? 8 : 7) << folder;
    }
  }
}

// A copy of `folder` with config.json's `key` set to `value` (a JSON text).
fs::path with_config(const fs::path& out, const std::string& folder, const std::string& key,
                     const std::string& value) {
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(distil_dir(folder)))
    fs::copy_file(e.path(), out / e.path().filename(), fs::copy_options::overwrite_existing);
  std::ifstream in(out / "config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find("\"" + key + "\"");
  EXPECT_NE(at, std::string::npos) << key;
  const size_t colon = text.find(':', at), end = text.find_first_of(",\n}", colon);
  text = text.substr(0, colon + 1) + " " + value + text.substr(end);
  std::ofstream(out / "config.json") << text;
  return out;
}

TEST(DistilBert, Errors) {
  const pretrained::Model m = pretrained::load(distil_dir("tiny_distilbert_cls"));
  const nn::Bert& bert = distilbert_of(m);
  try {  // DistilBERT has no token types
    compile_forward(
        *m.module, [&](Tensor ids, Tensor types) { return bert.hidden(ids, std::nullopt, types); },
        {.inputs = {{"ids", {1, 4}, DType::kI32}, {"types", {1, 4}, DType::kI32}}, .device = Device::ref()});
    ADD_FAILURE() << "token types were accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("type_vocab 0"), std::string::npos) << e.what();
  }
  const fs::path tmp = fs::path(::testing::TempDir()) / "distilbert_errors";
  try {
    pretrained::load(with_config(tmp, "tiny_distilbert_cls", "activation", "\"relu\"").string());
    ADD_FAILURE() << "activation relu was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("relu"), std::string::npos) << e.what();
  }
  try {
    pretrained::load(with_config(tmp, "tiny_distilbert_cls", "seq_classif_dropout", "1.5").string());
    ADD_FAILURE() << "a dropout of 1.5 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dropout"), std::string::npos) << e.what();
  }
  fs::remove_all(tmp);
}

}  // namespace
