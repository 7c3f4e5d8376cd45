// Sliding-window self-attention (AttentionOptions::window) against the same attention without
// a window (the fused kernel) and with a window too wide for blocks (the T × S composite):
// planned memory and time of one forward over q [1, 8, T, 64], k and v [1, 2, T, 64] (Mistral's
// 4:1 grouping), for windows T/8, T/4 (in blocks of 2W keys) and T − 1 (the composite).
//
//   ./build/bench/window_attention_bench [cpu|cuda] [T=2048]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../bench/timing.h"

int main(int argc, char** argv) {
  using namespace tg;
  const std::string where = argc > 1 ? argv[1] : "cpu";
  const int64_t T = argc > 2 ? std::atoll(argv[2]) : 2048, H = 8, Hkv = 2, D = 64;
  const Device device = where == "cuda" ? Device::cuda() : Device::cpu();
  std::printf("attention over T = %lld, %lld query heads on %lld kv heads, head width %lld, on %s\n",
              static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(Hkv),
              static_cast<long long>(D), device.str().c_str());
  std::printf("%-22s %14s %12s\n", "window", "planned MiB", "ms/forward");
  for (const int64_t window : {int64_t{0}, T / 8, T / 4, T - 1}) {
    Module none;
    Program p = compile_forward(
        none, [&](Tensor q, Tensor k, Tensor v) { return attention(q, k, v, {.window = window}); },
        {.inputs = {{"q", {1, H, T, D}, DType::kF32},
                    {"k", {1, Hkv, T, D}, DType::kF32},
                    {"v", {1, Hkv, T, D}, DType::kF32}},
         .device = device});
    const std::vector<float> q(static_cast<size_t>(H * T * D), 0.1f),
        kv(static_cast<size_t>(Hkv * T * D), 0.2f);
    const double s = seconds_per_call([&] { p.run({{"q", q}, {"k", kv}, {"v", kv}}); });
    const std::string what = window == 0       ? "none (fused)"
                             : window == T - 1 ? std::to_string(window) + " (composite)"
                                               : std::to_string(window) + " (blocks)";
    std::printf("%-22s %14.1f %12.2f\n", what.c_str(),
                static_cast<double>(p.memory_report().planned_peak()) / (1 << 20), s * 1e3);
  }
}
