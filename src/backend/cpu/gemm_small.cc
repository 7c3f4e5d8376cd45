// Single-threaded small-matrix SGEMM (see gemm_small.h).
//
// Structure (GotoBLAS loop order, minus the A packing):
//   for each K block of <= kKC (balanced):  pack op(B)[kblock, :] into NR-column panels
//     for each M block of <= kMC rows:  for each panel:  for each MR-row strip:  microkernel
// The microkernel keeps an MR x NR tile of C in registers and runs the K loop innermost: per
// k it loads one NR-wide row of the packed panel and broadcasts MR elements of op(A), read in
// place (row-major A: MR row streams; trans_a: MR consecutive floats of one stored row — the
// layout a packed A panel would have anyway, so A is never copied). Column tails are masked
// loads/stores against a zero-padded panel; row tails use the MR = 1..MR-1 instantiations.
// Degenerate shapes go elsewhere: M == 1 or N == 1 to two GEMV forms (instead of a 1-wide tile),
// K == 1 to an outer-product loop.
#include "backend/cpu/gemm_small.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif
#include "backend/cpu/intrinsics.h"

namespace tg::backend::cpu {
namespace {

// ---- vector abstraction: one W-lane float vector per ISA -------------------------------------
#if defined(__AVX512F__)
struct Vec {
  using V = __m512;
  static constexpr int W = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V bcast(float x) { return _mm512_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << std::clamp(n, 0, W)) - 1u); }
  /// First n lanes (n may be <= 0 or >= W); the others read as 0 and are never touched in memory.
  static V loadn(const float* p, int n) { return n >= W ? load(p) : _mm512_maskz_loadu_ps(mask(n), p); }
  static void storen(float* p, V v, int n) {
    if (n >= W)
      store(p, v);
    else
      _mm512_mask_storeu_ps(p, mask(n), v);
  }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
};
constexpr int kMR = 8;  // 8 x 32 tile: 16 accumulators + 2 B vectors (8x32 divides 64/256/4096)
#elif defined(__AVX2__) && defined(__FMA__)
struct Vec {
  using V = __m256;
  static constexpr int W = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V bcast(float x) { return _mm256_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static __m256i mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V loadn(const float* p, int n) { return n >= W ? load(p) : _mm256_maskload_ps(p, mask(n)); }
  static void storen(float* p, V v, int n) {
    if (n >= W)
      store(p, v);
    else
      _mm256_maskstore_ps(p, mask(n), v);
  }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
constexpr int kMR = 6;  // the classic 6 x 16 AVX2 tile: 12 accumulators + 2 B + 1 broadcast
#else
// Portable fallback: plain fixed-length loops the compiler may vectorise.
struct Vec {
  static constexpr int W = 8;
  struct V {
    float v[W];
  };
  static V zero() { return V{}; }
  static V load(const float* p) {
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = p[i];
    return r;
  }
  static void store(float* p, V v) {
    for (int i = 0; i < W; ++i) p[i] = v.v[i];
  }
  static V bcast(float x) {
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = x;
    return r;
  }
  static V fma(V a, V b, V c) {
    for (int i = 0; i < W; ++i) c.v[i] += a.v[i] * b.v[i];
    return c;
  }
  static V mul(V a, V b) {
    for (int i = 0; i < W; ++i) a.v[i] *= b.v[i];
    return a;
  }
  static V loadn(const float* p, int n) {
    V r{};
    for (int i = 0; i < std::min(n, W); ++i) r.v[i] = p[i];
    return r;
  }
  static void storen(float* p, V v, int n) {
    for (int i = 0; i < std::min(n, W); ++i) p[i] = v.v[i];
  }
  static float hsum(V v) {
    float s = 0;
    for (int i = 0; i < W; ++i) s += v.v[i];
    return s;
  }
};
constexpr int kMR = 4;
#endif
using V = Vec::V;
constexpr int W = Vec::W;
constexpr int kNV = 2;        // vectors per tile row
constexpr int kNR = kNV * W;  // tile columns (= packed panel width)
constexpr int64_t kKC = 256;  // K block: one packed panel (kKC x kNR floats, 32 KiB on AVX-512) stays in L1
constexpr int64_t kMC =
    128 / kMR * kMR;           // M block, whole strips: kMC x kKC of op(A) stays in L2 across panels
constexpr int64_t kNC = 2048;  // N block: bounds the packing buffer (kKC x kNC floats = 2 MiB)

// ---- per-thread packing buffers -------------------------------------------------------------
thread_local PackBuffer<float> t_pack_b;
thread_local PackBuffer<float> t_pack_x;

// ---- microkernel ----------------------------------------------------------------------------
/// C[0:MR, 0:n] = alpha * op(A)[0:MR, 0:kc] * Bpanel[0:kc, 0:kNR] + beta * C  (n <= kNR valid
/// columns). op(A)[r, k] = a[r*lda + k], or a[k*lda + r] when TA. beta == 0 never reads C.
template <int MR, bool TA>
void micro_kernel(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict bp, float* c,
                  int64_t ldc, float alpha, float beta, int n) {
  V acc[MR][kNV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[r][v] = Vec::zero();

  if constexpr (TA) {
    for (int64_t k = 0; k < kc; ++k, a += lda, bp += kNR) {
      V b[kNV];
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) b[v] = Vec::load(bp + v * W);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const V av = Vec::bcast(a[r]);
#pragma GCC unroll 4
        for (int v = 0; v < kNV; ++v) acc[r][v] = Vec::fma(av, b[v], acc[r][v]);
      }
    }
  } else {
    const float* ar[MR];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) ar[r] = a + r * lda;
    for (int64_t k = 0; k < kc; ++k, bp += kNR) {
      V b[kNV];
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) b[v] = Vec::load(bp + v * W);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const V av = Vec::bcast(ar[r][k]);
#pragma GCC unroll 4
        for (int v = 0; v < kNV; ++v) acc[r][v] = Vec::fma(av, b[v], acc[r][v]);
      }
    }
  }

  const V va = Vec::bcast(alpha);
  if (beta == 0.0f) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) Vec::storen(c + r * ldc + v * W, Vec::mul(acc[r][v], va), n - v * W);
  } else if (beta == 1.0f) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) {
        float* cp = c + r * ldc + v * W;
        Vec::storen(cp, Vec::fma(acc[r][v], va, Vec::loadn(cp, n - v * W)), n - v * W);
      }
  } else {
    const V vb = Vec::bcast(beta);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) {
        float* cp = c + r * ldc + v * W;
        Vec::storen(cp, Vec::fma(acc[r][v], va, Vec::mul(Vec::loadn(cp, n - v * W), vb)), n - v * W);
      }
  }
}

using KernelFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, float, float, int);

template <bool TA, int... R>
constexpr auto kernel_table(std::integer_sequence<int, R...>) {
  return std::array<KernelFn, sizeof...(R)>{&micro_kernel<R + 1, TA>...};
}
// [mr - 1] -> the MR = mr instantiation (row tails use the smaller ones).
constexpr auto kKernelsN = kernel_table<false>(std::make_integer_sequence<int, kMR>{});
constexpr auto kKernelsT = kernel_table<true>(std::make_integer_sequence<int, kMR>{});

// ---- packing of op(B) -----------------------------------------------------------------------
#if defined(__AVX512F__)
/// dst[c*ldd + r] = src[r*lds + c] for a 16 x 16 block.
inline void transpose16(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  // r[4q + j] now holds, per 128-bit lane L, column 4L + j of rows 4q..4q+3.
  for (int i = 0; i < 16; i += 8) {
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + 4 + j], 0x88);
      t[i + 4 + j] = _mm512_shuffle_f32x4(r[i + j], r[i + 4 + j], 0xDD);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ldd, r[i]);
}
#endif

/// Packs op(B)[k0:k0+kc, j0:j0+nc] into ceil(nc / kNR) panels of kc x kNR floats (row k of
/// panel p at dst + p*kc*kNR + k*kNR), zero-padding the columns past nc.
void pack_b(bool tb, const float* B, int64_t ldb, int64_t k0, int64_t j0, int64_t kc, int64_t nc,
            float* dst) {
  for (int64_t p0 = 0; p0 < nc; p0 += kNR, dst += kc * kNR) {
    const int jw = static_cast<int>(std::min<int64_t>(kNR, nc - p0));
    if (!tb) {
      const float* src = B + k0 * ldb + j0 + p0;
      for (int64_t k = 0; k < kc; ++k, src += ldb)
        for (int v = 0; v < kNV; ++v) Vec::store(dst + k * kNR + v * W, Vec::loadn(src + v * W, jw - v * W));
      continue;
    }
    // op(B)[k, j] = B[j*ldb + k]: a transpose.
    const float* src = B + (j0 + p0) * ldb + k0;
    int64_t k = 0;
#if defined(__AVX512F__)
    static_assert(kNR % 16 == 0);
    if (jw == kNR)
      for (; k + 16 <= kc; k += 16)
        for (int jb = 0; jb < kNR; jb += 16) transpose16(src + jb * ldb + k, ldb, dst + k * kNR + jb, kNR);
#endif
    for (int jj = 0; jj < jw; ++jj)
      for (int64_t kk = k; kk < kc; ++kk) dst[kk * kNR + jj] = src[jj * ldb + kk];
    for (int jj = jw; jj < kNR; ++jj)
      for (int64_t kk = k; kk < kc; ++kk) dst[kk * kNR + jj] = 0.0f;
  }
}

// ---- GEMV forms for M == 1 or N == 1 ---------------------------------------------------------
inline void put(float* y, float s, float alpha, float beta) {
  *y = beta == 0.0f ? alpha * s : alpha * s + beta * *y;
}

/// y[i*incy] = alpha * sum_k m[i*ldm + k] * x[k] + beta * y[i*incy], i < L (x contiguous).
void gemv_dot(int64_t L, int64_t K, const float* m, int64_t ldm, const float* x, float alpha, float beta,
              float* y, int64_t incy) {
  int64_t i = 0;
  for (; i + 4 <= L; i += 4) {
    V acc[4] = {Vec::zero(), Vec::zero(), Vec::zero(), Vec::zero()};
    const float* row = m + i * ldm;
    for (int64_t k = 0; k < K; k += W) {
      const int n = static_cast<int>(std::min<int64_t>(W, K - k));
      const V xv = Vec::loadn(x + k, n);
      for (int r = 0; r < 4; ++r) acc[r] = Vec::fma(Vec::loadn(row + r * ldm + k, n), xv, acc[r]);
    }
    for (int r = 0; r < 4; ++r) put(y + (i + r) * incy, Vec::hsum(acc[r]), alpha, beta);
  }
  for (; i < L; ++i) {
    V acc = Vec::zero();
    for (int64_t k = 0; k < K; k += W) {
      const int n = static_cast<int>(std::min<int64_t>(W, K - k));
      acc = Vec::fma(Vec::loadn(m + i * ldm + k, n), Vec::loadn(x + k, n), acc);
    }
    put(y + i * incy, Vec::hsum(acc), alpha, beta);
  }
}

/// y[i*incy] = alpha * sum_k m[k*ldm + i] * x[k*incx] + beta * y[i*incy], i < L.
void gemv_axpy(int64_t L, int64_t K, const float* m, int64_t ldm, const float* x, int64_t incx, float alpha,
               float beta, float* y, int64_t incy) {
  constexpr int kB = 4;  // vectors per column block; two k-phases keep 8 FMA chains in flight
  for (int64_t i0 = 0; i0 < L; i0 += kB * W) {
    const int n = static_cast<int>(std::min<int64_t>(kB * W, L - i0));
    V acc0[kB], acc1[kB];
    for (int v = 0; v < kB; ++v) acc0[v] = acc1[v] = Vec::zero();
    const float* col = m + i0;
    int64_t k = 0;
    for (; k + 2 <= K; k += 2) {
      const V x0 = Vec::bcast(x[k * incx]), x1 = Vec::bcast(x[(k + 1) * incx]);
      for (int v = 0; v < kB; ++v) {
        acc0[v] = Vec::fma(Vec::loadn(col + k * ldm + v * W, n - v * W), x0, acc0[v]);
        acc1[v] = Vec::fma(Vec::loadn(col + (k + 1) * ldm + v * W, n - v * W), x1, acc1[v]);
      }
    }
    if (k < K) {
      const V x0 = Vec::bcast(x[k * incx]);
      for (int v = 0; v < kB; ++v)
        acc0[v] = Vec::fma(Vec::loadn(col + k * ldm + v * W, n - v * W), x0, acc0[v]);
    }
    float s[kB * W];
    for (int v = 0; v < kB; ++v) Vec::store(s + v * W, acc0[v]);
    for (int v = 0; v < kB; ++v) {
      float t[W];
      Vec::store(t, acc1[v]);
      for (int l = 0; l < W; ++l) s[v * W + l] += t[l];
    }
    for (int l = 0; l < n; ++l) put(y + (i0 + l) * incy, s[l], alpha, beta);
  }
}

/// K == 1: the outer product C = alpha * a bᵀ + beta * C (b contiguous), row by row.
void outer(int64_t M, int64_t N, const float* a, int64_t inca, const float* b, float alpha, float beta,
           float* C, int64_t ldc) {
  const V vb = Vec::bcast(beta);
  for (int64_t i = 0; i < M; ++i) {
    const V av = Vec::bcast(alpha * a[i * inca]);
    float* row = C + i * ldc;
    for (int64_t j = 0; j < N; j += W) {
      const int n = static_cast<int>(std::min<int64_t>(W, N - j));
      const V p = Vec::loadn(b + j, n);
      if (beta == 0.0f)
        Vec::storen(row + j, Vec::mul(av, p), n);
      else if (beta == 1.0f)
        Vec::storen(row + j, Vec::fma(av, p, Vec::loadn(row + j, n)), n);
      else
        Vec::storen(row + j, Vec::fma(av, p, Vec::mul(Vec::loadn(row + j, n), vb)), n);
    }
  }
}

}  // namespace

void sgemm_small(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  if (N == 1) {  // y = op(A) x with x = op(B)[:, 0], y = C[:, 0]
    const int64_t incx = trans_b ? 1 : ldb;
    if (trans_a) {
      gemv_axpy(M, K, A, lda, B, incx, alpha, beta, C, ldc);
    } else {
      const float* x = B;
      if (incx != 1) {
        float* xp = t_pack_x.get(K);
        for (int64_t k = 0; k < K; ++k) xp[k] = B[k * incx];
        x = xp;
      }
      gemv_dot(M, K, A, lda, x, alpha, beta, C, ldc);
    }
    return;
  }
  if (M == 1) {  // yᵀ = xᵀ op(B) with x = op(A)[0, :], y = C[0, :]
    const int64_t incx = trans_a ? lda : 1;
    if (!trans_b) {
      gemv_axpy(N, K, B, ldb, A, incx, alpha, beta, C, 1);
    } else {
      const float* x = A;
      if (incx != 1) {
        float* xp = t_pack_x.get(K);
        for (int64_t k = 0; k < K; ++k) xp[k] = A[k * incx];
        x = xp;
      }
      gemv_dot(N, K, B, ldb, x, alpha, beta, C, 1);
    }
    return;
  }

  if (K == 1) {  // outer product of op(A)[:, 0] and op(B)[0, :]
    const float* b = B;
    if (trans_b && ldb != 1) {
      float* bp = t_pack_x.get(N);
      for (int64_t j = 0; j < N; ++j) bp[j] = B[j * ldb];
      b = bp;
    }
    outer(M, N, A, trans_a ? 1 : lda, b, alpha, beta, C, ldc);
    return;
  }

  const auto& kernels = trans_a ? kKernelsT : kKernelsN;
  // op(A)[i, k] = A[i*ars + k*acs].
  const int64_t ars = trans_a ? 1 : lda, acs = trans_a ? lda : 1;
  // Balanced blocks: K = 300 runs as 2 x 150, not 256 + 44.
  const int64_t kblocks = (K + kKC - 1) / kKC, kc_max = (K + kblocks - 1) / kblocks;
  const int64_t nc_max = std::min<int64_t>(N, kNC);
  float* bp = t_pack_b.get(kc_max * ((nc_max + kNR - 1) / kNR) * kNR);

  for (int64_t jc = 0; jc < N; jc += kNC) {
    const int64_t nc = std::min<int64_t>(kNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kc_max) {
      const int64_t kc = std::min<int64_t>(kc_max, K - pc);
      const float beta_eff = pc == 0 ? beta : 1.0f;
      pack_b(trans_b, B, ldb, pc, jc, kc, nc, bp);
      for (int64_t ic = 0; ic < M; ic += kMC) {
        const int64_t mc = std::min<int64_t>(kMC, M - ic);
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const int n = static_cast<int>(std::min<int64_t>(kNR, nc - jr));
          const float* panel = bp + (jr / kNR) * kc * kNR;
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const int64_t i = ic + ir;
            const int mr = static_cast<int>(std::min<int64_t>(kMR, mc - ir));
            kernels[mr - 1](kc, A + i * ars + pc * acs, lda, panel, C + i * ldc + jc + jr, ldc, alpha,
                            beta_eff, n);
          }
        }
      }
    }
  }
}

// The AVX-512 rule: on one thread sgemm_small is at least as fast as OpenBLAS on this
// library's shapes, small or large, so the rule only has to decide against OpenBLAS's other
// threads. Those gain little while M·N·K < 2^24, nor, up to M = 4096, when op(B) has at most
// 4096 elements (the split gains little on such a thin B); past that they pay. The transpose
// flags do not move the boundary. Where this says no, splitting M over the threads and calling
// sgemm_small on each part does better still (sgemm_small_everywhere).
bool prefer_sgemm_small(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  (void)trans_a;
  (void)trans_b;
  if (M <= 0 || N <= 0 || K <= 0) return true;
  // Compared in double: the product of three int64 extents may overflow.
  const double mnk = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
#if defined(__AVX512F__)
  if (mnk < static_cast<double>(int64_t{1} << 24)) return true;
  return static_cast<double>(N) * static_cast<double>(K) <= 4096.0 && M <= 4096;
#elif defined(__AVX2__) && defined(__FMA__)
  // Built for AVX2 only (OpenBLAS still picks its AVX-512 kernels where the CPU has them): the
  // 6x16 tile falls well behind OpenBLAS on one thread, so only the GEMV / outer-product shapes
  // are worth taking.
  (void)mnk;
  return std::min({M, N, K}) == 1;
#else
  (void)mnk;
  return false;  // the portable fallback is for correctness, not speed
#endif
}

}  // namespace tg::backend::cpu
