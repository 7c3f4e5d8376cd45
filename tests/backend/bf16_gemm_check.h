// The bf16 GEMM tests' shared checker (cpu_bf16_gemm_test.cc, cpu_amx_gemm_test.cc): random bf16
// operands with padded leading dimensions, and C = op(A)·op(B) against a double-precision sum of
// the same bf16 values within a bound relative to Σ|a·b|, C's padding untouched.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/dtype.h"

namespace tg::backend::cpu {

using Bf16Gemm = void (*)(bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*,
                          int64_t, float*, int64_t);

inline constexpr float kPadSentinel = -12345.0f;

inline std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = bf16_from_f32(dist(rng));
  return v;
}

struct GemmCase {
  bool ta, tb;
  int64_t M, N, K;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // extra elements per stored row
};

inline std::string describe(const GemmCase& c) {
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + " M=" + std::to_string(c.M) +
         " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) + " pads " + std::to_string(c.pad_a) +
         "," + std::to_string(c.pad_b) + "," + std::to_string(c.pad_c);
}

/// C = op(A)·op(B) by `gemm` against Σ in double: |C − Σ a·b| ≤ bound·Σ|a·b| for every element;
/// C's padding must keep its sentinel. Returns the number of mismatches (the first few reported).
inline int64_t check_gemm(Bf16Gemm gemm, const GemmCase& c, double bound, std::mt19937& rng) {
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + c.pad_a, ldb = b_cols + c.pad_b, ldc = c.N + c.pad_c;
  const std::vector<uint16_t> A = random_bf16(static_cast<size_t>(a_rows * lda), rng),
                              B = random_bf16(static_cast<size_t>(b_rows * ldb), rng);
  std::vector<float> C(static_cast<size_t>(c.M * ldc), kPadSentinel);
  gemm(c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, C.data(), ldc);
  int64_t bad = 0;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.N; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double a =
            f32_from_bf16(c.ta ? A[static_cast<size_t>(k * lda + i)] : A[static_cast<size_t>(i * lda + k)]);
        const double b =
            f32_from_bf16(c.tb ? B[static_cast<size_t>(j * ldb + k)] : B[static_cast<size_t>(k * ldb + j)]);
        s += a * b;
        mag += std::fabs(a * b);
      }
      const double got = C[static_cast<size_t>(i * ldc + j)];
      if (!(std::fabs(got - s) <= bound * mag + 1e-30) && ++bad <= 3)
        ADD_FAILURE() << describe(c) << ": C[" << i << "," << j << "] = " << got << ", want " << s
                      << " (bound " << bound * mag << ")";
    }
    for (int64_t j = c.N; j < ldc; ++j)
      if (C[static_cast<size_t>(i * ldc + j)] != kPadSentinel && ++bad <= 3)
        ADD_FAILURE() << describe(c) << ": padding C[" << i << "," << j << "] written";
  }
  return bad;
}

}  // namespace tg::backend::cpu
