// Benchmark: selective_scan of ../shared/bench/README.md — Mamba's selective scan forward and
// backward, as the peer's `bench_scan` in torch_peer.py: u, delta [b, d, l], A [d, n], B and C
// [b, n, l], D [d], all trained; delta through the softplus, the D skip, no z gate; loss =
// sum(y), gradients of every input. Sizes: b 8, d 1536, l 1024, n 16 on a GPU; b 2, d 256,
// l 256, n 16 on the CPU. One warm-up step, then the median of three (the peer's timing).
// The step is compile_train's with tg::GradientsOnly: forward and backward, the gradients left
// on the device, no update (the peer runs no optimizer either).
//
//   ./scan_bench [cpu|cuda]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <cstdio>
#include <string>

struct ScanInputs : tg::Module {
  ScanInputs(int64_t b, int64_t d, int64_t l, int64_t n)
      : u(*this, "u", {b, d, l}, tg::init::normal(1.0)),
        delta(*this, "delta", {b, d, l}, tg::init::normal(1.0)),
        A(*this, "A", {d, n}, tg::init::uniform(-1.0, 0.0)),
        B(*this, "B", {b, n, l}, tg::init::normal(1.0)),
        C(*this, "C", {b, n, l}, tg::init::normal(1.0)),
        D(*this, "D", {d}, tg::init::normal(1.0)) {}
  tg::Param u, delta, A, B, C, D;
};

int main(int argc, char** argv) {
  const bool gpu = argc > 1 && std::string(argv[1]) == "cuda";
  const tg::Device device = gpu ? tg::Device::cuda() : tg::Device::cpu();
  const int64_t b = gpu ? 8 : 2, d = gpu ? 1536 : 256, l = gpu ? 1024 : 256, n = 16;
  ScanInputs m(b, d, l, n);
  tg::Program step = tg::compile_train(
      m,
      [&] {
        return tg::sum(tg::selective_scan(m.u, m.delta, m.A, m.B, m.C, {.D = m.D, .delta_softplus = true}).y);
      },
      {.optimizer = tg::GradientsOnly{}, .device = device});
  const double sec = median_seconds_per_step([&] { step.step({}); }, 1, 3);
  const std::string mode = "tg_fwdbwd_b" + std::to_string(b) + "d" + std::to_string(d) + "l" +
                           std::to_string(l) + "n" + std::to_string(n);
  std::printf("%-22s %-26s %10.3f ms/step %14.1f tokens/s\n", "selective_scan", mode.c_str(), sec * 1e3,
              static_cast<double>(b * l) / sec);
  report_compiled("selective_scan", step);
  return 0;
}
