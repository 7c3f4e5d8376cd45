// Matmul breakdown for the char_6L384 training step: every product shape of one layer (the
// forward product, the input gradient dY·Wᵀ and the weight gradient Xᵀ·dY, for qkv, proj, fc
// and fc2 at B·T = 2048 rows, d = 384), timed through tensorgrad's matmul kernel and through
// OpenBLAS's cblas_sgemm with all its threads, back to back in one process.
//   ./matmul_bench [rows=2048] [d=384]
// Prints one line per shape and the total of each side; ratio = tensorgrad time / BLAS time.
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "timing.h"

#include "backend/cpu/cpu_kernels.h"

namespace {

using tg::backend::cpu::View;

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 2048, d = argc > 2 ? std::atoll(argv[2]) : 384;
  struct Layer {
    const char* name;
    int64_t in, out;
  };
  const Layer layers[] = {{"qkv", d, 3 * d}, {"proj", d, d}, {"fc", d, 4 * d}, {"fc2", 4 * d, d}};
  std::vector<float> X(static_cast<size_t>(rows * 4 * d), 0.01f), W(static_cast<size_t>(16 * d * d), 0.02f),
      Y(static_cast<size_t>(rows * 4 * d), 0.03f), C(static_cast<size_t>(rows * 4 * d + 16 * d * d));
  std::printf("%-6s %-4s %6s %6s %6s %10s %10s %7s %9s\n", "layer", "op", "M", "N", "K", "blas_ms", "tg_ms",
              "ratio", "tg_GF/s");
  double total_blas = 0, total_tg = 0;
  for (const Layer& l : layers) {
    // (M, N, K, trans_a, trans_b, A, B): forward X·W, input grad dY·Wᵀ, weight grad Xᵀ·dY.
    struct Product {
      const char* op;
      int64_t m, n, k;
      bool ta, tb;
    };
    const Product products[] = {{"fwd", rows, l.out, l.in, false, false},
                                {"dX", rows, l.in, l.out, false, true},
                                {"dW", l.in, l.out, rows, true, false}};
    for (const Product& p : products) {
      const int64_t lda = p.ta ? p.m : p.k, ldb = p.tb ? p.k : p.n;
      const float* A = p.op[1] == 'W' ? X.data() : (p.op[0] == 'f' ? X.data() : Y.data());
      const float* B = p.op[1] == 'W' ? Y.data() : W.data();
      const double blas = seconds_per_call([&] {
        cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans,
                    static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1.0f, A,
                    static_cast<int>(lda), B, static_cast<int>(ldb), 0.0f, C.data(), static_cast<int>(p.n));
      });
      // tensorgrad's kernel, fed the same operands as views (a transpose is a stride swap).
      const View a{reinterpret_cast<std::byte*>(const_cast<float*>(A)),
                   p.ta ? std::vector<int64_t>{1, lda} : std::vector<int64_t>{lda, 1}};
      const View b{reinterpret_cast<std::byte*>(const_cast<float*>(B)),
                   p.tb ? std::vector<int64_t>{1, ldb} : std::vector<int64_t>{ldb, 1}};
      const tg::backend::cpu::Kernel k =
          tg::backend::cpu::make_matmul({p.m, p.n}, {p.m, p.k}, a, {p.k, p.n}, b, C.data());
      const double ours = seconds_per_call(k);
      total_blas += blas;
      total_tg += ours;
      std::printf("%-6s %-4s %6lld %6lld %6lld %10.3f %10.3f %7.2f %9.1f\n", l.name, p.op,
                  static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k),
                  blas * 1e3, ours * 1e3, ours / blas,
                  2.0 * static_cast<double>(p.m * p.n * p.k) / ours * 1e-9);
    }
  }
  std::printf("total  (one layer)              %10.3f %10.3f %7.2f\n", total_blas * 1e3, total_tg * 1e3,
              total_tg / total_blas);
  return 0;
}
