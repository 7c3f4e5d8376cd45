// Precision::kTf32x3 on the GPU: products of 1 GFLOP and more run as three TF32 products over a
// hi/lo split of each operand (src/backend/cuda/products.cc, split_product_wanted). Measured here
// against the double-precision reference next to f32 FMA products (kFp32) and plain TF32: the
// split must stay within a small factor of f32's error and far below TF32's, for every operand
// layout, padded extents (m, n and the reduction axis 1100: zero padding to 1152) and the bias
// epilogue; and a whole training step of a GPT whose products split must match ref about as
// closely as the same step in f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/codegen.h"
#include "backend/cuda/driver.h"
#include "cuda_test_util.h"
#include "tensorgrad/tensorgrad.h"
#include "gpt_sgd_step.h"
#include "test_util.h"

namespace {

using namespace tg;

struct NoParams : Module {};

TEST(CudaSplitProductNvrtc, SplitKernelSourcesCompile) {
  std::string why;
  if (!tg::testing::have_nvrtc(why)) GTEST_SKIP() << why;
  std::vector<tg::backend::cuda::KernelSource> all;
  int n = 0;
  for (bool col_major : {false, true})
    for (int k_axis : {0, 1})
      for (bool lo_first : {false, true}) {
        const std::string name = "split" + std::to_string(n++);
        all.push_back({name, tg::backend::cuda::split_copy_kernel(name, 100, 70, col_major ? 1 : 70,
                                                                  col_major ? 100 : 1, 128, 128, col_major,
                                                                  k_axis, lo_first)
                                 .source});
      }
  const auto cubins = tg::backend::cuda::compile_cubins(all, 9, 0);
  ASSERT_EQ(cubins.size(), all.size());
  for (size_t i = 0; i < cubins.size(); ++i) EXPECT_FALSE(cubins[i].empty()) << all[i].name;
}

struct ProductCase {
  const char* name;
  int64_t m, k, n;
  bool a_transposed, b_transposed, bias;
};

std::vector<float> values(int64_t count, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(count));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    f = static_cast<float>(static_cast<double>((x * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0 * 2 -
                           1);
  }
  return v;
}

/// The product of `c` (a·b [+ bias]) on `device`; `describe` receives the program's step list.
std::vector<float> product(const ProductCase& c, Device device, Precision precision,
                           std::string* describe = nullptr) {
  NoParams none;
  const Shape as = c.a_transposed ? Shape{c.k, c.m} : Shape{c.m, c.k},
              bs = c.b_transposed ? Shape{c.n, c.k} : Shape{c.k, c.n};
  std::vector<InputSpec> inputs = {{"a", as}, {"b", bs}};
  if (c.bias) inputs.push_back({"bias", {c.n}});
  auto ab = [&](Tensor a, Tensor b) {
    return matmul(c.a_transposed ? transpose(a) : a, c.b_transposed ? transpose(b) : b);
  };
  const ForwardOptions options{.inputs = inputs, .device = device, .precision = precision};
  Program p = c.bias ? compile_forward(
                           none, [&](Tensor a, Tensor b, Tensor bias) { return ab(a, b) + bias; }, options)
                     : compile_forward(none, ab, options);
  if (describe) *describe = p.describe();
  const std::vector<float> a = values(c.m * c.k, 1), b = values(c.k * c.n, 2), bias = values(c.n, 3);
  Feeds feeds{{"a", a}, {"b", b}};
  if (c.bias) feeds.push_back({"bias", bias});
  return p.run(feeds).f32();
}

double max_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
  return worst;
}

class CudaSplitProduct : public ::testing::TestWithParam<ProductCase> {};

TEST_P(CudaSplitProduct, CloseToF32FarBelowTf32) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const ProductCase& c = GetParam();
  const std::vector<float> want = product(c, Device::ref(), Precision::kFp32);
  std::string steps, f32_steps;
  const std::vector<float> split = product(c, Device::cuda(), Precision::kTf32x3, &steps);
  const std::vector<float> f32 = product(c, Device::cuda(), Precision::kFp32, &f32_steps);
  const std::vector<float> tf32 = product(c, Device::cuda(), Precision::kTf32);
  EXPECT_NE(steps.find("3xTF32"), std::string::npos) << "the product was not split:\n" << steps;
  EXPECT_EQ(f32_steps.find("3xTF32"), std::string::npos) << "kFp32 split a product:\n" << f32_steps;
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(double(w)));
  const double e_split = max_error(split, want), e_f32 = max_error(f32, want), e_tf32 = max_error(tf32, want);
  std::printf("  %s: max |error| / max |value|: 3xTF32 %.3g, f32 %.3g, TF32 %.3g\n", c.name, e_split / scale,
              e_f32 / scale, e_tf32 / scale);
  EXPECT_LE(e_split, 10 * e_f32) << "3xTF32 " << e_split << " against f32 " << e_f32;
  EXPECT_LE(e_split, 1e-5 * scale);
  EXPECT_GE(e_tf32, 30 * e_split) << "plain TF32 should be far less accurate";
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaSplitProduct,
                         ::testing::Values(ProductCase{"nn_n1100", 1024, 1536, 1100, false, false, false},
                                           ProductCase{"tn_m1100", 1100, 1024, 1024, true, false, false},
                                           ProductCase{"nt_k1100_bias", 1024, 1100, 1024, false, true, true},
                                           ProductCase{"tt", 1024, 768, 1024, true, true, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// One SGD step with lr = 1 (the parameter change is the gradient) of a GPT whose head
// products (2048 tokens × d 256 × vocabulary 1100, padded) and MLP products split.
tg::testing::GptStepResult one_step(Device device, Precision precision,
                                    const std::map<std::string, HostTensor>* start,
                                    std::map<std::string, HostTensor>* initial,
                                    std::string* describe = nullptr) {
  return tg::testing::gpt_sgd_step({.vocab = 1100, .seq_len = 256, .layers = 1, .d_model = 256, .heads = 4},
                                   8, device, precision, start, initial, describe);
}

TEST(CudaSplitProductModel, GptStepAsCloseToRefAsF32) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  std::map<std::string, HostTensor> params;
  const tg::testing::GptStepResult want = one_step(Device::ref(), Precision::kFp32, nullptr, &params);
  std::string steps;
  const tg::testing::GptStepResult split =
      one_step(Device::cuda(), Precision::kTf32x3, &params, nullptr, &steps);
  const tg::testing::GptStepResult f32 = one_step(Device::cuda(), Precision::kFp32, &params, nullptr);
  EXPECT_NE(steps.find("3xTF32"), std::string::npos) << "no product was split:\n" << steps;
  EXPECT_NEAR(split.loss, want.loss, 1e-5 * std::abs(want.loss));
  for (const auto& [name, g] : want.grads) {
    const std::vector<float>&h = split.grads.at(name), &h32 = f32.grads.at(name);
    ASSERT_EQ(h.size(), g.size()) << name;
    double scale = 0, worst = 0, worst32 = 0;
    for (float x : g) scale = std::max(scale, std::abs(double(x)));
    for (size_t i = 0; i < g.size(); ++i) {
      worst = std::max(worst, std::abs(double(h[i]) - g[i]));
      worst32 = std::max(worst32, std::abs(double(h32[i]) - g[i]));
    }
    // The gradient is read as (parameter before − after): parameters near 1 resolve it only to
    // 2⁻²³ ≈ 1.2e-7, which bounds both runs' agreement from below.
    EXPECT_LE(worst, 10 * worst32 + 2.5e-7) << name << ": 3xTF32 " << worst << ", f32 " << worst32;
    EXPECT_LE(worst, 1e-4 * scale + 2.5e-7) << name << " (largest |gradient| " << scale << ")";
    EXPECT_GT(scale, 0.0) << name;
  }
}

}  // namespace
