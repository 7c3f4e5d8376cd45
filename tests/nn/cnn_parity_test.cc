// PyTorch parity of the convolutional layers: tests/data/cnn_golden.safetensors (written by
// gen_cnn_golden.py with PyTorch's nn.Conv2d, nn.BatchNorm2d, pools and nn.Linear, in float64)
// holds a small CNN's initial parameters, a batch, the first step's loss and gradients, the
// losses of three SGD steps, batch norm's running statistics after them and the evaluation-mode
// loss that uses those statistics. tensorgrad, from the same parameters, must agree to a
// relative error below 1e-4 (per tensor: max |ours − theirs| / max |theirs|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <map>
#include <string>
#include <vector>

#include "io/json.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

const std::string kGolden = std::string(TG_TEST_DATA_DIR) + "/cnn_golden.safetensors";

/// The golden's model with PyTorch's names: conv1 → bn → relu → max pool → conv2 (stride 2,
/// groups 2) → relu → avg pool → fc.
struct Net : Module {
  explicit Net(int64_t in_ch, int64_t classes)
      : conv1(*this, "conv1", in_ch, 4, 3, {.padding = 1, .bias = false}),
        bn(*this, "bn", 4),
        conv2(*this, "conv2", 4, 6, 3, {.stride = 2, .padding = 1, .groups = 2}),
        fc(*this, "fc", 6, classes) {}
  Tensor loss(const Tensor& x, const Tensor& targets) const {
    Tensor h = max_pool2d(relu(bn(conv1(x))), {.kernel = 2});
    h = avg_pool2d(relu(conv2(h)), {.kernel = 2, .stride = 1});
    return cross_entropy(fc(nn::Flatten{}(h)), targets);
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn;
  nn::Conv2d conv2;
  nn::Linear fc;
};

double rel(double got, double want) { return std::abs(got - want) / std::abs(want); }

/// The golden file with the model it describes, and programs of that model.
struct Golden {
  std::map<std::string, HostTensor> t = read_safetensors(kGolden);
  std::map<std::string, std::string> meta = read_safetensors_metadata(kGolden);
  const HostTensor& x = t.at("x");
  const HostTensor& targets = t.at("targets");
  Net net{x.shape()[1], t.at("param/fc.weight").shape()[0]};

  std::vector<InputSpec> inputs() const {
    return {{"x", x.shape(), DType::kF32}, {"targets", targets.shape(), DType::kI32}};
  }
  Feeds feeds() const { return {{"x", x.f32()}, {"targets", targets.i32()}}; }
  std::map<std::string, HostTensor> params() const {
    std::map<std::string, HostTensor> p;
    for (const auto& [name, v] : t)
      if (name.rfind("param/", 0) == 0) p[name.substr(6)] = v;
    return p;
  }
  /// A training program of `net` with the golden's initial parameters.
  Program train(Device device, Optimizer optimizer, Precision precision = Precision::kFp32) {
    Program p =
        compile_train(net, [this](Tensor xs, Tensor ts) { return net.loss(xs, ts); },
                      {.inputs = inputs(), .optimizer = optimizer, .device = device, .precision = precision});
    p.upload_params(params());  // every parameter, by name: a missing or extra one throws
    return p;
  }
  Program eval(Device device) {
    return compile_forward(net, [this](Tensor xs, Tensor ts) { return net.loss(xs, ts); },
                           {.inputs = inputs(), .device = device});
  }
};

class CnnParity : public ::testing::TestWithParam<Device> {};

TEST_P(CnnParity, GradientsRunningStatisticsAndEvalMatchPyTorch) {
  Golden g;
  Program train = g.train(GetParam(), SGD{.lr = std::stod(g.meta.at("lr"))});
  std::vector<double> losses;
  for (const io::JsonValue& v : io::parse_json(g.meta.at("losses")).array) losses.push_back(v.number);
  ASSERT_EQ(losses.size(), 3u);
  for (int step = 0; step < 3; ++step) {
    Captures caps;
    const float loss = train.step(g.feeds(), {.captures = step == 0 ? &caps : nullptr});
    EXPECT_LT(rel(loss, losses[static_cast<size_t>(step)]), 1e-4) << "step " << step + 1 << ": loss " << loss;
    if (step > 0) continue;
    for (const auto& [name, v] : g.params())
      EXPECT_LT(tg::testing::rel_diff(caps.at("grad/" + name).f32(), g.t.at("grad/" + name).f32()), 1e-4)
          << "gradient of " << name;
  }
  // PyTorch's momentum update with the unbiased batch variance, three times.
  for (const char* s : {"running_mean", "running_var"})
    EXPECT_LT(tg::testing::rel_diff(train.read_state(std::string("bn.") + s).f32(), g.t.at(s).f32()), 1e-4)
        << s;
  // An inference program of the same model normalises with those running statistics.
  const float eval_loss = g.eval(GetParam()).run(g.feeds()).f32().at(0);
  EXPECT_LT(rel(eval_loss, std::stod(g.meta.at("eval_loss"))), 1e-4) << "eval loss " << eval_loss;
  // reset_state() puts the running statistics back to PyTorch's initial zeros and ones.
  train.reset_state();
  EXPECT_EQ(train.read_state("bn.running_var").f32(), std::vector<float>(4, 1.f));
  EXPECT_EQ(train.read_state("bn.running_mean").f32(), std::vector<float>(4, 0.f));
}

// A PyTorch user's export of the trained model (state_dict → safetensors, batch norm's
// running statistics included) loads with load_safetensors into an inference program, which
// then computes PyTorch's evaluation loss.
TEST_P(CnnParity, APyTorchStateDictLoadsWithItsRunningStatistics) {
  const std::string file = std::string(TG_TEST_DATA_DIR) + "/cnn_state_dict.safetensors";
  Golden g;
  Program eval = g.eval(GetParam());
  load_safetensors(file, eval);
  EXPECT_LT(tg::testing::rel_diff(eval.read_state("bn.running_var").f32(), g.t.at("running_var").f32()),
            1e-6);
  const float loss = eval.run(g.feeds()).f32().at(0);
  EXPECT_LT(rel(loss, std::stod(read_safetensors_metadata(file).at("eval_loss"))), 1e-4)
      << "eval loss " << loss;
  // A state of the wrong shape is a CheckpointError naming it; nothing is loaded.
  std::map<std::string, HostTensor> bad = read_safetensors(file);
  bad.at("bn.running_mean") = HostTensor(DType::kF32, {5});
  const std::string bad_file = ::testing::TempDir() + "/cnn_bad_state.safetensors";
  save_safetensors(bad_file, bad);
  try {
    load_safetensors(bad_file, eval);
    ADD_FAILURE() << "no CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("bn.running_mean"), std::string::npos) << e.what();
  }
}

/// The first training step of the golden's model under `precision` on `device`: the loss, then
/// every gradient (by parameter name).
std::pair<float, std::map<std::string, HostTensor>> first_step(Device device, Precision precision) {
  Golden g;
  Program train = g.train(device, GradientsOnly{}, precision);
  Captures caps;
  const float loss = train.step(g.feeds(), {.captures = &caps});
  std::map<std::string, HostTensor> grads;
  for (const auto& [name, v] : g.params()) grads.emplace(name, caps.at("grad/" + name));
  return {loss, grads};
}

// The GPU's tensor-core modes. tf32 against the float64 golden, within tf32's rounding (10
// fraction bits: a product's relative error ≤ 2^-11; the bound leaves room for the sums). bf16
// against the reference backend running the same bf16 program (the same bf16 roundings, exact
// products, sums in double): the policy's own distance from f32 is larger where gradients
// cancel (conv1's, behind batch norm, is 8e-2 of its largest element away from PyTorch's f32)
// and is a property of bf16, not of the kernels.
TEST(CnnParityGpu, Tf32MatchesPyTorchAndBf16MatchesTheReference) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto golden = read_safetensors(kGolden);
  const double want = io::parse_json(read_safetensors_metadata(kGolden).at("losses")).array.at(0).number;
  const auto [tf32_loss, tf32_grads] = first_step(Device::cuda(), Precision::kTf32);
  EXPECT_LT(rel(tf32_loss, want), 5e-3) << "tf32 loss " << tf32_loss;
  for (const auto& [name, g] : tf32_grads)
    EXPECT_LT(tg::testing::rel_diff(g.f32(), golden.at("grad/" + name).f32()), 5e-3)
        << "tf32 gradient of " << name;
  const auto [bf16_loss, bf16_grads] = first_step(Device::cuda(), Precision::kBf16);
  const auto [ref_loss, ref_grads] = first_step(Device::ref(), Precision::kBf16);
  EXPECT_LT(rel(bf16_loss, ref_loss), 1e-4) << "bf16 loss " << bf16_loss << " vs ref " << ref_loss;
  double worst = 0;
  for (const auto& [name, g] : bf16_grads) {
    const double e = tg::testing::rel_diff(g.f32(), ref_grads.at(name).f32());
    EXPECT_LT(e, 1e-4) << "bf16 gradient of " << name;
    worst = std::max(worst, e);
  }
  std::printf(
      "  tf32 loss %.6f, bf16 loss %.6f (ref bf16 %.6f, PyTorch f64 %.6f); bf16 worst gradient vs ref %.2e\n",
      tf32_loss, bf16_loss, ref_loss, want, worst);
}

INSTANTIATE_TEST_SUITE_P(Devices, CnnParity, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

}  // namespace
