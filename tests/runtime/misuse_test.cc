// Regression tests for misuse and edge cases found in review: each must end in a typed
// error or in the documented behaviour, never in a crash or a silent wrong answer.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using tg::testing::message_of;

struct MisuseNet : tg::Module {
  tg::nn::Linear fc{*this, "fc", 2, 2};
};

TEST(Misuse, TensorKeptFromAnEarlierTraceIsRejected) {
  MisuseNet m;
  tg::Tensor cached;
  auto fn = [&](tg::Tensor x) {
    if (!cached.valid()) cached = x * 2.0;
    return tg::relu(cached) + m.fc(x);
  };
  tg::compile_forward(m, fn, {.inputs = {{"x", {1, 2}}}});
  const std::string msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m, fn, {.inputs = {{"x", {1, 2}}}});
  });
  EXPECT_NE(msg.find("trace has ended"), std::string::npos) << msg;
}

TEST(Misuse, EveryUseOfAStaleTensorIsAShapeError) {
  MisuseNet m;
  tg::Tensor kept;
  tg::compile_forward(m, [&](tg::Tensor x) { return kept = m.fc(x); }, {.inputs = {{"x", {1, 2}}}});
  // Outside any trace: reading it, and ops on it (which used to dereference a freed graph).
  for (const auto& use : std::vector<std::function<void()>>{
           [&] { (void)kept.shape(); }, [&] { (void)kept.dtype(); }, [&] { (void)kept.numel(); },
           [&] { (void)tg::relu(kept); }, [&] { (void)tg::mean(kept); }, [&] { (void)(kept + 1.0); },
           [&] { (void)tg::matmul(kept, kept); }, [&] { (void)tg::reshape(kept, {2}); }}) {
    const std::string msg = message_of<tg::ShapeError>(use);
    EXPECT_NE(msg.find("trace has ended"), std::string::npos) << msg;
  }
  // Inside a later trace, mixed with live tensors.
  const std::string msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m, [&](tg::Tensor x) { return tg::relu(kept) + x; }, {.inputs = {{"x", {1, 2}}}});
  });
  EXPECT_NE(msg.find("trace has ended"), std::string::npos) << msg;
  EXPECT_NE(msg.find("misuse_test.cc"), std::string::npos) << "names the call site: " << msg;
}

TEST(Misuse, ParametersDeclaredAfterTheFirstCompileJoinTheStore) {
  MisuseNet m;
  auto first = tg::compile_forward(m, [&](tg::Tensor x) { return m.fc(x); }, {.inputs = {{"x", {1, 2}}}});
  tg::nn::Linear head(m, "head", 2, 3);
  auto second =
      tg::compile_forward(m, [&](tg::Tensor x) { return head(m.fc(x)); }, {.inputs = {{"x", {1, 2}}}});
  const tg::HostTensor y = second.run({{"x", std::vector<float>{1, 2}}});
  EXPECT_EQ(y.shape(), (tg::Shape{1, 3}));
  EXPECT_EQ(second.download_params().count("head.weight"), 1u);
}

TEST(Misuse, RepeatedLayerCallsGetNumberedCaptures) {
  struct M : tg::Module {
    tg::nn::Gpt gpt{*this, "gpt", {.vocab = 5, .seq_len = 4, .layers = 1, .d_model = 8, .heads = 2}};
  } m;
  auto fwd =
      tg::compile_forward(m, [&](tg::Tensor a, tg::Tensor b) { return m.gpt.logits(a) + m.gpt.logits(b); },
                          {.inputs = {{"a", {1, 4}, tg::DType::kI32}, {"b", {1, 4}, tg::DType::kI32}}});
  EXPECT_EQ(fwd.capture_names(),
            (std::vector<std::string>{"gpt.blocks.0.attn.probs", "gpt.blocks.0.attn.probs#2"}));
}

TEST(Misuse, PowGradientIsZeroWherePyTorchsIs) {
  // d/dx x^0 at x = 0 and d/db 0^b for b >= 0 are 0 in PyTorch (not 0·∞ = NaN).
  struct P : tg::Module {
    tg::Param x{*this, "x", {2}, tg::init::zeros()};
    tg::Param b{*this, "b", {2}, tg::init::constant(0.0)};
  } m;
  auto train = tg::compile_train(
      m, [&](tg::Tensor) { return tg::sum(tg::pow(m.x, m.b)) + tg::sum(tg::pow(m.x, 2.0)); },
      {.inputs = {{"unused", {1}}}, .optimizer = tg::SGD{.lr = 0.0}, .device = tg::Device::ref()});
  tg::Captures caps;
  train.step({{"unused", std::vector<float>{0}}}, {.captures = &caps});
  for (float g : caps.at("grad/x").f32()) EXPECT_EQ(g, 0.0f);
  for (float g : caps.at("grad/b").f32()) EXPECT_EQ(g, 0.0f);
}

TEST(Misuse, LargeSeedsStillGiveEachDropoutSiteItsOwnStream) {
  struct D : tg::Module {
    tg::Param w{*this, "w", {64}, tg::init::ones()};
  } m;
  auto fwd = tg::compile_forward(m,
                                 [&](tg::Tensor) {
                                   return tg::concat({tg::dropout(m.w, 0.5), tg::dropout(m.w, 0.5)}, 0);
                                 },
                                 {.inputs = {{"unused", {1}}}, .training = true, .seed = uint64_t{1} << 40});
  const tg::HostTensor y = fwd.run({{"unused", std::vector<float>{0}}});
  int same = 0;
  for (size_t i = 0; i < 64; ++i) same += y.f32()[i] == y.f32()[64 + i];
  EXPECT_LT(same, 56);  // independent p = 0.5 masks agree on ~32 of 64
}

TEST(Misuse, EmptyAndDefaultObjectsThrowInsteadOfCrashing) {
  tg::HostTensor empty;
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_THROW((void)empty.item(), tg::InputError);
  MisuseNet m;
  auto fwd = tg::compile_forward(m, [&](tg::Tensor x) { return m.fc(x); }, {.inputs = {{"x", {1, 2}}}});
  EXPECT_THROW(fwd.upload_params({{"fc.bias", tg::HostTensor{}}}, {.partial = true}), tg::InputError);
  tg::Program nothing;
  EXPECT_THROW(nothing.run({}), tg::Error);
  EXPECT_THROW((void)nothing.lr(), tg::Error);
}

TEST(Misuse, BadDeclarationsAndArguments) {
  MisuseNet m;
  std::string msg = message_of<tg::InputError>([&] {
    tg::compile_forward(m, [&](tg::Tensor x) { return m.fc(x); }, {.inputs = {{"x", {-1, 2}}}});
  });
  EXPECT_NE(msg.find("input 'x' has shape [-1, 2]"), std::string::npos) << msg;
  msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m, [&](tg::Tensor x) { return tg::capture("grad/fc.weight", m.fc(x)); },
                        {.inputs = {{"x", {1, 2}}}});
  });
  EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
  msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m,
                        [&](tg::Tensor x) {
                          return tg::full({int64_t{1} << 40, int64_t{1} << 40}, 1.0) + x;
                        },
                        {.inputs = {{"x", {1, 2}}}});
  });
  EXPECT_NE(msg.find("too large"), std::string::npos) << msg;
  EXPECT_THROW(
      tg::compile_forward(m, [&](tg::Tensor x) { return tg::one_hot(tg::cast(x, tg::DType::kI32), -1); },
                          {.inputs = {{"x", {1, 2}}}}),
      tg::ShapeError);
  // Clipping a loss with no trainable parameter is fine (nothing to clip).
  EXPECT_NO_THROW(tg::compile_train(m, [&](tg::Tensor x) { return tg::sum(tg::stop_gradient(m.fc(x))); },
                                    {.inputs = {{"x", {1, 2}}}, .clip_grad_norm = 1.0}));
}

TEST(Misuse, ArangeInfersItsDtypeLikePyTorch) {
  MisuseNet m;
  auto ints = tg::compile_forward(m, [&](tg::Tensor) { return tg::arange(0, 4); }, {.inputs = {{"u", {1}}}});
  auto floats =
      tg::compile_forward(m, [&](tg::Tensor) { return tg::arange(0, 1, 0.25); }, {.inputs = {{"u", {1}}}});
  const std::vector<float> u{0};
  EXPECT_EQ(ints.run({{"u", u}}).dtype(), tg::DType::kI32);
  const tg::HostTensor f = floats.run({{"u", u}});
  ASSERT_EQ(f.dtype(), tg::DType::kF32);
  EXPECT_EQ(f.f32()[3], 0.75f);
}

TEST(Misuse, OptimizerSettingsAreValidatedAtCompile) {
  const double nan = std::nan("");
  auto compile = [](tg::Optimizer opt, std::optional<double> clip = {}) {
    MisuseNet m;
    tg::compile_train(m, [&](tg::Tensor x) { return tg::mean(m.fc(x)); },
                      {.inputs = {{"x", {1, 2}}}, .optimizer = std::move(opt), .clip_grad_norm = clip});
  };
  struct Case {
    tg::Optimizer opt;
    std::optional<double> clip;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {tg::Adam{.lr = nan}, {}, "Adam.lr must be finite and >= 0, got nan"},
      {tg::Adam{.lr = -1}, {}, "Adam.lr must be finite and >= 0, got -1"},
      {tg::Adam{.beta1 = 1}, {}, "Adam.beta1 must be in [0, 1), got 1"},
      {tg::Adam{.beta2 = -0.1}, {}, "Adam.beta2 must be in [0, 1)"},
      {tg::Adam{.eps = 0}, {}, "Adam.eps must be finite and > 0"},
      {tg::AdamW{.weight_decay = -0.1}, {}, "AdamW.weight_decay must be finite and >= 0"},
      {tg::AdamW{.beta1 = nan}, {}, "AdamW.beta1 must be in [0, 1)"},
      {tg::SGD{.lr = 0.1, .momentum = -0.5}, {}, "SGD.momentum must be finite and >= 0, got -0.5"},
      {tg::SGD{.lr = 0.1, .momentum = 0.9, .dampening = 2}, {}, "SGD.dampening must be in [0, 1]"},
      {tg::SGD{.lr = std::numeric_limits<double>::infinity()}, {}, "SGD.lr must be finite"},
      {tg::Adam{}, nan, "clip_grad_norm must be finite and > 0, got nan"},
      {tg::Adam{}, -1.0, "clip_grad_norm must be finite and > 0, got -1"},
  };
  for (const Case& c : cases) {
    const std::string msg = message_of<tg::InputError>([&] { compile(c.opt, c.clip); });
    EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
  }
}

TEST(Misuse, OverflowingSizesAreShapeErrorsWithNames) {
  // A one_hot of 2^40 classes used to allocate a host array of that many values.
  const std::string msg = message_of<tg::ShapeError>([] {
    MisuseNet m;
    tg::compile_forward(m, [](tg::Tensor ids) { return tg::one_hot(ids, int64_t{1} << 40); },
                        {.inputs = {{"ids", {2}, tg::DType::kI32}}, .device = tg::Device::cpu()});
  });
  EXPECT_NE(msg.find("classes must be in [1, 2^31 - 1]"), std::string::npos) << msg;
  struct Huge : tg::Module {
    tg::Param w{*this, "enormous", {int64_t{1} << 40, int64_t{1} << 30}};
  };
  const std::string pmsg = message_of<tg::ShapeError>([] { Huge h; });
  EXPECT_NE(pmsg.find("'enormous'"), std::string::npos) << pmsg;
  EXPECT_NE(pmsg.find("too large"), std::string::npos) << pmsg;
  // A large but legal one_hot traces without a host array (its classes are an arange).
  MisuseNet m;
  auto p = tg::compile_forward(m, [](tg::Tensor ids) { return tg::sum(tg::one_hot(ids, 5)); },
                               {.inputs = {{"ids", {3}, tg::DType::kI32}}, .device = tg::Device::cpu()});
  EXPECT_EQ(p.run({{"ids", std::vector<int32_t>{0, 4, 2}}}).item(), 3.0);
}

TEST(Misuse, ConcurrentCompilesAndStepsMatchSerialOnes) {
  // Serial: two models trained one after the other.
  auto train = [](MisuseNet& m, int steps) {
    auto p = tg::compile_train(
        m, [&m](tg::Tensor x) { return tg::mean(tg::relu(m.fc(x))); },
        {.inputs = {{"x", {1, 2}}}, .optimizer = tg::Adam{.lr = 0.1}, .device = tg::Device::cpu()});
    p.init_params(3);
    std::vector<float> losses;
    for (int s = 0; s < steps; ++s) losses.push_back(p.step({{"x", std::vector<float>{1.0f + s, -0.5f}}}));
    return losses;
  };
  MisuseNet a;
  const std::vector<float> serial = train(a, 20);
  // Concurrent: each thread traces, compiles and trains its own model.
  MisuseNet c, d;
  std::vector<float> lc, ld;
  std::thread t1([&] { lc = train(c, 20); }), t2([&] { ld = train(d, 20); });
  t1.join();
  t2.join();
  EXPECT_EQ(lc, serial);
  EXPECT_EQ(ld, serial);
  // Two threads stepping one program take turns: every step is counted once.
  MisuseNet e;
  auto shared = tg::compile_train(
      e, [&e](tg::Tensor x) { return tg::mean(e.fc(x)); },
      {.inputs = {{"x", {1, 2}}}, .optimizer = tg::SGD{.lr = 0.01}, .device = tg::Device::cpu()});
  auto worker = [&] {
    for (int s = 0; s < 50; ++s) shared.step({{"x", std::vector<float>{1, 2}}});
  };
  std::thread w1(worker), w2(worker);
  w1.join();
  w2.join();
  EXPECT_EQ(shared.steps(), 100);
}

TEST(Misuse, AScheduleReturningNanStopsTheStep) {
  MisuseNet m;
  auto train = tg::compile_train(m, [&](tg::Tensor x) { return tg::mean(m.fc(x)); },
                                 {.inputs = {{"x", {1, 2}}},
                                  .optimizer = tg::SGD{.lr = 0.1},
                                  .schedule = [](int64_t step) { return step < 2 ? 1.0 : std::nan(""); },
                                  .device = tg::Device::cpu()});
  const std::vector<float> x{1, 2};
  train.step({{"x", x}});
  train.step({{"x", x}});
  const auto before = train.download_params();
  const std::string msg = message_of<tg::InputError>([&] { train.step({{"x", x}}); });
  EXPECT_NE(msg.find("the schedule returned nan at step 2"), std::string::npos) << msg;
  EXPECT_EQ(train.steps(), 2);
  const auto after = train.download_params();
  for (const auto& [name, t] : before) {
    const auto a = t.f32(), b = after.at(name).f32();
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << name;
  }
}

}  // namespace
