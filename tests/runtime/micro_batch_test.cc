// Gradient accumulation (TrainOptions::micro_batches): k slices of the batch, one update. For
// a loss that is a mean over the batch, the step must equal one pass over the whole batch up
// to rounding, on every backend; batch norm's running statistics advance once per slice; only
// one slice's activations are alive at a time.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <random>

#include "test_util.h"

namespace {

using tg::testing::all_devices;
using tg::testing::device_test_name;

struct Mlp : tg::Module {
  tg::nn::Mlp net{*this, "net", {6, 32, 32, 3}};
};

class MicroBatches : public ::testing::TestWithParam<tg::Device> {};

TEST_P(MicroBatches, FourSlicesEqualOnePassOverTheBatch) {
  constexpr int64_t kBatch = 32;
  Mlp one, four;
  auto compile = [&](Mlp& m, int64_t k) {
    return tg::compile_train(m,
                             [&](tg::Tensor x, tg::Tensor y) {
                               const tg::Tensor d = m.net(x) - y;
                               return tg::mean(d * d);
                             },
                             {.inputs = {{"x", {kBatch, 6}}, {"y", {kBatch, 3}}},
                              .optimizer = tg::AdamW{.lr = 1e-2},
                              .clip_grad_norm = 1.0,
                              .device = GetParam(),
                              .micro_batches = k});
  };
  tg::Program a = compile(one, 1), b = compile(four, 4);
  for (int step = 0; step < 20; ++step) {
    const auto x = tg::testing::uniform_values(kBatch * 6, 100 + step),
               y = tg::testing::uniform_values(kBatch * 3, 200 + step);
    const float la = a.step({{"x", x}, {"y", y}}), lb = b.step({{"x", x}, {"y", y}});
    ASSERT_NEAR(lb, la, 1e-5 * std::fabs(la)) << "step " << step;
  }
  EXPECT_LT(tg::testing::param_difference(b, a), 1e-5);
}

// Adam's first steps amplify f32 rounding in near-zero gradients, so the transformer's
// gradients are compared directly, one step each, over the whole model.
TEST_P(MicroBatches, GptGradientsMatchTheWholeBatch) {
  const tg::nn::GptConfig config{.vocab = 11, .seq_len = 8, .layers = 2, .d_model = 16, .heads = 2};
  tg::nn::Gpt one(config), four(config);
  auto compile = [&](tg::nn::Gpt& m, int64_t k) {
    return tg::compile_train(m, [&](tg::Tensor ids, tg::Tensor t) { return m.loss(ids, t); },
                             {.inputs = {{"ids", {8, 8}, tg::DType::kI32}, {"t", {8, 8}, tg::DType::kI32}},
                              .optimizer = tg::GradientsOnly{},
                              .device = GetParam(),
                              .micro_batches = k});
  };
  tg::Program a = compile(one, 1), b = compile(four, 4);
  std::mt19937 rng(5);
  std::vector<int32_t> ids(64), targets(64);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(rng() % 11);
    targets[i] = static_cast<int32_t>(rng() % 11);
  }
  tg::Captures ga, gb;
  const float la = a.step({{"ids", ids}, {"t", targets}}, {.captures = &ga});
  const float lb = b.step({{"ids", ids}, {"t", targets}}, {.captures = &gb});
  EXPECT_NEAR(lb, la, 1e-5 * std::fabs(la));
  ASSERT_EQ(ga.size(), gb.size());
  for (const auto& [name, g] : ga) {
    if (name.rfind("grad/", 0) != 0) continue;
    EXPECT_LT(tg::testing::rel_diff(gb.at(name).f32(), g.f32()), 1e-5) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, MicroBatches, ::testing::ValuesIn(all_devices()),
                         [](const auto& info) { return device_test_name(info.param); });

struct BnNet : tg::Module {
  tg::nn::BatchNorm2d bn{*this, "bn", 2};
};

// With lr 0 the parameters stay put, so one step over two slices must advance the running
// statistics exactly as two one-slice steps do, slice after slice.
TEST(MicroBatchesState, BatchNormStatisticsAdvanceOncePerSlice) {
  BnNet a, b;
  auto loss = [](BnNet& m) {
    return [&m](tg::Tensor x) {
      const tg::Tensor y = m.bn(x);
      return tg::mean(y * y);
    };
  };
  tg::Program two = tg::compile_train(a, loss(a),
                                      {.inputs = {{"x", {4, 2, 3, 3}}},
                                       .optimizer = tg::SGD{.lr = 0},
                                       .device = tg::Device::cpu(),
                                       .micro_batches = 2});
  tg::Program one = tg::compile_train(
      b, loss(b),
      {.inputs = {{"x", {2, 2, 3, 3}}}, .optimizer = tg::SGD{.lr = 0}, .device = tg::Device::cpu()});
  const auto x = tg::testing::uniform_values(4 * 2 * 9, 9);
  two.step({{"x", x}});
  one.step({{"x", std::vector<float>(x.begin(), x.begin() + 36)}});
  one.step({{"x", std::vector<float>(x.begin() + 36, x.end())}});
  for (const char* name : {"bn.running_mean", "bn.running_var"}) {
    const auto va = two.read_state(name).f32(), vb = one.read_state(name).f32();
    EXPECT_LT(tg::testing::rel_diff(va, vb), 1e-6) << name;
  }
}

// Activations scale with the slice: a wide MLP whose activations dwarf its parameters needs
// about a quarter of them with four slices. The accumulated gradients (one parameter-sized
// sum) are what the slices add back.
TEST(MicroBatchesMemory, FourSlicesKeepAQuarterOfTheActivations) {
  struct Wide : tg::Module {
    tg::nn::Mlp net{*this, "net", {16, 256, 256, 1}};
  };
  constexpr int64_t kBatch = 2048;
  auto report = [&](int64_t k) {
    Wide m;
    tg::Program p = tg::compile_train(m,
                                      [&](tg::Tensor x, tg::Tensor y) {
                                        const tg::Tensor d = m.net(x) - y;
                                        return tg::mean(d * d);
                                      },
                                      {.inputs = {{"x", {kBatch, 16}}, {"y", {kBatch, 1}}},
                                       .device = tg::Device::cpu(),
                                       .micro_batches = k});
    return p.memory_report();
  };
  const tg::MemoryReport r1 = report(1), r4 = report(4);
  // One pass keeps at least the two hidden layers' outputs of the whole batch for the backward.
  const int64_t hidden = 2 * kBatch * 256 * 4;
  EXPECT_GE(r1.activations, hidden);
  EXPECT_LE(r4.activations, r1.activations / 4 + 64 * 1024) << r4.to_string();
  EXPECT_LT(r4.planned_peak(), r1.planned_peak() / 2) << r1.to_string() << r4.to_string();
}

TEST(MicroBatchesErrors, CountsThatCannotSplitTheInputsAreRefused) {
  Mlp m;
  auto compile = [&](std::vector<tg::InputSpec> inputs, int64_t k) {
    return tg::compile_train(m, [&](tg::Tensor x) { return tg::mean(m.net(x)); },
                             {.inputs = std::move(inputs), .device = tg::Device::cpu(), .micro_batches = k});
  };
  auto message = [&](std::vector<tg::InputSpec> inputs, int64_t k) -> std::string {
    try {
      compile(std::move(inputs), k);
    } catch (const tg::InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message({{"x", {10, 6}}}, 4).find("input 'x' has shape [10, 6] (10 is not a multiple of 4)"),
            std::string::npos)
      << message({{"x", {10, 6}}}, 4);
  EXPECT_NE(message({{"x", {10, 6}}}, 0).find("micro_batches is 0"), std::string::npos);
  EXPECT_NO_THROW(compile({{"x", {12, 6}}}, 4));
}

}  // namespace
