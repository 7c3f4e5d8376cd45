// Whisper against transformers 5.17: a tiny random WhisperForConditionalGeneration folder it wrote
// with what it computed for two short recordings (tests/nn/gen_hf_whisper_golden.py, run on the GPU
// machine), on every backend: the encoder's states, the logits, the loss and every gradient, the
// KV-cached step, language detection and greedy transcription, a save that gives the same file
// back, and the clear errors.
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
const auto whisper_dir = tg_test::data_dir;
nn::Whisper& whisper_of(const pretrained::Model& m) { return static_cast<nn::Whisper&>(*m.module); }
std::map<std::string, HostTensor> golden() {
  return read_safetensors(whisper_dir("tiny_whisper") + "/logits.safetensors");
}

// transformers' generated ids of one row, up to its first <|endoftext|>.
std::vector<int32_t> row_until_eos(const HostTensor& t, int64_t row, int32_t eos) {
  const int64_t T = t.shape()[1];
  std::vector<int32_t> out;
  for (int64_t i = 0; i < T && t.i32()[static_cast<size_t>(row * T + i)] != eos; ++i)
    out.push_back(t.i32()[static_cast<size_t>(row * T + i)]);
  return out;
}

TEST(Whisper, ConfigAndTokensAreTransformers) {
  const pretrained::Model m = pretrained::load(whisper_dir("tiny_whisper"));
  EXPECT_EQ(m.architecture, "WhisperForConditionalGeneration");
  const nn::WhisperConfig& c = std::get<nn::WhisperConfig>(m.config);
  EXPECT_EQ(c.vocab, 411);
  EXPECT_EQ(c.mels, 80);
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.encoder_layers, 2);
  EXPECT_EQ(c.decoder_heads, 4);
  EXPECT_EQ(c.decoder_ffn, 64);
  EXPECT_EQ(c.source_positions, 100);
  EXPECT_EQ(c.target_positions, 32);
  EXPECT_EQ(c.start_id, 401);
  EXPECT_EQ(m.context, 32);
  const WhisperTokens t = WhisperTokens::load(whisper_dir("tiny_whisper"));
  EXPECT_EQ(t.start, 401);
  EXPECT_EQ(t.eos, 400);
  EXPECT_EQ(t.no_timestamps, 410);
  EXPECT_EQ(t.transcribe, 406);
  EXPECT_EQ(t.translate, 405);
  EXPECT_EQ(t.languages, (std::map<std::string, int32_t>{{"de", 403}, {"en", 402}, {"fr", 404}}));
  EXPECT_EQ(t.suppress, (std::vector<int32_t>{407, 408, 409, 0, 30}));
  EXPECT_EQ(t.begin_suppress, (std::vector<int32_t>{220, 400}));
  const LogMelFeatures f = LogMelFeatures::load(whisper_dir("tiny_whisper"));
  EXPECT_EQ(f.chunk_length, 2);
  EXPECT_EQ(f.frames(), 200);
}

TEST(Whisper, OutputsEqualTransformersOnEveryBackend) {
  const pretrained::Model m = pretrained::load(whisper_dir("tiny_whisper"));
  const auto g = golden();
  const nn::Whisper& w = whisper_of(m);
  const Shape fs = g.at("features").shape(), ds = g.at("decoder_ids").shape();
  for (const Device& device : tg::testing::all_devices()) {
    Program enc = compile_forward(*m.module, [&](Tensor f) { return w.encode(f); },
                                  {.inputs = {{"features", fs}}, .device = device});
    m.upload(enc);
    const double dh = tg::testing::rel_diff(enc.run({{"features", g.at("features").f32()}}).f32(),
                                            g.at("encoder_hidden").f32());
    EXPECT_LT(dh, 1e-5) << "encoder on " << device.str();
    Program logits =
        compile_forward(*m.module, [&](Tensor f, Tensor ids) { return w.logits(w.decode(ids, w.encode(f))); },
                        {.inputs = {{"features", fs}, {"ids", ds, DType::kI32}}, .device = device});
    const double dl = tg::testing::rel_diff(
        logits.run({{"features", g.at("features").f32()}, {"ids", g.at("decoder_ids").i32()}}).f32(),
        g.at("logits").f32());
    EXPECT_LT(dl, 1e-5) << "logits on " << device.str();
    std::printf("  on %s: relative difference to transformers: encoder %.2e, logits %.2e\n",
                device.str().c_str(), dh, dl);
  }
}

// Teacher forcing: the labels shifted right behind <|startoftranscript|>; the loss and the gradient
// of every trained parameter (the encoder's sinusoidal positions are frozen, as in transformers).
TEST(Whisper, GradientsEqualTransformers) {
  const pretrained::Model m = pretrained::load(whisper_dir("tiny_whisper"));
  const auto g = golden();
  const nn::Whisper& w = whisper_of(m);
  const Shape ls = g.at("labels").shape();
  const std::vector<int32_t> dec = w.shift_right(g.at("labels").i32(), ls[0]);
  EXPECT_EQ(dec[0], 401);
  EXPECT_EQ(dec[1], g.at("labels").i32()[0]);
  EXPECT_EQ(dec[ls[1] * 2 - 1], 400) << "-100 read as the pad id";
  for (const Device& device : tg::testing::all_devices()) {
    Program p = compile_train(*m.module,
                              [&](Tensor f, Tensor ids, Tensor labels) {
                                return cross_entropy(w.logits(w.decode(ids, w.encode(f))), labels);
                              },
                              {.inputs = {{"features", g.at("features").shape()},
                                          {"ids", ls, DType::kI32},
                                          {"labels", ls, DType::kI32}},
                               .optimizer = GradientsOnly{},
                               .device = device,
                               .frozen = {"model.encoder.embed_positions"}});
    m.upload(p);
    Captures caps;
    const float loss =
        p.step({{"features", g.at("features").f32()}, {"ids", dec}, {"labels", g.at("labels").i32()}},
               {.captures = &caps});
    const float want = g.at("loss").f32()[0];
    EXPECT_NEAR(loss, want, 1e-5 * std::abs(want)) << device.str();
    int compared = 0;
    for (const std::string& name : p.param_names()) {
      if (name == "model.encoder.embed_positions.weight") continue;
      EXPECT_LT(tg::testing::rel_diff(caps.at("grad/" + name).f32(), g.at("grad/" + name).f32()), 1e-4)
          << device.str() << ": gradient of " << name;
      ++compared;
    }
    EXPECT_EQ(compared, 88) << "every gradient transformers computed";
  }
}

// The cached step (one token per call, its keys and values cached, the encoder's remembered)
// gives the full decoder's logits at every position.
TEST(Whisper, CachedStepEqualsTheFullDecoder) {
  const pretrained::Model m = pretrained::load(whisper_dir("tiny_whisper"));
  const auto g = golden();
  const nn::Whisper& w = whisper_of(m);
  const int64_t B = 2, T = g.at("decoder_ids").shape()[1], V = w.config.vocab;
  for (const Device& device : tg::testing::all_devices()) {
    Program enc = compile_forward(*m.module, [&](Tensor f) { return w.remember(w.encode(f)); },
                                  {.inputs = {{"features", g.at("features").shape()}}, .device = device});
    Program step = compile_forward(
        *m.module, [&](Tensor ids, Tensor pos) { return w.logits_cached(ids, pos, 16); },
        {.inputs = {{"ids", {B, 1}, DType::kI32}, {"pos", {B}, DType::kI32}}, .device = device});
    m.upload(enc);
    enc.run({{"features", g.at("features").f32()}});
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<int32_t> ids{g.at("decoder_ids").i32()[t], g.at("decoder_ids").i32()[T + t]};
      const std::vector<int32_t> pos(2, static_cast<int32_t>(t));
      const HostTensor got = step.run({{"ids", ids}, {"pos", pos}});
      for (int64_t b = 0; b < B; ++b) {
        const auto want = g.at("logits").f32().subspan(static_cast<size_t>((b * T + t) * V), V);
        worst =
            std::max(worst, tg::testing::rel_diff(got.f32().subspan(static_cast<size_t>(b * V), V), want));
      }
    }
    EXPECT_LT(worst, 1e-5) << device.str();
  }
}

TEST(Whisper, GeneratorEqualsTransformers) {
  const pretrained::Model m = pretrained::load(whisper_dir("tiny_whisper"));
  const auto g = golden();
  const WhisperTokens tokens = WhisperTokens::load(whisper_dir("tiny_whisper"));
  const LogMelFeatures features = LogMelFeatures::load(whisper_dir("tiny_whisper"));
  const std::vector<Audio> clips{read_wav(whisper_dir("audio") + "/chirp.wav"),
                                 read_wav(whisper_dir("audio") + "/tones.wav")};
  const std::vector<std::string> codes{"de", "en"};  // transformers' detect_language: 403, 402
  ASSERT_EQ(g.at("languages").i32()[0], 403);
  ASSERT_EQ(g.at("languages").i32()[1], 402);
  for (const Device& device : tg::testing::all_devices()) {
    WhisperGenerator gen(whisper_of(m), tokens, features, {.batch = 2, .device = device});
    m.upload(gen.encoder());
    const auto en = gen.transcribe_features(g.at("features"), {.language = "en", .max_new_tokens = 12});
    const auto detected = gen.transcribe_features(g.at("features"), {.max_new_tokens = 12});
    const auto from_audio = gen.transcribe(clips, {.max_new_tokens = 12});
    for (int64_t b = 0; b < 2; ++b) {
      EXPECT_EQ(en[b].tokens, row_until_eos(g.at("generated"), b, 400)) << device.str() << " row " << b;
      EXPECT_EQ(en[b].language, "en");
      EXPECT_EQ(detected[b].language, codes[b]) << device.str();
      EXPECT_EQ(detected[b].tokens, row_until_eos(g.at("generated_auto"), b, 400))
          << device.str() << " row " << b;
      EXPECT_EQ(from_audio[b].tokens, detected[b].tokens) << device.str() << " from the WAV files";
    }
    // Sampling flattened by a high temperature: reproducible by seed, and not the greedy tokens.
    const TranscribeOptions hot{.language = "en", .max_new_tokens = 12, .temperature = 20.0f, .seed = 3};
    const auto a = gen.transcribe_features(g.at("features"), hot);
    EXPECT_EQ(a[0].tokens, gen.transcribe_features(g.at("features"), hot)[0].tokens);
    EXPECT_NE(a[0].tokens, en[0].tokens);
    // The callback sees every token as it comes, and ends the call when it returns false.
    std::vector<int32_t> seen;
    gen.transcribe_features(
        g.at("features"),
        {.language = "en", .max_new_tokens = 12, .on_token = [&](int64_t clip, int32_t token) {
           if (clip == 0) seen.push_back(token);
           return seen.size() < 3;
         }});
    EXPECT_EQ(seen, std::vector<int32_t>(en[0].tokens.begin(), en[0].tokens.begin() + 3));
    EXPECT_EQ(gen.transcribe_features(g.at("features"),
                                      {.language = "fr", .task = "translate", .max_new_tokens = 3})[0]
                  .language,
              "fr");
    EXPECT_THROW(gen.transcribe_features(g.at("features"), {.language = "xx"}), InputError);
    EXPECT_THROW(gen.transcribe_features(g.at("features"), {.task = "summarize"}), InputError);
    EXPECT_THROW(gen.transcribe({clips.data(), 1}), InputError);
  }
}

// Clips of two windows and of one, together: each window transcribed on its own in the language
// detected in the clip's first window (chirp.wav: "de", tones.wav: "en"), an ended clip's empty
// window neither reported nor kept.
TEST(Whisper, ClipsOfDifferentLengthsGoInWindows) {
  const pretrained::Model m = pretrained::load(whisper_dir("tiny_whisper"));
  const LogMelFeatures features = LogMelFeatures::load(whisper_dir("tiny_whisper"));
  const WhisperTokens tokens = WhisperTokens::load(whisper_dir("tiny_whisper"));
  const Audio chirp = read_wav(whisper_dir("audio") + "/chirp.wav"),
              tones = read_wav(whisper_dir("audio") + "/tones.wav");
  // Another model for batch 1: a model's states (the caches) have one shape on a device.
  const pretrained::Model m1 = pretrained::load(whisper_dir("tiny_whisper"));
  WhisperGenerator one(whisper_of(m1), tokens, features, {.device = Device::cpu()});
  m1.upload(one.encoder());
  const auto alone = [&](const Audio& a, const std::string& language) {
    return one.transcribe({&a, 1}, {.language = language, .max_new_tokens = 6})[0].tokens;
  };
  Audio two = chirp;  // chirp, silence to the window's end, then tones
  two.samples.resize(static_cast<size_t>(features.n_samples()), 0.0f);
  two.samples.insert(two.samples.end(), tones.samples.begin(), tones.samples.end());
  WhisperGenerator gen(whisper_of(m), tokens, features, {.batch = 2, .device = Device::cpu()});
  m.upload(gen.encoder());
  int64_t reported = 0;
  const std::vector<Audio> clips{two, tones};
  const auto out = gen.transcribe(clips, {.max_new_tokens = 6, .on_token = [&](int64_t clip, int32_t) {
                                            reported += clip == 1;
                                            return true;
                                          }});
  EXPECT_EQ(out[0].language, "de");
  std::vector<int32_t> want = alone(chirp, "de"), second = alone(tones, "de");
  want.insert(want.end(), second.begin(), second.end());
  EXPECT_EQ(out[0].tokens, want) << "the second window in the first's language";
  EXPECT_EQ(out[1].language, "en");
  EXPECT_EQ(out[1].tokens, alone(tones, "en"));
  EXPECT_EQ(reported, static_cast<int64_t>(out[1].tokens.size()));
  for (const int64_t bad : {0, 29})  // 32 positions, 4 of them the prompt's
    EXPECT_THROW(gen.transcribe(clips, {.max_new_tokens = bad}), InputError) << bad;
  EXPECT_NO_THROW(gen.transcribe(clips, {.max_new_tokens = 28}));
}

// generation_config.json's forced_decoder_ids pin a language; is_multilingual false makes an
// English-only model (prompt <|startoftranscript|> <|notimestamps|>).
TEST(Whisper, GenerationConfigPinsTheLanguageOrEnglishOnly) {
  const pretrained::Model m = pretrained::load(whisper_dir("tiny_whisper"));
  const auto with = [&](const std::string& from, const std::string& to) {
    const fs::path dir = fs::path(::testing::TempDir()) / "tg_whisper_gen";
    fs::create_directories(dir);
    std::string g = file_bytes(whisper_dir("tiny_whisper") + "/generation_config.json");
    EXPECT_NE(g.find(from), std::string::npos) << from;
    g.replace(g.find(from), from.size(), to);
    std::ofstream(dir / "generation_config.json") << g;
    return WhisperTokens::load(dir.string());
  };
  const WhisperTokens pinned = with(
      "\"is_multilingual\": true", "\"is_multilingual\": true, \"forced_decoder_ids\": [[1, 404], [2, 406]]");
  EXPECT_EQ(pinned.forced_language, "fr");
  EXPECT_EQ(pinned.forced_task, "");
  const WhisperTokens translating =
      with("\"is_multilingual\": true",
           "\"is_multilingual\": true, \"forced_decoder_ids\": [[1, null], [2, 405]]");
  EXPECT_EQ(translating.forced_language, "");
  EXPECT_EQ(translating.forced_task, "translate");
  const LogMelFeatures features = LogMelFeatures::load(whisper_dir("tiny_whisper"));
  const Audio chirp = read_wav(whisper_dir("audio") + "/chirp.wav");
  WhisperGenerator gen(whisper_of(m), pinned, features, {.device = Device::cpu()});
  m.upload(gen.encoder());
  const Transcript fr = gen.transcribe({&chirp, 1}, {.max_new_tokens = 5})[0];
  EXPECT_EQ(fr.language, "fr");
  EXPECT_EQ(fr.tokens, gen.transcribe({&chirp, 1}, {.language = "fr", .max_new_tokens = 5})[0].tokens);
  WhisperGenerator tr(whisper_of(m), translating, features, {.device = Device::cpu()});
  EXPECT_EQ(
      tr.transcribe({&chirp, 1}, {.language = "fr", .max_new_tokens = 5})[0].tokens,
      gen.transcribe({&chirp, 1}, {.language = "fr", .task = "translate", .max_new_tokens = 5})[0].tokens);
  // As the English-only (.en) checkpoints' files: <|notimestamps|> forced at position 1.
  const WhisperTokens english =
      with("\"is_multilingual\": true", "\"is_multilingual\": false, \"forced_decoder_ids\": [[1, 410]]");
  EXPECT_FALSE(english.multilingual());
  WhisperGenerator en(whisper_of(m), english, features, {.device = Device::cpu()});
  const Transcript t = en.transcribe({&chirp, 1}, {.max_new_tokens = 30})[0];
  EXPECT_EQ(t.language, "");
  EXPECT_FALSE(t.tokens.empty());
  EXPECT_THROW(en.transcribe({&chirp, 1}, {.language = "en"}), InputError);
  EXPECT_THROW(en.transcribe({&chirp, 1}, {.max_new_tokens = 31}), InputError)
      << "30 fit after 2 prompt tokens";
  try {
    with("\"is_multilingual\": true", "\"is_multilingual\": true, \"forced_decoder_ids\": [[1, 300]]");
    ADD_FAILURE() << "a text token pinned in the prompt";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a language, task or <|notimestamps|> token"), std::string::npos)
        << e.what();
  }
}

// Audio longer than a window: each window of chunk_length seconds is transcribed on its own.
TEST(Whisper, LongAudioGoesInWindows) {
  const pretrained::Model m = pretrained::load(whisper_dir("tiny_whisper"));
  const LogMelFeatures features = LogMelFeatures::load(whisper_dir("tiny_whisper"));
  WhisperGenerator gen(whisper_of(m), WhisperTokens::load(whisper_dir("tiny_whisper")), features,
                       {.device = Device::cpu()});
  m.upload(gen.encoder());
  const Audio chirp = read_wav(whisper_dir("audio") + "/chirp.wav");
  Audio twice = chirp;
  twice.samples.resize(static_cast<size_t>(features.n_samples()),
                       0.0f);  // the first window: chirp, then silence
  twice.samples.insert(twice.samples.end(), chirp.samples.begin(), chirp.samples.end());
  const TranscribeOptions o{.language = "en", .max_new_tokens = 6};
  const std::vector<int32_t> one = gen.transcribe({&chirp, 1}, o)[0].tokens;
  std::vector<int32_t> want = one;
  want.insert(want.end(), one.begin(), one.end());
  EXPECT_EQ(gen.transcribe({&twice, 1}, o)[0].tokens, want);
  Audio fast = chirp;
  fast.sample_rate = 44100;
  EXPECT_THROW(gen.transcribe({&fast, 1}, o), InputError);
}

TEST(Whisper, SaveWritesTheSameFiles) {
  const fs::path out = fs::path(::testing::TempDir()) / "tg_whisper_saved";
  const pretrained::Model m = pretrained::load(whisper_dir("tiny_whisper"));
  pretrained::save(m, m.weights, out.string());
  EXPECT_EQ(file_bytes(out / "model.safetensors"),
            file_bytes(fs::path(whisper_dir("tiny_whisper")) / "model.safetensors"))
      << "the file save_pretrained wrote, byte for byte";
  for (const char* name : {"preprocessor_config.json", "generation_config.json", "tokenizer.json"})
    EXPECT_EQ(file_bytes(out / name), file_bytes(fs::path(whisper_dir("tiny_whisper")) / name)) << name;
  const pretrained::Model fresh = pretrained::from_config(std::get<nn::WhisperConfig>(m.config));
  EXPECT_EQ(fresh.architecture, m.architecture);
  pretrained::save(fresh, m.weights, out.string());
  const pretrained::Model again = pretrained::load(out.string());
  EXPECT_TRUE(tg_test::same_weights(again, m));
  EXPECT_EQ(std::get<nn::WhisperConfig>(again.config).source_positions, 100);
}

TEST(Whisper, Errors) {
  const pretrained::Model m = pretrained::load(whisper_dir("tiny_whisper"));
  const nn::Whisper& w = whisper_of(m);
  for (const auto& call :
       {std::function<void()>([&] { m.logits(Tensor()); }), std::function<void()>([&] { m.step(); })}) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Whisper"), std::string::npos) << e.what();
    }
  }
  try {  // 30 s of features into a model of 2 s windows
    compile_forward(*m.module, [&](Tensor f) { return w.encode(f); },
                    {.inputs = {{"features", {1, 80, 3000}}}});
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[B, 80, 200]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compile_forward(*m.module, [&](Tensor f, Tensor ids) { return w.decode(ids, w.encode(f)); },
                               {.inputs = {{"features", {1, 80, 200}}, {"ids", {1, 33}, DType::kI32}}}),
               ShapeError);
  EXPECT_THROW(
      WhisperGenerator(whisper_of(m), WhisperTokens::load(whisper_dir("tiny_whisper")), LogMelFeatures{}),
      InputError);  // 3000 frames of the default extractor
  {                 // scale_embedding is read but, as in transformers, not applied: the same logits
    const pretrained::Model scaled =
        pretrained::load(edited_copy("tiny_whisper", "tg_whisper_scaled", "\"scale_embedding\": false",
                                     "\"scale_embedding\": true")
                             .string());
    EXPECT_TRUE(std::get<nn::WhisperConfig>(scaled.config).scale_embedding);
    const auto g = golden();
    const nn::Whisper& sw = whisper_of(scaled);
    Program p = compile_forward(*scaled.module,
                                [&](Tensor f, Tensor ids) { return sw.logits(sw.decode(ids, sw.encode(f))); },
                                {.inputs = {{"features", g.at("features").shape()},
                                            {"ids", g.at("decoder_ids").shape(), DType::kI32}},
                                 .device = Device::cpu()});
    scaled.upload(p);
    EXPECT_LT(tg::testing::rel_diff(
                  p.run({{"features", g.at("features").f32()}, {"ids", g.at("decoder_ids").i32()}}).f32(),
                  g.at("logits").f32()),
              1e-5);
  }
  for (const auto& [from, to, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"activation_function\": \"gelu\"", "\"activation_function\": \"relu\"",
            "activation_function \"relu\""},
           {"\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", "tie_word_embeddings false"},
           {"\"max_source_positions\": 100", "\"max_source_positions\": 50",
            "model.encoder.embed_positions.weight"},
           {"\"encoder_attention_heads\": 4", "\"encoder_attention_heads\": 5", "do not divide d_model"}}) {
    try {
      pretrained::load(edited_copy("tiny_whisper", "tg_whisper_bad", from, to).string());
      ADD_FAILURE() << "loaded with " << to;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

}  // namespace
