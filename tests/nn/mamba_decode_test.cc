// Recurrent decoding of nn::MambaLM: the one-token step program (conv and SSM states as
// tg::state) gives, token after token, the logits the full forward gives on every prefix — one
// sequence and three at once; windows of several tokens from the states (a prompt's prefill)
// give them too, window after window and with one-token steps after them; and tg::Generator,
// token by token (prefill = false) and prefilling whole windows, continues prompts of different
// lengths exactly as the full forward's argmax does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

const nn::MambaLMConfig kMambaConfig{
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

// The worst relative difference between the full forward's logits of a sequence of sum(chunks)
// tokens and the cached steps' over the same tokens in chunks of those sizes, from zero states.
double worst_over_chunks(const nn::MambaLMConfig& config, int64_t batch, const std::vector<int64_t>& chunks,
                         Device device) {
  int64_t len = 0;
  for (const int64_t n : chunks) len += n;
  nn::MambaLM model(config);
  Program full = compile_forward(model, [&](Tensor ids) { return model.logits(ids); },
                                 {.inputs = {{"ids", {batch, len}, DType::kI32}}, .device = device});
  full.init_params(6);
  std::map<int64_t, Program> steps;  // by chunk size; the programs share the model's states
  for (const int64_t n : chunks)
    if (!steps.contains(n))
      steps.emplace(n, compile_forward(model, [&](Tensor ids) { return model.logits_step(ids); },
                                       {.inputs = {{"ids", {batch, n}, DType::kI32}}, .device = device}));
  std::vector<int32_t> ids(static_cast<size_t>(batch * len));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 5 + 2) % config.vocab);
  const std::vector<float> want = full.run({{"ids", ids}}).f32();
  const auto V = static_cast<size_t>(config.vocab);
  double worst = 0;
  full.reset_state();
  int64_t t = 0;
  for (const int64_t n : chunks) {
    std::vector<int32_t> cols;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < n; ++j) cols.push_back(ids[static_cast<size_t>(b * len + t + j)]);
    const std::vector<float> got = steps.at(n).run({{"ids", cols}}).f32();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < n; ++j) {
        const std::span<const float> g(got.data() + (b * n + j) * V, V),
            w(want.data() + (b * len + t + j) * V, V);
        worst = std::max(worst, rel_diff(g, w));
      }
    t += n;
  }
  return worst;
}

// One token at a time over 9 tokens; windows of 4 tokens, the first from zero states, the second
// from the first's (conv inputs across the boundary, a carried SSM state), then one-token steps.
TEST_P(MambaDecode, StepsGiveTheFullForwardOnEveryPrefix) {
  for (const auto& [config, batch] :
       {std::pair{kMambaConfig, int64_t{1}}, std::pair{kMambaConfig, int64_t{3}},
        std::pair{kConfig2, int64_t{1}}, std::pair{kConfig2, int64_t{3}}}) {
    for (const std::vector<int64_t>& chunks :
         {std::vector<int64_t>(9, 1), std::vector<int64_t>{4, 4, 1, 1}}) {
      SCOPED_TRACE("Mamba-" + std::to_string(config.version) + ", batch " + std::to_string(batch) +
                   ", first chunk " + std::to_string(chunks[0]));
      const double worst = worst_over_chunks(config, batch, chunks, GetParam());
      std::printf("  %s Mamba-%d batch %lld, chunks of %lld: worst relative logit difference %.2e\n",
                  GetParam().str().c_str(), config.version, static_cast<long long>(batch),
                  static_cast<long long>(chunks[0]), worst);
      EXPECT_LE(worst, 1e-5);
    }
  }
}

// Prompts of 8 and 6 tokens with windows of 3: two windows each (the shorter prompt whole, its
// first token sampled by the prefill), the rest of the longer token by token.
TEST_P(MambaDecode, GeneratorContinuesAsTheFullForward) {
  for (const auto& config : {kMambaConfig, kConfig2}) {
    SCOPED_TRACE("Mamba-" + std::to_string(config.version));
    nn::MambaLM model(config);
    constexpr int64_t kCache = 16;
    const CachedLm lm = [&model](const Tensor& ids, const Tensor& pos, int64_t n) {
      return model.logits_cached(ids, pos, n);
    };
    Generator tokens(model, lm, {.batch = 2, .cache_len = kCache, .device = GetParam(), .prefill = false});
    Generator windows(model, lm, {.batch = 2, .cache_len = kCache, .prefill_len = 3, .device = GetParam()});
    tokens.decode().init_params(9);
    Program full = compile_forward(model, [&](Tensor ids) { return model.logits(ids); },
                                   {.inputs = {{"ids", {1, kCache}, DType::kI32}}, .device = GetParam()});
    const std::vector<std::vector<int32_t>> prompts{{3, 1, 4, 1, 5, 9, 2, 6}, {9, 2, 7, 7, 1, 8}};
    for (Generator* gen : {&tokens, &windows}) {
      const auto outs = gen->generate(prompts, {.max_new_tokens = 6});
      for (size_t s = 0; s < prompts.size(); ++s)
        EXPECT_EQ(outs[s], tg::testing::greedy_by_full_forward(full, prompts[s], 6, kCache, config.vocab))
            << "sequence " << s << (gen == &windows ? ", prefilled in windows" : ", token by token");
    }
    // Sampling repeats for a seed, and the decode steps draw the same keys either way: also when
    // the prefill takes every prompt whole (6 and 6 tokens), with and without a penalty.
    for (const auto& these : {prompts, std::vector<std::vector<int32_t>>{prompts[1], prompts[1]}})
      for (const float penalty : {1.0f, 1.3f}) {
        const GenerateOptions o{
            .max_new_tokens = 8, .temperature = 1.0f, .top_k = 8, .repetition_penalty = penalty, .seed = 3};
        const auto sampled = tokens.generate(these, o);
        EXPECT_EQ(sampled, tokens.generate(these, o));
        EXPECT_EQ(sampled, windows.generate(these, o))
            << these[0].size() << " and " << these[1].size() << " tokens, penalty " << penalty;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, MambaDecode, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

TEST(MambaDecodeErrors, StepTakesI32Ids) {
  nn::MambaLM model(kMambaConfig);
  const std::string what = tg::testing::message_of<ShapeError>([&] {
    compile_forward(model, [&](Tensor ids) { return model.logits_step(ids); },
                    {.inputs = {{"ids", {1, 3}}}, .device = Device::cpu()});
  });
  EXPECT_NE(what.find("expects i32 ids [B, T], got f32[1, 3]"), std::string::npos) << what;
}

}  // namespace
