// Microbenchmark: sgemm_small (src/backend/cpu/gemm_small.h, one thread) against cblas_sgemm
// (OpenBLAS with 1 and with 2 threads) on the matrix products of the small benchmark models,
// all in one run. Also times sgemm_small split over M across 2 OpenMP threads (the way a
// caller would parallelise it) and prints prefer_sgemm_small's answer per shape.
//
//   ./gemm_small_bench [min_ms_per_sample=20] [substring of the shape names to run] [samples=5]
// Each cell: GFLOP/s (2·M·N·K / time) of the best of the samples (the machine is shared: the
// fastest sample is the least disturbed one), each sample repeating the
// call for at least min_ms (after a warm-up), operands cache-resident as in a training step.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm_small.h"

namespace {

struct Shape {
  const char* what;
  bool ta, tb;
  int64_t M, N, K;
};

const Shape kShapes[] = {
    // MLP 1 -> 64 -> 64 -> 1, batch 256
    {"mlp h2 = h1 W2", false, false, 256, 64, 64},
    {"mlp dh1 = dz2 W2^T", false, true, 256, 64, 64},
    {"mlp dW2 = h1^T dz2", true, false, 64, 64, 256},
    {"mlp (T,T) 64x64x256", true, true, 64, 64, 256},
    {"mlp z1 = x W1 (K=1)", false, false, 256, 64, 1},
    {"mlp dx = dz1 W1^T (N=1)", false, true, 256, 1, 64},
    {"mlp y = h2 W3 (N=1)", false, false, 256, 1, 64},
    {"mlp dh2 = dy W3^T (K=1)", false, true, 256, 64, 1},
    {"mlp dW3 = h2^T dy (N=1)", true, false, 64, 1, 256},
    {"mlp dW1 = x^T dz1 (M=1)", true, false, 1, 64, 256},
    // tiny GPT, d = 64, 4096 tokens
    {"gpt qkv = x Wqkv", false, false, 4096, 192, 64},
    {"gpt up = x Wup", false, false, 4096, 256, 64},
    {"gpt down = h Wdown", false, false, 4096, 64, 256},
    {"gpt proj = a Wo", false, false, 4096, 64, 64},
    {"gpt dx = dqkv Wqkv^T", false, true, 4096, 64, 192},
    {"gpt dx = dup Wup^T", false, true, 4096, 64, 256},
    {"gpt dh = ddown Wdown^T", false, true, 4096, 256, 64},
    {"gpt dWqkv = x^T dqkv", true, false, 64, 192, 4096},
    {"gpt dWup = x^T dup", true, false, 64, 256, 4096},
    {"gpt dWdown = h^T ddown", true, false, 256, 64, 4096},
    // threshold sweep (where OpenBLAS's second thread starts to pay off)
    {"sweep", false, false, 512, 64, 64},
    {"sweep", false, false, 1024, 64, 64},
    {"sweep", false, false, 2048, 64, 64},
    {"sweep", false, false, 1024, 192, 64},
    {"sweep", false, false, 2048, 192, 64},
    {"sweep", false, false, 1024, 64, 256},
    {"sweep", true, false, 64, 64, 1024},
    {"sweep", true, false, 64, 256, 1024},
    {"sweep", false, true, 1024, 256, 64},
    // reference points
    {"square 128", false, false, 128, 128, 128},
    {"square 512", false, false, 512, 512, 512},
};

template <class F>
double best_seconds(F&& f, double min_s, int nsamples) {
  for (int i = 0; i < 3; ++i) f();
  // calibrate the repetition count to min_s per sample
  int64_t reps = 1;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < reps; ++r) f();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt >= min_s * 0.5) {
      reps = std::max<int64_t>(1, static_cast<int64_t>(reps * min_s / dt));
      break;
    }
    reps *= 2;
  }
  std::vector<double> samples;
  for (int s = 0; s < nsamples; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < reps; ++r) f();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return *std::min_element(samples.begin(), samples.end());
}

}  // namespace

int main(int argc, char** argv) {
  using tg::backend::cpu::prefer_sgemm_small;
  using tg::backend::cpu::sgemm_small;
  const double min_s = (argc > 1 ? std::atof(argv[1]) : 20.0) * 1e-3;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::printf("%-26s %4s %14s %8s %8s %8s %8s %6s  %s\n", "shape", "op", "MxNxK", "small", "blas1", "blas2",
              "small2", "x/b2", "prefer");
  const std::string filter = argc > 2 ? argv[2] : "";
  const int nsamples = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  for (const Shape& s : kShapes) {
    if (std::string(s.what).find(filter) == std::string::npos) continue;
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N, ldc = s.N;
    std::vector<float> A(s.M * s.K), B(s.K * s.N), C(s.M * s.N);
    for (auto& x : A) x = dist(rng);
    for (auto& x : B) x = dist(rng);
    const double flop = 2.0 * s.M * s.N * s.K;
    auto gf = [&](double sec) { return flop / sec * 1e-9; };

    const double t_small = best_seconds(
        [&] {
          sgemm_small(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), ldc);
        },
        min_s, nsamples);
    auto blas = [&] {
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                  static_cast<blasint>(s.M), static_cast<blasint>(s.N), static_cast<blasint>(s.K), 1.0f,
                  A.data(), static_cast<blasint>(lda), B.data(), static_cast<blasint>(ldb), 0.0f, C.data(),
                  static_cast<blasint>(ldc));
    };
    openblas_set_num_threads(1);
    const double t_b1 = best_seconds(blas, min_s, nsamples);
    openblas_set_num_threads(2);
    const double t_b2 = best_seconds(blas, min_s, nsamples);
    // sgemm_small over 2 threads, each on half of the rows.
    const double t_small2 = best_seconds(
        [&] {
#pragma omp parallel num_threads(2)
          {
            const int t = omp_get_thread_num(), nt = omp_get_num_threads();
            const int64_t r0 = s.M * t / nt, r1 = s.M * (t + 1) / nt;
            if (r1 > r0)
              sgemm_small(s.ta, s.tb, r1 - r0, s.N, s.K, 1.0f, A.data() + (s.ta ? r0 : r0 * lda), lda,
                          B.data(), ldb, 0.0f, C.data() + r0 * ldc, ldc);
          }
        },
        min_s, nsamples);
    char dims[48];
    std::snprintf(dims, sizeof dims, "%lldx%lldx%lld", static_cast<long long>(s.M),
                  static_cast<long long>(s.N), static_cast<long long>(s.K));
    std::printf("%-26s %c%c   %14s %8.1f %8.1f %8.1f %8.1f %6.2f  %s\n", s.what, s.ta ? 'T' : 'N',
                s.tb ? 'T' : 'N', dims, gf(t_small), gf(t_b1), gf(t_b2), gf(t_small2), t_b2 / t_small,
                prefer_sgemm_small(s.ta, s.tb, s.M, s.N, s.K) ? "yes" : "no");
    std::fflush(stdout);
  }
  std::printf(
      "GFLOP/s, best of %d samples. small = sgemm_small 1 thread; blas1/blas2 = cblas_sgemm with 1/2 "
      "OpenBLAS threads; small2 = sgemm_small split over M on 2 OpenMP threads; x/b2 = speedup of small over "
      "blas2.\n",
      nsamples);
  return 0;
}
