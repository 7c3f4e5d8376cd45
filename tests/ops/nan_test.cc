// NaN semantics on every backend: relu, maximum and minimum propagate NaN from either operand
// (PyTorch's torch.relu, torch.maximum, torch.minimum), so a NaN input cannot become a finite
// result downstream.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "test_util.h"

namespace {

struct Empty : tg::Module {};

std::vector<float> run(tg::Device device, const std::function<tg::Tensor(tg::Tensor, tg::Tensor)>& fn,
                       const std::vector<float>& a, const std::vector<float>& b) {
  Empty m;
  const tg::Shape shape{static_cast<int64_t>(a.size())};
  tg::Program p = tg::compile_forward(m, fn, {.inputs = {{"a", shape}, {"b", shape}}, .device = device});
  return p.run({{"a", a}, {"b", b}}).f32();
}

TEST(NanSemantics, ReluMaximumMinimumPropagateNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> a{nan, 0.0f, nan, -1.0f, 2.0f}, b{0.0f, nan, nan, 3.0f, -4.0f};
  for (const tg::Device& d : tg::testing::all_devices()) {
    SCOPED_TRACE(d.str());
    // Each output: [a NaN, b NaN, both NaN, finite, finite]; relu of a: NaN, 0, NaN, 0, 2.
    const auto mx = run(
        d, [](tg::Tensor x, tg::Tensor y) { return tg::maximum(x, y); }, a, b);
    const auto mn = run(
        d, [](tg::Tensor x, tg::Tensor y) { return tg::minimum(x, y); }, a, b);
    const auto re = run(
        d, [](tg::Tensor x, tg::Tensor y) { return tg::relu(x) + y * 0.0f; }, a, b);
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(std::isnan(mx[i])) << "maximum " << i;
      EXPECT_TRUE(std::isnan(mn[i])) << "minimum " << i;
    }
    EXPECT_EQ(mx[3], 3.0f);
    EXPECT_EQ(mx[4], 2.0f);
    EXPECT_EQ(mn[3], -1.0f);
    EXPECT_EQ(mn[4], -4.0f);
    EXPECT_TRUE(std::isnan(re[0]));
    EXPECT_TRUE(std::isnan(re[1]));  // relu(0) + NaN·0
    EXPECT_TRUE(std::isnan(re[2]));
    EXPECT_EQ(re[3], 0.0f);
    EXPECT_EQ(re[4], 2.0f);
  }
}

TEST(NanSemantics, ANanInputReachesTheLossThroughRelu) {
  struct Net : tg::Module {
    tg::nn::Linear fc{*this, "fc", 2, 2};
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const tg::Device& d : tg::testing::all_devices()) {
    SCOPED_TRACE(d.str());
    Net m;
    auto train = tg::compile_train(m, [&](tg::Tensor x) { return tg::mean(tg::relu(m.fc(x))); },
                                   {.inputs = {{"x", {1, 2}}}, .optimizer = tg::SGD{.lr = 0.1}, .device = d});
    train.init_params(0);
    EXPECT_TRUE(std::isnan(train.step({{"x", std::vector<float>{nan, 1.0f}}})));
  }
}

}  // namespace

namespace {

TEST(NanGuard, ANonFiniteStepIsSkippedAndChangesNothing) {
  struct Net : tg::Module {
    tg::nn::Linear fc{*this, "fc", 3, 2};
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto compile = [](Net& m, tg::Device d, bool guard) {
    return tg::compile_train(
        m, [&m](tg::Tensor x) { return tg::mean(tg::relu(m.fc(x))); },
        {.inputs = {{"x", {2, 3}}}, .optimizer = tg::AdamW{.lr = 0.1}, .device = d, .skip_nonfinite = guard});
  };
  const std::vector<float> good{0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f},
      with_nan{0.5f, nan, 2.0f, 1.5f, 0.25f, 0.0f}, with_inf{inf, 1.0f, 2.0f, 1.5f, 0.25f, 0.0f};
  for (const tg::Device& d : tg::testing::all_devices()) {
    SCOPED_TRACE(d.str());
    Net a, b;
    tg::Program guarded = compile(a, d, true), plain = compile(b, d, false);
    guarded.init_params(1);
    plain.init_params(1);
    EXPECT_EQ(guarded.step({{"x", good}}), plain.step({{"x", good}}));
    EXPECT_FALSE(guarded.last_step_skipped());
    const auto before = guarded.download_params();
    const tg::TrainingState state = guarded.training_state();
    EXPECT_TRUE(std::isnan(guarded.step({{"x", with_nan}})));
    EXPECT_TRUE(guarded.last_step_skipped());
    (void)guarded.step({{"x", with_inf}});
    EXPECT_TRUE(guarded.last_step_skipped());
    EXPECT_EQ(guarded.skipped_steps(), 2);
    EXPECT_EQ(guarded.steps(), 1);
    const auto after = guarded.download_params();
    for (const auto& [name, t] : before)
      EXPECT_EQ(std::memcmp(t.data(), after.at(name).data(), static_cast<size_t>(t.numel()) * 4), 0) << name;
    const tg::TrainingState state_after = guarded.training_state();
    for (const auto& [name, t] : state.moments) {
      const tg::HostTensor& now = state_after.moments.at(name);
      EXPECT_EQ(std::memcmp(t.data(), now.data(), static_cast<size_t>(t.numel()) * 4), 0) << name;
    }
    // The next finite step is the one a run that never saw the bad batches takes.
    EXPECT_EQ(guarded.step({{"x", good}}), plain.step({{"x", good}}));
    EXPECT_FALSE(guarded.last_step_skipped());
    const auto pa = guarded.download_params(), pb = plain.download_params();
    for (const auto& [name, t] : pa)
      EXPECT_EQ(std::memcmp(t.data(), pb.at(name).data(), static_cast<size_t>(t.numel()) * 4), 0) << name;
    // Without the guard the NaN reaches the weights.
    (void)plain.step({{"x", with_nan}});
    const auto poisoned = plain.download_params();
    EXPECT_TRUE(std::isnan(poisoned.at("fc.weight").f32()[0]) ||
                std::isnan(poisoned.at("fc.weight").f32()[1]));
  }
}

}  // namespace

namespace {

TEST(NanGuard, CheckFiniteNamesTheFirstOpThatMadeANonFiniteValue) {
  struct Empty : tg::Module {
  } m;
  ::setenv("TG_CHECK_FINITE", "1", 1);
  const int line = __LINE__ + 3;  // the log below
  auto fn = [](tg::Tensor x) {
    tg::Tensor a = x * 2.0 + 1.0;
    tg::Tensor b = tg::log(a);
    return tg::sum(b * b);
  };
  for (const bool optimize : {false, true}) {
    SCOPED_TRACE(optimize ? "fused" : "one kernel per op");
    tg::Program p = tg::compile_forward(
        m, fn, {.inputs = {{"x", {3}}}, .device = tg::Device::cpu(), .optimize = optimize});
    EXPECT_NO_THROW(p.run({{"x", std::vector<float>{1, 2, 3}}}));
    const std::string msg = tg::testing::message_of<tg::Error>([&] {
      p.run({{"x", std::vector<float>{1, -4, 3}}});
    });
    EXPECT_NE(msg.find("TG_CHECK_FINITE"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nan"), std::string::npos) << msg;
    if (!optimize) {  // every op its own kernel: the log itself, where it was written
      EXPECT_NE(msg.find("= log"), std::string::npos) << msg;
      EXPECT_NE(msg.find("nan_test.cc:" + std::to_string(line)), std::string::npos) << msg;
    }
  }
  ::unsetenv("TG_CHECK_FINITE");
}

// Half values are checked too: 80000 is finite in f32 and infinite in f16 (largest 65504), so
// the cast to f16 is the first op that makes a non-finite value.
TEST(NanGuard, CheckFiniteSeesHalfValues) {
  struct Empty : tg::Module {
  } m;
  ::setenv("TG_CHECK_FINITE", "1", 1);
  auto fn = [](tg::Tensor x) {
    return tg::sum(tg::cast(tg::cast(x * 2.0, tg::DType::kF16), tg::DType::kF32));
  };
  tg::Program p =
      tg::compile_forward(m, fn, {.inputs = {{"x", {3}}}, .device = tg::Device::cpu(), .optimize = false});
  EXPECT_NO_THROW(p.run({{"x", std::vector<float>{1, 2, 3}}}));
  const std::string msg = tg::testing::message_of<tg::Error>([&] {
    p.run({{"x", std::vector<float>{1, 40000, 3}}});
  });
  EXPECT_NE(msg.find("= cast"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("inf"), std::string::npos) << msg;
  ::unsetenv("TG_CHECK_FINITE");
}

}  // namespace
