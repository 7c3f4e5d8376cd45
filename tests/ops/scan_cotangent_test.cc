// selective_scan's gradient for every form its cotangent takes: the loss reads y, the last
// state or both, weighted (a dense cotangent) or through a plain sum (one value broadcast).
// The gradient node reads dy and dlast as given (a known zero where a result reaches no loss,
// which the CUDA kernel then does not read); every gradient must match the reference backend's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <tensorgrad/tensorgrad.h>

#include "test_util.h"

namespace {

using namespace tg;

struct ScanParams : Module {
  ScanParams(int64_t b, int64_t d, int64_t l, int64_t n)
      : u(*this, "u", {b, d, l}),
        delta(*this, "delta", {b, d, l}),
        A(*this, "A", {d, n}),
        B(*this, "B", {b, n, l}),
        C(*this, "C", {b, n, l}),
        D(*this, "D", {d}),
        wy(*this, "wy", {b, d, l}),
        wh(*this, "wh", {b, d, n}) {}
  Param u, delta, A, B, C, D, wy,
      wh;  // wy, wh: the loss's weights (trained too: their gradients are y and h)
};

struct Case {
  const char* name;
  int64_t b, d, l, n;
  std::function<Tensor(const ScanParams&, const SelectiveScanResult&)> loss;
};

std::map<std::string, HostTensor> random_params(const ScanParams& m, uint32_t seed) {
  std::mt19937 rng(seed);
  auto fill = [&](const Param& p, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(numel(p.shape())));
    for (float& x : v) x = dist(rng);
    return HostTensor::f32(std::move(v), p.shape());
  };
  return {{"u", fill(m.u, -1, 1)},   {"delta", fill(m.delta, -2, 1)}, {"A", fill(m.A, -1.5f, -0.1f)},
          {"B", fill(m.B, -1, 1)},   {"C", fill(m.C, -1, 1)},         {"D", fill(m.D, -1, 1)},
          {"wy", fill(m.wy, -1, 1)}, {"wh", fill(m.wh, -1, 1)}};
}

Captures gradients(const Case& c, const Device& device) {
  ScanParams m(c.b, c.d, c.l, c.n);
  Program train = compile_train(m,
                                [&] {
                                  const SelectiveScanResult r = selective_scan(
                                      m.u, m.delta, m.A, m.B, m.C, {.D = m.D, .delta_softplus = true});
                                  return c.loss(m, r);
                                },
                                {.optimizer = GradientsOnly{}, .device = device});
  train.upload_params(random_params(m, 7));
  Captures caps;
  train.step({}, {.captures = &caps});
  return caps;
}

class ScanCotangent : public ::testing::TestWithParam<Device> {};

TEST_P(ScanCotangent, EveryGradientMatchesTheReference) {
  const std::vector<Case> cases = {
      {"sum_y", 2, 8, 21, 4, [](const ScanParams&, const SelectiveScanResult& r) { return sum(r.y); }},
      {"sum_y_vec", 2, 40, 24, 16, [](const ScanParams&, const SelectiveScanResult& r) { return sum(r.y); }},
      {"mean_y", 1, 8, 9, 4, [](const ScanParams&, const SelectiveScanResult& r) { return mean(r.y); }},
      {"sum_last", 2, 8, 21, 4,
       [](const ScanParams&, const SelectiveScanResult& r) { return sum(r.last_state); }},
      {"weighted_y", 2, 8, 24, 4,
       [](const ScanParams& m, const SelectiveScanResult& r) { return sum(r.y * m.wy); }},
      {"weighted_last", 2, 8, 21, 4,
       [](const ScanParams& m, const SelectiveScanResult& r) { return sum(r.last_state * m.wh); }},
      {"weighted_both", 2, 8, 21, 4,
       [](const ScanParams& m, const SelectiveScanResult& r) {
         return sum(r.y * m.wy) + sum(r.last_state * m.wh);
       }},
      {"sum_both", 2, 8, 21, 4,
       [](const ScanParams&, const SelectiveScanResult& r) { return sum(r.y) + 0.5f * sum(r.last_state); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Captures want = gradients(c, Device::ref());
    const Captures got = gradients(c, GetParam());
    for (const char* p : {"u", "delta", "A", "B", "C", "D"})
      EXPECT_TRUE(want.count(std::string("grad/") + p)) << p;
    for (const auto& [name, t] : want) {
      if (name.rfind("grad/", 0) != 0) continue;
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_LT(tg::testing::rel_diff(got.at(name).f32(), t.f32()), 2e-5) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ScanCotangent, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

}  // namespace
