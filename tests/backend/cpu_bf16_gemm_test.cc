// bf16 products of the CPU backend (backend/cpu/gemm_bf16.h, make_matmul on bf16 operands):
//   - vdpbf16ps's arithmetic, bit for bit, against the scalar model its comment states (per
//     pair p: acc = fma(a[2p+1], b[2p+1], acc), then acc = fma(a[2p], b[2p], acc));
//   - gemm_bf16_dot against a double-precision reference of the same bf16 values, over every
//     transpose combination, sizes around the tile and block edges, padded leading dimensions
//     whose padding must stay untouched, and two threads writing disjoint row ranges;
//   - bf16 matmul programs (forward and gradients) on the CPU backend, on the AMX path, the
//     vdpbf16ps path and the widening path, against the reference backend (batched, broadcast,
//     transposed and thread-split products), at half_op_test's tolerance.
// Tests of the vdpbf16ps kernel skip on CPUs without AVX512-BF16, the AMX path where AMX-BF16 is
// missing (the AMX kernel's own tests: cpu_amx_gemm_test).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/gemm_amx.h"
#include "backend/bf16_gemm_check.h"
#include "backend/cpu/gemm_bf16.h"
#include "ops/op_harness.h"

namespace tg::backend::cpu {
namespace {

using Case = GemmCase;

/// C = op(A)·op(B) on gemm_bf16_dot against Σ in double: |C − ref| ≤ 1e-5·√K·Σ|a·b| (f32
/// accumulation of exact products).
int64_t check(const Case& c, std::mt19937& rng) {
  return check_gemm(gemm_bf16_dot, c, 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(c.K, 1))), rng);
}

TEST(CpuBf16Gemm, VdpbfIsAnFmaChainOverPairsHighHalfFirst) {
  if (!bf16_dot_supported()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937 rng(5);
  for (int64_t K : {1, 2, 3, 64, 101, 512}) {  // one K block: no partial sums to add
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t M = 9, N = 35;
      const std::vector<uint16_t> A = random_bf16(static_cast<size_t>(M * K), rng),
                                  B = random_bf16(static_cast<size_t>(K * N), rng);
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      std::vector<float> C(static_cast<size_t>(M * N));
      gemm_bf16_dot(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, C.data(), N);
      auto a = [&](int64_t i, int64_t k) {
        return f32_from_bf16(A[static_cast<size_t>(ta ? k * lda + i : i * lda + k)]);
      };
      auto b = [&](int64_t k, int64_t j) {
        return f32_from_bf16(B[static_cast<size_t>(tb ? j * ldb + k : k * ldb + j)]);
      };
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          float acc = 0.0f;
          for (int64_t k = 0; k < K; k += 2) {
            if (k + 1 < K) acc = std::fma(a(i, k + 1), b(k + 1, j), acc);
            acc = std::fma(a(i, k), b(k, j), acc);
          }
          ASSERT_EQ(C[static_cast<size_t>(i * N + j)], acc)
              << "K=" << K << " t=" << t << " at " << i << "," << j;
        }
    }
  }
}

TEST(CpuBf16Gemm, DotKernelAllTransposesAndEdges) {
  if (!bf16_dot_supported()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937 rng(1234);
  const int64_t pads[] = {0, 3, 16};
  int64_t idx = 0, failures = 0;
  for (int t = 0; t < 4; ++t)
    for (int64_t M : {1, 2, 7, 8, 9, 17, 130})
      for (int64_t N : {1, 5, 31, 32, 33, 65})
        for (int64_t K : {1, 2, 3, 16, 33, 257}) {
          Case c{(t & 1) != 0,        (t & 2) != 0,       M, N, K, pads[idx % 3],
                 pads[(idx / 3) % 3], pads[(idx / 9) % 3]};
          ++idx;
          failures += check(c, rng) > 0;
          ASSERT_LT(failures, 10) << "stopping after 10 failing cases";
        }
  EXPECT_EQ(failures, 0);
}

TEST(CpuBf16Gemm, DotKernelLongKWideNTallM) {
  if (!bf16_dot_supported()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937 rng(7);
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    EXPECT_EQ(check({ta, tb, 64, 72, 4096}, rng), 0);           // 8 K blocks
    EXPECT_EQ(check({ta, tb, 19, 45, 1025, 2, 0, 1}, rng), 0);  // 3 balanced K blocks, odd K
    EXPECT_EQ(check({ta, tb, 5, 2100, 9, 0, 3, 0}, rng), 0);    // two N blocks
    EXPECT_EQ(check({ta, tb, 300, 40, 20}, rng), 0);            // three M blocks
  }
}

// A few rows against a [N, K] weight (a decode step's product): dot products, no packing. Every K
// remainder of the 32-wide loads, rows 1..8, padded leading dimensions.
void gemv_as_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                  const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
  ASSERT_TRUE(!ta && tb);
  gemv_bf16_dot(M, N, K, A, lda, B, ldb, C, ldc);
}

TEST(CpuBf16Gemm, SkinnyDotProductsAgainstAWeight) {
  if (!bf16_dot_supported()) GTEST_SKIP() << "no AVX512-BF16";
  std::mt19937 rng(11);
  int64_t failures = 0;
  for (int64_t M : {1, 2, 5, 8})
    for (int64_t K : {1, 31, 32, 33, 64, 100, 768})
      failures += check_gemm(gemv_as_gemm, {false, true, M, 37, K, M % 3, K % 5, M % 2}, 1e-5, rng) > 0;
  EXPECT_EQ(failures, 0);
  EXPECT_THROW(gemv_bf16_dot(9, 1, 1, nullptr, 1, nullptr, 1, nullptr, 1), Error);
}

TEST(CpuBf16Gemm, DotKernelDisjointRowRangesFromTwoThreads) {
  if (!bf16_dot_supported()) GTEST_SKIP() << "no AVX512-BF16";
  const int64_t M = 256, N = 64, K = 96;
  std::mt19937 rng(3);
  const std::vector<uint16_t> A = random_bf16(M * K, rng), B = random_bf16(K * N, rng);
  for (int ta = 0; ta < 2; ++ta) {
    std::vector<float> C1(M * N), C2(M * N);
    const int64_t lda = ta ? M : K;
    gemm_bf16_dot(ta, false, M, N, K, A.data(), lda, B.data(), N, C1.data(), N);
    auto part = [&](int64_t r0, int64_t rows) {
      for (int rep = 0; rep < 20; ++rep)
        gemm_bf16_dot(ta, false, rows, N, K, A.data() + (ta ? r0 : r0 * lda), lda, B.data(), N,
                      C2.data() + r0 * N, N);
    };
    std::thread th(part, 0, 96);
    part(96, M - 96);
    th.join();
    EXPECT_EQ(C1, C2);  // same K blocking per row, so bitwise equal
  }
}

/// Output and gradients (of sum(y·w), w fixed) of a bf16 program (Precision::kBf16's trace).
std::vector<std::vector<double>> run_bf16(backend::Backend& be, const std::vector<op_test::InputSpec>& inputs,
                                          const op_test::BuildFn& build, uint64_t seed) {
  return op_test::run_weighted(be, seed, inputs, build, DType::kBF16, 0x77ull);
}

TEST(CpuBf16Gemm, MatmulProgramsOnEveryPathMatchRef) {
  using namespace op_test;
  struct Row {
    std::string name;
    std::vector<op_test::InputSpec> inputs;
    BuildFn build;
    Tol tol{1e-5, 1e-6};  // half_op_test's: f32 accumulation of exact bf16 products
  };
  const std::vector<Row> rows = {
      {"square", {uni({48, 40}), uni({40, 56})}, [](const Ts& x) { return matmul(x[0], x[1]); }},
      {"transposed",
       {uni({40, 33}), uni({21, 40})},
       [](const Ts& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); }},
      {"batched", {uni({2, 3, 17, 20}), uni({2, 3, 20, 9})}, [](const Ts& x) { return matmul(x[0], x[1]); }},
      {"weight_broadcast", {uni({4, 50, 64}), uni({64, 96})}, [](const Ts& x) { return matmul(x[0], x[1]); }},
      // Big enough to split across threads, with a K of three blocks on the gradients.
      {"threaded",
       {uni({260, 1100}), uni({1100, 72})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kLargeSum},  // f32 sums of a thousand O(1) terms, any order
  };
  auto ref = backend::make_ref_backend();
  auto cpu = backend::make_cpu_backend();
  for (const Row& row : rows) {
    const auto want = run_bf16(*ref, row.inputs, row.build, seed_of(row.name));
    struct Path {
      const char* name;
      bool amx, dot;
    };
    for (const Path& p :
         {Path{"amx", true, false}, Path{"vdpbf16ps", false, true}, Path{"widened", false, false}}) {
      if ((p.amx && !bf16_amx_supported()) || (p.dot && !bf16_dot_supported())) continue;
      set_bf16_amx(p.amx);
      set_bf16_dot(p.dot);
      const auto got = run_bf16(*cpu, row.inputs, row.build, seed_of(row.name));
      set_bf16_amx(true);
      set_bf16_dot(true);
      const char* path = p.name;
      ASSERT_EQ(got.size(), want.size());
      EXPECT_TRUE(all_close(got[0], want[0], row.tol)) << row.name << " forward, " << path;
      const Tol grad_tol{std::max(row.tol.rel, 1e-5), std::max(row.tol.abs, 1e-5)};
      for (size_t i = 1; i < want.size(); ++i)
        EXPECT_TRUE(all_close(got[i], want[i], grad_tol)) << row.name << " gradient " << i << ", " << path;
    }
  }
}

}  // namespace
}  // namespace tg::backend::cpu
