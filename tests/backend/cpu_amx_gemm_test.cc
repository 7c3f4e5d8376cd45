// bf16 products on AMX tiles (backend/cpu/gemm_amx.h):
//   - gemm_bf16_amx_emulated, the kernel's packing, blocking and tile addressing with each tile
//     instruction computed in C++, on every CPU;
//   - gemm_bf16_amx itself where the CPU has AMX-BF16 and Linux grants the tile state (skipped
//     with the reason elsewhere);
// both against a double-precision sum of the same bf16 values over the four transpose
// combinations, sizes around the tile (16), chunk (32 k) and N-block edges, in-place and packed
// strips of A, and padded leading dimensions whose padding must stay untouched. Each C element is
// an f32 sum of K exact products, so |C − Σ a·b| ≤ γ_K·Σ|a·b| with γ_K = K·u/(1 − K·u), u = 2^-24
// (recursive summation, any order); the check allows (K + 1)·2^-24·Σ|a·b|.
// The AMX path through matmul programs: cpu_bf16_gemm_test (MatmulProgramsOnEveryPathMatchRef),
// and half_op_test / bf16_train_test, which run on it by default where AMX is.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/gemm_amx.h"
#include "backend/bf16_gemm_check.h"
#include "tensorgrad/dtype.h"

namespace tg::backend::cpu {
namespace {

using Gemm = Bf16Gemm;
using Case = GemmCase;

/// C = op(A)·op(B) by `gemm` against Σ in double within (K + 1)·2^-24·Σ|a·b|.
int64_t check(Gemm gemm, const Case& c, std::mt19937& rng) {
  return check_gemm(gemm, c, static_cast<double>(c.K + 1) * std::ldexp(1.0, -24), rng);
}

/// Every transpose combination over sizes around the tile and chunk edges (K % 32 == 0 with
/// M ≥ 16 reads whole strips of an untransposed A in place), with padded leading dimensions.
void all_transposes_and_edges(Gemm gemm) {
  std::mt19937 rng(1234);
  const int64_t pads[] = {0, 3, 16};
  int64_t idx = 0, failures = 0;
  for (int t = 0; t < 4; ++t)
    for (int64_t M : {1, 5, 16, 17, 32, 33, 50})
      for (int64_t N : {1, 15, 16, 17, 32, 33, 70})
        for (int64_t K : {1, 2, 3, 31, 32, 33, 64, 96}) {
          const Case c{(t & 1) != 0,        (t & 2) != 0,       M, N, K, pads[idx % 3],
                       pads[(idx / 3) % 3], pads[(idx / 9) % 3]};
          ++idx;
          failures += check(gemm, c, rng) > 0;
          ASSERT_LT(failures, 10) << "stopping after 10 failing cases";
        }
  EXPECT_EQ(failures, 0);
}

/// Long K (128 chunks), several N blocks (K = 4096 makes a block 128 columns), many strips.
void long_k_wide_n_tall_m(Gemm gemm) {
  std::mt19937 rng(7);
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    EXPECT_EQ(check(gemm, {ta, tb, 64, 72, 4096}, rng), 0);
    EXPECT_EQ(check(gemm, {ta, tb, 19, 300, 4096, 2, 0, 1}, rng), 0);  // 3 N blocks, the last partial
    EXPECT_EQ(check(gemm, {ta, tb, 21, 45, 1025, 0, 5, 0}, rng), 0);   // odd K, a partial last chunk
    EXPECT_EQ(check(gemm, {ta, tb, 300, 40, 20}, rng), 0);
    EXPECT_EQ(check(gemm, {ta, tb, 5, 2100, 9, 0, 3, 0}, rng), 0);
  }
}

TEST(CpuAmxGemm, EmulatedAllTransposesAndEdges) { all_transposes_and_edges(gemm_bf16_amx_emulated); }
TEST(CpuAmxGemm, EmulatedLongKWideNTallM) { long_k_wide_n_tall_m(gemm_bf16_amx_emulated); }

TEST(CpuAmxGemm, EmulatedKZeroWritesZeros) {
  std::vector<float> C(6 * 7, kPadSentinel);
  const uint16_t none = 0;
  gemm_bf16_amx_emulated(false, false, 6, 5, 0, &none, 1, &none, 5, C.data(), 7);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(C[static_cast<size_t>(i * 7 + j)], j < 5 ? 0.0f : kPadSentinel);
}

#define SKIP_WITHOUT_AMX() \
  if (!bf16_amx_supported()) GTEST_SKIP() << "no AMX-BF16: " << bf16_amx_unavailable_reason()

TEST(CpuAmxGemm, AllTransposesAndEdges) {
  SKIP_WITHOUT_AMX();
  all_transposes_and_edges(gemm_bf16_amx);
}

TEST(CpuAmxGemm, LongKWideNTallM) {
  SKIP_WITHOUT_AMX();
  long_k_wide_n_tall_m(gemm_bf16_amx);
}

TEST(CpuAmxGemm, DisjointRowRangesFromTwoThreads) {
  SKIP_WITHOUT_AMX();
  const int64_t M = 256, N = 80, K = 96;
  std::mt19937 rng(3);
  const std::vector<uint16_t> A = random_bf16(M * K, rng), B = random_bf16(K * N, rng);
  for (int ta = 0; ta < 2; ++ta) {
    std::vector<float> C1(M * N), C2(M * N);
    const int64_t lda = ta ? M : K;
    gemm_bf16_amx(ta, false, M, N, K, A.data(), lda, B.data(), N, C1.data(), N);
    auto part = [&](int64_t r0, int64_t rows) {
      for (int rep = 0; rep < 20; ++rep)
        gemm_bf16_amx(ta, false, rows, N, K, A.data() + (ta ? r0 : r0 * lda), lda, B.data(), N,
                      C2.data() + r0 * N, N);
    };
    std::thread th(part, 0, 90);  // each thread loads its own tile configuration
    part(90, M - 90);
    th.join();
    EXPECT_EQ(C1, C2);  // one accumulator per element over the same k order: bitwise equal
  }
}

}  // namespace
}  // namespace tg::backend::cpu
