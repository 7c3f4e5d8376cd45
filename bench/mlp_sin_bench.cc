// Benchmark: the `mlp_sin` reference workload (../shared/bench/README.md): MLP 1→64→64→1,
// ReLU, MSE, batch 256, Adam lr 5e-3. Prints one line in the torch_peer.py format:
//   mlp_sin <mode> <ms/step> ms/step <samples/s> samples/s
// Timing as the peer does: 20 warm-up steps, then the median of 3 runs of 200 steps.
#include <tensorgrad/tensorgrad.h>

#include "sin_mlp.h"
#include "timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

int main(int argc, char** argv) {
  const tg::Device device =
      argc > 1 && std::string(argv[1]) == "cuda" ? tg::Device::cuda() : tg::Device::cpu();
  constexpr int64_t kBatch = 256;
  SinMlp model;
  auto train = tg::compile_train(model,
                                 [&](tg::Tensor x, tg::Tensor y) {
                                   auto d = model(x) - y;
                                   return tg::mean(d * d);
                                 },
                                 {.inputs = {{"x", {kBatch, 1}}, {"y", {kBatch, 1}}},
                                  .optimizer = tg::Adam{.lr = 5e-3},
                                  .device = device});
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-3.14f, 3.14f);
  std::vector<float> xs(kBatch), ys(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) {
    xs[static_cast<size_t>(i)] = u(rng);
    ys[static_cast<size_t>(i)] = std::sin(xs[static_cast<size_t>(i)]);
  }
  // Like the peer, each step returns the loss (the peer's step returns the loss tensor
  // without synchronising; on the CPU that read-back is free for both).
  // On the GPU the loss stays there (the peer's CUDA-graph step does not read it either); the
  // next step's input upload waits for the previous step, so every step is still counted.
  const bool read = device.kind != tg::Device::Kind::kCuda;
  auto step = [&] { return train.step({{"x", xs}, {"y", ys}}, {.read_loss = read}); };
  const double sec = median_seconds_per_step(step, 20, device.kind == tg::Device::Kind::kCuda ? 500 : 200);
  std::printf("%-22s %-26s %10.3f ms/step %14.1f samples/s\n", "mlp_sin", "fp32", sec * 1e3, kBatch / sec);
  report_compiled("mlp_sin", train);
  return 0;
}
