// T5 against transformers 5.17: tiny random folders it wrote with what it computed for two padded
// source texts and their targets (tests/nn/gen_hf_t5_golden.py, run on the GPU machine):
// tiny_t5 (the original T5: ReLU, the head tied to shared and the decoder's output scaled),
// tiny_flan_t5 (gated tanh GELU, an untied head) and tiny_t5_encoder (T5EncoderModel), on every
// backend: the encoder's states, the logits, the loss and every gradient, greedy decoding, the
// tokenizer's ids, a save that gives the same files back, and the clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
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

using tg_test::edited_copy;
using tg_test::file_bytes;
const auto t5_dir = tg_test::data_dir;
const nn::T5& t5_of(const pretrained::Model& m) { return static_cast<const nn::T5&>(*m.module); }

TEST(T5, ConfigIsTransformers) {
  const pretrained::Model t5 = pretrained::load(t5_dir("tiny_t5"));
  EXPECT_EQ(t5.architecture, "T5ForConditionalGeneration");
  const nn::T5Config& c = std::get<nn::T5Config>(t5.config);
  EXPECT_EQ(c.vocab, 305);
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.d_kv, 8);
  EXPECT_EQ(c.d_ff, 48);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.decoder_layers, 2);
  EXPECT_EQ(c.buckets, 8);
  EXPECT_EQ(c.max_distance, 20);
  EXPECT_FALSE(c.gated);
  EXPECT_EQ(c.act, nn::T5Activation::kRelu);
  EXPECT_TRUE(c.tied && c.scale_decoder_outputs && c.decoder);
  EXPECT_DOUBLE_EQ(c.dropout, 0.1);
  EXPECT_EQ(t5.eos_ids, std::vector<int32_t>{1});
  const pretrained::Model flan = pretrained::load(t5_dir("tiny_flan_t5"));
  const nn::T5Config& f = std::get<nn::T5Config>(flan.config);
  EXPECT_TRUE(f.gated && !f.tied && !f.scale_decoder_outputs);
  EXPECT_EQ(f.act, nn::T5Activation::kGeluTanh);
  const pretrained::Model enc = pretrained::load(t5_dir("tiny_t5_encoder"));
  EXPECT_EQ(enc.architecture, "T5EncoderModel");
  EXPECT_FALSE(std::get<nn::T5Config>(enc.config).decoder);
}

// The folder's tokenizer gives the ids transformers fed the model (before padding).
TEST(T5, TokenizerGivesTheGoldenIds) {
  const auto g = read_safetensors(t5_dir("tiny_t5") + "/logits.safetensors");
  const Tokenizer tok = Tokenizer::load(t5_dir("tiny_t5"));
  const std::vector<std::string> texts{"translate English to German: The house is wonderful.",
                                       "summarize: studies have shown that owning a dog is good for you"};
  const int64_t S = g.at("ids").shape()[1];
  for (size_t b = 0; b < texts.size(); ++b) {
    std::vector<int32_t> want;
    for (int64_t s = 0; s < S; ++s)
      if (g.at("mask").i32()[b * S + s] != 0) want.push_back(g.at("ids").i32()[b * S + s]);
    EXPECT_EQ(tok.encode(texts[b], /*add_special=*/true), want) << texts[b];
  }
}

Feeds feeds_of(const std::map<std::string, HostTensor>& g, bool decoder) {
  Feeds f{{"ids", g.at("ids").i32()}, {"mask", g.at("mask").i32()}};
  if (decoder) f.push_back({"decoder_ids", g.at("decoder_ids").i32()});
  return f;
}

std::vector<InputSpec> inputs_of(const std::map<std::string, HostTensor>& g, bool decoder) {
  std::vector<InputSpec> in{{"ids", g.at("ids").shape(), DType::kI32},
                            {"mask", g.at("mask").shape(), DType::kI32}};
  if (decoder) in.push_back({"decoder_ids", g.at("decoder_ids").shape(), DType::kI32});
  return in;
}

TEST(T5, OutputsEqualTransformersOnEveryBackend) {
  for (const char* folder : {"tiny_t5", "tiny_flan_t5", "tiny_t5_encoder"}) {
    const pretrained::Model m = pretrained::load(t5_dir(folder));
    const auto g = read_safetensors(t5_dir(folder) + "/logits.safetensors");
    const nn::T5& t5 = t5_of(m);
    const bool decoder = t5.config.decoder;
    for (const Device& device : tg::testing::all_devices()) {
      Program hidden =
          compile_forward(*m.module, [&](Tensor ids, Tensor mask) { return t5.encode(ids, mask); },
                          {.inputs = inputs_of(g, false), .device = device});
      m.upload(hidden);
      const double dh =
          tg::testing::rel_diff(hidden.run(feeds_of(g, false)).f32(), g.at("encoder_hidden").f32());
      EXPECT_LT(dh, 1e-5) << folder << " encoder on " << device.str();
      double dl = 0;
      if (decoder) {
        Program logits = compile_forward(*m.module,
                                         [&](Tensor ids, Tensor mask, Tensor dec) {
                                           return t5.logits(t5.decode(dec, t5.encode(ids, mask), mask));
                                         },
                                         {.inputs = inputs_of(g, true), .device = device});
        dl = tg::testing::rel_diff(logits.run(feeds_of(g, true)).f32(), g.at("logits").f32());
        EXPECT_LT(dl, 1e-5) << folder << " logits on " << device.str();
      }
      std::printf("  %s on %s: relative difference to transformers: encoder %.2e, logits %.2e\n", folder,
                  device.str().c_str(), dh, dl);
    }
  }
}

// The loss of teacher forcing and every gradient; transformers 5 keeps an untied model's
// encoder.embed_tokens and decoder.embed_tokens apart from shared (equal values), so shared's
// gradient here is the sum of theirs.
TEST(T5, GradientsEqualTransformers) {
  const pretrained::Model m = pretrained::load(t5_dir("tiny_flan_t5"));
  const auto g = read_safetensors(t5_dir("tiny_flan_t5") + "/logits.safetensors");
  const nn::T5& t5 = t5_of(m);
  // The decoder's input is the labels shifted right behind the start token.
  EXPECT_EQ(t5.shift_right(g.at("labels").i32(), 2),
            std::vector<int32_t>(g.at("decoder_ids").i32().begin(), g.at("decoder_ids").i32().end()));
  std::vector<InputSpec> inputs = inputs_of(g, true);
  inputs.push_back({"labels", g.at("labels").shape(), DType::kI32});
  Feeds feeds = feeds_of(g, true);
  feeds.push_back({"labels", g.at("labels").i32()});
  for (const Device& device : tg::testing::all_devices()) {
    Program p =
        compile_train(*m.module,
                      [&](Tensor ids, Tensor mask, Tensor dec, Tensor labels) {
                        return cross_entropy(t5.logits(t5.decode(dec, t5.encode(ids, mask), mask)), labels);
                      },
                      {.inputs = inputs, .optimizer = GradientsOnly{}, .device = device});
    m.upload(p);
    Captures caps;
    const float loss = p.step(feeds, {.captures = &caps});
    const float want = g.at("loss").f32()[0];
    EXPECT_NEAR(loss, want, 1e-5 * std::abs(want)) << device.str();
    for (const std::string& name : p.param_names()) {
      std::vector<float> expected(g.count("grad/" + name) ? g.at("grad/" + name).f32().size() : 0);
      if (name == "shared.weight") {
        const auto e = g.at("grad/encoder.embed_tokens.weight").f32(),
                   d = g.at("grad/decoder.embed_tokens.weight").f32();
        expected.resize(e.size());
        for (size_t i = 0; i < e.size(); ++i) expected[i] = e[i] + d[i];
      } else {
        const auto w = g.at("grad/" + name).f32();
        expected.assign(w.begin(), w.end());
      }
      EXPECT_LT(tg::testing::rel_diff(caps.at("grad/" + name).f32(), expected), 1e-4)
          << device.str() << ": gradient of " << name;
    }
  }
}

// The original T5 (tied head, dropout 0.1 in training programs) fine-tunes: teacher forcing on one
// batch with AdamW brings the loss well down, and an inference program of the trained weights
// (no dropout) agrees.
TEST(T5, TiedModelWithDropoutTrains) {
  const pretrained::Model m = pretrained::load(t5_dir("tiny_t5"));
  const auto g = read_safetensors(t5_dir("tiny_t5") + "/logits.safetensors");
  const nn::T5& t5 = t5_of(m);
  std::vector<InputSpec> inputs = inputs_of(g, true);
  inputs.push_back({"labels", g.at("labels").shape(), DType::kI32});
  Feeds feeds = feeds_of(g, true);
  feeds.push_back({"labels", g.at("labels").i32()});
  const auto loss_of = [&](Tensor ids, Tensor mask, Tensor dec, Tensor labels) {
    return cross_entropy(t5.logits(t5.decode(dec, t5.encode(ids, mask), mask)), labels);
  };
  Program train = compile_train(*m.module, loss_of, {.inputs = inputs, .optimizer = AdamW{.lr = 1e-2}});
  m.upload(train);
  const float first = train.step(feeds);
  EXPECT_NEAR(first, g.at("loss").f32()[0], 0.5f * g.at("loss").f32()[0]);  // dropout moves it a little
  float last = first;
  for (int i = 0; i < 40; ++i) last = train.step(feeds);
  EXPECT_LT(last, 0.3f * first) << "from " << first;
  Program eval = compile_forward(*m.module, loss_of, {.inputs = inputs});
  eval.upload_params(train.download_params());
  EXPECT_LT(eval.run(feeds).f32()[0], 0.5f * first);
}

// Greedy decoding as transformers' generate(max_new_tokens = min_new_tokens = 8): the encoder
// once, then a decoder program over 9 positions (the start token and 8 new ones; causal, so a
// position's logits do not see the ones after it), end-of-sequence held back until the 8th.
TEST(T5, GreedyDecodingEqualsTransformers) {
  for (const char* folder : {"tiny_t5", "tiny_flan_t5"}) {
    const pretrained::Model m = pretrained::load(t5_dir(folder));
    const auto g = read_safetensors(t5_dir(folder) + "/logits.safetensors");
    const nn::T5& t5 = t5_of(m);
    const int64_t B = 2, S = g.at("ids").shape()[1], T = g.at("generated").shape()[1], d = t5.config.d_model;
    for (const Device& device : tg::testing::all_devices()) {
      Program encode =
          compile_forward(*m.module, [&](Tensor ids, Tensor mask) { return t5.encode(ids, mask); },
                          {.inputs = inputs_of(g, false), .device = device});
      Program step = compile_forward(
          *m.module,
          [&](Tensor dec, Tensor hidden, Tensor mask) { return t5.logits(t5.decode(dec, hidden, mask)); },
          {.inputs = {{"dec", {B, T}, DType::kI32},
                      {"hidden", {B, S, d}, DType::kF32},
                      {"mask", {B, S}, DType::kI32}},
           .device = device});
      m.upload(encode);
      const HostTensor hidden = encode.run(feeds_of(g, false));
      std::vector<int32_t> dec(static_cast<size_t>(B * T), t5.config.pad_id);
      for (int64_t b = 0; b < B; ++b) dec[static_cast<size_t>(b * T)] = t5.config.start_id;
      const int64_t V = t5.config.vocab;
      for (int64_t t = 0; t + 1 < T; ++t) {
        const HostTensor logits =
            step.run({{"dec", dec}, {"hidden", hidden.f32()}, {"mask", g.at("mask").i32()}});
        for (int64_t b = 0; b < B; ++b) {
          const std::span<const float> row = logits.f32().subspan(static_cast<size_t>((b * T + t) * V), V);
          int32_t best = -1;
          for (int32_t v = 0; v < V; ++v)
            if (v != t5.config.eos_id && (best < 0 || row[v] > row[best])) best = v;
          dec[static_cast<size_t>(b * T + t + 1)] = best;
        }
      }
      EXPECT_EQ(dec, std::vector<int32_t>(g.at("generated").i32().begin(), g.at("generated").i32().end()))
          << folder << " on " << device.str();
    }
  }
}

// The cached step (one token per call: its keys and values cached, the position bias of each
// query over the cache, the encoder's states and padding mask remembered) gives the full
// decoder's logits at every position, a cache longer than the text included.
TEST(T5, CachedStepEqualsTheFullDecoder) {
  for (const char* folder : {"tiny_t5", "tiny_flan_t5"}) {
    const pretrained::Model m = pretrained::load(t5_dir(folder));
    const auto g = read_safetensors(t5_dir(folder) + "/logits.safetensors");
    const nn::T5& t5 = t5_of(m);
    const int64_t B = 2, S = g.at("ids").shape()[1], T = g.at("decoder_ids").shape()[1], V = t5.config.vocab;
    for (const Device& device : tg::testing::all_devices()) {
      Program enc = compile_forward(
          *m.module, [&](Tensor ids, Tensor mask) { return t5.remember(t5.encode(ids, mask), mask); },
          {.inputs = inputs_of(g, false), .device = device});
      Program step = compile_forward(
          *m.module, [&](Tensor ids, Tensor pos) { return t5.logits_cached(ids, pos, T + 5, S); },
          {.inputs = {{"ids", {B, 1}, DType::kI32}, {"pos", {B}, DType::kI32}}, .device = device});
      m.upload(enc);
      enc.run(feeds_of(g, false));
      // Row 1 runs a step behind row 0 (each sequence at its own position; a row at its last or
      // first position writes the same keys again), so one call reads two different positions.
      double worst = 0;
      for (int64_t call = 0; call <= T; ++call) {
        const int64_t at[2] = {std::min(call, T - 1), std::max<int64_t>(call - 1, 0)};
        const std::vector<int32_t> ids{g.at("decoder_ids").i32()[at[0]],
                                       g.at("decoder_ids").i32()[T + at[1]]};
        const std::vector<int32_t> pos{static_cast<int32_t>(at[0]), static_cast<int32_t>(at[1])};
        const HostTensor got = step.run({{"ids", ids}, {"pos", pos}});
        for (int64_t b = 0; b < B; ++b) {
          const auto want = g.at("logits").f32().subspan(static_cast<size_t>((b * T + at[b]) * V), V);
          worst =
              std::max(worst, tg::testing::rel_diff(got.f32().subspan(static_cast<size_t>(b * V), V), want));
        }
      }
      // Three tokens in one call (a prefill) from position 0.
      Program prefill = compile_forward(
          *m.module, [&](Tensor ids, Tensor pos) { return t5.logits_cached(ids, pos, T + 5, S); },
          {.inputs = {{"ids", {B, 3}, DType::kI32}, {"pos", {B}, DType::kI32}}, .device = device});
      std::vector<int32_t> three;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < 3; ++t) three.push_back(g.at("decoder_ids").i32()[b * T + t]);
      const HostTensor got = prefill.run({{"ids", three}, {"pos", std::vector<int32_t>{0, 0}}});
      for (int64_t b = 0; b < B; ++b)
        worst = std::max(worst, tg::testing::rel_diff(
                                    got.f32().subspan(static_cast<size_t>(b * 3 * V), 3 * V),
                                    g.at("logits").f32().subspan(static_cast<size_t>(b * T * V), 3 * V)));
      EXPECT_LT(worst, 1e-5) << folder << " on " << device.str();
    }
  }
}

// T5Generator gives the same tokens (transformers' greedy choice never fell on end-of-sequence
// in these 8 steps, so its min_new_tokens changed nothing) and samples reproducibly.
TEST(T5, GeneratorEqualsTransformers) {
  const pretrained::Model m = pretrained::load(t5_dir("tiny_flan_t5"));
  const auto g = read_safetensors(t5_dir("tiny_flan_t5") + "/logits.safetensors");
  const int64_t S = g.at("ids").shape()[1], T = g.at("generated").shape()[1];
  std::vector<std::vector<int32_t>> sources(2);
  for (size_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < S; ++s)
      if (g.at("mask").i32()[b * S + s] != 0) sources[b].push_back(g.at("ids").i32()[b * S + s]);
  for (const Device& device : tg::testing::all_devices()) {
    T5Generator gen(static_cast<nn::T5&>(*m.module),
                    {.batch = 2, .source_len = S + 3, .max_new_tokens = 12, .device = device});
    m.upload(gen.encoder());
    const auto out = gen.generate(sources, {.max_new_tokens = T - 1});
    for (size_t b = 0; b < 2; ++b) {
      const auto want = g.at("generated").i32().subspan(b * T + 1, T - 1);
      EXPECT_EQ(out[b], std::vector<int32_t>(want.begin(), want.end())) << device.str() << " row " << b;
    }
    // Stopping: each row ends before its first 300 (199 84 300 …; 199 96 168 84 300 …).
    const auto stopped = gen.generate(sources, {.max_new_tokens = T - 1, .stop_tokens = {300}});
    EXPECT_EQ(stopped[0], (std::vector<int32_t>{199, 84})) << device.str();
    EXPECT_EQ(stopped[1], (std::vector<int32_t>{199, 96, 168, 84})) << device.str();
    // Sampling flattened by a high temperature: reproducible by seed, and not the greedy tokens.
    GenerateOptions sampled{.max_new_tokens = 8, .temperature = 20.0f, .seed = 7};
    const auto a = gen.generate(sources, sampled);
    EXPECT_EQ(a, gen.generate(sources, sampled)) << device.str();
    EXPECT_NE(a, out) << device.str();
    sampled.seed = 8;
    EXPECT_NE(a, gen.generate(sources, sampled)) << device.str();
    EXPECT_THROW(gen.generate({sources[0]}), InputError);
    EXPECT_THROW(gen.generate(sources, {.repetition_penalty = 1.2f}), InputError);
  }
}

TEST(T5, SaveWritesTheSameFiles) {
  const fs::path out = fs::path(::testing::TempDir()) / "tg_t5_saved";
  for (const char* folder : {"tiny_t5", "tiny_flan_t5", "tiny_t5_encoder"}) {
    const pretrained::Model m = pretrained::load(t5_dir(folder));
    pretrained::save(m, m.weights, out.string());
    EXPECT_EQ(file_bytes(out / "model.safetensors"),
              file_bytes(fs::path(t5_dir(folder)) / "model.safetensors"))
        << folder << ": the file save_pretrained wrote, byte for byte";
    const pretrained::Model fresh = pretrained::from_config(std::get<nn::T5Config>(m.config));
    EXPECT_EQ(fresh.architecture, m.architecture);
    pretrained::save(fresh, m.weights, out.string());
    const pretrained::Model again = pretrained::load(out.string());
    const nn::T5Config& a = std::get<nn::T5Config>(again.config);
    const nn::T5Config& c = std::get<nn::T5Config>(m.config);
    EXPECT_TRUE(a.gated == c.gated && a.act == c.act && a.tied == c.tied && a.decoder == c.decoder) << folder;
    EXPECT_EQ(a.buckets, c.buckets);
    EXPECT_EQ(again.weights.size(), m.weights.size());
  }
}

TEST(T5, Errors) {
  const pretrained::Model m = pretrained::load(t5_dir("tiny_t5"));
  const nn::T5& t5 = t5_of(m);
  for (const auto& call :
       {std::function<void()>([&] { m.logits(Tensor()); }), std::function<void()>([&] { m.step(); })}) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("T5"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(compile_forward(*m.module, [&](Tensor ids) { return t5.encode(ids); },
                               {.inputs = {{"ids", {2, 5}, DType::kF32}}}),
               ShapeError);
  EXPECT_THROW(compile_forward(*m.module, [&](Tensor ids, Tensor mask) { return t5.encode(ids, mask); },
                               {.inputs = {{"ids", {2, 5}, DType::kI32}, {"mask", {2, 4}, DType::kI32}}}),
               ShapeError);
  EXPECT_THROW(compile_forward(*m.module, [&](Tensor dec, Tensor h) { return t5.decode(dec, h); },
                               {.inputs = {{"dec", {2, 5}, DType::kI32}, {"h", {3, 4, 32}, DType::kF32}}}),
               ShapeError);
  const pretrained::Model enc = pretrained::load(t5_dir("tiny_t5_encoder"));
  EXPECT_THROW(t5_of(enc).logits(Tensor()), Error);
  for (const auto& [folder, from, to, says] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {"tiny_t5", "\"dense_act_fn\": \"relu\"", "\"dense_act_fn\": \"tanh\"", "activation \"tanh\""},
           {"tiny_t5", "\"relative_attention_max_distance\": 20", "\"relative_attention_max_distance\": 4",
            "relative_attention_max_distance 4"},
           {"tiny_t5", "\"is_decoder\": false", "\"is_decoder\": true", "is_decoder"},
           {"tiny_t5", "\"d_kv\": 8", "\"d_kv\": 16", "SelfAttention.q.weight"},
           {"tiny_flan_t5", "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true",
            "lm_head.weight"}}) {
    try {
      pretrained::load(edited_copy(folder, "tg_t5_bad", from, to).string());
      ADD_FAILURE() << "loaded with " << to;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

}  // namespace
