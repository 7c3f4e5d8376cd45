// PyTorch parity of nn::MambaLM: tests/data/mamba_golden.safetensors (written by
// gen_mamba_golden.py from the reference semantics of state-spaces/mamba, in float64) holds a
// 2-layer Mamba LM's parameters, a batch with one ignored target, the loss and every
// parameter's gradient. tensorgrad's loss and gradients, from the same parameters, must agree
// to a relative error below 1e-4 (per tensor: max |ours − theirs| / max |theirs|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

const std::string kMambaGolden = std::string(TG_TEST_DATA_DIR) + "/mamba_golden.safetensors";

class MambaParity : public ::testing::TestWithParam<Device> {};

TEST_P(MambaParity, LossAndEveryGradientMatchPyTorch) {
  const auto golden = read_safetensors(kMambaGolden);
  const auto meta = read_safetensors_metadata(kMambaGolden);
  nn::MambaLM model({.vocab = std::stoll(meta.at("vocab")),
                     .layers = std::stoll(meta.at("layers")),
                     .d_model = std::stoll(meta.at("d_model")),
                     .d_state = std::stoll(meta.at("d_state")),
                     .d_conv = std::stoll(meta.at("d_conv")),
                     .expand = std::stoll(meta.at("expand"))});
  const HostTensor& ids = golden.at("ids");
  Program train;
  try {
    train =
        compile_train(model, [&](Tensor i, Tensor t) { return model.loss(i, t); },
                      {.inputs = {{"ids", ids.shape(), DType::kI32}, {"targets", ids.shape(), DType::kI32}},
                       .optimizer = GradientsOnly{},
                       .device = GetParam()});
  } catch (const DeviceError& e) {
    if (std::string(e.what()).find("not implemented on the CUDA backend yet") == std::string::npos) throw;
    GTEST_SKIP() << e.what();
  }
  std::map<std::string, HostTensor> params;
  for (const auto& [name, t] : golden)
    if (name.rfind("param/", 0) == 0) params[name.substr(6)] = t;
  train.upload_params(params);  // every parameter, by name: a missing or extra one throws
  Captures caps;
  const float loss =
      train.step({{"ids", ids.i32()}, {"targets", golden.at("targets").i32()}}, {.captures = &caps});
  const double want_loss = std::stod(meta.at("loss"));
  EXPECT_LT(std::abs(loss - want_loss) / want_loss, 1e-4) << "loss " << loss << " vs PyTorch " << want_loss;
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, t] : params) {
    const double e = tg::testing::rel_diff(caps.at("grad/" + name).f32(), golden.at("grad/" + name).f32());
    EXPECT_LT(e, 1e-4) << "gradient of " << name;
    if (e > worst) worst = e, worst_name = name;
  }
  std::printf("  %s: loss %.7f (PyTorch %.7f), worst gradient error %.2e (%s)\n", GetParam().str().c_str(),
              loss, want_loss, worst, worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(Devices, MambaParity, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

}  // namespace
