// Recurrent decoding of nn::MambaLM: the one-token step program (conv and SSM states as
// tg::state) gives, token after token, the logits the full forward gives on every prefix — one
// sequence and three at once; and tg::Generator in token-by-token mode (prefill = false)
// continues prompts of different lengths exactly as the full forward's argmax does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

const nn::MambaLMConfig kConfig{
    .vocab = 19, .layers = 2, .d_model = 16, .d_state = 4, .d_conv = 4, .expand = 2};
// Mamba-2: 4 heads of 8 channels, B and C in 2 groups, Δ clamped (the limit binds for some
// steps), biases, no conv bias, an untied head.
const nn::MambaLMConfig kConfig2{.vocab = 19,
                                 .layers = 2,
                                 .d_model = 16,
                                 .d_state = 4,
                                 .d_conv = 3,
                                 .expand = 2,
                                 .version = 2,
                                 .head_dim = 8,
                                 .groups = 2,
                                 .dt_limit_max = 0.05,
                                 .bias = true,
                                 .conv_bias = false,
                                 .tied_head = false};

class MambaDecode : public ::testing::TestWithParam<Device> {};

using tg::testing::rel_diff;

TEST_P(MambaDecode, StepsGiveTheFullForwardOnEveryPrefix) {
  constexpr int64_t kLen = 9;
  for (const auto& [config, batch] : {std::pair{kConfig, int64_t{1}}, std::pair{kConfig, int64_t{3}},
                                      std::pair{kConfig2, int64_t{1}}, std::pair{kConfig2, int64_t{3}}}) {
    SCOPED_TRACE("Mamba-" + std::to_string(config.version) + ", batch " + std::to_string(batch));
    nn::MambaLM model(config);
    Program full = compile_forward(model, [&](Tensor ids) { return model.logits(ids); },
                                   {.inputs = {{"ids", {batch, kLen}, DType::kI32}}, .device = GetParam()});
    Program step = compile_forward(model, [&](Tensor ids) { return model.logits_step(ids); },
                                   {.inputs = {{"ids", {batch, 1}, DType::kI32}}, .device = GetParam()});
    full.init_params(5);
    std::vector<int32_t> ids(static_cast<size_t>(batch * kLen));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % config.vocab);
    const std::vector<float> want = full.run({{"ids", ids}}).f32();
    const auto V = static_cast<size_t>(config.vocab);
    double worst = 0;
    step.reset_state();
    for (int64_t t = 0; t < kLen; ++t) {
      std::vector<int32_t> col;
      for (int64_t b = 0; b < batch; ++b) col.push_back(ids[static_cast<size_t>(b * kLen + t)]);
      const std::vector<float> got = step.run({{"ids", col}}).f32();
      for (int64_t b = 0; b < batch; ++b) {
        const std::span<const float> g(got.data() + b * V, V), w(want.data() + (b * kLen + t) * V, V);
        worst = std::max(worst, rel_diff(g, w));
      }
    }
    std::printf("  %s Mamba-%d batch %lld: worst relative logit difference %.2e\n", GetParam().str().c_str(),
                config.version, static_cast<long long>(batch), worst);
    EXPECT_LE(worst, 1e-5);
  }
}

TEST_P(MambaDecode, GeneratorContinuesAsTheFullForward) {
  nn::MambaLM model(kConfig);
  constexpr int64_t kCache = 16;
  Generator gen(
      model,
      [&model](const Tensor& ids, const Tensor& pos, int64_t n) { return model.logits_cached(ids, pos, n); },
      {.batch = 2, .cache_len = kCache, .device = GetParam(), .prefill = false});
  gen.decode().init_params(9);
  Program full = compile_forward(model, [&](Tensor ids) { return model.logits(ids); },
                                 {.inputs = {{"ids", {1, kCache}, DType::kI32}}, .device = GetParam()});
  const std::vector<std::vector<int32_t>> prompts{{3, 1, 4, 1, 5}, {9, 2}};
  const auto outs = gen.generate(prompts, {.max_new_tokens = 6});
  for (size_t s = 0; s < prompts.size(); ++s)
    EXPECT_EQ(outs[s], tg::testing::greedy_by_full_forward(full, prompts[s], 6, kCache, kConfig.vocab))
        << "sequence " << s;
  // Sampling repeats for a seed.
  const GenerateOptions o{.max_new_tokens = 8, .temperature = 1.0f, .top_k = 8, .seed = 3};
  EXPECT_EQ(gen.generate(prompts, o), gen.generate(prompts, o));
}

INSTANTIATE_TEST_SUITE_P(Devices, MambaDecode, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

TEST(MambaDecodeErrors, StepTakesOneToken) {
  nn::MambaLM model(kConfig);
  try {
    compile_forward(model, [&](Tensor ids) { return model.logits_step(ids); },
                    {.inputs = {{"ids", {1, 3}, DType::kI32}}, .device = Device::cpu()});
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("prefill = false"), std::string::npos) << e.what();
  }
}

}  // namespace
