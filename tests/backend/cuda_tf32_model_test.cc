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
#include "gpt_sgd_step.h"
#include "test_util.h"

namespace {

using namespace tg;

using tg::testing::GptStepResult;

GptStepResult tf32_step(Device device, Precision precision, const std::map<std::string, HostTensor>* start,
                        std::map<std::string, HostTensor>* initial) {
  return tg::testing::gpt_sgd_step({.vocab = 1100, .seq_len = 64, .layers = 1, .d_model = 64, .heads = 2}, 16,
                                   device, precision, start, initial);
}

TEST(CudaTf32, PaddedVocabularyGptMatchesRef) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  std::map<std::string, HostTensor> params;
  const GptStepResult want = tf32_step(Device::ref(), Precision::kFp32, nullptr, &params);
  const GptStepResult got = tf32_step(Device::cuda(), Precision::kTf32, &params, nullptr);
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
