// Vision Transformers against transformers 5.17: tiny random folders it wrote with what it
// computed for a fixed batch of two 16 × 16 images (tests/nn/gen_hf_vit_golden.py, run on the
// GPU machine): tiny_vit (ViTModel with its pooler, no q/k/v biases, the tanh GELU) and
// tiny_vit_cls (ViTForImageClassification, 5 labels, the erf GELU), on every backend; the
// classifier's loss and every parameter's gradient of transformers' backward; a save and load
// that gives the same file back; and the clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tensorgrad/pretrained.h"
#include "tensorgrad/tensorgrad.h"
#include "io/folder_util.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;
using tg_test::same_weights;

std::string vit_dir(const std::string& folder) { return std::string(TG_TEST_DATA_DIR) + "/" + folder; }

const nn::ViT& vit_of(const pretrained::Model& m) { return static_cast<const nn::ViT&>(*m.module); }

TEST(ViT, ConfigIsTransformers) {
  for (const char* folder : {"tiny_vit", "tiny_vit_cls"}) {
    const pretrained::Model m = pretrained::load(vit_dir(folder));
    const bool cls = std::string(folder) == "tiny_vit_cls";
    EXPECT_EQ(m.architecture, cls ? "ViTForImageClassification" : "ViTModel");
    const nn::ViTConfig& v = std::get<nn::ViTConfig>(m.config);
    EXPECT_EQ(v.image_size, 16);
    EXPECT_EQ(v.patch_size, 4);
    EXPECT_EQ(v.channels, 3);
    EXPECT_EQ(v.tokens(), 17);
    EXPECT_EQ(m.context, 17);
    EXPECT_EQ(v.d_model, 32);
    EXPECT_EQ(v.layers, 2);
    EXPECT_EQ(v.heads, 4);
    EXPECT_EQ(v.mlp_hidden, 48);
    EXPECT_EQ(v.gelu, cls ? GeluApprox::kErf : GeluApprox::kTanh);
    EXPECT_EQ(v.qkv_bias, cls);
    EXPECT_EQ(v.pooler, !cls);
    EXPECT_EQ(v.labels, cls ? 5 : 0);
    EXPECT_DOUBLE_EQ(v.ln_eps, 1e-12);
    const std::vector<std::string> names{"LABEL_0", "LABEL_1", "LABEL_2", "LABEL_3", "LABEL_4"};
    EXPECT_EQ(m.label_names, cls ? names : std::vector<std::string>());
    EXPECT_FALSE(v.distillation_token);
  }
  // DeiT's distilled classifier: [CLS], the distillation token, 16 patches.
  const pretrained::Model deit = pretrained::load(vit_dir("tiny_deit_distilled"));
  EXPECT_EQ(deit.architecture, "DeiTForImageClassificationWithTeacher");
  const nn::ViTConfig& d = std::get<nn::ViTConfig>(deit.config);
  EXPECT_TRUE(d.distillation_token && d.distillation_head);
  EXPECT_EQ(d.tokens(), 18);
  EXPECT_EQ(d.labels, 4);
  EXPECT_FALSE(d.pooler);
}

// Hidden states and the head's output (pooler or classifier) for the golden images.
TEST(ViT, OutputsEqualTransformersOnEveryBackend) {
  for (const char* folder : {"tiny_vit", "tiny_vit_cls", "tiny_deit_distilled"}) {
    const pretrained::Model m = pretrained::load(vit_dir(folder));
    const auto g = read_safetensors(vit_dir(folder) + "/logits.safetensors");
    const nn::ViT& vit = vit_of(m);
    const bool cls = vit.config.labels > 0;
    const char* head = cls ? "logits" : "pooled";
    const ForwardOptions base{.inputs = {{"pixels", g.at("pixels").shape(), DType::kF32}}};
    for (const Device& device : tg::testing::all_devices()) {
      ForwardOptions options = base;
      options.device = device;
      Program hidden = compile_forward(
          *m.module, [&](Tensor x) { return vit.hidden(x); }, options);
      Program out = compile_forward(
          *m.module, [&](Tensor x) { return cls ? m.logits(x) : vit.pooled(vit.hidden(x)); }, options);
      m.upload(hidden);
      const Feeds feeds{{"pixels", g.at("pixels").f32()}};
      const double dh = tg::testing::rel_diff(hidden.run(feeds).f32(), g.at("hidden").f32());
      const double dy = tg::testing::rel_diff(out.run(feeds).f32(), g.at(head).f32());
      EXPECT_LT(dh, 1e-4) << folder << " hidden on " << device.str();
      EXPECT_LT(dy, 1e-4) << folder << " " << head << " on " << device.str();
      std::printf("  %s on %s: relative difference to transformers: hidden %.2e, %s %.2e\n", folder,
                  device.str().c_str(), dh, head, dy);
    }
  }
}

// transformers 5 names a ViT's modules in memory otherwise than in its files (save_pretrained
// writes the files' names back): the golden gradients carry the in-memory names of a parameter.
std::string memory_name(const std::string& p) {
  if (p.starts_with("classifier")) return p;
  std::string n = "vit." + p;
  const std::string layer = "vit.encoder.layer.";
  if (!n.starts_with(layer)) return n;
  const size_t dot = n.find('.', layer.size());
  const std::string i = n.substr(layer.size(), dot - layer.size()), rest = n.substr(dot + 1);
  const std::pair<const char*, const char*> renames[] = {{"attention.attention.query.", "attention.q_proj."},
                                                         {"attention.attention.key.", "attention.k_proj."},
                                                         {"attention.attention.value.", "attention.v_proj."},
                                                         {"attention.output.dense.", "attention.o_proj."},
                                                         {"intermediate.dense.", "mlp.fc1."},
                                                         {"output.dense.", "mlp.fc2."}};
  for (const auto& [from, to] : renames)
    if (rest.starts_with(from)) return "vit.layers." + i + "." + to + rest.substr(std::string(from).size());
  return "vit.layers." + i + "." + rest;
}

TEST(ViT, GradientsEqualTransformers) {
  const pretrained::Model m = pretrained::load(vit_dir("tiny_vit_cls"));
  const auto g = read_safetensors(vit_dir("tiny_vit_cls") + "/logits.safetensors");
  const nn::ViT& vit = vit_of(m);
  for (const Device& device : tg::testing::all_devices()) {
    Program p = compile_train(
        *m.module,
        [&](Tensor x, Tensor labels) { return cross_entropy(vit.classify(vit.hidden(x)), labels); },
        {.inputs = {{"pixels", g.at("pixels").shape(), DType::kF32},
                    {"labels", g.at("labels").shape(), DType::kI32}},
         .optimizer = GradientsOnly{},
         .device = device});
    m.upload(p);
    Captures caps;
    const float loss =
        p.step({{"pixels", g.at("pixels").f32()}, {"labels", g.at("labels").i32()}}, {.captures = &caps});
    EXPECT_NEAR(loss, g.at("loss").f32()[0], 1e-5 * std::abs(g.at("loss").f32()[0])) << device.str();
    for (const std::string& name : p.param_names()) {
      const std::string file = memory_name(name);
      if (name.ends_with("key.bias")) {  // exactly zero: the softmax takes q·b away from each row
        for (float v : caps.at("grad/" + name).f32()) EXPECT_LT(std::abs(v), 1e-6f) << name;
        for (float v : g.at("grad/" + file).f32()) EXPECT_LT(std::abs(v), 1e-6f) << name;
        continue;
      }
      EXPECT_LT(tg::testing::rel_diff(caps.at("grad/" + name).f32(), g.at("grad/" + file).f32()), 1e-4)
          << device.str() << ": gradient of " << name;
    }
  }
}

// save() writes the file's names and config back: loading the saved folder gives the same
// configuration and weights. So does a model of the same configuration from from_config (its
// config.json written by the library).
TEST(ViT, SaveLoadsBack) {
  const fs::path out = fs::path(::testing::TempDir()) / "tg_vit_saved";
  for (const char* folder : {"tiny_vit", "tiny_vit_cls", "tiny_deit_distilled"}) {
    const pretrained::Model m = pretrained::load(vit_dir(folder));
    const nn::ViTConfig& v = std::get<nn::ViTConfig>(m.config);
    pretrained::save(m, m.weights, out.string());
    const pretrained::Model back = pretrained::load(out.string());
    EXPECT_EQ(back.architecture, m.architecture) << folder;
    EXPECT_TRUE(same_weights(back, m)) << folder;
    if (v.labels > 0) {  // ViTForImageClassification has no pooler to write
      const pretrained::Model fresh = pretrained::from_config(v);
      pretrained::save(fresh, m.weights, out.string());
      const pretrained::Model again = pretrained::load(out.string());
      EXPECT_EQ(again.architecture, m.architecture);
      EXPECT_TRUE(same_weights(again, m));
      const nn::ViTConfig& w = std::get<nn::ViTConfig>(again.config);
      EXPECT_EQ(w.labels, v.labels);
      EXPECT_EQ(w.distillation_head, v.distillation_head);
      EXPECT_EQ(w.gelu, v.gelu);
      EXPECT_EQ(w.qkv_bias, v.qkv_bias);
    } else {
      EXPECT_THROW(pretrained::from_config(nn::ViTConfig{.pooler = true, .labels = 3}), CheckpointError);
    }
  }
}

TEST(ViT, Errors) {
  const pretrained::Model m = pretrained::load(vit_dir("tiny_vit_cls"));
  const nn::ViT& vit = vit_of(m);
  // Images of another size or channel count.
  for (const Shape& bad : {Shape{2, 3, 32, 32}, Shape{2, 1, 16, 16}, Shape{3, 16, 16}})
    EXPECT_THROW(compile_forward(*m.module, [&](Tensor x) { return vit.hidden(x); },
                                 {.inputs = {{"pixels", bad, DType::kF32}}}),
                 ShapeError)
        << shape_str(bad);
  EXPECT_THROW(nn::ViT(nn::ViTConfig{.image_size = 30, .patch_size = 4}), ShapeError);
  // What the loader refuses, each naming the field.
  const fs::path dir = fs::path(::testing::TempDir()) / "tg_vit_bad";
  fs::create_directories(dir);
  fs::copy_file(vit_dir("tiny_vit_cls") + "/model.safetensors", dir / "model.safetensors",
                fs::copy_options::overwrite_existing);
  std::ifstream in(vit_dir("tiny_vit_cls") + "/config.json");
  const std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [from, to, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"attention_probs_dropout_prob\": 0.0", "\"attention_probs_dropout_prob\": 0.1",
            "attention_probs_dropout_prob"},
           {"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"relu\"", "hidden_act"},
           {"\"image_size\": 16", "\"image_size\": [16, 16]", "image_size"},
           {"\"patch_size\": 4", "\"patch_size\": 8", "position_embeddings"}}) {
    std::string c = config;
    ASSERT_NE(c.find(from), std::string::npos) << from;
    c.replace(c.find(from), from.size(), to);
    std::ofstream(dir / "config.json") << c;
    try {
      pretrained::load(dir.string());
      ADD_FAILURE() << "loaded with " << to;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

}  // namespace
