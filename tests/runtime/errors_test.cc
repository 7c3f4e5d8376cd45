// Every misuse the issue names ends in a typed exception whose message says what is wrong
// and where: shape mismatches at trace time (op, shapes, the caller's file:line), bad
// inputs at step/run, bad parameter uploads, and a loss that is not a scalar.
#include <gtest/gtest.h>

#include "test_util.h"
#include <tensorgrad/tensorgrad.h>

#include <string>

// The tests compare __LINE__ with the call site an error reports: statements stay on the lines
// they were written on, not formatted (.clang-format).
// clang-format off

namespace {

struct Tiny : tg::Module {
  tg::nn::Linear fc{*this, "fc", 3, 2};
};

using tg::testing::message_of;

std::string here(int line) { return std::string("errors_test.cc:") + std::to_string(line); }

TEST(Errors, ShapeMismatchAtTraceNamesOpShapesAndCallSite) {
  Tiny m;
  int line = 0;
  const std::string msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m, [&](tg::Tensor a, tg::Tensor b) { line = __LINE__; return a + b; },
                        {.inputs = {{"a", {2, 3}}, {"b", {4}}}, .device = tg::Device::ref()});
  });
  EXPECT_NE(msg.find("[add]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find(here(line)), std::string::npos) << msg;
}

TEST(Errors, MatmulAndFunctionCallSitesAreReported) {
  Tiny m;
  int line = 0;
  std::string msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m, [&](tg::Tensor a, tg::Tensor b) { line = __LINE__; return tg::matmul(a, b); },
                        {.inputs = {{"a", {2, 3}}, {"b", {4, 5}}}, .device = tg::Device::ref()});
  });
  EXPECT_NE(msg.find("[matmul]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 vs 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find(here(line)), std::string::npos) << msg;

  msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m, [&](tg::Tensor a) { line = __LINE__; return tg::sum(a, {2}); },
                        {.inputs = {{"a", {2, 3}}}, .device = tg::Device::ref()});
  });
  EXPECT_NE(msg.find("[sum]"), std::string::npos) << msg;
  EXPECT_NE(msg.find(here(line)), std::string::npos) << msg;

  msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m, [&](tg::Tensor a) { line = __LINE__; return m.fc(a); },
                        {.inputs = {{"a", {2, 5}}}, .device = tg::Device::ref()});
  });
  EXPECT_NE(msg.find("[Linear] 'fc' expects [..., 3], got [2, 5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find(here(line)), std::string::npos) << msg;
}

TEST(Errors, CumsumRejectsBadAxesAndBool) {
  Tiny m;
  int line = 0;
  std::string msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m, [&](tg::Tensor a) { line = __LINE__; return tg::cumsum(a, 2); },
                        {.inputs = {{"a", {2, 3}}}, .device = tg::Device::ref()});
  });
  EXPECT_NE(msg.find("[cumsum]"), std::string::npos) << msg;
  EXPECT_NE(msg.find(here(line)), std::string::npos) << msg;
  msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m, [&](tg::Tensor a) { return tg::cumsum(a > 0.0, 0); },
                        {.inputs = {{"a", {2, 3}}}, .device = tg::Device::ref()});
  });
  EXPECT_NE(msg.find("[cumsum] does not accept bool"), std::string::npos) << msg;
  msg = message_of<tg::ShapeError>([&] {
    tg::compile_forward(m, [&](tg::Tensor a) { return tg::cumsum(tg::sum(a), 0); },
                        {.inputs = {{"a", {2, 3}}}, .device = tg::Device::ref()});
  });
  EXPECT_NE(msg.find("[cumsum] a scalar has no axis 0"), std::string::npos) << msg;
}

TEST(Errors, RotaryRejectsOddRowsOtherDtypesAndTablesThatDoNotBroadcast) {
  Tiny m;
  auto error_of = [&](std::function<tg::Tensor(tg::Tensor)> f, tg::Shape shape) {
    return message_of<tg::ShapeError>(
        [&] { tg::compile_forward(m, f, {.inputs = {{"a", shape}}, .device = tg::Device::ref()}); });
  };
  std::string msg = error_of([](tg::Tensor a) { return tg::rotary(a, a, a); }, {2, 5});
  EXPECT_NE(msg.find("[rotary] needs x [..., D] with D even, got [2, 5]"), std::string::npos) << msg;
  msg = error_of([](tg::Tensor a) { return tg::rotary(a, tg::slice(a, 0, 0, 1), tg::slice(a, 1, 0, 2)); }, {2, 4});
  EXPECT_NE(msg.find("[rotary]"), std::string::npos) << msg;
  msg = error_of([](tg::Tensor a) { return tg::rotary(a, tg::ones({3, 4}), tg::ones({3, 4})); }, {2, 4});
  EXPECT_NE(msg.find("[rotary] cannot broadcast shapes [3, 4] and [2, 4]"), std::string::npos) << msg;
  msg = error_of([](tg::Tensor a) { return tg::rotary(a, tg::ones({3, 2, 4}), tg::ones({3, 2, 4})); }, {2, 4});
  EXPECT_NE(msg.find("must broadcast to x [2, 4]"), std::string::npos) << msg;
  msg = error_of([](tg::Tensor a) { return tg::rotary(tg::cast(a, tg::DType::kI32), a, a); }, {2, 4});
  EXPECT_NE(msg.find("[rotary] x, cos and sin must be f32"), std::string::npos) << msg;
}

tg::Program tiny_train(Tiny& m, tg::Device device = tg::Device::cpu()) {
  return tg::compile_train(
      m, [&](tg::Tensor x, tg::Tensor y) { return tg::mean(tg::pow(m.fc(x) - y, 2)); },
      {.inputs = {{"x", {4, 3}}, {"y", {4, 2}}}, .optimizer = tg::SGD{.lr = 0.1}, .device = device});
}

TEST(Errors, BadInputsAtStepAreRejectedBeforeAnyWork) {
  Tiny m;
  tg::Program train = tiny_train(m);
  const auto before = train.download_params();
  std::vector<float> x(12, 1.0f), y(8, 0.5f), short_y(7, 0.5f);
  std::vector<int32_t> y_int(8, 1);

  std::string msg = message_of<tg::InputError>([&] { train.step({{"x", x}, {"z", y}}); });
  EXPECT_NE(msg.find("unknown input 'z'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("x, y"), std::string::npos) << msg;

  msg = message_of<tg::InputError>([&] { train.step({{"x", x}}); });
  EXPECT_NE(msg.find("missing input 'y'"), std::string::npos) << msg;

  msg = message_of<tg::InputError>([&] { train.step({{"x", x}, {"y", y_int}}); });
  EXPECT_NE(msg.find("input 'y' expects f32 with 8 elements (shape [4, 2]), got i32 with 8 elements"), std::string::npos) << msg;

  msg = message_of<tg::InputError>([&] { train.step({{"x", x}, {"y", short_y}}); });
  EXPECT_NE(msg.find("input 'y' expects f32 with 8 elements (shape [4, 2]), got f32 with 7 elements"), std::string::npos) << msg;

  msg = message_of<tg::InputError>([&] { train.step({{"x", x}, {"y", y}, {"x", x}}); });
  EXPECT_NE(msg.find("'x' is given twice"), std::string::npos) << msg;

  EXPECT_EQ(train.steps(), 0);
  const auto after = train.download_params();
  for (const auto& [name, t] : before)
    for (size_t i = 0; i < t.f32().size(); ++i) EXPECT_EQ(t.f32()[i], after.at(name).f32()[i]) << name;
}

TEST(Errors, UploadParamsRejectsUnknownMissingAndMisshapen) {
  Tiny m;
  tg::Program train = tiny_train(m);
  auto params = train.download_params();
  ASSERT_EQ(params.size(), 2u);

  auto with_unknown = params;
  with_unknown.emplace("fc.gain", tg::HostTensor::f32({1, 2}, {2}));
  std::string msg = message_of<tg::InputError>([&] { train.upload_params(with_unknown); });
  EXPECT_NE(msg.find("unknown parameter 'fc.gain'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fc.bias, fc.weight"), std::string::npos) << msg;
  msg = message_of<tg::InputError>([&] { train.upload_params(with_unknown, {.partial = true}); });
  EXPECT_NE(msg.find("unknown parameter 'fc.gain'"), std::string::npos) << msg;

  std::map<std::string, tg::HostTensor> only_bias{{"fc.bias", tg::HostTensor::f32({7, 8}, {2})}};
  msg = message_of<tg::InputError>([&] { train.upload_params(only_bias); });
  EXPECT_NE(msg.find("missing parameter 'fc.weight'"), std::string::npos) << msg;
  train.upload_params(only_bias, {.partial = true});
  const auto got = train.download_params();
  EXPECT_EQ(got.at("fc.bias").f32()[1], 8.0f);
  EXPECT_EQ(got.at("fc.weight").f32()[0], params.at("fc.weight").f32()[0]);

  std::map<std::string, tg::HostTensor> misshapen{{"fc.bias", tg::HostTensor::f32({1, 2, 3}, {3})}};
  msg = message_of<tg::InputError>([&] { train.upload_params(misshapen, {.partial = true}); });
  EXPECT_NE(msg.find("'fc.bias' expects f32[2], got f32[3]"), std::string::npos) << msg;
}

TEST(Errors, LossMustBeAScalar) {
  Tiny m;
  int line = 0;
  const std::string msg = message_of<tg::ShapeError>([&] {
    tg::compile_train(m, [&](tg::Tensor x) { line = __LINE__; return m.fc(x) * 2.0; },
                      {.inputs = {{"x", {4, 3}}}, .device = tg::Device::ref()});
  });
  EXPECT_NE(msg.find("[compile_train] the loss must be a single f32 value, got f32[4, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find(here(line)), std::string::npos) << msg;
}

TEST(Errors, MisuseOfProgramsAndDevices) {
  Tiny m;
  tg::Program train = tiny_train(m, tg::Device::ref());
  EXPECT_THROW(train.run({}), tg::Error);
  auto fwd = tg::compile_forward(m, [&](tg::Tensor x) { return m.fc(x); }, {.inputs = {{"x", {1, 3}}}, .device = tg::Device::ref()});
  EXPECT_THROW(fwd.step({}), tg::Error);
  EXPECT_THROW(fwd.set_lr(0.1), tg::Error);
  EXPECT_THROW(train.set_lr(-1), tg::Error);
  // The function's arity must match the declared inputs.
  EXPECT_THROW(tg::compile_forward(m, [&](tg::Tensor x) { return m.fc(x); }, {.inputs = {}, .device = tg::Device::ref()}),
               tg::InputError);
  // Without a usable GPU: a clear DeviceError naming the device, not a crash.
  if (!tg::testing::gpu_skip_reason().empty()) {
    const std::string msg = message_of<tg::DeviceError>([&] {
      tg::compile_forward(m, [&](tg::Tensor x) { return m.fc(x); }, {.inputs = {{"x", {1, 3}}}, .device = tg::Device::cuda()});
    });
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  }
  // A parameter outside a trace.
  EXPECT_THROW((void)tg::Tensor(m.fc.weight), tg::Error);
}

}  // namespace
