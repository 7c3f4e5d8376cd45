// PyTorch parity of nn::ConvTranspose2d: tests/data/conv_transpose_golden.safetensors (written by
// gen_conv_transpose_golden.py with PyTorch's nn.ConvTranspose2d, in float64) holds a two-layer
// decoder's initial parameters (PyTorch's layout [in, out/groups, kh, kw]), a batch, a target,
// the mean squared error and its gradients. tensorgrad, from the same parameters, must agree to
// a relative error below 1e-4 (per tensor: max |ours − theirs| / max |theirs|), on every device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "nn/init.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

const std::string kTransposeGolden = std::string(TG_TEST_DATA_DIR) + "/conv_transpose_golden.safetensors";

/// The golden's decoder with PyTorch's names.
struct Decoder : Module {
  Decoder()
      : up1(*this, "up1", 4, 6, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2}),
        up2(*this, "up2", 6, 3, {2, 3},
            {.stride = {1, 2}, .padding = {0, 1}, .dilation = {1, 2}, .bias = false}) {}
  Tensor loss(const Tensor& x, const Tensor& target) const { return mse_loss(up2(relu(up1(x))), target); }
  nn::ConvTranspose2d up1, up2;
};

class ConvTransposeParity : public ::testing::TestWithParam<Device> {};

TEST_P(ConvTransposeParity, LossAndGradientsMatchPyTorch) {
  const std::map<std::string, HostTensor> t = read_safetensors(kTransposeGolden);
  const std::map<std::string, std::string> meta = read_safetensors_metadata(kTransposeGolden);
  Decoder net;
  std::map<std::string, HostTensor> params;
  for (const auto& [name, v] : t)
    if (name.rfind("param/", 0) == 0) params[name.substr(6)] = v;
  ASSERT_EQ(params.size(), 3u);  // up1.weight, up1.bias, up2.weight: the layers' names and layouts
  const HostTensor &x = t.at("x"), &target = t.at("target");
  Program train =
      compile_train(net, [&](Tensor xs, Tensor ys) { return net.loss(xs, ys); },
                    {.inputs = {{"x", x.shape(), DType::kF32}, {"target", target.shape(), DType::kF32}},
                     .optimizer = GradientsOnly{},
                     .device = GetParam()});
  train.upload_params(params);  // a shape that differs from PyTorch's would throw here
  Captures caps;
  const float loss = train.step({{"x", x.f32()}, {"target", target.f32()}}, {.captures = &caps});
  const double want = std::stod(meta.at("loss"));
  EXPECT_LT(std::abs(loss - want) / want, 1e-4) << "loss " << loss << " vs " << want;
  for (const auto& [name, v] : params)
    EXPECT_LT(tg::testing::rel_diff(caps.at("grad/" + name).f32(), t.at("grad/" + name).f32()), 1e-4)
        << "gradient of " << name;
}

// PyTorch's default initialisation: U(±1/√fan_in) with fan_in = out/groups·kh·kw, for the weight
// and the bias; the weight is [in, out/groups, kh, kw].
TEST(ConvTranspose2dLayer, ShapesNamesAndPyTorchsInitBounds) {
  Module root;
  nn::ConvTranspose2d up(root, "up", 8, 6, 3, {.groups = 2});
  EXPECT_EQ(up.weight.shape(), (Shape{8, 3, 3, 3}));
  ASSERT_TRUE(up.bias.has_value());
  EXPECT_EQ(up.bias->shape(), (Shape{6}));
  const double bound = 1 / std::sqrt(3.0 * 9);
  for (const Param* param : {&up.weight, &*up.bias}) {
    std::vector<float> v(static_cast<size_t>(numel(param->shape())));
    tg::detail::fill_init(param->init(), v, param->shape(), 7, param->path());
    double most = 0;
    for (float e : v) most = std::max(most, std::abs(static_cast<double>(e)));
    EXPECT_LE(most, bound) << param->path();
    EXPECT_GT(most, 0.7 * bound) << param->path() << ": drawn from the whole range";
  }
  EXPECT_THROW(nn::ConvTranspose2d(root, "bad", 6, 5, 3, {.groups = 2}), ShapeError);
}

INSTANTIATE_TEST_SUITE_P(Devices, ConvTransposeParity, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

}  // namespace
