// One thread's bf16 products of the char_6L384 training step (2048 rows split over two threads:
// forward and input-gradient products of 1024 rows, weight gradients of half the weight's rows
// over K = 2048) and a 2048³ product, on gemm_bf16_amx and on gemm_bf16_dot, each as the best
// of 5 runs of 5 calls after 3 warm-up calls:
//   <ta><tb> M N K  amx <ms> ms <GFLOP/s> GFLOP/s  dot <ms> ms <GFLOP/s> GFLOP/s
// A kernel the CPU lacks prints "-".
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "timing.h"

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/gemm_bf16.h"
#include "tensorgrad/dtype.h"

namespace {

struct Shape {
  bool ta, tb;
  int64_t M, N, K;
};

}  // namespace

int main() {
  using namespace tg::backend::cpu;
  const Shape shapes[] = {
      {false, false, 1024, 1152, 384}, {false, false, 1024, 1536, 384}, {false, false, 1024, 384, 1536},
      {false, false, 1024, 384, 384},  {false, true, 1024, 384, 1152},  {false, true, 1024, 384, 1536},
      {false, true, 1024, 1536, 384},  {true, false, 192, 1152, 2048},  {true, false, 192, 1536, 2048},
      {true, false, 768, 384, 2048},   {true, false, 192, 384, 2048},   {false, false, 2048, 2048, 2048},
  };
  if (!bf16_amx_supported()) std::printf("# no AMX: %s\n", bf16_amx_unavailable_reason());
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const Shape& s : shapes) {
    std::vector<uint16_t> A(static_cast<size_t>(s.M * s.K)), B(static_cast<size_t>(s.K * s.N));
    for (uint16_t& x : A) x = tg::bf16_from_f32(dist(rng));
    for (uint16_t& x : B) x = tg::bf16_from_f32(dist(rng));
    std::vector<float> C(static_cast<size_t>(s.M * s.N));
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    const double gflop = 2.0 * static_cast<double>(s.M * s.N * s.K) * 1e-9;
    std::printf("%c%c %5lld %5lld %5lld", s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', static_cast<long long>(s.M),
                static_cast<long long>(s.N), static_cast<long long>(s.K));
    for (int kernel = 0; kernel < 2; ++kernel) {
      const bool amx = kernel == 0;
      if (amx ? !bf16_amx_supported() : !bf16_dot_supported()) {
        std::printf("  %s -", amx ? "amx" : "dot");
        continue;
      }
      const double t = seconds_per_call([&] {
        (amx ? gemm_bf16_amx : gemm_bf16_dot)(s.ta, s.tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb,
                                              C.data(), s.N);
      });
      std::printf("  %s %8.3f ms %7.1f GFLOP/s", amx ? "amx" : "dot", t * 1e3, gflop / t);
    }
    std::printf("\n");
  }
  return 0;
}
