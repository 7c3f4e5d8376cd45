// nn::Llama, the Llama-family decoder: Hugging Face LlamaForCausalLM's parameter names and
// shapes (grouped-query attention, untied, tied and with biases); KV-cached logits equal the
// plain forward's on every prefix and tg::Generator's greedy tokens equal greedy by the full
// forward, on every backend this machine has; gradients against central differences on ref;
// a few training steps lower the loss (recomputation changing nothing); the configuration and
// shape errors; and, once tests/data/tiny_llama/ exists (gen_llama_golden.py, on a machine with
// transformers), logits equal to transformers' for its weights loaded by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "decode_check.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

// transformers' tiny fixture sizes (gen_llama_golden.py): GQA with 4 query and 2 kv heads.
const nn::LlamaConfig kLlamaConfig{
    .vocab = 64, .seq_len = 16, .layers = 2, .d_model = 32, .heads = 4, .kv_heads = 2, .mlp_hidden = 48};
constexpr int64_t kLlamaCache = 12;

std::vector<Device> llama_devices() { return tg::testing::all_devices(); }

std::map<std::string, Shape> shapes_of(const nn::Llama& model) {
  std::map<std::string, Shape> out;
  for (const Param* p : model.parameters()) out[p->path()] = p->shape();
  return out;
}

TEST(Llama, ParametersAreHuggingFacesNamesAndShapes) {
  std::map<std::string, Shape> want{
      {"model.embed_tokens.weight", {64, 32}}, {"model.norm.weight", {32}}, {"lm_head.weight", {64, 32}}};
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    want[l + "input_layernorm.weight"] = {32};
    want[l + "self_attn.q_proj.weight"] = {32, 32};  // [out, in], PyTorch's layout
    want[l + "self_attn.k_proj.weight"] = {16, 32};  // 2 kv heads of 8
    want[l + "self_attn.v_proj.weight"] = {16, 32};
    want[l + "self_attn.o_proj.weight"] = {32, 32};
    want[l + "post_attention_layernorm.weight"] = {32};
    want[l + "mlp.gate_proj.weight"] = {48, 32};
    want[l + "mlp.up_proj.weight"] = {48, 32};
    want[l + "mlp.down_proj.weight"] = {32, 48};
  }
  nn::Llama untied(kLlamaConfig);
  EXPECT_EQ(shapes_of(untied), want);
  // Tied: the head is embed_tokens, no lm_head.
  nn::LlamaConfig tied_config = kLlamaConfig;
  tied_config.tied_head = true;
  nn::Llama tied(tied_config);
  want.erase("lm_head.weight");
  EXPECT_EQ(shapes_of(tied), want);
  // Biases: q/k/v/o_proj with attention_bias, gate/up/down_proj with mlp_bias.
  nn::LlamaConfig biased = kLlamaConfig;
  biased.attention_bias = biased.mlp_bias = true;
  const std::map<std::string, Shape> with_bias = shapes_of(nn::Llama(biased));
  EXPECT_EQ(with_bias.size(), want.size() + 1 + 2 * 7);
  EXPECT_EQ(with_bias.at("model.layers.1.self_attn.k_proj.bias"), Shape{16});
  EXPECT_EQ(with_bias.at("model.layers.0.mlp.down_proj.bias"), Shape{32});
}

TEST(Llama, InitialisesAsHuggingFace) {
  nn::Llama model(kLlamaConfig);
  Program p = compile_forward(model, [&model](Tensor ids) { return model.logits(ids); },
                              {.inputs = {{"ids", {2, 7}, DType::kI32}}, .device = Device::cpu()});
  p.init_params(1);
  const auto params = p.download_params();
  const std::span<const float> gain = params.at("model.norm.weight").f32();
  EXPECT_EQ(std::vector<float>(gain.begin(), gain.end()), std::vector<float>(32, 1.f));
  const std::span<const float> w = params.at("model.layers.0.mlp.gate_proj.weight").f32();
  double sq = 0;
  for (const float v : w) sq += double(v) * v;
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(w.size())), 0.02, 0.002);  // normal(0.02)
  EXPECT_EQ(p.run({{"ids", std::vector<int32_t>(14, 3)}}).shape(), (Shape{2, 7, 64}));
}

TEST(Llama, ConfigurationAndShapeErrors) {
  nn::LlamaConfig c = kLlamaConfig;
  c.kv_heads = 3;  // 4 heads are no multiple of 3
  EXPECT_NE(tg::testing::message_of<ShapeError>([&] { nn::Llama m(c); }).find("multiple of kv_heads"),
            std::string::npos);
  c = kLlamaConfig;
  c.d_model = 12;  // head size 3: no rotate-half pairs
  EXPECT_NE(tg::testing::message_of<ShapeError>([&] { nn::Llama m(c); }).find("even rotary_dim"),
            std::string::npos);
  for (const int64_t rotary : {3, 10}) {  // odd; wider than the head of 8
    c = kLlamaConfig;
    c.rotary_dim = rotary;
    EXPECT_NE(
        tg::testing::message_of<ShapeError>([&] { nn::Llama m(c); }).find("even rotary_dim within the head"),
        std::string::npos);
  }
  c = kLlamaConfig;
  c.rope_scaling = {.type = RopeScaling::Type::kLongRope, .original_context = 8, .short_factor = {1.0}};
  EXPECT_NE(
      tg::testing::message_of<ShapeError>([&] { nn::Llama m(c); }).find("longrope needs 4 positive short"),
      std::string::npos);
  // Experts, norm placements and multipliers that cannot be built.
  const auto error_of = [](const nn::LlamaConfig& bad) {
    return tg::testing::message_of<ShapeError>([&] { nn::Llama m(bad); });
  };
  c = kLlamaConfig;
  c.experts = {.count = 4, .top_k = 5};
  EXPECT_NE(error_of(c).find("1 <= top_k <= count"), std::string::npos);
  c.experts = {.count = 4, .top_k = 2};
  c.moe_layers = {true};
  EXPECT_NE(error_of(c).find("moe_layers empty or one flag per layer"), std::string::npos);
  c = kLlamaConfig;
  c.post_norms = c.sandwich_norms = true;
  EXPECT_NE(error_of(c).find("sandwich_norms and post_norms exclude each other"), std::string::npos);
  c = kLlamaConfig;
  c.qk_norm_whole = true;
  EXPECT_NE(error_of(c).find("qk_norm_whole needs qk_norm"), std::string::npos);
  c = kLlamaConfig;
  c.residual_multiplier = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_of(c).find("must be finite and > 0"), std::string::npos);
  c = kLlamaConfig;
  c.parallel = nn::LlamaConfig::Parallel::kShared;
  c.post_norms = true;
  EXPECT_NE(error_of(c).find("a parallel layer has no sandwich_norms or post_norms"), std::string::npos);
  c = kLlamaConfig;
  c.layer_norm = c.gemma = true;
  EXPECT_NE(error_of(c).find("layer_norm excludes gemma"), std::string::npos);
  c = kLlamaConfig;
  c.head_bias = c.tied_head = true;
  EXPECT_NE(error_of(c).find("head_bias needs an untied head"), std::string::npos);
  c = kLlamaConfig;
  c.experts = {.count = 2, .top_k = 1};
  c.gated_mlp = false;
  EXPECT_NE(error_of(c).find("experts are gated MLPs"), std::string::npos);
  nn::Llama model(kLlamaConfig);
  EXPECT_THROW(compile_forward(model, [&model](Tensor ids) { return model.logits(ids); },
                               {.inputs = {{"ids", {1, kLlamaConfig.seq_len + 1}, DType::kI32}},
                                .device = Device::cpu()}),
               ShapeError);
  EXPECT_THROW(tg::testing::cached_program(model, 1, 1, kLlamaConfig.seq_len + 1, Device::cpu()), ShapeError);
  EXPECT_THROW(tg::testing::cached_program(model, 1, kLlamaCache + 1, kLlamaCache, Device::cpu()),
               ShapeError);
}

// d(loss)/dθ along a random ±1 direction u of each parameter tensor, autograd's Σ g·u against
// (L(θ + h·u) − L(θ − h·u)) / 2h, on the double-precision reference: with biases everywhere,
// with a mixture of experts (top 2 of 3, renormalised, a gated shared expert, the
// load-balancing loss) in layer 0, and gpt-oss's layer (attention sinks, a window, a biased
// router, biased experts with the clamped gated unit; its clamps are the op table's `clamp`, and
// act in the transformers parity of pretrained_family_test.cc).
TEST(Llama, GradientsMatchCentralDifferences) {
  nn::LlamaConfig moe{
      .vocab = 11, .seq_len = 6, .layers = 2, .d_model = 8, .heads = 2, .kv_heads = 1, .mlp_hidden = 12};
  moe.experts = {
      .count = 3, .top_k = 2, .hidden = 6, .normalize = true, .shared_hidden = 5, .aux_loss_coef = 0.5};
  moe.moe_layers = {true, false};
  // GPT-NeoX's shape of layer: LayerNorms, an ungated MLP, parallel branches on two norms, a
  // biased head, half of each head rotated.
  nn::LlamaConfig neox{
      .vocab = 11, .seq_len = 6, .layers = 2, .d_model = 8, .heads = 2, .kv_heads = 1, .mlp_hidden = 12};
  neox.rotary_dim = 2;
  neox.attention_bias = neox.mlp_bias = neox.head_bias = neox.layer_norm = true;
  neox.gated_mlp = false;
  neox.gate = nn::LlamaConfig::Gate::kGelu;
  neox.parallel = nn::LlamaConfig::Parallel::kSeparate;
  nn::LlamaConfig phi = neox;  // one norm shared by both branches
  phi.parallel = nn::LlamaConfig::Parallel::kShared;
  nn::LlamaConfig gpt_oss{
      .vocab = 11, .seq_len = 6, .layers = 2, .d_model = 8, .heads = 2, .kv_heads = 1, .mlp_hidden = 6};
  gpt_oss.attention_sinks = gpt_oss.attention_bias = gpt_oss.mlp_bias = true;
  gpt_oss.sliding_window = 2;
  gpt_oss.sliding_layers = {true, false};
  gpt_oss.gate = nn::LlamaConfig::Gate::kClampedSwiglu;
  gpt_oss.experts = {.count = 3, .top_k = 2, .normalize = true, .router_bias = true};
  for (const nn::LlamaConfig& c : {nn::LlamaConfig{.vocab = 11,
                                  .seq_len = 6,
                                  .layers = 2,
                                  .d_model = 8,
                                  .heads = 2,
                                  .kv_heads = 1,
                                  .mlp_hidden = 12,
                                  .rope_theta = 100.0,
                                  .attention_bias = true,
                                  .mlp_bias = true},
                                   moe, neox, phi, gpt_oss}) {
    nn::Llama model(c);
    Program ref = compile_train(model, [&model](Tensor ids, Tensor t) { return model.loss(ids, t); },
                                {.inputs = {{"ids", {2, 5}, DType::kI32}, {"targets", {2, 5}, DType::kI32}},
                                 .optimizer = GradientsOnly{},
                                 .device = Device::ref()});
    // Larger values than the init's make larger, better measured derivatives.
    std::map<std::string, HostTensor> params = ref.download_params();
    uint32_t seed = 1;
    for (auto& [name, t] : params) {
      std::vector<float> v = tg::testing::uniform_values(t.f32().size(), seed++);
      if (name.find("norm") != std::string::npos)
        for (float& x : v) x = 1.f + 0.3f * x;
      t = HostTensor::f32(std::move(v), t.shape());
    }
    ref.upload_params(params);
    const std::vector<int32_t> ids{1, 4, 9, 2, 7, 3, 3, 10, 0, 5}, targets{4, 9, 2, 7, 1, 3, 10, 0, 5, 6};
    const Feeds feeds{{"ids", ids}, {"targets", targets}};  // Feeds views the vectors
    Captures grads;
    ref.step(feeds, {.captures = &grads});
    // The experts' choice is discontinuous (a top-k can flip within a step): smaller steps there.
    const float h = c.experts.count ? 1e-4f : 1e-3f;
    double worst = 0;
    for (const auto& [name, t] : params) {
      const std::vector<float> u = tg::testing::uniform_values(t.f32().size(), 100 + seed++);
      const std::span<const float> g = grads.at("grad/" + name).f32();
      double exact = 0;
      for (size_t i = 0; i < u.size(); ++i) exact += double(g[i]) * (u[i] < 0 ? -1.0 : 1.0);
      auto loss_at = [&](float step) {
        std::vector<float> v(t.f32().begin(), t.f32().end());
        for (size_t i = 0; i < v.size(); ++i) v[i] += u[i] < 0 ? -step : step;
        ref.upload_params({{name, HostTensor::f32(std::move(v), t.shape())}}, {.partial = true});
        return static_cast<double>(ref.step(feeds));
      };
      const double fd = (loss_at(h) - loss_at(-h)) / (2.0 * h);
      ref.upload_params({{name, t}}, {.partial = true});
      EXPECT_NEAR(exact, fd, 2e-3 * std::fabs(fd) + 2e-3)
          << name << ": autograd " << exact << ", difference " << fd;
      worst = std::max(worst, std::fabs(exact - fd) / std::max(std::fabs(fd), 1.0));
    }
    std::printf("  worst |autograd − central difference| / max(|difference|, 1): %.2e (%s)\n", worst,
                c.attention_sinks ? "gpt-oss"
                : c.experts.count ? "experts"
                : c.layer_norm    ? (c.parallel == nn::LlamaConfig::Parallel::kShared ? "parallel, one norm"
                                                                                      : "parallel, two norms")
                                  : "biases");
  }
}

// The two dispatches of a mixture compute the same function: the loss and every gradient of
// a training step with the experts sorted by expert (grouped_matmul) equal those of every expert
// on every token, on each backend; also with gpt-oss's biased experts (each sorted row gets its
// expert's bias) and clamped unit. With adapters on the experts kSorted runs dense, so that case
// only checks that the adapters are not dropped (both sides run the dense dispatch).
TEST(Llama, SortedAndDenseDispatchAgree) {
  const std::vector<int32_t> ids{1, 4, 9, 2, 7, 3, 3, 10, 0, 5, 12, 11, 6, 8},
      targets{4, 9, 2, 7, 1, 3, 10, 0, 5, 6, 11, 12, 8, 2};
  const Feeds feeds{{"ids", ids}, {"targets", targets}};
  for (const Device& device : tg::testing::all_devices())
    for (const bool lora : {false, true})
      for (const bool biased : {false, true}) {
        if (lora && biased) continue;
        nn::LlamaConfig c{.vocab = 13,
                          .seq_len = 8,
                          .layers = 2,
                          .d_model = 16,
                          .heads = 2,
                          .kv_heads = 1,
                          .mlp_hidden = 20};
        c.experts = {
            .count = 5, .top_k = 2, .hidden = 12, .normalize = true, .shared_hidden = biased ? 0 : 8};
        if (biased) {
          c.mlp_bias = c.experts.router_bias = true;
          c.gate = nn::LlamaConfig::Gate::kClampedSwiglu;
        }
        std::vector<Captures> grads(2);
        std::vector<float> losses;
        for (const auto dispatch :
             {nn::LlamaConfig::Experts::Dispatch::kDense, nn::LlamaConfig::Experts::Dispatch::kSorted}) {
          c.experts.dispatch = dispatch;
          nn::Llama model(c);
          if (lora) nn::add_lora(model, {.targets = {"up_proj"}, .rank = 2});
          Program p =
              compile_train(model, [&model](Tensor i, Tensor t) { return model.loss(i, t); },
                            {.inputs = {{"ids", {2, 7}, DType::kI32}, {"targets", {2, 7}, DType::kI32}},
                             .optimizer = GradientsOnly{},
                             .device = device});
          p.init_params(3);
          if (lora || biased) {  // B and the biases start at zero: give them a term
            std::map<std::string, HostTensor> params = p.download_params();
            uint32_t seed = 5;
            for (auto& [name, t] : params)
              if (name.find(lora ? "lora_B" : "bias") != std::string::npos)
                t = HostTensor::f32(tg::testing::uniform_values(t.f32().size(), seed++), t.shape());
            p.upload_params(params);
          }
          losses.push_back(p.step(feeds, {.captures = &grads[losses.size()]}));
        }
        SCOPED_TRACE(tg::testing::device_test_name(device) + (lora     ? ", adapters"
                                                              : biased ? ", biased"
                                                                       : ""));
        EXPECT_NEAR(losses[0], losses[1], 1e-5 * std::fabs(losses[0]));
        ASSERT_EQ(grads[0].size(), grads[1].size());
        for (const auto& [name, g] : grads[0])
          EXPECT_LT(tg::testing::rel_diff(g.f32(), grads[1].at(name).f32()), 1e-4) << name;
      }
}

// Adam on one batch: the loss falls; with every layer a recompute region the losses are the same.
TEST(Llama, TrainingLowersTheLoss) {
  std::vector<std::vector<float>> losses;
  for (const bool recompute : {false, true}) {
    nn::LlamaConfig c = kLlamaConfig;
    c.recompute = recompute;
    nn::Llama model(c);
    Program train = compile_train(model, [&model](Tensor ids, Tensor t) { return model.loss(ids, t); },
                                  {.inputs = {{"ids", {2, 8}, DType::kI32}, {"targets", {2, 8}, DType::kI32}},
                                   .optimizer = Adam{.lr = 1e-2},
                                   .device = Device::cpu()});
    train.init_params(7);
    std::vector<int32_t> ids, targets;
    for (int i = 0; i < 17; ++i) (i < 16 ? ids : targets).push_back(static_cast<int32_t>((i * 19 + 5) % 64));
    targets.insert(targets.begin(), ids.begin() + 1, ids.end());
    losses.emplace_back();
    for (int step = 0; step < 15; ++step)
      losses.back().push_back(train.step({{"ids", ids}, {"targets", targets}}));
  }
  EXPECT_NEAR(losses[0].front(), std::log(64.0), 0.2);  // near uniform at init
  EXPECT_LT(losses[0].back(), 0.5 * losses[0].front());
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-4) << "step " << i;
}

class LlamaDevices : public ::testing::TestWithParam<Device> {};

TEST_P(LlamaDevices, CachedLogitsMatchTheFullForwardOnEveryPrefix) {
  for (const int64_t batch : {int64_t{1}, int64_t{4}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    nn::Llama model(kLlamaConfig);
    tg::testing::expect_cached_equals_full(model, kLlamaConfig.vocab, kLlamaCache, batch, GetParam());
  }
}

TEST_P(LlamaDevices, GreedyGenerationEqualsTheFullForward) {
  nn::LlamaConfig c = kLlamaConfig;
  c.tied_head = true;
  nn::Llama model(c);
  Generator g(model,
              [&model](const Tensor& ids, const Tensor& pos, int64_t cache) {
                return model.logits_cached(ids, pos, cache);
              },
              {.batch = 2, .cache_len = kLlamaCache, .prefill_len = 4, .device = GetParam()});
  g.prefill().init_params(5);
  const std::vector<std::vector<int32_t>> prompts{{3, 17, 42, 5, 9, 60}, {11, 2}};
  const std::vector<std::vector<int32_t>> outs = g.generate(prompts, {.max_new_tokens = 5});
  Program full = compile_forward(model, [&model](Tensor ids) { return model.logits(ids); },
                                 {.inputs = {{"ids", {1, kLlamaCache}, DType::kI32}}, .device = GetParam()});
  ASSERT_EQ(outs.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(outs[i], tg::testing::greedy_by_full_forward(full, prompts[i], 5, kLlamaCache, c.vocab))
        << "prompt " << i;
}

// gpt-oss's layers (sinks, a window, biased experts sorted by expert, the clamped unit) under
// mixed precision: the logits move from the f32 program's by about bf16's (f16's) rounding. All
// experts are chosen (top_k = count), so that no rounding can flip a choice; the biases and
// sinks are drawn away from their zero init, and the gate and up rows large enough that the
// clamps act.
TEST_P(LlamaDevices, GptOssLayersInHalfPrecisionStayWithinRounding) {
  nn::LlamaConfig c{
      .vocab = 40, .seq_len = 8, .layers = 2, .d_model = 32, .heads = 4, .kv_heads = 2, .mlp_hidden = 24};
  c.attention_sinks = c.attention_bias = c.mlp_bias = true;
  c.sliding_window = 3;
  c.sliding_layers = {true, false};
  c.gate = nn::LlamaConfig::Gate::kClampedSwiglu;
  c.experts = {.count = 3, .top_k = 3, .normalize = true, .router_bias = true};
  nn::Llama model(c);
  const std::vector<int32_t> ids{1, 4, 9, 2, 7, 3, 3, 10, 0, 5, 12, 11, 6, 8, 39, 20};
  std::map<std::string, HostTensor> params;
  std::vector<float> want;
  for (const Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kF16}) {
    Program p = compile_forward(
        model, [&model](Tensor x) { return model.logits(x); },
        {.inputs = {{"ids", {2, 8}, DType::kI32}}, .device = GetParam(), .precision = precision});
    if (params.empty()) {
      p.init_params(11);
      params = p.download_params();
      uint32_t seed = 20;
      for (auto& [name, t] : params) {
        const bool drawn = name.ends_with("bias") || name.ends_with("sinks");
        const double scale =
            drawn ? 1.0
            : name.find("gate_proj") != std::string::npos || name.find("up_proj") != std::string::npos
                ? 1.5 / 0.02  // ~±7 at the clamps
                : 1.0;
        if (!drawn && scale == 1.0) continue;
        std::vector<float> v = drawn ? tg::testing::uniform_values(t.f32().size(), seed++)
                                     : std::vector<float>(t.f32().begin(), t.f32().end());
        for (float& x : v) x = static_cast<float>(x * scale);
        t = HostTensor::f32(std::move(v), t.shape());
      }
    }
    p.upload_params(params);
    const std::vector<float> got = p.run({{"ids", ids}}).f32();
    if (precision == Precision::kFp32) {
      want = got;
      continue;
    }
    const double d = tg::testing::rel_diff(got, want);
    const bool bf16 = precision == Precision::kBf16;
    EXPECT_GT(d, bf16 ? 1e-5 : 1e-6) << "the half type is in use";
    EXPECT_LT(d, bf16 ? 3e-2 : 4e-3);
    std::printf("  %s %s: relative logit difference to f32 %.2e\n", GetParam().str().c_str(),
                bf16 ? "bf16" : "f16", d);
  }
}

// transformers' LlamaForCausalLM on the same weights (tests/data/tiny_llama/, written by
// gen_llama_golden.py): model.safetensors loads by name, logits agree to 1e-4.
TEST_P(LlamaDevices, LogitsEqualTransformers) {
  const std::string dir = std::string(TG_TEST_DATA_DIR) + "/tiny_llama";
  if (!std::filesystem::exists(dir + "/model.safetensors"))
    GTEST_SKIP() << dir
                 << " does not exist yet: run tests/nn/gen_llama_golden.py on a machine with transformers";
  const std::map<std::string, HostTensor> golden = read_safetensors(dir + "/logits.safetensors");
  const std::map<std::string, std::string> meta = read_safetensors_metadata(dir + "/logits.safetensors");
  const nn::LlamaConfig c{.vocab = std::stoll(meta.at("vocab")),
                          .seq_len = std::stoll(meta.at("seq_len")),
                          .layers = std::stoll(meta.at("layers")),
                          .d_model = std::stoll(meta.at("d_model")),
                          .heads = std::stoll(meta.at("heads")),
                          .kv_heads = std::stoll(meta.at("kv_heads")),
                          .mlp_hidden = std::stoll(meta.at("mlp_hidden")),
                          .rms_eps = std::stod(meta.at("rms_eps")),
                          .rope_theta = std::stod(meta.at("rope_theta"))};
  nn::Llama model(c);
  const HostTensor& ids = golden.at("ids");
  Program p = compile_forward(model, [&model](Tensor x) { return model.logits(x); },
                              {.inputs = {{"ids", ids.shape(), DType::kI32}}, .device = GetParam()});
  load_safetensors(dir + "/model.safetensors", p);  // every parameter by its Hugging Face name
  const std::vector<float> got = p.run({{"ids", ids.i32()}}).f32();
  const double d = tg::testing::rel_diff(got, golden.at("logits").f32());
  EXPECT_LT(d, 1e-4);
  std::printf("  %s: relative logit difference to transformers %.2e\n", GetParam().str().c_str(), d);
}

INSTANTIATE_TEST_SUITE_P(Devices, LlamaDevices, ::testing::ValuesIn(llama_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

}  // namespace
