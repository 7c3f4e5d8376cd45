// Whole training steps in TF32 on the GPU against the double-precision reference. The GPT
// here has a vocabulary of 1100 (not a multiple of 64, and ≥ 1024), so the cuda backend pads
// its three head products (logits = x·wteᵀ: n; dx = dlogits·wte: the reduction axis, read as
// zeros; dwte = dlogitsᵀ·x: m) to 1152 and runs them through cuBLASLt. SGD with lr = 1 makes
// the parameter change after one step the gradient itself, compared to TF32 accuracy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

struct StepResult {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads;
};

StepResult one_step(Device device, Precision precision, const std::map<std::string, HostTensor>* start,
             std::map<std::string, HostTensor>* initial) {
  const nn::GptConfig config{.vocab = 1100, .seq_len = 64, .layers = 1, .d_model = 64, .heads = 2};
  const int64_t batch = 16, T = 64;
  nn::Gpt model(config);
  Program p = compile_train(model, [&model](Tensor ids, Tensor targets) { return model.loss(ids, targets); },
                            {.inputs = {{"ids", {batch, T}, DType::kI32}, {"targets", {batch, T}, DType::kI32}},
                             .optimizer = SGD{.lr = 1.0},
                             .device = device,
                             .precision = precision});
  if (start) p.upload_params(*start);
  const auto before = p.download_params();
  if (initial) *initial = before;
  std::vector<int32_t> ids(static_cast<size_t>(batch * T)), targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 37 + 11) % 1100);
    targets[i] = static_cast<int32_t>((i * 53 + 5) % 1100);
  }
  StepResult r;
  r.loss = p.step({{"ids", ids}, {"targets", targets}});
  for (const auto& [name, t] : p.download_params()) {
    const std::span<const float> a = before.at(name).f32(), b = t.f32();
    std::vector<float>& g = r.grads[name];
    for (size_t i = 0; i < a.size(); ++i) g.push_back(a[i] - b[i]);
  }
  return r;
}

TEST(CudaTf32, PaddedVocabularyGptMatchesRef) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  std::map<std::string, HostTensor> params;
  const StepResult want = one_step(Device::ref(), Precision::kFp32, nullptr, &params);
  const StepResult got = one_step(Device::cuda(), Precision::kTf32, &params, nullptr);
  EXPECT_NEAR(got.loss, want.loss, 2e-3 * std::abs(want.loss));
  for (const auto& [name, g] : want.grads) {
    const std::vector<float>& h = got.grads.at(name);
    ASSERT_EQ(h.size(), g.size()) << name;
    double scale = 0, worst = 0;
    for (float x : g) scale = std::max(scale, std::abs(double(x)));
    for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(double(h[i]) - g[i]));
    // TF32 keeps 10 mantissa bits: products are good to ~1e-3 of the largest gradient entry.
    EXPECT_LE(worst, 5e-3 * scale + 1e-7) << name << " (largest |gradient| " << scale << ")";
    EXPECT_GT(scale, 0.0) << name;
  }
}

}  // namespace
