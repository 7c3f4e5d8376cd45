// Captures: named intermediates read back on request, with their shapes; duplicate names
// are an error; a program that is never asked for captures does not compute capture-only
// values. Also: training vs inference mode (dropout) per compiled program.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>

namespace {

struct Net : tg::Module {
  tg::nn::Linear fc{*this, "fc", 3, 4};
};

const std::vector<float> kX{0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};  // [2, 3]

TEST(Captures, ReturnsNamedTensorsWithShapes) {
  Net m;
  auto fwd =
      tg::compile_forward(m,
                          [&](tg::Tensor x) {
                            tg::Tensor h = tg::capture("hidden", m.fc(x));
                            tg::capture("only_for_inspection", tg::exp(h) * 100.0);  // read by nothing else
                            return tg::sum(tg::tanh(h), {1});
                          },
                          {.inputs = {{"x", {2, 3}}}});
  // Without a request, the capture-only value is not in the compiled program.
  EXPECT_EQ(fwd.ir().find("exp"), std::string::npos) << fwd.ir();
  const tg::HostTensor plain = fwd.run({{"x", kX}});

  tg::Captures caps;
  const tg::HostTensor out = fwd.run({{"x", kX}}, {.captures = &caps});
  ASSERT_EQ(caps.size(), 2u);
  EXPECT_EQ(caps.at("hidden").shape(), (tg::Shape{2, 4}));
  EXPECT_EQ(caps.at("only_for_inspection").shape(), (tg::Shape{2, 4}));
  for (size_t i = 0; i < 8; ++i)
    EXPECT_NEAR(caps.at("only_for_inspection").f32()[i], 100.0f * std::exp(caps.at("hidden").f32()[i]),
                1e-3f);
  // The hidden activations are what the output was computed from.
  for (int64_t r = 0; r < 2; ++r) {
    double s = 0;
    for (int64_t c = 0; c < 4; ++c) s += std::tanh(caps.at("hidden").f32()[static_cast<size_t>(r * 4 + c)]);
    EXPECT_NEAR(out.f32()[static_cast<size_t>(r)], s, 1e-5);
    EXPECT_EQ(out.f32()[static_cast<size_t>(r)], plain.f32()[static_cast<size_t>(r)]);
  }
  EXPECT_EQ(fwd.capture_names(), (std::vector<std::string>{"hidden", "only_for_inspection"}));
}

TEST(Captures, DuplicateNamesAreAnError) {
  Net m;
  int line = 0;
  try {
    tg::compile_forward(m,
                        [&](tg::Tensor x) {
                          tg::capture("h", x);
                          line = __LINE__ + 1;
                          return tg::capture("h", m.fc(x));
                        },
                        {.inputs = {{"x", {2, 3}}}});
    FAIL() << "expected a ShapeError";
  } catch (const tg::ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[capture] the name 'h' is used twice"), std::string::npos) << msg;
    EXPECT_NE(msg.find("captures_test.cc:" + std::to_string(line)), std::string::npos) << msg;
  }
}

TEST(Captures, TrainingStepReturnsGradients) {
  Net m;
  auto train = tg::compile_train(m, [&](tg::Tensor x) { return tg::sum(m.fc(x)); },
                                 {.inputs = {{"x", {2, 3}}}, .optimizer = tg::SGD{.lr = 0.0}});
  tg::Captures caps;
  train.step({{"x", kX}}, {.captures = &caps});
  // d/dW sum(x Wᵀ + b) = column sums of x for every output row; d/db = batch size.
  const auto& dw = caps.at("grad/fc.weight");
  ASSERT_EQ(dw.shape(), (tg::Shape{4, 3}));
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_FLOAT_EQ(dw.f32()[static_cast<size_t>(o * 3 + i)],
                      kX[static_cast<size_t>(i)] + kX[static_cast<size_t>(3 + i)]);
  for (float g : caps.at("grad/fc.bias").f32()) EXPECT_FLOAT_EQ(g, 2.0f);
}

TEST(Modes, DropoutIsActiveOnlyInTrainingPrograms) {
  struct Drop : tg::Module {
    tg::Param w{*this, "w", {1000}, tg::init::ones()};
  } m;
  auto fn = [&] { return tg::dropout(tg::Tensor(m.w), 0.5); };
  auto eval = tg::compile_forward(m, fn, {});
  const tg::HostTensor evaluated = eval.run({});
  for (float v : evaluated.f32()) ASSERT_EQ(v, 1.0f);
  auto train_mode = tg::compile_forward(m, fn, {.training = true});
  const tg::HostTensor a = train_mode.run({}), b = train_mode.run({});
  int kept = 0, differ = 0;
  for (size_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(a.f32()[i] == 0.0f || a.f32()[i] == 2.0f);
    kept += a.f32()[i] != 0.0f;
    differ += a.f32()[i] != b.f32()[i];
  }
  EXPECT_NEAR(kept, 500, 60);  // p = 0.5 over 1000 elements: 4 standard deviations
  EXPECT_GT(differ, 300);      // a fresh mask on every call
}

}  // namespace
