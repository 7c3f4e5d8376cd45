// The Llama family's relatives, each a tiny random folder transformers 5.17 wrote
// (tests/nn/gen_hf_family_golden.py, run on the GPU machine): Llama with Llama 3.1's RoPE
// rescaling, q/k/v/o biases and a tied head; Qwen2 (q/k/v biases); Qwen3 (q/k norms, its own
// head_dim, YaRN); Mistral (a sliding window, linear RoPE scaling); Phi-3 (fused projections);
// Gemma ((1 + w) norms, scaled embeddings, tanh-GELU gate); Gemma 2 and 3; the mixtures of
// experts Mixtral, Qwen2-MoE and Qwen3-MoE; Granite's multipliers; OLMo 2's and 3's norms
// after each branch; the LayerNorm relatives GPT-NeoX (parallel and sequential), Phi and
// StableLM (sequential with q/k/v biases, and parallel), each rotating part of a head, and
// StarCoder 2 (LayerNorms, an MLP without a gate, a window in every layer); gpt-oss (attention
// sinks, biased experts with interleaved gate/up columns and a clamped GLU, a biased router),
// also with its experts in MXFP4 as the published checkpoints hold them; Qwen2 as GPTQ (4 and
// 8 bits), AWQ and FP8 files hold it (tests/io/gen_quantized_fixtures.py). For each: the RoPE
// frequencies equal those transformers used, the logits equal transformers' on every backend (1e-4), a greedy
// Generator gives transformers' greedy ids, and the KV-cached logits equal the full forward on every prefix.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include "../nn/decode_check.h"
#include "tensorgrad/pretrained.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

struct FamilyCase {
  const char* folder;
  const char* architecture;
  int64_t context;  // what load() must report (longrope's is the original context)
};

const FamilyCase kFamilyCases[] = {{"tiny_llama3", "LlamaForCausalLM", 16},
                                   {"tiny_qwen2", "Qwen2ForCausalLM", 16},
                                   {"tiny_qwen3", "Qwen3ForCausalLM", 64},
                                   {"tiny_mistral", "MistralForCausalLM", 32},
                                   {"tiny_phi3", "Phi3ForCausalLM", 16},
                                   {"tiny_gemma", "GemmaForCausalLM", 16},
                                   {"tiny_phi3_longrope", "Phi3ForCausalLM", 8},
                                   {"tiny_mistral_window", "MistralForCausalLM", 32},
                                   {"tiny_qwen2_window", "Qwen2ForCausalLM", 16},
                                   {"tiny_gemma2", "Gemma2ForCausalLM", 16},
                                   {"tiny_gemma3", "Gemma3ForCausalLM", 16},
                                   {"tiny_mixtral", "MixtralForCausalLM", 16},
                                   {"tiny_qwen2_moe", "Qwen2MoeForCausalLM", 16},
                                   {"tiny_qwen3_moe", "Qwen3MoeForCausalLM", 16},
                                   {"tiny_granite", "GraniteForCausalLM", 16},
                                   {"tiny_olmo2", "Olmo2ForCausalLM", 16},
                                   {"tiny_olmo3", "Olmo3ForCausalLM", 16},
                                   {"tiny_gpt_neox", "GPTNeoXForCausalLM", 16},
                                   {"tiny_gpt_neox_sequential", "GPTNeoXForCausalLM", 16},
                                   {"tiny_phi", "PhiForCausalLM", 16},
                                   {"tiny_stablelm", "StableLmForCausalLM", 16},
                                   {"tiny_stablelm_parallel", "StableLmForCausalLM", 16},
                                   {"tiny_starcoder2", "Starcoder2ForCausalLM", 16},
                                   {"tiny_gpt_oss", "GptOssForCausalLM", 32},
                                   {"tiny_gpt_oss_mxfp4", "GptOssForCausalLM", 32},
                                   {"tiny_qwen2_gptq", "Qwen2ForCausalLM", 16},
                                   {"tiny_qwen2_awq", "Qwen2ForCausalLM", 16},
                                   {"tiny_qwen2_gptq8", "Qwen2ForCausalLM", 16},
                                   {"tiny_qwen2_fp8", "Qwen2ForCausalLM", 16},
                                   {"tiny_qwen2_fp8_channel", "Qwen2ForCausalLM", 16}};

std::string family_dir(const FamilyCase& c) { return std::string(TG_TEST_DATA_DIR) + "/" + c.folder; }

const nn::LlamaConfig& config_of(const pretrained::Model& lm) { return std::get<nn::LlamaConfig>(lm.config); }

class Family : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(Family, ConfigAndRopeFrequenciesAreTransformers) {
  const FamilyCase& c = GetParam();
  const pretrained::Model lm = pretrained::load(family_dir(c));
  EXPECT_EQ(lm.architecture, c.architecture);
  EXPECT_EQ(lm.context, c.context);
  EXPECT_EQ(lm.eos_ids, std::vector<int32_t>{2});
  const nn::LlamaConfig& l = config_of(lm);
  const std::string name = c.folder;
  EXPECT_EQ(l.qkv_bias, name.starts_with("tiny_qwen2") || name == "tiny_stablelm");
  // The LayerNorm relatives (gen_hf_family_golden.py): GPT-NeoX's MLP without a gate and
  // biases everywhere, parallel on two norms in tiny_gpt_neox; Phi's likewise on one norm, its
  // head biased; StableLM's SwiGLU, parallel on one norm in tiny_stablelm_parallel.
  const bool neox = name.starts_with("tiny_gpt_neox"), phi = name == "tiny_phi",
             stablelm = name.starts_with("tiny_stablelm"), starcoder2 = name == "tiny_starcoder2";
  using Parallel = nn::LlamaConfig::Parallel;
  EXPECT_EQ(l.layer_norm, neox || phi || stablelm || starcoder2);
  EXPECT_EQ(l.gated_mlp, !neox && !phi && !starcoder2);
  EXPECT_EQ(l.parallel, name == "tiny_gpt_neox"                   ? Parallel::kSeparate
                        : phi || name == "tiny_stablelm_parallel" ? Parallel::kShared
                                                                  : Parallel::kNone);
  EXPECT_EQ(l.head_bias, phi);
  // gpt-oss (gen_hf_family_golden.py): sinks, biases everywhere, windows of 3 in layer 0, 4
  // biased experts of 32 (intermediate_size) top 2 after a biased router, its clamped GLU.
  const bool gpt_oss = name.starts_with("tiny_gpt_oss");
  EXPECT_EQ(l.attention_sinks, gpt_oss);
  EXPECT_EQ(l.gate, name == "tiny_gpt_neox"                        ? nn::LlamaConfig::Gate::kGelu
                    : phi || name == "tiny_gpt_neox_sequential"    ? nn::LlamaConfig::Gate::kGeluTanh
                    : name.starts_with("tiny_gemma") || starcoder2 ? nn::LlamaConfig::Gate::kGeluTanh
                    : gpt_oss                                      ? nn::LlamaConfig::Gate::kClampedSwiglu
                                                                   : nn::LlamaConfig::Gate::kSilu);
  // Sliding windows: Mistral's in every layer (16 for tiny_mistral: its 7-token prompts do not
  // reach it), Qwen2's from max_window_layers = 1 on, Gemma 2's and 3's where layer_types says.
  const bool windows_of_3 = name.ends_with("_window") || name == "tiny_gemma2" || name == "tiny_gemma3" ||
                            name == "tiny_olmo3" || starcoder2 || gpt_oss;
  EXPECT_EQ(l.sliding_window, name == "tiny_mistral" ? 16 : windows_of_3 ? 3 : 0);
  const std::vector<bool> sliding = name == "tiny_qwen2_window"        ? std::vector<bool>{false, true}
                                    : name.starts_with("tiny_mistral") ? std::vector<bool>{true, true}
                                    : name == "tiny_gemma2"            ? std::vector<bool>{true, false}
                                    : name == "tiny_gemma3"            ? std::vector<bool>{true, false, true}
                                    : name == "tiny_olmo3" || gpt_oss  ? std::vector<bool>{true, false}
                                                                       : std::vector<bool>{};
  EXPECT_EQ(l.sliding_layers, sliding);
  EXPECT_EQ(l.attention_bias,
            name == "tiny_llama3" || name == "tiny_olmo2" || neox || phi || starcoder2 || gpt_oss);
  EXPECT_EQ(l.mlp_bias, name == "tiny_granite" || neox || phi || starcoder2 || gpt_oss);
  const bool olmo = name.starts_with("tiny_olmo");
  EXPECT_EQ(l.qk_norm, name.starts_with("tiny_qwen3") || name == "tiny_gemma3" || olmo);
  EXPECT_EQ(l.qk_norm_whole, olmo);
  EXPECT_EQ(l.post_norms, olmo);
  const bool granite = name == "tiny_granite";  // its multipliers (gen_hf_family_golden.py)
  EXPECT_EQ(l.embedding_multiplier, granite ? 2.0 : 1.0);
  EXPECT_EQ(l.residual_multiplier, granite ? 0.5 : 1.0);
  EXPECT_EQ(l.logits_scaling, granite ? 4.0 : 1.0);
  const bool gemma = name.starts_with("tiny_gemma"), gemma23 = name == "tiny_gemma2" || name == "tiny_gemma3";
  EXPECT_EQ(l.gemma, gemma);
  EXPECT_EQ(l.tied_head, name == "tiny_llama3" || name == "tiny_qwen3" || gemma || starcoder2);
  EXPECT_EQ(l.sandwich_norms, gemma23);
  EXPECT_DOUBLE_EQ(l.attention_scale, gemma23   ? 1.0 / std::sqrt(12.0)
                                      : granite ? 0.3
                                                : 0.0);  // query_pre_attn_scalar 12
  EXPECT_EQ(l.attention_softcap, name == "tiny_gemma2" ? 5.0 : 0.0);
  EXPECT_EQ(l.logit_softcap, name == "tiny_gemma2" ? 3.0 : 0.0);
  EXPECT_EQ(l.rope_local_theta, name == "tiny_gemma3" || name == "tiny_olmo3" ? 10000.0 : 0.0);
  if (name == "tiny_olmo3" || name == "tiny_gpt_neox_sequential") {
    EXPECT_EQ(l.rope_theta, 500.0);
  }
  const int64_t head_dim = l.head_size();
  EXPECT_EQ(head_dim, name.starts_with("tiny_qwen3") || gemma ? 16 : 8);
  // The mixtures of experts (gen_hf_family_golden.py): Mixtral's 4 of width 48, top 2
  // renormalised, every layer; Qwen2-MoE's 6 of 24, top 3 as they are, a shared expert of 40,
  // layer 1 dense; Qwen3-MoE's 6 of 24, top 2 renormalised, layer 0 dense.
  const nn::LlamaConfig::Experts& x = l.experts;
  const bool mixtral = name == "tiny_mixtral", qwen2_moe = name == "tiny_qwen2_moe",
             qwen3_moe = name == "tiny_qwen3_moe";
  EXPECT_EQ(x.count, mixtral || gpt_oss ? 4 : qwen2_moe || qwen3_moe ? 6 : 0);
  EXPECT_EQ(x.router_bias, gpt_oss);
  if (x.count > 0) {
    EXPECT_EQ(x.top_k, qwen2_moe ? 3 : 2);
    EXPECT_EQ(x.hidden, mixtral || gpt_oss ? 0 : 24);
    EXPECT_EQ(x.normalize, !qwen2_moe);
    EXPECT_EQ(x.shared_hidden, qwen2_moe ? 40 : 0);
    const std::vector<bool> moe_layers = mixtral || gpt_oss ? std::vector<bool>{}
                                         : qwen2_moe        ? std::vector<bool>{true, false}
                                                            : std::vector<bool>{false, true};
    EXPECT_EQ(l.moe_layers, moe_layers);
  }
  const int64_t rotary_dim = l.rotary_dim > 0 ? l.rotary_dim : head_dim;
  // Partial rotations: half of each head of 8 (Phi-3 longrope, GPT-NeoX, Phi, StableLM
  // parallel), a quarter (the sequential GPT-NeoX and StableLM).
  const bool quarter = name == "tiny_gpt_neox_sequential" || name == "tiny_stablelm";
  EXPECT_EQ(rotary_dim, quarter ? 2 : name == "tiny_phi3_longrope" || neox || phi || stablelm ? 4 : head_dim);

  const std::string logits = family_dir(c) + "/logits.safetensors";
  const HostTensor want = read_safetensors(logits).at("inv_freq");
  const double want_scaling = std::stod(read_safetensors_metadata(logits).at("attention_scaling"));
  const RopeFrequencies got = rope_frequencies(rotary_dim, l.rope_theta, l.rope_scaling);
  ASSERT_EQ(static_cast<int64_t>(got.inv_freq.size()), want.numel());
  std::vector<float> got_f(got.inv_freq.begin(), got.inv_freq.end());
  // transformers computes them in f32: 1e-6 is a few of its roundings.
  EXPECT_LT(tg::testing::rel_diff(got_f, want.f32()), 1e-6) << name;
  EXPECT_NEAR(got.attention_factor, want_scaling, 1e-12) << name;
  // Every case moves at least one frequency when its rope is rescaled (a no-op would pass).
  if (l.rope_scaling.type != RopeScaling::Type::kNone) {
    const RopeFrequencies plain = rope_frequencies(rotary_dim, l.rope_theta);
    EXPECT_NE(plain.inv_freq, got.inv_freq) << name;
  }
}

TEST_P(Family, LogitsEqualTransformersOnEveryBackend) {
  const FamilyCase& c = GetParam();
  const pretrained::Model lm = pretrained::load(family_dir(c));
  const std::map<std::string, HostTensor> golden = read_safetensors(family_dir(c) + "/logits.safetensors");
  const HostTensor& ids = golden.at("ids");
  for (const Device& device : tg::testing::all_devices()) {
    Program p = compile_forward(*lm.module, [&lm](Tensor x) { return lm.logits(x); },
                                {.inputs = {{"ids", ids.shape(), DType::kI32}}, .device = device});
    lm.upload(p);
    const double d = tg::testing::rel_diff(p.run({{"ids", ids.i32()}}).f32(), golden.at("logits").f32());
    EXPECT_LT(d, 1e-4) << c.folder << " on " << device.str();
    std::printf("  %s on %s: relative logit difference to transformers %.2e\n", c.folder,
                device.str().c_str(), d);
  }
}

// Under bf16 mixed precision the products round their operands to 8 significant bits: the
// logits stay within that of transformers' f32 ones (and differ from them: bf16 is in use).
// f16 keeps 11 bits: about an eighth of bf16's distance (bound 4e-3). (Inference programs hoist
// the weights' 16-bit copies and merge products that read the same rows: those paths run in
// both types.)
TEST_P(Family, HalfLogitsWithinTheirRounding) {
  const FamilyCase& c = GetParam();
  // The gpt-oss fixtures' experts are drawn large, so that the clamps at ±7 act, beside decisive
  // routers: a rounding moves values across a clamp or flips a choice, and the logits then move
  // by far more than a rounding. llama_test.cc's GptOssLayersInHalfPrecisionStayWithinRounding
  // checks those layers in half precision without choices to flip.
  if (std::string(c.folder).starts_with("tiny_gpt_oss")) GTEST_SKIP() << "see the comment";
  const pretrained::Model lm = pretrained::load(family_dir(c));
  const std::map<std::string, HostTensor> golden = read_safetensors(family_dir(c) + "/logits.safetensors");
  const HostTensor& ids = golden.at("ids");
  for (const Device& device : tg::testing::all_devices())
    for (const auto& [precision, low, bound] :
         {std::tuple{Precision::kBf16, 1e-5, 3e-2}, std::tuple{Precision::kF16, 1e-6, 4e-3}}) {
      const char* name = precision == Precision::kBf16 ? "bf16" : "f16";
      Program p = compile_forward(
          *lm.module, [&lm](Tensor x) { return lm.logits(x); },
          {.inputs = {{"ids", ids.shape(), DType::kI32}}, .device = device, .precision = precision});
      lm.upload(p);
      const double d = tg::testing::rel_diff(p.run({{"ids", ids.i32()}}).f32(), golden.at("logits").f32());
      EXPECT_GT(d, low) << c.folder << " " << name << " on " << device.str();
      EXPECT_LT(d, bound) << c.folder << " " << name << " on " << device.str();
      std::printf("  %s %s on %s: relative logit difference to transformers' f32 %.2e\n", c.folder, name,
                  device.str().c_str(), d);
    }
}

// transformers' greedy generate of 8 tokens after the first row's first 3 ids (with its cache),
// as far as the context goes (the longrope model's 8 positions hold 3 + 5: transformers changes
// its frequencies for the later ones).
TEST_P(Family, GreedyGenerationEqualsTransformers) {
  const FamilyCase& c = GetParam();
  const pretrained::Model lm = pretrained::load(family_dir(c));
  const std::map<std::string, HostTensor> golden = read_safetensors(family_dir(c) + "/logits.safetensors");
  const std::span<const int32_t> hf = golden.at("greedy").i32();
  ASSERT_EQ(hf.size(), 11u);
  const int64_t cache = std::min<int64_t>(12, lm.context), new_tokens = std::min<int64_t>(8, cache - 3);
  const std::vector<int32_t> prompt(hf.begin(), hf.begin() + 3),
      want(hf.begin() + 3, hf.begin() + 3 + new_tokens);
  for (const Device& device : tg::testing::all_devices()) {
    Generator gen(*lm.module, lm.step(), {.cache_len = cache, .device = device});
    lm.upload(gen.decode());
    EXPECT_EQ(gen.generate(prompt, {.max_new_tokens = 8}), want) << c.folder << " on " << device.str();
  }
}

TEST_P(Family, CachedLogitsEqualTheFullForwardOnEveryPrefix) {
  const FamilyCase& c = GetParam();
  const pretrained::Model lm = pretrained::load(family_dir(c));
  // The check runs 10 positions; the longrope model's cached path is what its greedy test drives.
  if (lm.context < 10) GTEST_SKIP() << c.folder << ": a context of " << lm.context << " positions";
  auto& model = static_cast<nn::Llama&>(*lm.module);
  for (const Device& device : tg::testing::all_devices())
    tg::testing::expect_cached_equals_full(model, config_of(lm).vocab, 12, 4, device);
}

// A copy of a fixture folder with its config.json edited (each `from` → `to`; each must occur)
// and its weights as given, under the temp directory; removed at the end.
struct EditedFolder {
  EditedFolder(const std::string& fixture, const std::vector<std::pair<std::string, std::string>>& edits,
               const std::map<std::string, HostTensor>* weights = nullptr)
      : path(std::filesystem::temp_directory_path() /
             ("tg_family_" + std::to_string(getpid()) + "_" + std::to_string(counter++))) {
    const std::string src = std::string(TG_TEST_DATA_DIR) + "/" + fixture;
    std::filesystem::create_directories(path);
    std::ifstream in(src + "/config.json");
    std::string config{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    for (const auto& [from, to] : edits) {
      const size_t at = config.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      if (at != std::string::npos) config.replace(at, from.size(), to);
    }
    std::ofstream(path / "config.json") << config;
    save_safetensors((path / "model.safetensors").string(),
                     weights ? *weights : read_safetensors(src + "/model.safetensors"));
  }
  ~EditedFolder() { std::filesystem::remove_all(path); }
  std::string error() const {
    return tg::testing::message_of<CheckpointError>([&] { pretrained::load(path.string()); });
  }
  std::filesystem::path path;
  static inline int counter = 0;
};

// transformers' load-balancing loss of the mixtures (gen_hf_moe_aux_golden.py writes
// moe_aux_golden.txt): the fixtures' config.json leave output_router_logits false, so the loader
// leaves the term off. With LlamaConfig::Experts::aux_loss_coef set, Llama::loss is
// transformers' loss with labels (the next token's cross-entropy plus coef · aux), and coef 1
// against coef 0 gives the auxiliary loss alone.
TEST(MoeAuxLoss, EqualsTransformers) {
  std::ifstream in(std::string(TG_TEST_DATA_DIR) + "/moe_aux_golden.txt");
  ASSERT_TRUE(in) << "moe_aux_golden.txt missing";
  std::string line;
  int folders = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string folder;
    double aux = 0, coef = 0, full = 0;
    fields >> folder >> aux >> coef >> full;
    const std::string dir = std::string(TG_TEST_DATA_DIR) + "/" + folder;
    const pretrained::Model lm = pretrained::load(dir);
    const nn::LlamaConfig loaded = std::get<nn::LlamaConfig>(lm.config);
    EXPECT_EQ(loaded.experts.aux_loss_coef, 0.0) << folder;
    const HostTensor ids = read_safetensors(dir + "/logits.safetensors").at("ids");
    const int64_t batch = ids.shape()[0], length = ids.shape()[1];
    std::vector<int32_t> targets(ids.i32().begin(), ids.i32().end());  // the next id; the last ignored
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < length; ++t)
        targets[static_cast<size_t>(b * length + t)] =
            t + 1 < length ? ids.i32()[static_cast<size_t>(b * length + t + 1)] : -100;
    for (const Device& device : tg::testing::all_devices()) {
      std::vector<double> losses;
      for (const double c : {0.0, 1.0, coef}) {
        nn::LlamaConfig config = loaded;
        config.experts.aux_loss_coef = c;
        nn::Llama model(config);
        Program p = compile_forward(
            model, [&model](Tensor i, Tensor t) { return model.loss(i, t); },
            {.inputs = {{"ids", ids.shape(), DType::kI32}, {"targets", ids.shape(), DType::kI32}},
             .device = device});
        p.upload_params(lm.weights);
        losses.push_back(p.run({{"ids", ids.i32()}, {"targets", targets}}).f32()[0]);
      }
      const std::string at = folder + " on " + device.str();
      EXPECT_NEAR(losses[1] - losses[0], aux, 2e-5 * aux) << at;
      EXPECT_NEAR(losses[2], full, 1e-5 * full) << at;
      std::printf("  %s: aux %.7f (transformers %.7f), loss %.7f (transformers %.7f)\n", at.c_str(),
                  losses[1] - losses[0], aux, losses[2], full);
    }
    ++folders;
  }
  EXPECT_EQ(folders, 3);
  // With output_router_logits true the loader takes router_aux_loss_coef (transformers' default
  // 0.001 where it is absent).
  const auto coef_of = [](const EditedFolder& d) {
    return std::get<nn::LlamaConfig>(pretrained::load(d.path.string()).config).experts.aux_loss_coef;
  };
  EXPECT_EQ(coef_of(EditedFolder("tiny_mixtral",
                                 {{"\"output_router_logits\": false", "\"output_router_logits\": true"},
                                  {"\"router_aux_loss_coef\": 0.001", "\"router_aux_loss_coef\": 0.02"}})),
            0.02);
  EXPECT_EQ(coef_of(EditedFolder("tiny_qwen3_moe",
                                 {{"\"output_router_logits\": false", "\"output_router_logits\": true"},
                                  {"\"router_aux_loss_coef\": 0.001,", ""}})),
            0.001);
}

TEST(FamilyErrors, WhatTheLibraryDoesNotImplementIsRefused) {
  EXPECT_HAS(
      EditedFolder("tiny_qwen2", {{"\"rms_norm_eps\"", "\"partial_rotary_factor\": 0.5, \"rms_norm_eps\""}})
          .error(),
      "partial_rotary_factor 0.500000 is implemented for Phi3ForCausalLM only");
  EXPECT_HAS(EditedFolder("tiny_phi3", {{"\"default\"", "\"dynamic\""}}).error(),
             "rope_type \"dynamic\"; implemented: default, linear, llama3, yarn and longrope");
  EXPECT_HAS(EditedFolder("tiny_phi3_longrope", {{"1.5\n    ]", "1.5, 2.0\n    ]"}}).error(),
             "longrope needs 2 positive short factors (one per pair), got 3");
  EXPECT_HAS(EditedFolder("tiny_gemma", {{"\"hidden_activation\": \"gelu_pytorch_tanh\"",
                                          "\"hidden_activation\": \"relu\""}})
                 .error(),
             "hidden_activation \"relu\" (implemented: silu, gelu, gelu_pytorch_tanh, gelu_new, relu2)");
  EXPECT_HAS(EditedFolder("tiny_gemma3", {{"\"use_bidirectional_attention\": false",
                                           "\"use_bidirectional_attention\": true"}})
                 .error(),
             "use_bidirectional_attention true (an encoder) is not implemented");
  EXPECT_HAS(EditedFolder("tiny_qwen3", {{"\"head_dim\": 16", "\"head_dim\": 0"}}).error(),
             "\"head_dim\" is 0, expected a positive integer");
  EXPECT_HAS(EditedFolder("tiny_qwen2_window", {{"\"full_attention\"", "\"global\""}}).error(),
             "layer_types is [\"global\",\"sliding_attention\"], expected 2 of \"full_attention\" and "
             "\"sliding_attention\"");
  EXPECT_HAS(EditedFolder("tiny_qwen2_window", {{"\"full_attention\",", ""}}).error(), "layer_types is");
  // Without layer_types (transformers 4's files), Qwen2 slides from max_window_layers on, and a
  // missing sliding_window is its 4096.
  EditedFolder old_style("tiny_qwen2_window", {{"\"layer_types\"", "\"unused_layer_types\""},
                                               {"\"max_window_layers\": 1", "\"max_window_layers\": 0"},
                                               {"\"sliding_window\": 3,", ""}});
  const nn::LlamaConfig l = std::get<nn::LlamaConfig>(pretrained::load(old_style.path.string()).config);
  EXPECT_EQ(l.sliding_window, 4096);
  EXPECT_EQ(l.sliding_layers, (std::vector<bool>{true, true}));
  // Gemma: hidden_activation first (the Hub's files say "hidden_act": "gelu" beside it), then
  // hidden_act; "gelu" is the erf GELU.
  const auto gate_of = [](const EditedFolder& d) {
    return std::get<nn::LlamaConfig>(pretrained::load(d.path.string()).config).gate;
  };
  EXPECT_EQ(gate_of(EditedFolder("tiny_gemma",
                                 {{"\"hidden_act\": \"gelu_pytorch_tanh\"", "\"hidden_act\": \"gelu\""}})),
            nn::LlamaConfig::Gate::kGeluTanh);
  EXPECT_EQ(gate_of(EditedFolder("tiny_gemma", {{"\"hidden_activation\": \"gelu_pytorch_tanh\"",
                                                 "\"hidden_activation\": \"gelu\""}})),
            nn::LlamaConfig::Gate::kGelu);
  EXPECT_EQ(gate_of(EditedFolder("tiny_gemma",
                                 {{"\"hidden_act\": \"gelu_pytorch_tanh\"", "\"hidden_act\": \"gelu\""},
                                  {"\"hidden_activation\": \"gelu_pytorch_tanh\"", "\"unused\": 0"}})),
            nn::LlamaConfig::Gate::kGelu);
  // Qwen's use_sliding_window false turns windows off even where layer_types names them.
  EditedFolder off("tiny_qwen2_window", {{"\"use_sliding_window\": true", "\"use_sliding_window\": false"}});
  EXPECT_EQ(std::get<nn::LlamaConfig>(pretrained::load(off.path.string()).config).sliding_window, 0);
}

// Older config files of the newer families, and what their loaders refuse.
TEST(FamilyErrors, OlderConfigsAndExpertSettings) {
  // OLMo 3 without per-layer-type RoPE settings or layer_types (transformers 4's files): the
  // rescaling is the full layers' alone, the sliding ones rotate plainly by the base; three
  // sliding layers, then a full one (both of these two are sliding).
  EditedFolder olmo3("tiny_olmo3", {{"\"layer_types\"", "\"unused_layer_types\""},
                                    {"\"rope_parameters\"",
                                     "\"rope_theta\": 500.0, \"rope_scaling\": {\"rope_type\": "
                                     "\"linear\", \"factor\": 2.0}, \"unused_rope\""}});
  const nn::LlamaConfig l = std::get<nn::LlamaConfig>(pretrained::load(olmo3.path.string()).config);
  EXPECT_EQ(l.rope_theta, 500.0);
  EXPECT_EQ(l.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(l.rope_local_theta, 500.0);
  EXPECT_EQ(l.sliding_layers, (std::vector<bool>{true, true}));
  // A missing rms_norm_eps is the family's default: Mixtral's 1e-5.
  EditedFolder mixtral("tiny_mixtral", {{"\"rms_norm_eps\"", "\"unused_eps\""}});
  EXPECT_EQ(std::get<nn::LlamaConfig>(pretrained::load(mixtral.path.string()).config).rms_eps, 1e-5);
  EXPECT_HAS(
      EditedFolder("tiny_mixtral", {{"\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 5"}}).error(),
      "num_experts_per_tok 5 is more than the 4 experts");
  EXPECT_HAS(
      EditedFolder("tiny_qwen3_moe", {{"\"decoder_sparse_step\": 2", "\"decoder_sparse_step\": 0"}}).error(),
      "decoder_sparse_step 0 is not positive");
  EXPECT_HAS(
      EditedFolder("tiny_qwen2_moe", {{"\"mlp_only_layers\": [\n    1\n  ]", "\"mlp_only_layers\": [7]"}})
          .error(),
      "mlp_only_layers holds 7, not a layer of 0 … 1");
  EXPECT_HAS(EditedFolder("tiny_granite", {{"\"logits_scaling\": 4.0", "\"logits_scaling\": -4.0"}}).error(),
             "logits_scaling must be a positive number");
}

// gpt-oss's MXFP4 folder saves as a plain one (the decoded f32 experts, no quantization_config)
// that loads back to the same weights; other quantizations and broken MXFP4 pairs are refused.
TEST(FamilyErrors, GptOssMxfp4SavesDecodedAndBadQuantizationIsRefused) {
  const pretrained::Model lm = pretrained::load(std::string(TG_TEST_DATA_DIR) + "/tiny_gpt_oss_mxfp4");
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("tg_gpt_oss_save_" + std::to_string(getpid()));
  pretrained::save(lm, lm.weights, out.string());
  EXPECT_EQ(tg::testing::slurp(out / "config.json").find("quantization_config"), std::string::npos);
  const pretrained::Model back = pretrained::load(out.string());
  ASSERT_EQ(back.weights.size(), lm.weights.size());
  for (const auto& [name, t] : lm.weights) EXPECT_TRUE(std::ranges::equal(back.weights.at(name).f32(), t.f32())) << name;
  std::filesystem::remove_all(out);

  EXPECT_HAS(EditedFolder("tiny_gpt_oss", {{"\"model_type\": \"gpt_oss\"",
                                            "\"model_type\": \"gpt_oss\", \"quantization_config\": "
                                            "{\"quant_method\": \"bitsandbytes\"}"}})
                 .error(),
             "quantization_config {\"quant_method\":\"bitsandbytes\"} is not read");
  const std::string dir = std::string(TG_TEST_DATA_DIR) + "/tiny_gpt_oss";
  std::map<std::string, HostTensor> w = read_safetensors(dir + "/model.safetensors");
  w.erase("model.layers.0.mlp.experts.gate_up_proj");
  w["model.layers.0.mlp.experts.gate_up_proj_blocks"] = HostTensor(DType::kI8, {4, 64, 1, 16});
  EXPECT_HAS(EditedFolder("tiny_gpt_oss", {}, &w).error(),
             "'model.layers.0.mlp.experts.gate_up_proj_scales' is missing");
  w["model.layers.0.mlp.experts.gate_up_proj_blocks"] = HostTensor(DType::kI8, {4, 64, 2, 16});
  w["model.layers.0.mlp.experts.gate_up_proj_scales"] = HostTensor(DType::kI8, {4, 64, 2});
  EXPECT_HAS(
      EditedFolder("tiny_gpt_oss", {}, &w).error(),
      "'model.layers.0.mlp.experts.gate_up_proj_blocks' must be U8 [4, 64, 1, 16], found [4, 64, 2, 16]");
}

TEST(FamilyErrors, PhiFusedTensorsAreChecked) {
  const std::string dir = std::string(TG_TEST_DATA_DIR) + "/tiny_phi3";
  std::map<std::string, HostTensor> w = read_safetensors(dir + "/model.safetensors");
  w.erase("model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_HAS(
      EditedFolder("tiny_phi3", {}, &w).error(),
      "no tensor 'model.layers.1.self_attn.qkv_proj.weight' (Phi3ForCausalLM needs it, shape [64, 32])");
  w = read_safetensors(dir + "/model.safetensors");
  w["model.layers.0.mlp.gate_up_proj.weight"] = HostTensor(DType::kF32, {48, 32});
  EXPECT_HAS(EditedFolder("tiny_phi3", {}, &w).error(),
             "'model.layers.0.mlp.gate_up_proj.weight' has shape [48, 32], expected [96, 32]");
  w = read_safetensors(dir + "/model.safetensors");
  w["model.layers.0.self_attn.q_proj.weight"] = HostTensor(DType::kF32, {32, 32});
  EXPECT_HAS(EditedFolder("tiny_phi3", {}, &w).error(),
             "unexpected tensor 'model.layers.0.self_attn.q_proj.weight'");
}

// GPT-NeoX in transformers 4's words (rotary_pct, rotary_emb_base at the top) reads as 5's
// rope_parameters; its old files' buffers (the causal mask attention.bias, masked_bias) are
// skipped; the fused query_key_value is checked; q/k LayerNorms and unknown activations are
// refused.
TEST(FamilyErrors, LayerNormRelatives) {
  const std::string neox_rope =
      "\"rope_parameters\": {\n    \"partial_rotary_factor\": 0.25,\n    \"rope_theta\": 500.0,\n    "
      "\"rope_type\": \"default\"\n  },";
  EditedFolder old_neox("tiny_gpt_neox_sequential",
                        {{neox_rope, "\"rotary_pct\": 0.25, \"rotary_emb_base\": 500.0,"}});
  const nn::LlamaConfig l = std::get<nn::LlamaConfig>(pretrained::load(old_neox.path.string()).config);
  EXPECT_EQ(l.rotary_dim, 2);
  EXPECT_EQ(l.rope_theta, 500.0);
  // Without any rotated fraction the family's default: a quarter of GPT-NeoX's heads.
  EditedFolder bare("tiny_gpt_neox_sequential", {{neox_rope, ""}});
  EXPECT_EQ(std::get<nn::LlamaConfig>(pretrained::load(bare.path.string()).config).rotary_dim, 2);

  const std::string dir = std::string(TG_TEST_DATA_DIR) + "/tiny_gpt_neox";
  std::map<std::string, HostTensor> w = read_safetensors(dir + "/model.safetensors");
  w["gpt_neox.layers.0.attention.bias"] = HostTensor(DType::kBool, {1, 1, 16, 16});
  w["gpt_neox.layers.0.attention.masked_bias"] = HostTensor(DType::kF32, {});
  EXPECT_NO_THROW(pretrained::load(EditedFolder("tiny_gpt_neox", {}, &w).path.string()));
  w = read_safetensors(dir + "/model.safetensors");
  w["gpt_neox.layers.1.attention.query_key_value.weight"] = HostTensor(DType::kF32, {95, 32});
  EXPECT_HAS(EditedFolder("tiny_gpt_neox", {}, &w).error(),
             "'gpt_neox.layers.1.attention.query_key_value.weight' has shape [95, 32], expected [96, 32]");
  w.erase("gpt_neox.layers.1.attention.query_key_value.weight");
  EXPECT_HAS(EditedFolder("tiny_gpt_neox", {}, &w).error(),
             "no tensor 'gpt_neox.layers.1.attention.query_key_value.weight' (GPTNeoXForCausalLM needs it");
  EXPECT_HAS(
      EditedFolder("tiny_gpt_neox", {{"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"relu\""}}).error(),
      "hidden_act \"relu\" (implemented: silu, gelu, gelu_new, gelu_pytorch_tanh)");
  EXPECT_HAS(EditedFolder("tiny_phi", {{"\"qk_layernorm\": false", "\"qk_layernorm\": true"}}).error(),
             "qk_layernorm true (LayerNorms over the queries and keys) is not implemented");
  EXPECT_HAS(
      EditedFolder("tiny_phi", {{"\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true"}}).error(),
      "tie_word_embeddings true is not implemented for Phi");
  EXPECT_HAS(
      EditedFolder("tiny_stablelm", {{"\"partial_rotary_factor\": 0.25,", "\"partial_rotary_factor\": 1.5,"},
                                     {"\"partial_rotary_factor\": 0.25,", "\"partial_rotary_factor\": 1.5,"}})
          .error(),
      "partial_rotary_factor 1.500000 is not within (0, 1]");
  // 0.375 of a head of 8 is 3 features: no whole number of pairs.
  EXPECT_HAS(
      EditedFolder("tiny_phi", {{"\"partial_rotary_factor\": 0.5,", "\"partial_rotary_factor\": 0.375,"},
                                {"\"partial_rotary_factor\": 0.5,", "\"partial_rotary_factor\": 0.375,"}})
          .error(),
      "rotates 3 of the 8 features of a head; RoPE needs a positive even count");
}

INSTANTIATE_TEST_SUITE_P(Folders, Family, ::testing::ValuesIn(kFamilyCases),
                         [](const auto& info) { return std::string(info.param.folder).substr(5); });

}  // namespace
