// Benchmark: the cnn_fashion workload of ../shared/bench/torch_peer.py, in its output format:
//   cnn_fashion <mode> <ms/step> ms/step <images/s> images/s
// The peer's model (conv3x3 1→32, relu, max pool 2, conv3x3 32→64, relu, max pool 2, linear
// 3136→128, relu, linear 128→10, cross-entropy), Adam lr 1e-3, uniform [0, 1) images and random
// labels, batch 128 on the CPU and 512 on the GPU; timing as the peer's: 3 warm-up steps, then
// the median of 3 runs of 20 steps (50 on the GPU). Each step reads the loss back.
//
//   ./cnn_bench [cpu|cuda] [fp32|tf32|bf16]
#include <tensorgrad/tensorgrad.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "backend/cpu/gemm_amx.h"
#include "timing.h"

namespace {

struct Cnn : tg::Module {
  Cnn()
      : c1(*this, "c1", 1, 32, 3, {.padding = 1}),
        c2(*this, "c2", 32, 64, 3, {.padding = 1}),
        f1(*this, "f1", 64 * 7 * 7, 128),
        f2(*this, "f2", 128, 10) {}
  tg::Tensor loss(const tg::Tensor& x, const tg::Tensor& y) const {
    tg::Tensor h = tg::max_pool2d(tg::relu(c1(x)), {.kernel = 2});
    h = tg::max_pool2d(tg::relu(c2(h)), {.kernel = 2});
    return tg::cross_entropy(f2(tg::relu(f1(tg::nn::Flatten{}(h)))), y);
  }
  tg::nn::Conv2d c1, c2;
  tg::nn::Linear f1, f2;
};

}  // namespace

int main(int argc, char** argv) {
  const bool gpu = argc > 1 && std::string(argv[1]) == "cuda";
  const std::string mode = argc > 2 ? argv[2] : "fp32";
  if (mode != "fp32" && mode != "tf32" && mode != "bf16") {
    std::fprintf(stderr, "cnn_bench: unknown precision '%s' (fp32, tf32 or bf16)\n", mode.c_str());
    return 2;
  }
  const tg::Precision precision = mode == "tf32"   ? tg::Precision::kTf32
                                  : mode == "bf16" ? tg::Precision::kBf16
                                                   : tg::Precision::kFp32;
  if (precision == tg::Precision::kBf16 && !gpu)
    std::fprintf(stderr, "# bf16 CPU products on AMX: %s\n",
                 tg::backend::cpu::bf16_amx_enabled()     ? "on"
                 : tg::backend::cpu::bf16_amx_supported() ? "off (TG_CPU_AMX=off)"
                                                          : tg::backend::cpu::bf16_amx_unavailable_reason());
  const int64_t B = gpu ? 512 : 128;
  Cnn model;
  auto train =
      tg::compile_train(model, [&](tg::Tensor x, tg::Tensor y) { return model.loss(x, y); },
                        {.inputs = {{"x", {B, 1, 28, 28}, tg::DType::kF32}, {"y", {B}, tg::DType::kI32}},
                         .optimizer = tg::Adam{.lr = 1e-3},
                         .device = gpu ? tg::Device::cuda() : tg::Device::cpu(),
                         .precision = precision});
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> pixel(0.f, 1.f);
  std::uniform_int_distribution<int32_t> label(0, 9);
  std::vector<float> x(static_cast<size_t>(B * 28 * 28));
  std::vector<int32_t> y(static_cast<size_t>(B));
  for (float& v : x) v = pixel(rng);
  for (int32_t& v : y) v = label(rng);
  const double sec = median_seconds_per_step([&] { train.step({{"x", x}, {"y", y}}); }, 3, gpu ? 50 : 20);
  std::printf("%-22s %-26s %10.3f ms/step %14.1f images/s\n", "cnn_fashion", mode.c_str(), sec * 1e3,
              static_cast<double>(B) / sec);
  report_compiled("cnn_fashion", train);
  return 0;
}
