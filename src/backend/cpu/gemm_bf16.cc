// bf16 products with f32 accumulation (see gemm_bf16.h).
//
// gemm_bf16_dot follows sgemm_small's loop order (gemm_small.cc), with both operands packed:
//   for each N block of <= kBfNC columns:  for each K block of <= kBfKC (even, balanced):
//     pack op(B)[kblock, nblock] into kBfNR-column panels of k pairs
//     for each M block of <= kBfMC rows:  pack op(A)[mblock, kblock] into kBfMR-row strips of k pairs
//       for each panel:  for each strip:  microkernel (kBfMR × kBfNR tile of C in 16 zmm accumulators)
// A packed pair is one 32-bit word holding op(X)[.., 2p] in its low half and op(X)[.., 2p+1] in
// its high half (zero past K), the operand layout of vdpbf16ps: per lane, acc += a_lo·b_lo +
// a_hi·b_hi. Per pair the microkernel loads two panel rows (32 columns) and broadcasts one word
// of each of the kBfMR rows. Row tails are computed on zero rows and not stored; column tails are
// zero-padded panels and masked stores.
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/gemm_small.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "tensorgrad/dtype.h"
#include "tensorgrad/errors.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TG_X86 1
#endif
#include "backend/cpu/intrinsics.h"

namespace tg::backend::cpu {
namespace {

constexpr int kBfMR = 8;         // tile rows: 8 × 2 accumulators, 2 panel vectors, 1 broadcast
constexpr int kBfNR = 32;        // tile columns: two zmm of f32 (one panel row of 32 words)
constexpr int64_t kBfKC = 512;   // K block (256 pairs): a packed panel is 32 KiB, L1-resident
constexpr int64_t kBfMC = 128;   // M block: its packed strips (128 KiB) stay in L2 across panels
constexpr int64_t kBfNC = 2048;  // N block: bounds the packed op(B) block (2 MiB)

thread_local PackBuffer<uint32_t> t_pack_a;
thread_local PackBuffer<uint32_t> t_pack_b_pairs;

/// dst[p·width + c] = the pair (x(2p, c), x(2p+1, c)) for p < ⌈kc/2⌉, c < width, where
/// x(k, c) = src[k·ks + c·cs]; columns c ≥ cols and the half k = kc of an odd last pair are 0
/// (never read from src).
void pack_pairs(const uint16_t* src, int64_t ks, int64_t cs, int64_t kc, int64_t cols, int64_t width,
                uint32_t* dst) {
  const int64_t pairs = (kc + 1) / 2, full = kc / 2;
  if (ks == 1 && cs != 1) {  // a pair is one 32-bit word in memory (little-endian: low half = k)
    for (int64_t c = 0; c < cols; ++c) {
      const uint16_t* x = src + c * cs;
      for (int64_t p = 0; p < full; ++p) {
        uint32_t w;
        std::memcpy(&w, x + 2 * p, sizeof w);
        dst[p * width + c] = w;
      }
      if (full < pairs) dst[full * width + c] = x[2 * full];
    }
  } else {  // the two halves come from two rows of src
    for (int64_t p = 0; p < pairs; ++p) {
      const uint16_t* x0 = src + 2 * p * ks;
      uint32_t* d = dst + p * width;
      if (p < full) {
        const uint16_t* x1 = x0 + ks;
        for (int64_t c = 0; c < cols; ++c) d[c] = x0[c * cs] | static_cast<uint32_t>(x1[c * cs]) << 16;
      } else {
        for (int64_t c = 0; c < cols; ++c) d[c] = x0[c * cs];
      }
    }
  }
  for (int64_t p = 0; p < pairs; ++p) std::fill(dst + p * width + cols, dst + (p + 1) * width, 0u);
}

#if defined(TG_X86)
// Compiled for AVX512-BF16 whatever the build's flags; called only where bf16_dot_supported().
[[gnu::target("avx512bf16,avx512f,avx512bw,avx512vl")]] inline __mmask16 lanes(int n) {
  return static_cast<__mmask16>((1u << std::clamp(n, 0, 16)) - 1u);
}

/// C[0:rows, 0:n] (=, or += when accumulate) Σ_p a[p]·b[p] over `pairs` packed pairs: a holds kBfMR
/// words per pair (one per row), b kBfNR words per pair (one per column).
[[gnu::target("avx512bf16,avx512f,avx512bw,avx512vl")]] void dot_tile(int64_t pairs,
                                                                      const uint32_t* __restrict a,
                                                                      const uint32_t* __restrict b, float* c,
                                                                      int64_t ldc, int rows, int n,
                                                                      bool accumulate) {
  __m512 acc[kBfMR][2];
#pragma GCC unroll 8
  for (int r = 0; r < kBfMR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p, a += kBfMR, b += kBfNR) {
    const auto b0 = (__m512bh)_mm512_load_si512(b);
    const auto b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 8
    for (int r = 0; r < kBfMR; ++r) {
      const auto av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  const __mmask16 m0 = lanes(n), m1 = lanes(n - 16);
#pragma GCC unroll 8
  for (int r = 0; r < kBfMR; ++r) {
    if (r >= rows) break;
    float* cr = c + r * ldc;
    if (accumulate) {
      acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, cr));
      acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, cr + 16));
    }
    _mm512_mask_storeu_ps(cr, m0, acc[r][0]);
    _mm512_mask_storeu_ps(cr + 16, m1, acc[r][1]);
  }
}
#endif

}  // namespace

bool bf16_dot_supported() {
#if defined(TG_X86)
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return supported;
#else
  return false;
#endif
}

namespace {
std::atomic<bool> g_bf16_dot_on{true};
}  // namespace

bool bf16_dot_enabled() { return g_bf16_dot_on.load(std::memory_order_relaxed) && bf16_dot_supported(); }
void set_bf16_dot(bool on) { g_bf16_dot_on.store(on, std::memory_order_relaxed); }
bool bf16_kernel_enabled() { return bf16_amx_enabled() || bf16_dot_enabled(); }

void gemm_bf16_kernel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                      int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
  if (bf16_amx_enabled() && ((M >= 16 && N >= 16) || !bf16_dot_enabled()))
    return gemm_bf16_amx(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  gemm_bf16_dot(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
}

void gemm_bf16_dot(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                   int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
#if defined(TG_X86)
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  // op(A)[i, k] = A[i·ars + k·aks], op(B)[k, j] = B[k·bks + j·bjs].
  const int64_t ars = trans_a ? 1 : lda, aks = trans_a ? lda : 1;
  const int64_t bks = trans_b ? 1 : ldb, bjs = trans_b ? ldb : 1;
  // Balanced K blocks of an even length, so that only the last may end in half a pair.
  const int64_t kblocks = (K + kBfKC - 1) / kBfKC, kc_max = ((K + kblocks - 1) / kblocks + 1) / 2 * 2;
  const int64_t pairs_max = kc_max / 2, nc_max = std::min(N, kBfNC);
  uint32_t* bp = t_pack_b_pairs.get(pairs_max * ((nc_max + kBfNR - 1) / kBfNR) * kBfNR);
  uint32_t* ap = t_pack_a.get(pairs_max * ((std::min(M, kBfMC) + kBfMR - 1) / kBfMR) * kBfMR);
  for (int64_t jc = 0; jc < N; jc += kBfNC) {
    const int64_t nc = std::min(kBfNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kc_max) {
      const int64_t kc = std::min(kc_max, K - pc), pairs = (kc + 1) / 2;
      for (int64_t jr = 0; jr < nc; jr += kBfNR)
        pack_pairs(B + pc * bks + (jc + jr) * bjs, bks, bjs, kc, std::min<int64_t>(kBfNR, nc - jr), kBfNR,
                   bp + jr / kBfNR * pairs * kBfNR);
      for (int64_t ic = 0; ic < M; ic += kBfMC) {
        const int64_t mc = std::min(kBfMC, M - ic);
        for (int64_t ir = 0; ir < mc; ir += kBfMR)
          pack_pairs(A + (ic + ir) * ars + pc * aks, aks, ars, kc, std::min<int64_t>(kBfMR, mc - ir), kBfMR,
                     ap + ir / kBfMR * pairs * kBfMR);
        for (int64_t jr = 0; jr < nc; jr += kBfNR) {
          const int n = static_cast<int>(std::min<int64_t>(kBfNR, nc - jr));
          for (int64_t ir = 0; ir < mc; ir += kBfMR)
            dot_tile(pairs, ap + ir / kBfMR * pairs * kBfMR, bp + jr / kBfNR * pairs * kBfNR,
                     C + (ic + ir) * ldc + jc + jr, ldc, static_cast<int>(std::min<int64_t>(kBfMR, mc - ir)),
                     n, pc > 0);
        }
      }
    }
  }
#else
  (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C,
      (void)ldc;
  throw Error("[cpu] gemm_bf16_dot: no AVX512-BF16 on this architecture");
#endif
}

#if defined(TG_X86)
namespace {

/// C[0:M, j] for one column j: M (≤ 8) dot products of length K.
[[gnu::target("avx512bf16,avx512f,avx512bw,avx512vl")]] void gemv_column(int64_t M, int64_t K,
                                                                         const uint16_t* A, int64_t lda,
                                                                         const uint16_t* w, float* c,
                                                                         int64_t ldc) {
  __m512 acc[8];
  for (int64_t i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    const auto mask = static_cast<__mmask32>(K - k >= 32 ? ~0u : (1u << (K - k)) - 1u);
    const auto wv = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + k);
    for (int64_t i = 0; i < M; ++i)
      acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_maskz_loadu_epi16(mask, A + i * lda + k), wv);
  }
  for (int64_t i = 0; i < M; ++i) c[i * ldc] = _mm512_reduce_add_ps(acc[i]);
}

}  // namespace
#endif

void gemv_bf16_dot(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* W,
                   int64_t ldw, float* C, int64_t ldc) {
#if defined(TG_X86)
  if (M > 8) throw Error("[cpu] gemv_bf16_dot takes at most 8 rows, got " + std::to_string(M));
  for (int64_t j = 0; j < N; ++j) gemv_column(M, K, A, lda, W + j * ldw, C + j, ldc);
#else
  (void)M, (void)N, (void)K, (void)A, (void)lda, (void)W, (void)ldw, (void)C, (void)ldc;
  throw Error("[cpu] gemv_bf16_dot: no AVX512-BF16 on this architecture");
#endif
}

void widen_bf16(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * ld;
    float* d = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c) d[c] = f32_from_bf16(s[c]);
  }
}

namespace {
/// The bits of tg::f32_from_f16(h) without branches: a subnormal is mant · 2^-24 (an exact
/// product of normal f32 values, so no denormal flushing can touch it), inf and NaN keep their
/// payload, a normal number rebiases its exponent (15 → 127). All three are computed and the
/// right one picked with masks: with ?: the compiler would guard the multiply with a branch
/// (it may trap) and leave the loop scalar.
inline uint32_t f32_bits_from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  const auto sub = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(mant)) * 0x1p-24f);
  const uint32_t special = 0x7f800000u | (mant << 13), normal = ((exp + 112) << 23) | (mant << 13);
  const uint32_t is_sub = 0u - (exp == 0), is_special = 0u - (exp == 31);
  return sign | (sub & is_sub) | (special & is_special) | (normal & ~(is_sub | is_special));
}
}  // namespace

void widen_f16(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * ld;
    float* d = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c) d[c] = std::bit_cast<float>(f32_bits_from_f16(s[c]));
  }
}

}  // namespace tg::backend::cpu
