// CLIP against transformers 5.17: a tiny random CLIPModel it wrote with what it computed for two
// padded captions and two 16 × 16 images (tests/nn/gen_hf_clip_golden.py, run on the GPU
// machine), and the one-tower classes with the same weights: every output on every backend, the
// contrastive loss and every parameter's gradient, the tokenizer's ids, old configs' pooling,
// a save and load that gives the same weights back, and the clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
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

using tg_test::data_dir;
using tg_test::edited_copy;
using tg_test::file_bytes;
using tg_test::same_weights;
const auto clip_dir = data_dir;
const nn::Clip& clip_of(const pretrained::Model& m) { return static_cast<const nn::Clip&>(*m.module); }

// x / ‖x‖ along the last axis (transformers' text_embeds and image_embeds).
Tensor unit(const Tensor& x) { return nn::l2_normalize(x); }

TEST(Clip, ConfigIsTransformers) {
  const pretrained::Model m = pretrained::load(clip_dir("tiny_clip"));
  EXPECT_EQ(m.architecture, "CLIPModel");
  const nn::ClipConfig& c = std::get<nn::ClipConfig>(m.config);
  EXPECT_TRUE(c.has_text && c.has_vision && c.projections);
  EXPECT_EQ(c.projection_dim, 24);
  EXPECT_NEAR(c.logit_scale_init, 2.6592, 1e-12);
  EXPECT_EQ(c.text.vocab, 749);
  EXPECT_EQ(c.text.positions, 24);
  EXPECT_EQ(c.text.eos_id, 748);
  EXPECT_EQ(c.text.encoder.d_model, 32);
  EXPECT_EQ(c.text.encoder.mlp_hidden, 48);
  EXPECT_EQ(c.vision.encoder.d_model, 40);
  EXPECT_EQ(c.vision.encoder.mlp_hidden, 56);
  EXPECT_EQ(c.vision.encoder.heads, 4);
  EXPECT_EQ(c.vision.encoder.act, nn::ClipActivation::kQuickGelu);
  EXPECT_EQ(c.vision.tokens(), 17);
  EXPECT_EQ(m.context, 24);
  EXPECT_EQ(m.eos_ids, std::vector<int32_t>{748});
  const pretrained::Model text = pretrained::load(clip_dir("tiny_clip_text"));
  const nn::ClipConfig& t = std::get<nn::ClipConfig>(text.config);
  EXPECT_TRUE(t.has_text && !t.has_vision && t.projections);
  const pretrained::Model vision = pretrained::load(clip_dir("tiny_clip_vision"));
  const nn::ClipConfig& v = std::get<nn::ClipConfig>(vision.config);
  EXPECT_TRUE(!v.has_text && v.has_vision && v.projections);
  EXPECT_EQ(vision.context, 17);
}

// The folder's tokenizer gives the ids transformers fed the model (before padding).
TEST(Clip, TokenizerGivesTheGoldenIds) {
  const auto g = read_safetensors(clip_dir("tiny_clip") + "/logits.safetensors");
  const Tokenizer tok = Tokenizer::load(clip_dir("tiny_clip"));
  const std::vector<std::string> texts{"a photo of a cat", "two dogs playing in the snow"};
  const int64_t T = g.at("ids").shape()[1];
  for (size_t b = 0; b < texts.size(); ++b) {
    std::vector<int32_t> want;
    for (int64_t t = 0; t < T; ++t)
      if (g.at("mask").i32()[b * T + t] != 0) want.push_back(g.at("ids").i32()[b * T + t]);
    EXPECT_EQ(tok.encode(texts[b], /*add_special=*/true), want) << texts[b];
  }
}

struct Output {
  const char* golden;
  std::function<Tensor(const nn::Clip&, Tensor ids, Tensor mask, Tensor pixels)> fn;
};

TEST(Clip, OutputsEqualTransformersOnEveryBackend) {
  const pretrained::Model m = pretrained::load(clip_dir("tiny_clip"));
  const auto g = read_safetensors(clip_dir("tiny_clip") + "/logits.safetensors");
  const nn::Clip& clip = clip_of(m);
  const std::vector<Output> outputs{
      {"text_hidden",
       [](const nn::Clip& c, Tensor ids, Tensor mask, Tensor) { return c.text_hidden(ids, mask); }},
      {"text_features",
       [](const nn::Clip& c, Tensor ids, Tensor mask, Tensor) { return c.text_features(ids, mask); }},
      {"text_embeds",
       [](const nn::Clip& c, Tensor ids, Tensor mask, Tensor) { return unit(c.text_features(ids, mask)); }},
      {"vision_hidden", [](const nn::Clip& c, Tensor, Tensor, Tensor px) { return c.vision_hidden(px); }},
      {"image_features", [](const nn::Clip& c, Tensor, Tensor, Tensor px) { return c.image_features(px); }},
      {"image_embeds",
       [](const nn::Clip& c, Tensor, Tensor, Tensor px) { return unit(c.image_features(px)); }},
      {"logits_per_image", [](const nn::Clip& c, Tensor ids, Tensor mask, Tensor px) {
         return c.logits_per_image(c.image_features(px), c.text_features(ids, mask));
       }}};
  const Feeds feeds{
      {"ids", g.at("ids").i32()}, {"mask", g.at("mask").i32()}, {"pixels", g.at("pixels").f32()}};
  for (const Device& device : tg::testing::all_devices()) {
    for (const Output& o : outputs) {
      Program p = compile_forward(
          *m.module, [&](Tensor ids, Tensor mask, Tensor px) { return o.fn(clip, ids, mask, px); },
          {.inputs = {{"ids", g.at("ids").shape(), DType::kI32},
                      {"mask", g.at("mask").shape(), DType::kI32},
                      {"pixels", g.at("pixels").shape(), DType::kF32}},
           .device = device});
      m.upload(p);
      const double d = tg::testing::rel_diff(p.run(feeds).f32(), g.at(o.golden).f32());
      EXPECT_LT(d, 1e-5) << o.golden << " on " << device.str();
      std::printf("  %s on %s: relative difference to transformers %.2e\n", o.golden, device.str().c_str(),
                  d);
    }
  }
}

// The README's zero-shot example on the tiny CLIP: captions padded by encode_batch with the
// end-of-text id, an image through the folder's processor; the probabilities transformers gives
// (tests/nn/clip_zero_shot_reference.py prints them to three places).
TEST(Clip, ZeroShotAsTheReadmeShows) {
  if (!image_files_supported()) GTEST_SKIP() << "this build of tensorgrad has no stb_image to read photo.png";
  const pretrained::Model m = pretrained::load(clip_dir("tiny_clip"));
  const auto& clip = static_cast<const nn::Clip&>(*m.module);
  const Tokenizer tok = Tokenizer::load(clip_dir("tiny_clip"));
  const EncodedBatch text = tok.encode_batch({"a photo of a cat.", "a photo of a dog.", "a photo of a car."},
                                             {.pad_id = tok.eos_id()});
  const std::vector<Image> images{read_image(clip_dir("image/photo.png"))};
  const HostTensor pixels = ImageProcessor::load(clip_dir("tiny_clip"))(images);
  const Shape captions{text.rows, text.length};
  Program p = compile_forward(
      *m.module,
      [&](Tensor x, Tensor ids, Tensor mask) {
        return softmax(clip.logits_per_image(clip.image_features(x), clip.text_features(ids, mask)), -1);
      },
      {.inputs = {{"pixels", pixels.shape(), DType::kF32},
                  {"ids", captions, DType::kI32},
                  {"mask", captions, DType::kI32}}});
  m.upload(p);
  const HostTensor probs = p.run({{"pixels", pixels.f32()}, {"ids", text.ids}, {"mask", text.mask}});
  ASSERT_EQ(probs.shape(), (Shape{1, 3}));
  const float want[] = {0.379f, 0.307f, 0.314f};  // cat, dog, car
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(probs.f32()[i], want[i], 6e-4) << i;
}

// CLIPTextModelWithProjection and CLIPVisionModelWithProjection hold the same towers.
TEST(Clip, OneTowerClassesEqualTransformers) {
  const pretrained::Model text = pretrained::load(clip_dir("tiny_clip_text"));
  const auto gt = read_safetensors(clip_dir("tiny_clip_text") + "/logits.safetensors");
  Program pt = compile_forward(
      *text.module, [&](Tensor ids, Tensor mask) { return clip_of(text).text_features(ids, mask); },
      {.inputs = {{"ids", gt.at("ids").shape(), DType::kI32}, {"mask", gt.at("mask").shape(), DType::kI32}}});
  text.upload(pt);
  EXPECT_LT(tg::testing::rel_diff(pt.run({{"ids", gt.at("ids").i32()}, {"mask", gt.at("mask").i32()}}).f32(),
                                  gt.at("text_features").f32()),
            1e-5);
  const pretrained::Model vision = pretrained::load(clip_dir("tiny_clip_vision"));
  const auto gv = read_safetensors(clip_dir("tiny_clip_vision") + "/logits.safetensors");
  Program pv = compile_forward(*vision.module, [&](Tensor px) { return clip_of(vision).image_features(px); },
                               {.inputs = {{"pixels", gv.at("pixels").shape(), DType::kF32}}});
  vision.upload(pv);
  EXPECT_LT(
      tg::testing::rel_diff(pv.run({{"pixels", gv.at("pixels").f32()}}).f32(), gv.at("image_features").f32()),
      1e-4);
  EXPECT_THROW(clip_of(text).image_features(Tensor()), Error);
  EXPECT_THROW(text.logits(Tensor()), Error);
}

TEST(Clip, ContrastiveGradientsEqualTransformers) {
  const pretrained::Model m = pretrained::load(clip_dir("tiny_clip"));
  const auto g = read_safetensors(clip_dir("tiny_clip") + "/logits.safetensors");
  const nn::Clip& clip = clip_of(m);
  for (const Device& device : tg::testing::all_devices()) {
    Program p = compile_train(*m.module,
                              [&](Tensor ids, Tensor mask, Tensor px) {
                                return nn::Clip::contrastive_loss(clip.logits_per_image(
                                    clip.image_features(px), clip.text_features(ids, mask)));
                              },
                              {.inputs = {{"ids", g.at("ids").shape(), DType::kI32},
                                          {"mask", g.at("mask").shape(), DType::kI32},
                                          {"pixels", g.at("pixels").shape(), DType::kF32}},
                               .optimizer = GradientsOnly{},
                               .device = device});
    m.upload(p);
    Captures caps;
    const float loss =
        p.step({{"ids", g.at("ids").i32()}, {"mask", g.at("mask").i32()}, {"pixels", g.at("pixels").f32()}},
               {.captures = &caps});
    const float want = g.at("loss").f32()[0];
    EXPECT_NEAR(loss, want, 1e-5 * std::abs(want)) << device.str();
    for (const std::string& name : p.param_names()) {
      if (name.ends_with("k_proj.bias")) {  // exactly zero: the softmax takes q·b away from each row
        for (float v : caps.at("grad/" + name).f32()) EXPECT_LT(std::abs(v), 1e-6f) << name;
        continue;
      }
      EXPECT_LT(tg::testing::rel_diff(caps.at("grad/" + name).f32(), g.at("grad/" + name).f32()), 1e-4)
          << device.str() << ": gradient of " << name;
    }
  }
}

// Configs written before transformers fixed eos_token_id say 2: the pooled token is then the one
// of the largest id (the end-of-text token in CLIP's vocabulary, here too: the golden rows agree
// with transformers'; a row without one shows which rule pooled).
TEST(Clip, OldConfigsPoolTheLargestId) {
  const pretrained::Model m = pretrained::load(
      edited_copy("tiny_clip", "tg_clip_legacy", "\"eos_token_id\": 748", "\"eos_token_id\": 2").string());
  EXPECT_EQ(std::get<nn::ClipConfig>(m.config).text.eos_id, 2);
  const auto g = read_safetensors(clip_dir("tiny_clip") + "/logits.safetensors");
  Program p = compile_forward(
      *m.module, [&](Tensor ids, Tensor mask) { return clip_of(m).text_features(ids, mask); },
      {.inputs = {{"ids", g.at("ids").shape(), DType::kI32}, {"mask", g.at("mask").shape(), DType::kI32}}});
  m.upload(p);
  EXPECT_LT(tg::testing::rel_diff(p.run({{"ids", g.at("ids").i32()}, {"mask", g.at("mask").i32()}}).f32(),
                                  g.at("legacy_text_features").f32()),
            1e-5);
  // A row without the end-of-text token, whose largest id (600) is at position 1: the old rule
  // pools there, the current one at position 0 (no token is end-of-text: the first position).
  const pretrained::Model current = pretrained::load(clip_dir("tiny_clip"));
  const std::vector<int32_t> row{5, 600, 3, 9, 7};
  for (const auto& [model, at] : {std::pair{&m, 1}, std::pair{&current, 0}}) {
    const nn::Clip& clip = clip_of(*model);
    Program hidden = compile_forward(*model->module, [&](Tensor ids) { return clip.text_hidden(ids); },
                                     {.inputs = {{"ids", {1, 5}, DType::kI32}}});
    Program pooled = compile_forward(*model->module,
                                     [&](Tensor ids) { return clip.text_pooled(clip.text_hidden(ids), ids); },
                                     {.inputs = {{"ids", {1, 5}, DType::kI32}}});
    model->upload(hidden);
    const HostTensor h = hidden.run({{"ids", row}});
    const int64_t d = clip.config.text.encoder.d_model;
    EXPECT_EQ(tg::testing::rel_diff(pooled.run({{"ids", row}}).f32(), h.f32().subspan(at * d, d)), 0.0) << at;
  }
}

TEST(Clip, SaveLoadsBack) {
  const fs::path out = fs::path(::testing::TempDir()) / "tg_clip_saved";
  for (const char* folder : {"tiny_clip", "tiny_clip_text", "tiny_clip_vision"}) {
    const pretrained::Model m = pretrained::load(clip_dir(folder));
    pretrained::save(m, m.weights, out.string());
    const pretrained::Model back = pretrained::load(out.string());
    EXPECT_EQ(back.architecture, m.architecture) << folder;
    EXPECT_TRUE(same_weights(back, m)) << folder;
    EXPECT_EQ(file_bytes(out / "model.safetensors"),
              file_bytes(fs::path(clip_dir(folder)) / "model.safetensors"))
        << folder << ": the file save_pretrained wrote, byte for byte";
    // A configuration of the library's own: config.json written by from_config.
    const pretrained::Model fresh = pretrained::from_config(std::get<nn::ClipConfig>(m.config));
    EXPECT_EQ(fresh.architecture, m.architecture);
    pretrained::save(fresh, m.weights, out.string());
    const pretrained::Model again = pretrained::load(out.string());
    EXPECT_TRUE(same_weights(again, m)) << folder;
    const nn::ClipConfig& a = std::get<nn::ClipConfig>(again.config);
    const nn::ClipConfig& c = std::get<nn::ClipConfig>(m.config);
    EXPECT_EQ(a.text.eos_id, c.text.eos_id);
    EXPECT_EQ(a.vision.encoder.act, c.vision.encoder.act);
    EXPECT_EQ(a.projection_dim, c.projection_dim);
  }
  EXPECT_THROW(pretrained::from_config(nn::ClipConfig{.projections = false}), CheckpointError);
}

TEST(Clip, Errors) {
  const pretrained::Model m = pretrained::load(clip_dir("tiny_clip"));
  const nn::Clip& clip = clip_of(m);
  for (const Shape& bad : {Shape{2, 3, 32, 32}, Shape{2, 1, 16, 16}, Shape{3, 16, 16}})
    EXPECT_THROW(compile_forward(*m.module, [&](Tensor x) { return clip.vision_hidden(x); },
                                 {.inputs = {{"pixels", bad, DType::kF32}}}),
                 ShapeError)
        << shape_str(bad);
  // A text longer than the 24 positions, ids of another type, a mask of another shape.
  EXPECT_THROW(compile_forward(*m.module, [&](Tensor ids) { return clip.text_hidden(ids); },
                               {.inputs = {{"ids", {1, 25}, DType::kI32}}}),
               ShapeError);
  EXPECT_THROW(compile_forward(*m.module, [&](Tensor ids) { return clip.text_hidden(ids); },
                               {.inputs = {{"ids", {1, 5}, DType::kF32}}}),
               ShapeError);
  EXPECT_THROW(
      compile_forward(*m.module, [&](Tensor ids, Tensor mask) { return clip.text_hidden(ids, mask); },
                      {.inputs = {{"ids", {2, 5}, DType::kI32}, {"mask", {2, 4}, DType::kI32}}}),
      ShapeError);
  EXPECT_THROW(compile_forward(*m.module, [&](Tensor x) { return nn::Clip::contrastive_loss(x); },
                               {.inputs = {{"logits", {2, 3}, DType::kF32}}}),
               ShapeError);
  EXPECT_THROW(m.step(), Error);
  for (const auto& [from, to, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"attention_dropout\": 0.0", "\"attention_dropout\": 0.1", "attention_dropout"},
           {"\"hidden_act\": \"quick_gelu\"", "\"hidden_act\": \"relu\"", "hidden_act"},
           {"\"image_size\": 16", "\"image_size\": [16, 16]", "image_size"},
           {"\"patch_size\": 4", "\"patch_size\": 8", "patch_embedding"},
           {"\"projection_dim\": 24,\n  \"text_config\"", "\"projection_dim\": 20,\n  \"text_config\"",
            "projection"}}) {
    try {
      pretrained::load(edited_copy("tiny_clip", "tg_clip_bad", from, to).string());
      ADD_FAILURE() << "loaded with " << to;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

}  // namespace
