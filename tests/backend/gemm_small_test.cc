// sgemm_small (backend/cpu/gemm_small.h) against a naive double-precision reference: every
// transpose combination, odd sizes around the tile and block edges, alpha/beta variants
// (beta 0 over NaN-filled C, beta 1, beta 0.5), non-tight leading dimensions whose padding
// must stay untouched, long K (K blocking), wide N (N blocking), and disjoint row ranges
// from two threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/gemm_small.h"

namespace tg::backend::cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kPadSentinel = -12345.0f;

struct GemmCase {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // extra elements per stored row
};

std::string describe_gemm(const GemmCase& c) {
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + " M=" + std::to_string(c.M) +
         " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) + " alpha=" + std::to_string(c.alpha) +
         " beta=" + std::to_string(c.beta) + " pads=" + std::to_string(c.pad_a) + "," +
         std::to_string(c.pad_b) + "," + std::to_string(c.pad_c);
}

/// Runs one case; returns the number of mismatching elements (reports the first few).
int64_t check_gemm(const GemmCase& c, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + c.pad_a, ldb = b_cols + c.pad_b, ldc = c.N + c.pad_c;
  std::vector<float> A(a_rows * lda), B(b_rows * ldb), C(c.M * ldc, kPadSentinel);
  for (auto& x : A) x = dist(rng);
  for (auto& x : B) x = dist(rng);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) C[i * ldc + j] = c.beta == 0.0f ? kNaN : dist(rng);
  const std::vector<float> C0 = C;

  sgemm_small(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);

  const double tol = 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(c.K, 1)));
  int64_t bad = 0;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.N; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = c.ta ? A[k * lda + i] : A[i * lda + k];
        const double b = c.tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
        mag += std::fabs(a * b);
      }
      double ref = c.alpha * s;
      mag = std::fabs(c.alpha) * mag;
      if (c.beta != 0.0f) {
        ref += c.beta * static_cast<double>(C0[i * ldc + j]);
        mag += std::fabs(c.beta * static_cast<double>(C0[i * ldc + j]));
      }
      const double got = C[i * ldc + j];
      if (!(std::fabs(got - ref) <= tol * mag + 1e-30)) {
        if (++bad <= 3)
          ADD_FAILURE() << describe_gemm(c) << ": C[" << i << "," << j << "] = " << got << ", want " << ref
                        << " (tol " << tol * mag << ")";
      }
    }
    for (int64_t j = c.N; j < ldc; ++j)
      if (i * ldc + j < static_cast<int64_t>(C.size()) && C[i * ldc + j] != kPadSentinel) {
        if (++bad <= 3) ADD_FAILURE() << describe_gemm(c) << ": padding C[" << i << "," << j << "] written";
      }
  }
  return bad;
}

const int64_t kSizes[] = {1, 2, 3, 7, 17, 31, 33, 64, 65, 100, 257};

TEST(CpuSgemmSmall, AllTransposesOddSizes) {
  std::mt19937 rng(1234);
  const float alphas[] = {1.0f, 1.0f, 0.75f, -2.0f};
  const float betas[] = {0.0f, 1.0f, 0.5f, 0.0f};
  const int64_t pads[] = {0, 3, 16};
  int64_t idx = 0, failures = 0;
  for (int t = 0; t < 4; ++t)
    for (int64_t M : kSizes)
      for (int64_t N : kSizes)
        for (int64_t K : kSizes) {
          // At most one extent past the 64-wide blocks at a time: every large extent still meets
          // every small one, and the cubic reference stays cheap under the sanitizers.
          if ((M >= 100) + (N >= 100) + (K >= 100) >= 2) continue;
          GemmCase c{t & 1 ? true : false, t & 2 ? true : false, M, N, K, alphas[idx % 4], betas[idx % 4]};
          c.pad_a = pads[idx % 3];
          c.pad_b = pads[(idx / 3) % 3];
          c.pad_c = pads[(idx / 9) % 3];
          ++idx;
          failures += check_gemm(c, rng) > 0;
          ASSERT_LT(failures, 10) << "stopping after 10 failing cases";
        }
  EXPECT_EQ(failures, 0);
}

TEST(CpuSgemmSmall, EveryAlphaBetaVariantOnEdgeSizes) {
  std::mt19937 rng(99);
  const std::pair<float, float> ab[] = {
      {1.0f, 0.0f}, {1.0f, 1.0f}, {1.0f, 0.5f}, {-0.5f, 0.0f}, {2.0f, -1.0f}};
  for (int t = 0; t < 4; ++t)
    for (int64_t M : {1, 7, 9, 33})
      for (int64_t N : {1, 15, 17, 33, 64})
        for (int64_t K : {1, 16, 31})
          for (auto [alpha, beta] : ab) {
            GemmCase c{t & 1 ? true : false, t & 2 ? true : false, M, N, K, alpha, beta, 5, 1, 7};
            EXPECT_EQ(check_gemm(c, rng), 0);
          }
}

TEST(CpuSgemmSmall, LongKAndWideN) {
  std::mt19937 rng(7);
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    EXPECT_EQ(check_gemm({ta, tb, 64, 72, 4096, 1.0f, 0.0f}, rng), 0);  // 16 K blocks (weight-gradient shape)
    EXPECT_EQ(check_gemm({ta, tb, 19, 45, 300, 1.0f, 0.5f, 2, 0, 1}, rng), 0);  // two balanced K blocks
    EXPECT_EQ(check_gemm({ta, tb, 5, 2100, 9, 1.0f, 1.0f, 0, 3, 0}, rng), 0);   // two N blocks
    EXPECT_EQ(check_gemm({ta, tb, 300, 40, 20, 1.0f, 0.0f}, rng), 0);           // three M blocks
    EXPECT_EQ(check_gemm({ta, tb, 1, 1, 1000, 1.0f, 0.0f, 4, 4, 4}, rng), 0);   // dot product
  }
}

TEST(CpuSgemmSmall, ZeroKAndZeroAlphaScaleC) {
  std::vector<float> A(4, kNaN), B(4, kNaN), C = {1, 2, 3, 4};
  sgemm_small(false, false, 2, 2, 0, 1.0f, A.data(), 2, B.data(), 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
  sgemm_small(false, false, 2, 2, 2, 0.0f, A.data(), 2, B.data(), 2, 2.0f, C.data(), 2);  // A·B never read
  EXPECT_EQ(C, (std::vector<float>{1, 2, 3, 4}));
  C.assign(4, kNaN);
  sgemm_small(true, true, 2, 2, 0, 1.0f, A.data(), 2, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>(4, 0.0f)));
}

TEST(CpuSgemmSmall, DisjointRowRangesFromTwoThreads) {
  // The documented way for a caller to parallelise: split M, one call per thread.
  const int64_t M = 256, N = 64, K = 64;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int ta = 0; ta < 2; ++ta) {
    std::vector<float> A(M * K), B(K * N), C1(M * N, kNaN), C2(M * N, kNaN);
    for (auto& x : A) x = dist(rng);
    for (auto& x : B) x = dist(rng);
    const int64_t lda = ta ? M : K;
    sgemm_small(ta, false, M, N, K, 1.0f, A.data(), lda, B.data(), N, 0.0f, C1.data(), N);
    auto half = [&](int64_t r0, int64_t rows) {
      for (int rep = 0; rep < 50; ++rep)
        sgemm_small(ta, false, rows, N, K, 1.0f, A.data() + (ta ? r0 : r0 * lda), lda, B.data(), N, 0.0f,
                    C2.data() + r0 * N, N);
    };
    std::thread th(half, 0, 100);
    half(100, M - 100);
    th.join();
    EXPECT_EQ(C1, C2);  // same blocking per row, so bitwise equal
  }
}

TEST(CpuSgemmSmall, PreferRuleOnTheBenchmarkShapes) {
  EXPECT_TRUE(prefer_sgemm_small(false, false, 0, 64, 64));
  EXPECT_FALSE(
      prefer_sgemm_small(false, false, int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40));  // no overflow
  EXPECT_FALSE(prefer_sgemm_small(false, false, 4096, 192, 64));
  EXPECT_FALSE(prefer_sgemm_small(true, false, 64, 256, 4096));
  EXPECT_FALSE(prefer_sgemm_small(false, false, 8192, 64, 64));
#if defined(__AVX512F__)
  EXPECT_TRUE(prefer_sgemm_small(false, false, 256, 64, 64));   // MLP layers
  EXPECT_TRUE(prefer_sgemm_small(true, false, 64, 64, 256));    // MLP weight gradient
  EXPECT_TRUE(prefer_sgemm_small(false, true, 256, 1, 64));     // GEMV
  EXPECT_TRUE(prefer_sgemm_small(false, false, 4096, 64, 64));  // small op(B), M <= 4096
#endif
}

}  // namespace
}  // namespace tg::backend::cpu
