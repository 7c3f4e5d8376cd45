// The Llama family's relatives, each a tiny random folder transformers 5.17 wrote
// (tests/nn/gen_hf_family_golden.py, run on the GPU machine): Llama with Llama 3.1's RoPE
// rescaling, q/k/v/o biases and a tied head; Qwen2 (q/k/v biases); Qwen3 (q/k norms, its own
// head_dim, YaRN); Mistral (a sliding window, linear RoPE scaling); Phi-3 (fused projections);
// Gemma ((1 + w) norms, scaled embeddings, tanh-GELU gate). For each: the RoPE frequencies
// equal those transformers used, the logits equal transformers' on every backend (1e-4), a
// greedy Generator gives transformers' greedy ids, and the KV-cached logits equal the full
// forward on every prefix.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../nn/decode_check.h"
#include "tensorgrad/pretrained.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

struct Case {
  const char* folder;
  const char* architecture;
  int64_t context;  // what load() must report (Mistral's is its window)
};

const Case kCases[] = {{"tiny_llama3", "LlamaForCausalLM", 16}, {"tiny_qwen2", "Qwen2ForCausalLM", 16},
                       {"tiny_qwen3", "Qwen3ForCausalLM", 32},  {"tiny_mistral", "MistralForCausalLM", 16},
                       {"tiny_phi3", "Phi3ForCausalLM", 16},    {"tiny_gemma", "GemmaForCausalLM", 16}};

std::string dir_of(const Case& c) { return std::string(TG_TEST_DATA_DIR) + "/" + c.folder; }

const nn::LlamaConfig& config_of(const pretrained::Model& lm) { return std::get<nn::LlamaConfig>(lm.config); }

class Family : public ::testing::TestWithParam<Case> {};

TEST_P(Family, ConfigAndRopeFrequenciesAreTransformers) {
  const Case& c = GetParam();
  const pretrained::Model lm = pretrained::load(dir_of(c));
  EXPECT_EQ(lm.architecture, c.architecture);
  EXPECT_EQ(lm.context, c.context);
  EXPECT_EQ(lm.eos_ids, std::vector<int32_t>{2});
  const nn::LlamaConfig& l = config_of(lm);
  const std::string name = c.folder;
  EXPECT_EQ(l.qkv_bias, name == "tiny_qwen2");
  EXPECT_EQ(l.attention_bias, name == "tiny_llama3");
  EXPECT_EQ(l.qk_norm, name == "tiny_qwen3");
  EXPECT_EQ(l.gemma, name == "tiny_gemma");
  EXPECT_EQ(l.tied_head, name == "tiny_llama3" || name == "tiny_qwen3" || name == "tiny_gemma");
  const int64_t head_dim = l.head_dim > 0 ? l.head_dim : l.d_model / l.heads;
  EXPECT_EQ(head_dim, name == "tiny_qwen3" || name == "tiny_gemma" ? 16 : 8);

  const std::string logits = dir_of(c) + "/logits.safetensors";
  const HostTensor want = read_safetensors(logits).at("inv_freq");
  const double want_scaling = std::stod(read_safetensors_metadata(logits).at("attention_scaling"));
  const RopeFrequencies got = rope_frequencies(head_dim, l.rope_theta, l.rope_scaling);
  ASSERT_EQ(static_cast<int64_t>(got.inv_freq.size()), want.numel());
  std::vector<float> got_f(got.inv_freq.begin(), got.inv_freq.end());
  // transformers computes them in f32: 1e-6 is a few of its roundings.
  EXPECT_LT(tg::testing::rel_diff(got_f, want.f32()), 1e-6) << name;
  EXPECT_NEAR(got.attention_factor, want_scaling, 1e-12) << name;
  // Every case moves at least one frequency when its rope is rescaled (a no-op would pass).
  if (l.rope_scaling.type != RopeScaling::Type::kNone) {
    const RopeFrequencies plain = rope_frequencies(head_dim, l.rope_theta);
    EXPECT_NE(plain.inv_freq, got.inv_freq) << name;
  }
}

TEST_P(Family, LogitsEqualTransformersOnEveryBackend) {
  const Case& c = GetParam();
  const pretrained::Model lm = pretrained::load(dir_of(c));
  const std::map<std::string, HostTensor> golden = read_safetensors(dir_of(c) + "/logits.safetensors");
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

// transformers' greedy generate of 8 tokens after the first row's first 3 ids (with its cache).
TEST_P(Family, GreedyGenerationEqualsTransformers) {
  const Case& c = GetParam();
  const pretrained::Model lm = pretrained::load(dir_of(c));
  const std::map<std::string, HostTensor> golden = read_safetensors(dir_of(c) + "/logits.safetensors");
  const std::span<const int32_t> hf = golden.at("greedy").i32();
  ASSERT_EQ(hf.size(), 11u);
  const std::vector<int32_t> prompt(hf.begin(), hf.begin() + 3), want(hf.begin() + 3, hf.end());
  for (const Device& device : tg::testing::all_devices()) {
    Generator gen(*lm.module, lm.step(), {.cache_len = 12, .device = device});
    lm.upload(gen.decode());
    EXPECT_EQ(gen.generate(prompt, {.max_new_tokens = 8}), want) << c.folder << " on " << device.str();
  }
}

TEST_P(Family, CachedLogitsEqualTheFullForwardOnEveryPrefix) {
  const Case& c = GetParam();
  const pretrained::Model lm = pretrained::load(dir_of(c));
  auto& model = static_cast<nn::Llama&>(*lm.module);
  for (const Device& device : tg::testing::all_devices())
    tg::testing::expect_cached_equals_full(model, config_of(lm).vocab, 12, 4, device);
}

INSTANTIATE_TEST_SUITE_P(Folders, Family, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.folder).substr(5); });

}  // namespace
