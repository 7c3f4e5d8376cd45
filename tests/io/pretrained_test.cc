// tg::pretrained::load: the tiny Llama folder transformers wrote (tests/data/tiny_llama) gives
// transformers' logits on every backend; BF16 and F16 copies of its weights load as their f32
// values exactly and give logits within their rounding; a sharded copy loads the same weights;
// GPT-2 and Mamba folders (made here with Hugging Face's names and layouts) map onto nn::Gpt
// and nn::MambaLM by the documented renames, transposes and reshapes, and give transformers'
// logits once tests/data/tiny_gpt2 and tiny_mamba exist (tests/nn/gen_hf_golden.py); and every
// error names what is wrong.
#include "tensorgrad/pretrained.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;
using tg::testing::slurp;

const std::string kTinyLlama = std::string(TG_TEST_DATA_DIR) + "/tiny_llama";

// A fresh folder under the temp directory, removed at the end of the test.
struct PretrainedFolder {
  explicit PretrainedFolder(const std::string& name)
      : path(fs::temp_directory_path() / ("tg_pretrained_" + std::to_string(getpid()) + "_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~PretrainedFolder() { fs::remove_all(path); }
  void write(const std::string& file, const std::string& text) const { std::ofstream(path / file) << text; }
  std::string str() const { return path.string(); }
  fs::path path;
};

// The tiny Llama folder with its weights replaced by `weights` and its config by `config`.
void write_llama(const PretrainedFolder& dir, const std::map<std::string, HostTensor>& weights,
                 const std::string& config = slurp(kTinyLlama + "/config.json")) {
  dir.write("config.json", config);
  save_safetensors((dir.path / "model.safetensors").string(), weights);
}

// Logits of `lm` for the golden ids, on `device`.
std::vector<float> llama_logits_of(const pretrained::Model& lm, const HostTensor& ids, Device device) {
  Program p = compile_forward(*lm.module, [&lm](Tensor x) { return lm.logits(x); },
                              {.inputs = {{"ids", ids.shape(), DType::kI32}}, .device = device});
  lm.upload(p);
  return p.run({{"ids", ids.i32()}}).f32();
}

std::string llama_load_error(const std::string& folder) {
  return tg::testing::message_of<CheckpointError>([&] { pretrained::load(folder); });
}

class PretrainedDevices : public ::testing::TestWithParam<Device> {};

TEST_P(PretrainedDevices, LlamaFolderGivesTransformersLogits) {
  const pretrained::Model lm = pretrained::load(kTinyLlama);
  EXPECT_EQ(lm.architecture, "LlamaForCausalLM");
  ASSERT_TRUE(std::holds_alternative<nn::LlamaConfig>(lm.config));
  const nn::LlamaConfig& c = std::get<nn::LlamaConfig>(lm.config);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.rope_theta, 10000.0);  // from transformers 5's rope_parameters
  EXPECT_EQ(lm.context, 16);
  EXPECT_EQ(lm.eos_ids, std::vector<int32_t>{2});
  EXPECT_FALSE(lm.recurrent());
  const std::map<std::string, HostTensor> golden = read_safetensors(kTinyLlama + "/logits.safetensors");
  const double d =
      tg::testing::rel_diff(llama_logits_of(lm, golden.at("ids"), GetParam()), golden.at("logits").f32());
  EXPECT_LT(d, 1e-4);
  std::printf("  %s: relative logit difference to transformers %.2e\n", GetParam().str().c_str(), d);
}

INSTANTIATE_TEST_SUITE_P(Devices, PretrainedDevices, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

TEST(Pretrained, HalfPrecisionWeightsLoadAsTheirF32Values) {
  const std::map<std::string, HostTensor> f32 = read_safetensors(kTinyLlama + "/model.safetensors");
  const std::map<std::string, HostTensor> golden = read_safetensors(kTinyLlama + "/logits.safetensors");
  const pretrained::Model ref = pretrained::load(kTinyLlama);
  const std::vector<float> want = llama_logits_of(ref, golden.at("ids"), Device::cpu());
  // bf16 keeps 8 significant bits, f16 11: the logits move by about that much.
  for (const auto& [dtype, tolerance] : {std::pair{DType::kBF16, 2e-2}, std::pair{DType::kF16, 3e-3}}) {
    PretrainedFolder dir(dtype == DType::kBF16 ? "bf16" : "f16");
    std::map<std::string, HostTensor> half;
    for (const auto& [name, t] : f32) half[name] = t.to(dtype);
    write_llama(dir, half);
    const pretrained::Model lm = pretrained::load(dir.str());
    for (const auto& [name, t] : half) {
      const HostTensor exact = t.to(DType::kF32);
      const std::span<const float> got = lm.weights.at(name).f32(), expected = exact.f32();
      EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin(), expected.end())) << name;
    }
    const double d = tg::testing::rel_diff(llama_logits_of(lm, golden.at("ids"), Device::cpu()), want);
    EXPECT_GT(d, 0);
    EXPECT_LT(d, tolerance);
    std::printf("  %s weights: relative logit difference to f32's %.2e\n",
                dtype == DType::kBF16 ? "bf16" : "f16", d);
  }
}

// LoadOptions::dtype: the matrices held as bf16 compute what the f32 model computes with its
// matrices rounded to bf16 (products in f32 and under Precision::kBf16), for each layout the
// loaders change (GPT-2's transposed Conv1D, Mamba's squeezed conv1d), on every backend.
TEST(Pretrained, Bf16HeldMatricesEqualTheRoundedF32Model) {
  for (const std::string name : {"tiny_llama", "tiny_gpt2", "tiny_mamba"}) {
    const std::string dir = std::string(TG_TEST_DATA_DIR) + "/" + name;
    const pretrained::Model held = pretrained::load(dir, {.dtype = DType::kBF16}),
                            full = pretrained::load(dir);
    EXPECT_EQ(held.dtype, DType::kBF16);
    std::map<std::string, HostTensor> rounded = full.weights;
    for (auto& [param, t] : rounded) {
      EXPECT_EQ(held.weights.at(param).dtype(), t.shape().size() >= 2 ? DType::kBF16 : DType::kF32) << param;
      if (t.shape().size() >= 2) t = t.to(DType::kBF16).to(DType::kF32);
      EXPECT_EQ(0, tg::testing::rel_diff(held.weights.at(param).to(DType::kF32).f32(), t.f32())) << param;
    }
    const HostTensor ids = read_safetensors(dir + "/logits.safetensors").at("ids");
    for (const Device& device : tg::testing::all_devices())
      for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
        auto logits = [&](const pretrained::Model& lm, const std::map<std::string, HostTensor>& w) {
          Program p = compile_forward(
              *lm.module, [&lm](Tensor x) { return lm.logits(x); },
              {.inputs = {{"ids", ids.shape(), DType::kI32}}, .device = device, .precision = precision});
          p.upload_params(w);
          return p.run({{"ids", ids.i32()}}).f32();
        };
        const std::vector<float> got = logits(held, held.weights);
        EXPECT_LT(tg::testing::rel_diff(got, logits(full, rounded)), 2e-6)
            << name << " on " << device.str() << (precision == Precision::kBf16 ? ", bf16 products" : "");
        if (precision == Precision::kFp32) {  // the rounding is seen: not the unrounded model's logits
          EXPECT_GT(tg::testing::rel_diff(got, logits(full, full.weights)), 1e-5) << name;
        }
      }
  }
  EXPECT_THROW(pretrained::load(kTinyLlama, {.dtype = DType::kI32}), CheckpointError);
  // A weight past f16's largest finite value is refused rather than made infinite.
  std::map<std::string, HostTensor> w = read_safetensors(kTinyLlama + "/model.safetensors");
  w.at("model.layers.0.mlp.up_proj.weight").f32()[3] = 1e5f;
  PretrainedFolder dir("f16_overflow");
  write_llama(dir, w);
  EXPECT_HAS(
      tg::testing::message_of<CheckpointError>([&] { pretrained::load(dir.str(), {.dtype = DType::kF16}); }),
      "'model.layers.0.mlp.up_proj.weight' holds 100000");
  EXPECT_NO_THROW(pretrained::load(dir.str(), {.dtype = DType::kBF16}));
}

TEST(Pretrained, ShardedWeightsLoad) {
  const std::map<std::string, HostTensor> all = read_safetensors(kTinyLlama + "/model.safetensors");
  PretrainedFolder dir("sharded");
  dir.write("config.json", slurp(kTinyLlama + "/config.json"));
  std::map<std::string, HostTensor> shard[2];
  std::string index = "{\"metadata\": {}, \"weight_map\": {";
  int i = 0;
  for (const auto& [name, t] : all) {
    const int s = name.find("layers.1.") != std::string::npos || name == "lm_head.weight" ? 1 : 0;
    shard[s][name] = t;
    index += std::string(i++ ? ", " : "") + "\"" + name + "\": \"model-0000" + std::to_string(s + 1) +
             "-of-00002.safetensors\"";
  }
  index += "}}";
  ASSERT_FALSE(shard[0].empty());
  ASSERT_FALSE(shard[1].empty());
  save_safetensors((dir.path / "model-00001-of-00002.safetensors").string(), shard[0]);
  save_safetensors((dir.path / "model-00002-of-00002.safetensors").string(), shard[1]);
  dir.write("model.safetensors.index.json", index);
  const pretrained::Model lm = pretrained::load(dir.str());
  const pretrained::Model one = pretrained::load(kTinyLlama);
  ASSERT_EQ(lm.weights.size(), one.weights.size());
  for (const auto& [name, t] : one.weights) {
    const std::span<const float> a = lm.weights.at(name).f32(), b = t.f32();
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << name;
  }
  // A shard the index names but the folder lacks.
  fs::remove(dir.path / "model-00002-of-00002.safetensors");
  EXPECT_HAS(llama_load_error(dir.str()), "model-00002-of-00002.safetensors");
}

// GPT-2's names and Conv1D layout ([in, out]), written here: the loader's renames and
// transposes put each tensor where nn::Gpt reads it.
TEST(Pretrained, Gpt2NamesAndConv1dLayoutMapOntoGpt) {
  const int64_t d = 8, v = 11, n = 6, inner = 32;
  std::map<std::string, HostTensor> w;
  uint32_t seed = 1;
  auto put = [&](const std::string& name, Shape s) {
    w[name] = HostTensor::f32(tg::testing::uniform_values(static_cast<size_t>(numel(s)), seed++), s);
  };
  put("transformer.wte.weight", {v, d});
  put("transformer.wpe.weight", {n, d});
  for (const char* l : {"ln_1", "ln_2"}) {
    put(std::string("transformer.h.0.") + l + ".weight", {d});
    put(std::string("transformer.h.0.") + l + ".bias", {d});
  }
  put("transformer.h.0.attn.c_attn.weight", {d, 3 * d});
  put("transformer.h.0.attn.c_attn.bias", {3 * d});
  put("transformer.h.0.attn.c_proj.weight", {d, d});
  put("transformer.h.0.attn.c_proj.bias", {d});
  put("transformer.h.0.mlp.c_fc.weight", {d, inner});
  put("transformer.h.0.mlp.c_fc.bias", {inner});
  put("transformer.h.0.mlp.c_proj.weight", {inner, d});
  put("transformer.h.0.mlp.c_proj.bias", {d});
  put("transformer.ln_f.weight", {d});
  put("transformer.ln_f.bias", {d});
  put("transformer.h.0.attn.bias", {1, 1, n, n});        // the causal-mask buffer: ignored
  w["lm_head.weight"] = w.at("transformer.wte.weight");  // tied: equal to wte
  PretrainedFolder dir("gpt2");
  const std::string config =
      R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 11, "n_embd": 8,
          "n_layer": 1, "n_head": 2, "n_positions": 6, "n_inner": null, "layer_norm_epsilon": 1e-5,
          "activation_function": "gelu_new", "eos_token_id": 10})";
  dir.write("config.json", config);
  save_safetensors((dir.path / "model.safetensors").string(), w);
  const pretrained::Model lm = pretrained::load(dir.str());
  EXPECT_EQ(lm.architecture, "GPT2LMHeadModel");
  EXPECT_EQ(lm.context, 6);
  EXPECT_EQ(lm.eos_ids, std::vector<int32_t>{10});
  const nn::GptConfig& c = std::get<nn::GptConfig>(lm.config);
  EXPECT_EQ(c.mlp_hidden, inner);
  EXPECT_TRUE(c.tied_head);
  EXPECT_EQ(lm.weights.size(), 16u);  // wte, wpe, lnf and the block's 12
  // qkv [3d, d] is c_attn [d, 3d] transposed: qkv[o][i] = c_attn[i][o].
  const std::span<const float> qkv = lm.weights.at("blocks.0.attn.qkv.weight").f32();
  const std::span<const float> c_attn = w.at("transformer.h.0.attn.c_attn.weight").f32();
  EXPECT_EQ(lm.weights.at("blocks.0.attn.qkv.weight").shape(), (Shape{3 * d, d}));
  for (int64_t o = 0; o < 3 * d; ++o)
    for (int64_t i = 0; i < d; ++i) ASSERT_EQ(qkv[o * d + i], c_attn[i * 3 * d + o]);
  EXPECT_EQ(lm.weights.at("blocks.0.fc.weight").shape(), (Shape{inner, d}));
  EXPECT_EQ(lm.weights.at("blocks.0.fc2.weight").shape(), (Shape{d, inner}));
  EXPECT_EQ(HostTensor(lm.weights.at("blocks.0.ln2.bias")).f32(),
            HostTensor(w.at("transformer.h.0.ln_2.bias")).f32());
  EXPECT_EQ(llama_logits_of(lm, HostTensor::i32({1, 2, 3}, {1, 3}), Device::cpu()).size(), 3u * v);
  // A tied head that differs from wte.
  w["lm_head.weight"] = HostTensor::f32(tg::testing::uniform_values(static_cast<size_t>(v * d), 99), {v, d});
  save_safetensors((dir.path / "model.safetensors").string(), w);
  EXPECT_HAS(llama_load_error(dir.str()), "lm_head.weight differs");
  // Another activation.
  w.erase("lm_head.weight");
  save_safetensors((dir.path / "model.safetensors").string(), w);
  std::string relu = config;
  relu.replace(relu.find("gelu_new"), 8, "relu");
  dir.write("config.json", relu);
  EXPECT_HAS(llama_load_error(dir.str()), "activation_function \"relu\"");
}

// MambaForCausalLM's names (backbone.*) and conv1d [D, 1, K] map onto nn::MambaLM.
TEST(Pretrained, MambaNamesMapOntoMambaLM) {
  const int64_t d = 8, v = 11, inner = 16, state = 4, k = 4, rank = 1;
  std::map<std::string, HostTensor> w;
  uint32_t seed = 1;
  auto put = [&](const std::string& name, Shape s) {
    w[name] = HostTensor::f32(tg::testing::uniform_values(static_cast<size_t>(numel(s)), seed++), s);
  };
  put("backbone.embeddings.weight", {v, d});
  const std::string l = "backbone.layers.0.";
  put(l + "norm.weight", {d});
  put(l + "mixer.in_proj.weight", {2 * inner, d});
  put(l + "mixer.conv1d.weight", {inner, 1, k});
  put(l + "mixer.conv1d.bias", {inner});
  put(l + "mixer.x_proj.weight", {rank + 2 * state, inner});
  put(l + "mixer.dt_proj.weight", {inner, rank});
  put(l + "mixer.dt_proj.bias", {inner});
  put(l + "mixer.A_log", {inner, state});
  put(l + "mixer.D", {inner});
  put(l + "mixer.out_proj.weight", {d, inner});
  put("backbone.norm_f.weight", {d});
  PretrainedFolder dir("mamba");
  dir.write("config.json", R"({"architectures": ["MambaForCausalLM"], "model_type": "mamba", "vocab_size": 11,
      "hidden_size": 8, "num_hidden_layers": 1, "state_size": 4, "conv_kernel": 4, "expand": 2,
      "intermediate_size": 16, "time_step_rank": 1, "use_bias": false, "use_conv_bias": true,
      "layer_norm_epsilon": 1e-5, "hidden_act": "silu", "tie_word_embeddings": true})");
  save_safetensors((dir.path / "model.safetensors").string(), w);
  const pretrained::Model lm = pretrained::load(dir.str());
  EXPECT_TRUE(lm.recurrent());
  EXPECT_EQ(lm.context, 0);
  EXPECT_EQ(lm.weights.size(), w.size());
  EXPECT_EQ(lm.weights.at("layers.0.mixer.conv1d.weight").shape(), (Shape{inner, k}));
  EXPECT_EQ(HostTensor(lm.weights.at("layers.0.mixer.conv1d.weight")).f32(),
            HostTensor(w.at(l + "mixer.conv1d.weight")).f32());  // [D, 1, K] → [D, K], same values
  EXPECT_EQ(llama_logits_of(lm, HostTensor::i32({1, 2, 3}, {1, 3}), Device::cpu()).size(), 3u * v);
}

// transformers' own tiny GPT-2 and Mamba (tests/nn/gen_hf_golden.py): the same logits.
TEST(Pretrained, Gpt2AndMambaFoldersGiveTransformersLogits) {
  int found = 0;
  for (const std::string name : {"tiny_gpt2", "tiny_mamba"}) {
    const std::string dir = std::string(TG_TEST_DATA_DIR) + "/" + name;
    if (!fs::exists(dir + "/config.json")) continue;
    ++found;
    const pretrained::Model lm = pretrained::load(dir);
    const std::map<std::string, HostTensor> golden = read_safetensors(dir + "/logits.safetensors");
    for (const Device& device : tg::testing::all_devices()) {
      const double d =
          tg::testing::rel_diff(llama_logits_of(lm, golden.at("ids"), device), golden.at("logits").f32());
      EXPECT_LT(d, 1e-4) << name << " on " << device.str();
      std::printf("  %s on %s: relative logit difference to transformers %.2e\n", name.c_str(),
                  device.str().c_str(), d);
    }
  }
  if (found == 0)
    GTEST_SKIP()
        << "tests/data/tiny_gpt2 and tiny_mamba do not exist yet: run tests/nn/gen_hf_golden.py on a "
           "machine with transformers";
}

// lm.step() drives tg::Generator for each family (Mamba's 5-token prompt as windows of 2 from
// its states and a token): greedy tokens equal greedy by the full forward of the loaded weights.
TEST(Pretrained, GeneratorGreedyEqualsFullForward) {
  for (const std::string name : {"tiny_llama", "tiny_gpt2", "tiny_mamba"}) {
    const std::string dir = std::string(TG_TEST_DATA_DIR) + "/" + name;
    if (!fs::exists(dir + "/config.json")) continue;
    const pretrained::Model lm = pretrained::load(dir);
    const int64_t window = 12, vocab = 64;
    Program full = compile_forward(*lm.module, [&lm](Tensor x) { return lm.logits(x); },
                                   {.inputs = {{"ids", {1, window}, DType::kI32}}, .device = Device::cpu()});
    lm.upload(full);
    const std::vector<int32_t> prompt{3, 17, 42, 8, 1};
    const std::vector<int32_t> want = tg::testing::greedy_by_full_forward(full, prompt, 6, window, vocab);
    Generator gen(*lm.module, lm.step(), {.cache_len = window, .prefill_len = 2, .device = Device::cpu()});
    lm.upload(gen.decode());
    EXPECT_EQ(gen.generate(prompt, {.max_new_tokens = 6}), want) << name;
  }
}

TEST(Pretrained, Errors) {
  const std::map<std::string, HostTensor> w = read_safetensors(kTinyLlama + "/model.safetensors");
  const std::string config = slurp(kTinyLlama + "/config.json");
  {
    PretrainedFolder dir("no_config");
    EXPECT_HAS(llama_load_error(dir.str()), "no config.json");
  }
  EXPECT_HAS(llama_load_error("/nonexistent/tg_model"), "no such folder or file");
  {
    PretrainedFolder dir("bart");
    dir.write("config.json", R"({"architectures": ["BartForConditionalGeneration"], "model_type": "bart"})");
    const std::string e = llama_load_error(dir.str());
    EXPECT_HAS(e, "BartForConditionalGeneration");
    EXPECT_HAS(
        e,
        "supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
        "Phi3ForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, MixtralForCausalLM, "
        "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, GraniteForCausalLM, Olmo2ForCausalLM, "
        "Olmo3ForCausalLM, "
        "GraniteMoeHybridForCausalLM, BambaForCausalLM, NemotronHForCausalLM, GptOssForCausalLM, "
        "GPTNeoXForCausalLM, "
        "PhiForCausalLM, "
        "StableLmForCausalLM, Starcoder2ForCausalLM, "
        "GPT2LMHeadModel, BertModel, BertForMaskedLM, RobertaModel, RobertaForMaskedLM, "
        "BertForSequenceClassification, RobertaForSequenceClassification, BertForTokenClassification, "
        "RobertaForTokenClassification, BertForQuestionAnswering, RobertaForQuestionAnswering, "
        "XLMRobertaModel, XLMRobertaForMaskedLM, XLMRobertaForSequenceClassification, "
        "XLMRobertaForTokenClassification, XLMRobertaForQuestionAnswering, DistilBertModel, "
        "DistilBertForMaskedLM, DistilBertForSequenceClassification, DistilBertForTokenClassification, "
        "DistilBertForQuestionAnswering, ViTModel, ViTForImageClassification, DeiTModel, "
        "DeiTForImageClassification, DeiTForImageClassificationWithTeacher, T5ForConditionalGeneration, "
        "T5EncoderModel, WhisperForConditionalGeneration, CLIPModel, CLIPTextModel, "
        "CLIPTextModelWithProjection, CLIPVisionModel, CLIPVisionModelWithProjection, "
        "MambaForCausalLM, Mamba2ForCausalLM");
  }
  {
    PretrainedFolder dir("no_weights");
    dir.write("config.json", config);
    EXPECT_HAS(llama_load_error(dir.str()), "no model.safetensors");
  }
  {
    PretrainedFolder dir("missing");
    std::map<std::string, HostTensor> less = w;
    less.erase("model.layers.1.mlp.up_proj.weight");
    write_llama(dir, less);
    const std::string e = llama_load_error(dir.str());
    EXPECT_HAS(e, "no tensor 'model.layers.1.mlp.up_proj.weight'");
    EXPECT_HAS(e, "[48, 32]");
  }
  {
    PretrainedFolder dir("extra");
    std::map<std::string, HostTensor> more = w;
    more["model.layers.0.self_attn.q_proj.bias"] = HostTensor(DType::kF32, {32});
    write_llama(dir, more);
    EXPECT_HAS(llama_load_error(dir.str()), "unexpected tensor 'model.layers.0.self_attn.q_proj.bias' [32]");
  }
  {
    PretrainedFolder dir("shape");
    std::map<std::string, HostTensor> wrong = w;
    wrong["model.layers.0.mlp.down_proj.weight"] = HostTensor(DType::kF32, {48, 32});
    write_llama(dir, wrong);
    const std::string e = llama_load_error(dir.str());
    EXPECT_HAS(e, "'model.layers.0.mlp.down_proj.weight' has shape [48, 32], expected [32, 48]");
  }
  {
    PretrainedFolder dir("int");
    std::map<std::string, HostTensor> wrong = w;
    wrong["model.norm.weight"] = HostTensor(DType::kI32, {32});
    write_llama(dir, wrong);
    EXPECT_HAS(llama_load_error(dir.str()), "'model.norm.weight' is not a float tensor");
  }
  {
    PretrainedFolder dir("rope");
    std::string scaled = config;
    scaled.replace(scaled.find("\"default\""), 9, "\"dynamic\"");
    write_llama(dir, w, scaled);
    EXPECT_HAS(llama_load_error(dir.str()),
               "rope_type \"dynamic\"; implemented: default, linear, llama3, yarn and longrope");
    scaled.replace(scaled.find("\"dynamic\""), 9, "\"linear\"");
    write_llama(dir, w, scaled);
    EXPECT_HAS(llama_load_error(dir.str()), "rope_parameters (rope_type linear) has no factor");
    // YaRN without a factor takes the context's ratio to the original one (16 / 4).
    scaled.replace(scaled.find("\"linear\""), 8, "\"yarn\", \"original_max_position_embeddings\": 4");
    write_llama(dir, w, scaled);
    const nn::LlamaConfig c = std::get<nn::LlamaConfig>(pretrained::load(dir.str()).config);
    EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
    EXPECT_EQ(c.rope_scaling.factor, 4.0);
  }
  {
    // transformers 4.x: rope_theta at the top and rope_scaling beside it.
    PretrainedFolder dir("rope4");
    std::string old = config;
    old.replace(old.find("\"rope_parameters\""), 17, "\"rope_scaling\"");
    old.replace(old.find("\"rope_theta\": 10000.0"), 21, "\"factor\": 8.0");
    old.replace(old.find("\"default\""), 9, "\"llama3\"");
    old.replace(old.find("\"rms_norm_eps\""), 14, "\"rope_theta\": 500000.0, \"rms_norm_eps\"");
    write_llama(dir, w, old);
    EXPECT_HAS(llama_load_error(dir.str()), "rope_scaling (rope_type llama3) has no low_freq_factor");
    old.replace(old.find("\"factor\": 8.0"), 13,
                "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                "\"original_max_position_embeddings\": 8");
    write_llama(dir, w, old);
    const nn::LlamaConfig c = std::get<nn::LlamaConfig>(pretrained::load(dir.str()).config);
    EXPECT_EQ(c.rope_theta, 500000.0);
    EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
    EXPECT_EQ(c.rope_scaling.factor, 8.0);
    EXPECT_EQ(c.rope_scaling.original_context, 8);
  }
  {
    PretrainedFolder dir("tied");
    std::string tied = config;
    tied.replace(tied.find("\"tie_word_embeddings\": false"), 28, "\"tie_word_embeddings\": true");
    write_llama(dir, w, tied);  // lm_head.weight differs from embed_tokens
    EXPECT_HAS(llama_load_error(dir.str()), "lm_head.weight differs");
    std::map<std::string, HostTensor> no_head = w;
    no_head.erase("lm_head.weight");
    write_llama(dir, no_head, tied);
    const pretrained::Model lm = pretrained::load(dir.str());
    EXPECT_TRUE(std::get<nn::LlamaConfig>(lm.config).tied_head);
    EXPECT_EQ(lm.weights.count("lm_head.weight"), 0u);
  }
  {
    PretrainedFolder dir("bad_json");
    dir.write("config.json", "{\"model_type\": ");
    EXPECT_HAS(llama_load_error(dir.str()), "config.json is not valid JSON");
  }
}

}  // namespace
