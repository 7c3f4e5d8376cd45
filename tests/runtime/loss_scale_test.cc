// Loss scaling (TrainOptions::loss_scaling) under Precision::kF16 on every device: gradients
// that underflow f16 without it are recovered exactly with it; an overflowing step is skipped
// and backs the scale off; finite steps grow it; it is saved, restored and reset with the
// optimizer state; and bad settings are errors.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "test_util.h"

namespace tg {
namespace {

struct Net : Module {
  nn::Linear fc{*this, "fc", 4, 3};
};

// Inputs and weights that f16 holds exactly (multiples of 1/8 of small size), so products of
// f16 operands equal those of f32 ones.
const std::vector<float> kX{0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.75f, 0.125f, 1.0f};
const std::map<std::string, HostTensor> kParams{
    {"fc.weight",
     HostTensor::f32({0.5f, -0.25f, 1.0f, 0.75f, -1.5f, 0.125f, 0.25f, -0.5f, 1.25f, 0.375f, -0.625f, 2.0f},
                     {3, 4})},
    {"fc.bias", HostTensor::f32({0.25f, -0.5f, 1.0f}, {3})}};

/// sum(fc(x)) · c: every element of the gradient flowing into fc's product is c.
Program compile(Net& m, Device d, Precision precision, double c, std::optional<LossScaling> scaling,
                Optimizer optimizer = SGD{.lr = 1.0}) {
  Program p = compile_train(m, [&m, c](Tensor x) { return sum(m.fc(x)) * c; },
                            {.inputs = {{"x", {2, 4}}},
                             .optimizer = optimizer,
                             .device = d,
                             .precision = precision,
                             .loss_scaling = scaling});
  p.upload_params(kParams);
  return p;
}

std::vector<float> grad_of_weight(Program& p) {
  Captures caps;
  (void)p.step({{"x", kX}}, {.captures = &caps});
  const std::span<const float> g = caps.at("grad/fc.weight").f32();
  return {g.begin(), g.end()};
}

TEST(LossScale, RecoversGradientsThatUnderflowF16) {
  // c = 2^-30: the f32 gradient xᵀ·c is representable, but c itself rounds to 0 in f16
  // (below 2^-25). Scaled by 2^16 it is 2^-14, a normal f16, and the unscaled gradient is
  // exactly the f32 one (powers of two and f16-exact operands).
  const double c = std::ldexp(1.0, -30);
  for (const Device& d : testing::all_devices()) {
    SCOPED_TRACE(d.str());
    Net a, b, e;
    Program f32_run = compile(a, d, Precision::kFp32, c, std::nullopt);
    Program scaled = compile(b, d, Precision::kF16, c, std::nullopt);  // the default under kF16
    Program unscaled = compile(e, d, Precision::kF16, c, LossScaling{.enabled = false});
    EXPECT_EQ(scaled.loss_scale(), 65536.0);
    EXPECT_EQ(unscaled.loss_scale(), 1.0);
    const std::vector<float> want = grad_of_weight(f32_run), got = grad_of_weight(scaled),
                             lost = grad_of_weight(unscaled);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NE(want[i], 0.0f) << i;
      EXPECT_EQ(got[i], want[i]) << i;
      EXPECT_EQ(lost[i], 0.0f) << i << ": f16 kept a gradient below its range";
    }
    EXPECT_FALSE(scaled.last_step_skipped());
  }
}

TEST(LossScale, AnOverflowSkipsTheStepAndBacksOff) {
  // c = 1: the scaled gradient 65536 overflows f16 (largest 65504) → inf → the step is skipped
  // and the scale halves; at 32768 the next step goes through.
  for (const Device& d : testing::all_devices()) {
    SCOPED_TRACE(d.str());
    Net m;
    Program p = compile(m, d, Precision::kF16, 1.0, std::nullopt);
    const float loss = p.step({{"x", kX}});
    EXPECT_TRUE(std::isfinite(loss)) << "the loss is computed unscaled";
    EXPECT_TRUE(p.last_step_skipped());
    EXPECT_EQ(p.skipped_steps(), 1);
    EXPECT_EQ(p.steps(), 0);
    EXPECT_EQ(p.loss_scale(), 32768.0);
    const auto kept = p.download_params();
    for (const auto& [name, t] : kParams)
      EXPECT_EQ(std::memcmp(t.data(), kept.at(name).data(), static_cast<size_t>(t.numel()) * 4), 0) << name;
    (void)p.step({{"x", kX}});
    EXPECT_FALSE(p.last_step_skipped());
    EXPECT_EQ(p.steps(), 1);
    EXPECT_EQ(p.loss_scale(), 32768.0);
    // SGD with lr 1: the bias moved by exactly its gradient, 2 (two rows).
    EXPECT_EQ(p.download_params().at("fc.bias").f32()[0], 0.25f - 2.0f);
  }
}

TEST(LossScale, BackingOffStopsAtOne) {
  // c = 2^17: the gradient entering the product overflows f16 at any scale >= 1.
  Net m;
  Program p = compile(m, Device::cpu(), Precision::kF16, 131072.0, LossScaling{.init_scale = 4});
  std::vector<double> scales;
  for (int s = 0; s < 4; ++s) {
    (void)p.step({{"x", kX}});
    scales.push_back(p.loss_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{2, 1, 1, 1}));
  EXPECT_EQ(p.skipped_steps(), 4);
  EXPECT_EQ(p.steps(), 0);
}

TEST(LossScale, GrowsAfterTheIntervalAndIsSavedAndReset) {
  const LossScaling o{.init_scale = 1024, .growth_factor = 4, .backoff_factor = 0.25, .growth_interval = 3};
  for (const Device& d : testing::all_devices()) {
    SCOPED_TRACE(d.str());
    Net m;
    Program p = compile(m, d, Precision::kF16, 1.0 / 64, o, Adam{.lr = 1e-3});
    std::vector<double> scales;
    for (int s = 0; s < 7; ++s) {
      (void)p.step({{"x", kX}});
      scales.push_back(p.loss_scale());
    }
    EXPECT_EQ(scales, (std::vector<double>{1024, 1024, 4096, 4096, 4096, 16384, 16384}));
    EXPECT_EQ(p.skipped_steps(), 0);
    // The scale is optimizer state: saved, restored exactly, and reset with the optimizer.
    const TrainingState saved = p.training_state();
    ASSERT_EQ(saved.moments.count("loss_scale"), 1u);
    p.reset_optimizer();
    EXPECT_EQ(p.loss_scale(), 1024.0);
    p.restore_training_state(saved);
    EXPECT_EQ(p.loss_scale(), 16384.0);
    // Growth at step 6 restarted the count: steps 7, 8 and 9 are the next three.
    (void)p.step({{"x", kX}});
    EXPECT_EQ(p.loss_scale(), 16384.0);
    (void)p.step({{"x", kX}});
    EXPECT_EQ(p.loss_scale(), 65536.0);
  }
}

TEST(LossScale, StatesRestoreAcrossScalingOnAndOff) {
  const LossScaling o{.init_scale = 1024, .growth_factor = 2, .growth_interval = 1};
  Net a, b;
  Program scaled = compile(a, Device::cpu(), Precision::kF16, 1.0 / 64, o, Adam{.lr = 1e-3});
  Program plain = compile(b, Device::cpu(), Precision::kBf16, 1.0 / 64, std::nullopt, Adam{.lr = 1e-3});
  for (int s = 0; s < 2; ++s) (void)scaled.step({{"x", kX}});
  EXPECT_EQ(scaled.loss_scale(), 4096.0);
  // With scaling into without: the moments and step count come over, the scale is dropped.
  const TrainingState saved = scaled.training_state();
  plain.restore_training_state(saved);
  EXPECT_EQ(plain.steps(), 2);
  const TrainingState got = plain.training_state();
  EXPECT_EQ(got.moments.size() + 2, saved.moments.size());
  EXPECT_EQ(got.moments.count("loss_scale") + got.moments.count("loss_scale.good_steps"), 0u);
  for (const auto& [name, t] : got.moments) {
    ASSERT_EQ(saved.moments.count(name), 1u) << name;
    EXPECT_EQ(std::memcmp(t.data(), saved.moments.at(name).data(), static_cast<size_t>(t.numel()) * 4), 0)
        << name;
  }
  // Without into with: the scale starts again from init_scale.
  scaled.restore_training_state(plain.training_state());
  EXPECT_EQ(scaled.loss_scale(), 1024.0);
  EXPECT_EQ(scaled.steps(), 2);
}

TEST(LossScale, MicroBatchesScaleEachSliceAlike) {
  // The step over 2 slices equals the step over the whole batch (up to f32 summation order),
  // scale included.
  auto run = [](int64_t k) {
    Net m;
    Program p = compile_train(m, [&m](Tensor x) { return mean(m.fc(x) * m.fc(x)); },
                              {.inputs = {{"x", {2, 4}}},
                               .optimizer = SGD{.lr = 0.1},
                               .device = Device::cpu(),
                               .precision = Precision::kF16,
                               .loss_scaling = LossScaling{.init_scale = 256, .growth_interval = 2},
                               .micro_batches = k});
    p.upload_params(kParams);
    std::vector<float> losses;
    for (int s = 0; s < 3; ++s) losses.push_back(p.step({{"x", kX}}));
    EXPECT_EQ(p.loss_scale(), 512.0);
    return std::pair{losses, p.download_params()};
  };
  const auto [whole, pw] = run(1);
  const auto [sliced, ps] = run(2);
  for (size_t s = 0; s < whole.size(); ++s) EXPECT_NEAR(sliced[s], whole[s], 1e-5 * std::abs(whole[s])) << s;
  for (const auto& [name, t] : pw)
    for (size_t i = 0; i < t.f32().size(); ++i)
      EXPECT_NEAR(ps.at(name).f32()[i], t.f32()[i], 1e-5 + 1e-5 * std::abs(t.f32()[i])) << name << i;
}

TEST(LossScale, AStaticScaleNeverMovesAndFp32CanScaleToo) {
  Net m;
  Program p =
      compile(m, Device::cpu(), Precision::kFp32, 1.0,
              LossScaling{.init_scale = 8, .growth_factor = 1, .backoff_factor = 1, .growth_interval = 1});
  for (int s = 0; s < 3; ++s) (void)p.step({{"x", kX}});
  EXPECT_EQ(p.loss_scale(), 8.0);
  EXPECT_EQ(p.steps(), 3);
}

TEST(LossScale, BadSettingsAreErrors) {
  auto expect_error = [](LossScaling o, const char* field) {
    Net m;
    try {
      (void)compile(m, Device::cpu(), Precision::kF16, 1.0, o);
      ADD_FAILURE() << field << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_error({.init_scale = 0}, "init_scale");
  expect_error({.init_scale = 0.5}, "init_scale");  // below 1, unscaling could overflow f32
  expect_error({.init_scale = INFINITY}, "init_scale");
  expect_error({.growth_factor = 0.5}, "growth_factor");
  expect_error({.backoff_factor = 0}, "backoff_factor");
  expect_error({.backoff_factor = 2}, "backoff_factor");
  expect_error({.growth_interval = 0}, "growth_interval");
  expect_error({.init_scale = 1e39}, "init_scale");                              // beyond f32
  expect_error({.growth_interval = (int64_t{1} << 24) + 1}, "growth_interval");  // an f32 count
}

}  // namespace
}  // namespace tg
