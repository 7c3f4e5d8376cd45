// The norm fusions of the cuda backend (src/backend/cuda/norm_fusion.cc): the affine forward
// and the whole backward. Their kernel sources compile through NVRTC for many shapes (wherever
// NVRTC is installed), and on a GPU a training step of affine and plain layer / RMS norms over
// shapes that are not multiples of the warp (100 columns, 37 rows per half) gives the loss and
// the gradients of x, the gain and the bias the reference backend gives, with the fused
// kernels really planned (describe()).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/driver.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace cuda = tg::backend::cuda;

TEST(CudaNormFusionNvrtc, SourcesCompile) {
  std::string why;
  if (!tg::testing::have_nvrtc(why)) GTEST_SKIP() << why;
  std::vector<cuda::KernelSource> all;
  int n = 0;
  for (int64_t cols : {1, 64, 100, 384, 768, 1024})
    for (bool layer : {false, true})
      for (int parts = 0; parts < 4; ++parts) {
        const bool dw = parts & 1, db = parts & 2;
        const std::string name = "nb" + std::to_string(n++);
        all.push_back(
            {name,
             cuda::norm_backward_kernel(name, 4096, cols, 1e-5, layer, parts != 1, dw, db, 264).source});
        if (dw || db)
          all.push_back({name + "p", cuda::norm_partials_kernel(name + "p", cols, 264, dw, db).source});
        const cuda::NormAffine affine{parts != 0, db};
        const cuda::Launch f = layer ? cuda::layer_norm_kernel(name + "f", 4096, cols * 40, 1e-5, affine)
                                     : cuda::rms_norm_kernel(name + "f", 4096, cols * 40, 1e-5, affine);
        all.push_back({name + "f", f.source});
      }
  const std::vector<std::vector<char>> cubins = cuda::compile_cubins(all, 9, 0);
  ASSERT_EQ(cubins.size(), all.size());
  for (size_t i = 0; i < cubins.size(); ++i) EXPECT_FALSE(cubins[i].empty()) << all[i].name;
}

struct NormCase {
  const char* name;
  int64_t rows_half, cols;
  bool rms, gain, bias;
};

constexpr int64_t kOut = 8;  // the projection after the norm: [C, 8]

struct NormModel : Module {
  NormModel(const NormCase& c)
      : c(c),
        x(*this, "x", {2, c.rows_half, c.cols}, init::normal(1.5, 0.3)),
        w(*this, "w", {c.cols}, init::normal(1.0, 1.0)),
        b(*this, "b", {c.cols}, init::normal(0.5)),
        proj(*this, "proj", {c.cols, kOut}, init::normal(0.3)) {}
  // As in a transformer block: the norm's output goes into a product, so its affine part is a
  // group of its own (fused into the norm), and dz comes from that product's backward.
  Tensor loss(const Tensor& t) const {
    const Tensor gain = c.gain ? w.tensor() : Tensor(), shift = c.bias ? b.tensor() : Tensor();
    Tensor y = c.rms ? rms_norm(x.tensor(), gain, 1e-6) : layer_norm(x.tensor(), gain, shift, 1e-5);
    if (c.rms && c.bias) y = y + shift;
    // w and b join the loss even when the norm does not use them (their gradients are then
    // these terms alone), so every parameter has a gradient to compare.
    return sum(matmul(y, proj.tensor()) * t) + sum(w.tensor() * w.tensor()) * 0.01 + sum(b.tensor()) * 0.01;
  }
  NormCase c;
  Param x, w, b, proj;
};

std::map<std::string, std::vector<float>> grads(const NormCase& c, Device device, std::string* describe) {
  NormModel model(c);
  Program p = compile_train(
      model, [&model](Tensor t) { return model.loss(t); },
      {.inputs = {{"t", {2, c.rows_half, kOut}}}, .optimizer = SGD{.lr = 1.0}, .device = device});
  if (describe) *describe = p.describe();
  p.init_params(7);
  const auto before = p.download_params();
  std::vector<float> t(static_cast<size_t>(2 * c.rows_half * kOut));
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 0.8);
  std::map<std::string, std::vector<float>> out;
  out["loss"] = {p.step({{"t", t}})};
  for (const auto& [name, after] : p.download_params()) {
    const std::span<const float> a = before.at(name).f32(), b = after.f32();
    for (size_t i = 0; i < a.size(); ++i) out[name].push_back(a[i] - b[i]);
  }
  return out;
}

class CudaNormFusion : public ::testing::TestWithParam<NormCase> {};

TEST_P(CudaNormFusion, GradientsMatchRef) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const NormCase& c = GetParam();
  std::string steps;
  const auto want = grads(c, Device::ref(), nullptr);
  const auto got = grads(c, Device::cuda(), &steps);
  EXPECT_NE(steps.find("norm_grad"), std::string::npos) << steps;
  // The fused kernel lists the norm grad with what it absorbed; a plain one lists it alone.
  const bool fused = steps.find(c.rms ? "rms_norm_grad" : "layer_norm_grad") != std::string::npos &&
                     steps.find(c.rms ? "fused rms_norm_grad" : "fused layer_norm_grad") != std::string::npos;
  EXPECT_EQ(fused, (c.gain || c.bias) && c.cols <= 1024) << steps;
  const bool fused_forward = steps.find(c.rms ? "fused rms_norm%" : "fused layer_norm%") != std::string::npos;
  EXPECT_EQ(fused_forward, c.gain && c.cols <= 16384) << steps;
  for (const auto& [name, g] : want) {
    const std::vector<float>& h = got.at(name);
    double scale = 0, worst = 0;
    for (float v : g) scale = std::max(scale, std::abs(double(v)));
    for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(double(h[i]) - g[i]));
    // Parameters near 1.5 resolve a gradient (before − after) only to ~2.4e-7.
    EXPECT_LE(worst, 2e-5 * scale + 5e-7) << c.name << " " << name << " (largest |gradient| " << scale << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaNormFusion,
                         ::testing::Values(NormCase{"layer_affine", 37, 100, false, true, true},
                                           NormCase{"layer_affine_wide", 300, 768, false, true, true},
                                           NormCase{"layer_gain_only", 37, 64, false, true, false},
                                           NormCase{"layer_plain", 37, 100, false, false, false},
                                           NormCase{"rms_gain", 37, 100, true, true, false},
                                           NormCase{"rms_gain_bias", 5, 1024, true, true, true},
                                           NormCase{"layer_wider_than_fused", 4, 1500, false, true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
