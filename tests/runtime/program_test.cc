// Program behaviour: parameter storage shared between programs of one model, seeded and
// reproducible init, naming, decay defaults, lr changes without rebuilds, optional loss
// read-back, serialized concurrent calls, and gradient-only programs.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <thread>

namespace {

struct ProgramNet : tg::Module {
  tg::nn::Linear l1{*this, "l1", 2, 8};
  tg::nn::Mlp head{*this, "head", {8, 4, 1}};
  tg::Param gain{*this, "gain", {1}, tg::init::ones()};
  tg::Param table{*this, "table", {3, 3}, tg::init::zeros()};
  tg::Tensor operator()(const tg::Tensor& x) const { return head(tg::tanh(l1(x))) * gain; }
};

const std::vector<float> kInputX{0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f};  // [4, 2]
const std::vector<float> kY{0.5f, -0.5f, 0.25f, 1.0f};                                // [4, 1]

tg::Program make_train(ProgramNet& m, tg::Device device, tg::Optimizer opt = tg::Adam{.lr = 1e-2}) {
  return tg::compile_train(m,
                           [&](tg::Tensor x, tg::Tensor y) {
                             auto d = m(x) - y;
                             return tg::mean(d * d);
                           },
                           {.inputs = {{"x", {4, 2}}, {"y", {4, 1}}}, .optimizer = opt, .device = device});
}

TEST(Program, HierarchicalNamesAndDecayDefaults) {
  ProgramNet m;
  std::vector<std::string> names;
  for (const tg::Param* p : m.parameters()) names.push_back(p->path());
  EXPECT_EQ(names,
            (std::vector<std::string>{"l1.weight", "l1.bias", "head.layers.0.weight", "head.layers.0.bias",
                                      "head.layers.1.weight", "head.layers.1.bias", "gain", "table"}));
  EXPECT_TRUE(m.l1.weight.decay());
  EXPECT_FALSE(m.l1.bias->decay());
  EXPECT_FALSE(m.gain.decay());
  EXPECT_FALSE(m.table.decay());  // zeros-initialised
}

TEST(Program, InitIsSeededReproducibleAndDeviceIndependent) {
  ProgramNet a, b;
  tg::Program pa = make_train(a, tg::Device::cpu());
  tg::Program pb = make_train(b, tg::Device::ref());
  pa.init_params(7);
  pb.init_params(7);
  const auto va = pa.download_params(), vb = pb.download_params();
  for (const auto& [name, t] : va)
    for (size_t i = 0; i < t.f32().size(); ++i) ASSERT_EQ(t.f32()[i], vb.at(name).f32()[i]) << name;
  pa.init_params(8);
  const auto vc = pa.download_params();
  EXPECT_NE(vc.at("l1.weight").f32()[0], va.at("l1.weight").f32()[0]);
  // PyTorch's Linear bound: U(±1/√in) with in = 2.
  for (float w : va.at("l1.weight").f32()) EXPECT_LE(std::fabs(w), 1.0f / std::sqrt(2.0f));
  EXPECT_EQ(va.at("gain").f32()[0], 1.0f);
}

// Feeds built from temporaries own them (a stored Feeds built from a function's result would
// otherwise point at freed memory); named vectors and tensors are borrowed, not copied.
TEST(Program, FeedsKeepTheTemporariesTheyAreBuiltFrom) {
  const auto batch = [] { return std::vector<float>(kInputX); };
  const tg::Feeds owned{{"x", batch()}};
  const tg::Feeds tensor{{"x", tg::HostTensor::f32(batch(), {4, 2})}};
  ASSERT_NE(owned[0].value.kept, nullptr);
  ASSERT_NE(tensor[0].value.kept, nullptr);
  const tg::HostTensor named = tg::HostTensor::f32(batch(), {4, 2});
  const tg::Feeds borrowed{{"x", kInputX}, {"t", named}};
  EXPECT_EQ(borrowed[0].value.kept, nullptr);
  EXPECT_EQ(borrowed[0].value.data, kInputX.data());
  EXPECT_EQ(borrowed[1].value.data, named.data());
  std::vector<std::vector<float>> churn(64, std::vector<float>(8, -1.0f));  // reuse freed memory, if any
  ProgramNet m;
  tg::Program predict = tg::compile_forward(m, [&](tg::Tensor x) { return m(x); },
                                            {.inputs = {{"x", {4, 2}}}, .device = tg::Device::cpu()});
  const std::vector<float> want = predict.run({{"x", kInputX}}).f32();
  EXPECT_EQ(predict.run(owned).f32(), want);
  EXPECT_EQ(predict.run(tensor).f32(), want);
}

TEST(Program, ForwardProgramsShareTheTrainedParameters) {
  ProgramNet m;
  tg::Program train = make_train(m, tg::Device::cpu());
  // Storage is shared per device: the forward program must be on the training program's
  // device (the default, Device::best(), is a GPU where there is one).
  tg::Program predict = tg::compile_forward(m, [&](tg::Tensor x) { return m(x); },
                                            {.inputs = {{"x", {4, 2}}}, .device = tg::Device::cpu()});
  const float before = predict.run({{"x", kInputX}}).f32()[0];
  for (int i = 0; i < 5; ++i) train.step({{"x", kInputX}, {"y", kY}});
  const float after = predict.run({{"x", kInputX}}).f32()[0];
  EXPECT_NE(before, after);
  // The forward program sees exactly what a fresh forward of the downloaded params computes.
  ProgramNet fresh;
  tg::Program check = tg::compile_forward(fresh, [&](tg::Tensor x) { return fresh(x); },
                                          {.inputs = {{"x", {4, 2}}}, .device = tg::Device::cpu()});
  check.upload_params(train.download_params());
  EXPECT_EQ(check.run({{"x", kInputX}}).f32()[0], after);
}

TEST(Program, LossDecreasesAndLrChangesWithoutRebuild) {
  ProgramNet m;
  tg::Program train = make_train(m, tg::Device::cpu());
  const float first = train.step({{"x", kInputX}, {"y", kY}});
  for (int i = 0; i < 50; ++i) train.step({{"x", kInputX}, {"y", kY}});
  const float later = train.step({{"x", kInputX}, {"y", kY}});
  EXPECT_LT(later, first * 0.5f);
  const std::string ir_before = train.ir();
  train.set_lr(0.0);
  EXPECT_EQ(train.lr(), 0.0);
  const auto frozen = train.download_params();
  train.step({{"x", kInputX}, {"y", kY}});
  EXPECT_EQ(train.ir(), ir_before);
  const auto still = train.download_params();
  for (const auto& [name, t] : frozen)
    for (size_t i = 0; i < t.f32().size(); ++i) ASSERT_EQ(t.f32()[i], still.at(name).f32()[i]) << name;
}

TEST(Program, StepWithoutLossReadBackStillUpdates) {
  ProgramNet m;
  tg::Program train = make_train(m, tg::Device::cpu());
  const auto before = train.download_params();
  EXPECT_TRUE(std::isnan(train.step({{"x", kInputX}, {"y", kY}}, {.read_loss = false})));
  EXPECT_EQ(train.steps(), 1);
  EXPECT_NE(before.at("l1.weight").f32()[0], train.download_params().at("l1.weight").f32()[0]);
}

TEST(Program, UnusedParametersAreLeftUntouched) {
  ProgramNet m;
  tg::Program train = make_train(m, tg::Device::cpu(), tg::AdamW{.lr = 1e-2, .weight_decay = 0.5});
  for (int i = 0; i < 3; ++i) train.step({{"x", kInputX}, {"y", kY}});
  const auto params = train.download_params();
  for (float v : params.at("table").f32()) EXPECT_EQ(v, 0.0f);
}

TEST(Program, ConcurrentStepsAreSerialized) {
  // With a fixed batch every step is the same function of the parameters, so 40 atomic steps
  // give the same result whichever thread runs which; an interleaved step would not.
  ProgramNet a, b;
  tg::Program pa = make_train(a, tg::Device::cpu(), tg::SGD{.lr = 0.05, .momentum = 0.9});
  tg::Program pb = make_train(b, tg::Device::cpu(), tg::SGD{.lr = 0.05, .momentum = 0.9});
  tg::Program pa_eval =
      tg::compile_forward(a, [&](tg::Tensor x) { return a(x); }, {.inputs = {{"x", {4, 2}}}});
  for (int i = 0; i < 40; ++i) pb.step({{"x", kInputX}, {"y", kY}});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        pa.step({{"x", kInputX}, {"y", kY}});
        (void)pa_eval.run({{"x", kInputX}});
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(pa.steps(), 40);
  const auto va = pa.download_params(), vb = pb.download_params();
  for (const auto& [name, t] : va)
    for (size_t i = 0; i < t.f32().size(); ++i) ASSERT_EQ(t.f32()[i], vb.at(name).f32()[i]) << name;
}

TEST(Program, GradientsOnlyReturnsGradientsAndLeavesParametersAlone) {
  ProgramNet a, b;
  tg::Program cpu = make_train(a, tg::Device::cpu(), tg::GradientsOnly{});
  tg::Program ref = make_train(b, tg::Device::ref(), tg::GradientsOnly{});
  ref.upload_params(cpu.download_params());
  const auto before = cpu.download_params();
  tg::Captures gc, gr;
  const float l1 = cpu.step({{"x", kInputX}, {"y", kY}}, {.captures = &gc});
  const float l2 = cpu.step({{"x", kInputX}, {"y", kY}});
  const float lr = ref.step({{"x", kInputX}, {"y", kY}}, {.captures = &gr});
  EXPECT_EQ(l1, l2);  // nothing moved between the steps
  EXPECT_NEAR(l1, lr, 1e-5 * std::fabs(lr));
  EXPECT_EQ(cpu.steps(), 2);
  const auto after = cpu.download_params();
  for (const auto& [name, t] : before)
    for (size_t i = 0; i < t.f32().size(); ++i) ASSERT_EQ(t.f32()[i], after.at(name).f32()[i]) << name;
  // Every parameter that reaches the loss has its gradient, as the reference computes it.
  EXPECT_EQ(gc.size(), 7u);
  EXPECT_EQ(gc.count("grad/table"), 0u);  // unused: no gradient, as in PyTorch
  for (const auto& [name, t] : gr) {
    ASSERT_EQ(gc.count(name), 1u) << name;
    for (size_t i = 0; i < t.f32().size(); ++i)
      EXPECT_NEAR(gc.at(name).f32()[i], t.f32()[i], 1e-5) << name << "[" << i << "]";
  }
  // And against central differences of the reference's loss in the gain.
  const float g0 = before.at("gain").f32()[0], h = 1e-3f;
  auto loss_at = [&](float g) {
    ref.upload_params({{"gain", tg::HostTensor::f32({g}, {1})}}, {.partial = true});
    return static_cast<double>(ref.step({{"x", kInputX}, {"y", kY}}));
  };
  const double fd = (loss_at(g0 + h) - loss_at(g0 - h)) / (2.0 * h);
  EXPECT_NEAR(gr.at("grad/gain").f32()[0], fd, 1e-3 * std::fabs(fd) + 1e-6);
  // No learning rate, no clipping.
  EXPECT_THROW(cpu.set_lr(0.1), tg::Error);
  EXPECT_THROW(
      tg::compile_train(a, [&](tg::Tensor x, tg::Tensor y) { return tg::mean((a(x) - y) * (a(x) - y)); },
                        {.inputs = {{"x", {4, 2}}, {"y", {4, 1}}},
                         .optimizer = tg::GradientsOnly{},
                         .clip_grad_norm = 1.0,
                         .device = tg::Device::cpu()}),
      tg::InputError);
}

TEST(Program, CpuMatchesRefOnAWholeTrainingStep) {
  ProgramNet a, b;
  tg::Program cpu = make_train(a, tg::Device::cpu());
  tg::Program ref = make_train(b, tg::Device::ref());
  ref.upload_params(cpu.download_params());
  for (int i = 0; i < 3; ++i) {
    const float lc = cpu.step({{"x", kInputX}, {"y", kY}});
    const float lr = ref.step({{"x", kInputX}, {"y", kY}});
    EXPECT_NEAR(lc, lr, 1e-5 * std::fabs(lr) + 1e-7);
  }
  const auto vc = cpu.download_params(), vr = ref.download_params();
  for (const auto& [name, t] : vc)
    for (size_t i = 0; i < t.f32().size(); ++i) EXPECT_NEAR(t.f32()[i], vr.at(name).f32()[i], 1e-5) << name;
}

}  // namespace
