// mlp_sin: the smallest complete tensorgrad program. A 1→64→64→1 ReLU MLP learns
// y = sin(x) on [-π, π] with Adam (lr 5e-3, batch 256), on the CPU by default.
//
//   ./mlp_sin [steps=2000] [device=cpu|ref]
#include <tensorgrad/tensorgrad.h>

#include "sin_mlp.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <random>
#include <string>

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 2000;
  const tg::Device device = argc > 2 && std::string(argv[2]) == "ref" ? tg::Device::ref() : tg::Device::cpu();
  constexpr int64_t kBatch = 256;
  std::printf(
      "mlp_sin: fitting y = sin(x) on [-pi, pi] with a 1-64-64-1 ReLU MLP, Adam lr 5e-3, batch %lld, "
      "%d steps on %s\n",
      static_cast<long long>(kBatch), steps, device.str().c_str());

  SinMlp model;
  auto train = tg::compile_train(model,
                                 [&](tg::Tensor x, tg::Tensor y) {
                                   auto d = model(x) - y;
                                   return tg::mean(d * d);
                                 },
                                 {.inputs = {{"x", {kBatch, 1}}, {"y", {kBatch, 1}}},
                                  .optimizer = tg::Adam{.lr = 5e-3},
                                  .device = device});
  train.init_params(/*seed=*/0);

  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uniform(-std::numbers::pi_v<float>, std::numbers::pi_v<float>);
  std::vector<float> xs(kBatch), ys(kBatch);
  float loss = 0;
  for (int step = 1; step <= steps; ++step) {
    for (int64_t i = 0; i < kBatch; ++i) {
      xs[static_cast<size_t>(i)] = uniform(rng);
      ys[static_cast<size_t>(i)] = std::sin(xs[static_cast<size_t>(i)]);
    }
    loss = train.step({{"x", xs}, {"y", ys}});
    if (step % 100 == 0 || step == steps) {
      const int width = 30, filled = width * step / steps;
      std::printf("\r  [%s%s] step %5d/%d  loss %.6f", std::string(static_cast<size_t>(filled), '#').c_str(),
                  std::string(static_cast<size_t>(width - filled), '.').c_str(), step, steps,
                  static_cast<double>(loss));
      std::fflush(stdout);
    }
  }
  std::printf("\n");

  // Evaluate on a fixed grid with a forward program that shares the trained parameters.
  constexpr int64_t kGrid = 1000;
  auto predict = tg::compile_forward(model, [&](tg::Tensor x) { return model(x); },
                                     {.inputs = {{"x", {kGrid, 1}}}, .device = device});
  std::vector<float> grid(kGrid);
  for (int64_t i = 0; i < kGrid; ++i)
    grid[static_cast<size_t>(i)] =
        static_cast<float>(-std::numbers::pi + 2 * std::numbers::pi * static_cast<double>(i) / (kGrid - 1));
  tg::HostTensor pred = predict.run({{"x", grid}});
  double mse = 0;
  for (int64_t i = 0; i < kGrid; ++i) {
    const double d = pred.f32()[static_cast<size_t>(i)] - std::sin(grid[static_cast<size_t>(i)]);
    mse += d * d / kGrid;
  }
  std::printf("held-out grid MSE: %.6f (%s)\n", mse,
              mse < 1e-3 ? "target < 1e-3 reached" : "target < 1e-3 NOT reached");
  for (float x : {-3.0f, -1.5f, 0.0f, 1.5f, 3.0f}) {
    const auto i = static_cast<size_t>((x + std::numbers::pi) / (2 * std::numbers::pi) * (kGrid - 1) + 0.5);
    std::printf("  sin(%+.3f) = %+.4f, model says %+.4f\n", static_cast<double>(grid[i]),
                std::sin(static_cast<double>(grid[i])), static_cast<double>(pred.f32()[i]));
  }
  return mse < 1e-3 ? 0 : 1;
}
