// CPU kernels of the window ops. conv2d and its two gradients are GEMMs over im2col tiles:
// per (image, group), Y[og, P] = W[og, K] · col[K, P] with K = C/G·KH·KW and P = OH·OW, col
// built a tile of whole output rows at a time in a per-thread buffer (never the whole layer's
// matrix); grad_input multiplies Wᵀ by dY into such a tile and scatters it back (col2im),
// grad_weight accumulates dY·colᵀ into a per-thread partial summed at the end. A 1×1 window
// with unit stride and no padding reads x in place. bf16 operands (mixed precision) stay bf16
// through im2col into the AMX or vdpbf16ps GEMM where the CPU has one, else are widened to f32 first;
// f16 operands are always widened (there is no f16 product kernel here).
// The pools are direct loops over the planes of [N·C, H, W].
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_small.h"
#include "ir/window.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {
namespace {

using ir::Op;
using ir::WindowGeom;

constexpr int64_t kTileFloats = int64_t{1} << 16;  // one col tile: 256 KiB, within L2

/// Output rows per col tile: as many as keep K·rows·OW under kTileFloats (at least one row).
/// Tiles hold whole output rows, so a tile's pixels are rows [i0, i0 + rows) of the output.
int64_t tile_rows(const WindowGeom& g) {
  return std::clamp<int64_t>(kTileFloats / std::max<int64_t>(1, g.k() * g.ow), 1, g.oh);
}

bool direct(const WindowGeom& g) {  // col is x itself
  const ir::Window& w = g.win;
  return w.kh == 1 && w.kw == 1 && w.sh == 1 && w.sw == 1 && w.ph == 0 && w.pw == 0;
}

/// The output columns [j_lo, j_hi) whose tap b lands inside the input (iw = j·sw − pw + b·dw).
void inside_cols(const WindowGeom& g, int64_t b, int64_t& j_lo, int64_t& j_hi) {
  const ir::Window& w = g.win;
  const int64_t off = b * w.dw - w.pw;  // iw = j·sw + off
  j_lo = off >= 0 ? 0 : (-off + w.sw - 1) / w.sw;
  j_hi = g.w - 1 - off < 0 ? 0 : std::min(g.ow, (g.w - 1 - off) / w.sw + 1);
  j_hi = std::max(j_hi, j_lo);
}

/// col[k][(i − i0)·OW + j] for output rows [i0, i0 + rows), k = (c, a, b), of one image's
/// group (x at its first channel): x under window tap (a, b) of output (i, j), 0 in the padding.
template <class T>
void im2col(const WindowGeom& g, const T* x, int64_t i0, int64_t rows, T* col) {
  const ir::Window& w = g.win;
  const int64_t cols = rows * g.ow;
  for (int64_t c = 0; c < g.cg(); ++c)
    for (int64_t a = 0; a < w.kh; ++a)
      for (int64_t b = 0; b < w.kw; ++b) {
        T* row = col + ((c * w.kh + a) * w.kw + b) * cols;
        int64_t j_lo, j_hi;
        inside_cols(g, b, j_lo, j_hi);
        const int64_t off = b * w.dw - w.pw;
        for (int64_t i = i0; i < i0 + rows; ++i, row += g.ow) {
          const int64_t ih = i * w.sh - w.ph + a * w.dh;
          if (ih < 0 || ih >= g.h) {
            std::fill(row, row + g.ow, T{});
            continue;
          }
          const T* src = x + (c * g.h + ih) * g.w + off;
          std::fill(row, row + j_lo, T{});
          if (w.sw == 1)
            std::copy(src + j_lo, src + j_hi, row + j_lo);
          else
            for (int64_t j = j_lo; j < j_hi; ++j) row[j] = src[j * w.sw];
          std::fill(row + j_hi, row + g.ow, T{});
        }
      }
}

/// The adjoint of im2col: dx[...] += col[k][...] (padding taps are dropped).
void col2im(const WindowGeom& g, const float* col, int64_t i0, int64_t rows, float* dx) {
  const ir::Window& w = g.win;
  const int64_t cols = rows * g.ow;
  for (int64_t c = 0; c < g.cg(); ++c)
    for (int64_t a = 0; a < w.kh; ++a)
      for (int64_t b = 0; b < w.kw; ++b) {
        const float* row = col + ((c * w.kh + a) * w.kw + b) * cols;
        int64_t j_lo, j_hi;
        inside_cols(g, b, j_lo, j_hi);
        const int64_t off = b * w.dw - w.pw;
        for (int64_t i = i0; i < i0 + rows; ++i, row += g.ow) {
          const int64_t ih = i * w.sh - w.ph + a * w.dh;
          if (ih < 0 || ih >= g.h) continue;
          float* dst = dx + (c * g.h + ih) * g.w + off;
          if (w.sw == 1)
            for (int64_t j = j_lo; j < j_hi; ++j) dst[j] += row[j];
          else
            for (int64_t j = j_lo; j < j_hi; ++j) dst[j * w.sw] += row[j];
        }
      }
}

/// An operand as f32: itself, or (bf16, f16) widened (exactly) into `buf`.
const float* as_f32(DType dtype, const std::byte* p, int64_t n, std::vector<float>& buf) {
  if (dtype == DType::kF32) return reinterpret_cast<const float*>(p);
  buf.resize(static_cast<size_t>(n));
  (dtype == DType::kF16 ? widen_f16 : widen_bf16)(reinterpret_cast<const uint16_t*>(p), 1, n, n, buf.data());
  return buf.data();
}

/// C = op(A)·op(B), or C += op(A)·op(B) with `add`, for f32 operands (sgemm_small) or bf16 ones
/// held as uint16 words (gemm_bf16_kernel, which only writes C: `add` goes through a per-thread
/// product buffer).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
          int64_t ldb, bool add, float* C, int64_t ldc) {
  sgemm_small(ta, tb, M, N, K, 1.f, A, lda, B, ldb, add ? 1.f : 0.f, C, ldc);
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
          const uint16_t* B, int64_t ldb, bool add, float* C, int64_t ldc) {
  if (!add) return gemm_bf16_kernel(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
  thread_local PackBuffer<float> product;
  float* t = product.get(M * N);
  gemm_bf16_kernel(ta, tb, M, N, K, A, lda, B, ldb, t, N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += t[i * N + j];
}

template <class T>
void conv_forward(const WindowGeom& g, const T* x, const T* wt, float* y) {
  const int64_t P = g.oh * g.ow, K = g.k(), rows = tile_rows(g), G = g.win.groups;
#pragma omp parallel
  {
    thread_local PackBuffer<T> tile;
    T* col = tile.get(K * rows * g.ow);
#pragma omp for schedule(dynamic) collapse(2)
    for (int64_t ng = 0; ng < g.n * G; ++ng)
      for (int64_t i0 = 0; i0 < g.oh; i0 += rows) {
        const int64_t n = ng / G, grp = ng % G, nr = std::min(rows, g.oh - i0), p0 = i0 * g.ow,
                      cols = nr * g.ow;
        const T* xg = x + (n * g.c + grp * g.cg()) * g.h * g.w;
        const T* wg = wt + grp * g.og() * K;
        float* yg = y + (n * g.o + grp * g.og()) * P + p0;
        if (direct(g)) {
          gemm(false, false, g.og(), cols, K, wg, K, xg + p0, P, false, yg, P);
        } else {
          im2col(g, xg, i0, nr, col);
          gemm(false, false, g.og(), cols, K, wg, K, col, cols, false, yg, P);
        }
      }
  }
}

template <class T>
void conv_grad_input(const WindowGeom& g, const T* dy, const T* wt, float* dx) {
  const int64_t P = g.oh * g.ow, K = g.k(), rows = tile_rows(g), G = g.win.groups;
#pragma omp parallel
  {
    thread_local PackBuffer<float> tile;
    float* col = tile.get(K * rows * g.ow);
#pragma omp for schedule(dynamic)
    for (int64_t ng = 0; ng < g.n * G; ++ng) {  // tiles of one (image, group) overlap in dx
      const int64_t n = ng / G, grp = ng % G;
      float* dxg = dx + (n * g.c + grp * g.cg()) * g.h * g.w;
      const T* wg = wt + grp * g.og() * K;
      const T* dyg = dy + (n * g.o + grp * g.og()) * P;
      if (direct(g)) {
        gemm(true, false, K, P, g.og(), wg, K, dyg, P, false, dxg, P);
        continue;
      }
      std::memset(dxg, 0, static_cast<size_t>(g.cg() * g.h * g.w) * sizeof(float));
      for (int64_t i0 = 0; i0 < g.oh; i0 += rows) {
        const int64_t nr = std::min(rows, g.oh - i0), cols = nr * g.ow;
        gemm(true, false, K, cols, g.og(), wg, K, dyg + i0 * g.ow, P, false, col, cols);
        col2im(g, col, i0, nr, dxg);
      }
    }
  }
}

template <class T>
void conv_grad_weight(const WindowGeom& g, const T* x, const T* dy, float* dw) {
  const int64_t P = g.oh * g.ow, K = g.k(), rows = tile_rows(g), G = g.win.groups;
  const int64_t wsize = g.o * K;
  const int threads = std::max(1, std::min<int>(omp_get_max_threads(), static_cast<int>(g.n * G)));
  thread_local PackBuffer<float> partials;  // the other threads' sums; thread 0 writes dw
  float* partial = partials.get(std::max(1, threads - 1) * wsize);
  std::memset(dw, 0, static_cast<size_t>(wsize) * sizeof(float));
#pragma omp parallel num_threads(threads)
  {
    thread_local PackBuffer<T> tile;
    T* col = tile.get(K * rows * g.ow);
    const int t = omp_get_thread_num();
    float* mine = t == 0 ? dw : partial + (t - 1) * wsize;
    if (t > 0) std::memset(mine, 0, static_cast<size_t>(wsize) * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t ng = 0; ng < g.n * G; ++ng) {
      const int64_t n = ng / G, grp = ng % G;
      const T* xg = x + (n * g.c + grp * g.cg()) * g.h * g.w;
      const T* dyg = dy + (n * g.o + grp * g.og()) * P;
      float* dwg = mine + grp * g.og() * K;
      for (int64_t i0 = 0; i0 < g.oh; i0 += rows) {
        const int64_t nr = std::min(rows, g.oh - i0), p0 = i0 * g.ow, cols = nr * g.ow;
        if (direct(g)) {
          gemm(false, true, g.og(), K, cols, dyg + p0, P, xg + p0, P, true, dwg, K);
        } else {
          im2col(g, xg, i0, nr, col);
          gemm(false, true, g.og(), K, cols, dyg + p0, P, col, cols, true, dwg, K);
        }
      }
    }
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t i = 0; i < wsize; ++i)
      for (int u = 1; u < threads; ++u) dw[i] += partial[(u - 1) * wsize + i];
  }
}

/// Runs a conv op on f32 operands, or on bf16 ones: through AMX or vdpbf16ps where the CPU has one,
/// else widened to f32 (the same products, exactly); f16 ones always widened to f32.
template <class F>
void with_operands(DType dtype, const std::byte* a, int64_t na, const std::byte* b, int64_t nb, F&& run) {
  if (dtype == DType::kBF16 && bf16_kernel_enabled())
    return run(reinterpret_cast<const uint16_t*>(a), reinterpret_cast<const uint16_t*>(b));
  std::vector<float> wa, wb;
  run(as_f32(dtype, a, na, wa), as_f32(dtype, b, nb, wb));
}

/// fn(plane, i, j) for every output of the pools, planes of [N·C] in parallel.
template <class F>
void for_outputs(const WindowGeom& g, F&& fn) {
  const int64_t planes = g.n * g.c;
#pragma omp parallel for schedule(static) if (planes * g.oh * g.ow > (int64_t{1} << 14))
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j) fn(pl, i, j);
}

/// The first maximum of the window of output (i, j) in plane x (a NaN wins), as an offset.
int64_t window_argmax(const WindowGeom& g, const float* x, int64_t i, int64_t j) {
  const ir::Window& w = g.win;
  int64_t best = -1;
  for (int64_t a = 0; a < w.kh; ++a) {
    const int64_t ih = i * w.sh - w.ph + a * w.dh;
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t b = 0; b < w.kw; ++b) {
      const int64_t iw = j * w.sw - w.pw + b * w.dw;
      if (iw < 0 || iw >= g.w) continue;
      const int64_t at = ih * g.w + iw;
      if (best < 0 || (!std::isnan(x[best]) && (std::isnan(x[at]) || x[at] > x[best]))) best = at;
    }
  }
  return best;
}

/// Whether the pool's windows tile the input without overlap or padding (stride = kernel, the
/// usual 2×2 pool): every x element then lies in at most one window.
bool tiling(const WindowGeom& g) {
  const ir::Window& w = g.win;
  return w.sh == w.kh && w.sw == w.kw && w.ph == 0 && w.pw == 0 && w.dh == 1 && w.dw == 1;
}

/// max_pool2d over tiling windows, one plane: y, or (dy given) dx with dy at each window's
/// first maximum and 0 elsewhere (including the rows and columns no window covers). `corner`
/// holds each output's window's first element (i·kh·W + j·kw). Outputs go 64 at a time, tap by
/// tap, so that the compare-and-select chains of different outputs are independent (one
/// output's taps form a serial chain), whatever the plane's width.
void max_pool_tiling(const WindowGeom& g, const int32_t* corner, const float* x, const float* dy,
                     float* out) {
  constexpr int64_t kLanes = 64;
  const int64_t kh = g.win.kh, kw = g.win.kw, outputs = g.oh * g.ow;
  if (dy != nullptr) std::fill(out, out + g.h * g.w, 0.f);
  float bv[kLanes];
  int32_t best[kLanes];
  for (int64_t o0 = 0; o0 < outputs; o0 += kLanes) {
    const int64_t lanes = std::min(kLanes, outputs - o0);
    const int32_t* at = corner + o0;
    for (int64_t l = 0; l < lanes; ++l) bv[l] = x[at[l]], best[l] = at[l];
    for (int64_t a = 0; a < kh; ++a)
      for (int64_t b = 0; b < kw; ++b) {
        const auto tap = static_cast<int32_t>(a * g.w + b);
        for (int64_t l = 0; l < lanes; ++l) {
          // Take v when it is larger or a NaN, unless a NaN was taken already (branch-free).
          const float v = x[at[l] + tap];
          const bool take = bv[l] == bv[l] && !(v <= bv[l]);
          bv[l] = take ? v : bv[l];
          best[l] = take ? at[l] + tap : best[l];
        }
      }
    if (dy == nullptr)
      std::copy(bv, bv + lanes, out + o0);
    else
      for (int64_t l = 0; l < lanes; ++l) out[best[l]] = dy[o0 + l];
  }
}

/// The usual 2×2 pool (stride 2, no padding) on one plane with AVX-512, 16 outputs of a row a
/// step: each input row pair loaded as 32 floats, split into even and odd columns, the four taps
/// compared in max_pool_tiling's order with its rule (first maximum, a NaN wins). The gradient
/// writes every covered element (dy at the window's maximum, else 0) by interleaving back.
[[gnu::target("avx512f")]] void max_pool_2x2_avx512(const WindowGeom& g, const float* x, const float* dy,
                                                    float* out) {
  const int64_t w = g.w, ow = g.ow;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t i = 0; i < g.oh; ++i) {
    const float* r0 = x + 2 * i * w;
    const float* r1 = r0 + w;
    for (int64_t j0 = 0; j0 < ow; j0 += 16) {
      const int n = static_cast<int>(std::min<int64_t>(16, ow - j0));
      const auto m_out = static_cast<__mmask16>((1u << n) - 1);
      const auto m_lo = static_cast<__mmask16>((1u << std::min(2 * n, 16)) - 1);
      const auto m_hi = static_cast<__mmask16>((1u << std::max(2 * n - 16, 0)) - 1);
      __m512 taps[4];
      for (int r = 0; r < 2; ++r) {
        const float* p = (r == 0 ? r0 : r1) + 2 * j0;
        const __m512 lo = _mm512_maskz_loadu_ps(m_lo, p), hi = _mm512_maskz_loadu_ps(m_hi, p + 16);
        taps[2 * r] = _mm512_permutex2var_ps(lo, even, hi);
        taps[2 * r + 1] = _mm512_permutex2var_ps(lo, odd, hi);
      }
      __m512 best = taps[0];
      __m512i tap = _mm512_setzero_si512();
      for (int t = 1; t < 4; ++t) {
        // Take v when it is larger or a NaN, unless a NaN was taken already.
        const __mmask16 take =
            _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q) & _mm512_cmp_ps_mask(taps[t], best, _CMP_NLE_UQ);
        best = _mm512_mask_mov_ps(best, take, taps[t]);
        tap = _mm512_mask_mov_epi32(tap, take, _mm512_set1_epi32(t));
      }
      if (dy == nullptr) {
        _mm512_mask_storeu_ps(out + i * ow + j0, m_out, best);
        continue;
      }
      const __m512 d = _mm512_maskz_loadu_ps(m_out, dy + i * ow + j0);
      for (int r = 0; r < 2; ++r) {
        const __m512 e = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(tap, _mm512_set1_epi32(2 * r)), d);
        const __m512 o = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(tap, _mm512_set1_epi32(2 * r + 1)), d);
        float* q = out + (2 * i + r) * w + 2 * j0;
        _mm512_mask_storeu_ps(q, m_lo, _mm512_permutex2var_ps(e, low, o));
        _mm512_mask_storeu_ps(q + 16, m_hi, _mm512_permutex2var_ps(e, high, o));
      }
    }
  }
  if (dy == nullptr) return;
  // The last column and row when W or H is odd: no window covers them.
  for (int64_t r = 0; r < 2 * g.oh && 2 * ow < w; ++r)
    std::fill(out + r * w + 2 * ow, out + (r + 1) * w, 0.f);
  std::fill(out + 2 * g.oh * w, out + g.h * w, 0.f);
}

bool avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

/// Sum of the window of output (i, j) in plane x (or, with dx, adds v to each of its
/// elements), and the divisor avg_pool2d uses.
float avg_window(const WindowGeom& g, const float* x, float* dx, float v, int64_t i, int64_t j) {
  const ir::Window& w = g.win;
  float sum = 0.f;
  int64_t inside = 0;
  for (int64_t a = 0; a < w.kh; ++a) {
    const int64_t ih = i * w.sh - w.ph + a;
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t b = 0; b < w.kw; ++b) {
      const int64_t iw = j * w.sw - w.pw + b;
      if (iw < 0 || iw >= g.w) continue;
      ++inside;
      if (dx == nullptr) sum += x[ih * g.w + iw];
    }
  }
  const float div = static_cast<float>(w.count_pad ? w.kh * w.kw : inside);
  if (dx != nullptr)
    for (int64_t a = 0; a < w.kh; ++a) {
      const int64_t ih = i * w.sh - w.ph + a;
      if (ih < 0 || ih >= g.h) continue;
      for (int64_t b = 0; b < w.kw; ++b) {
        const int64_t iw = j * w.sw - w.pw + b;
        if (iw >= 0 && iw < g.w) dx[ih * g.w + iw] += v / div;
      }
    }
  return sum / div;
}

}  // namespace

Kernel make_window(const ir::Node& node, const WindowGeom& g, DType dtype, const std::byte* a,
                   const std::byte* b, float* out) {
  const int64_t x_size = g.n * g.c * g.h * g.w, y_size = g.n * g.o * g.oh * g.ow, w_size = g.o * g.k();
  const int64_t plane = g.h * g.w, oplane = g.oh * g.ow;
  switch (node.op) {
    case Op::kConv2d:
      return [=] {
        with_operands(dtype, a, x_size, b, w_size, [&](auto* x, auto* w) { conv_forward(g, x, w, out); });
      };
    case Op::kConv2dGradInput:
      return [=] {
        with_operands(dtype, a, y_size, b, w_size,
                      [&](auto* dy, auto* w) { conv_grad_input(g, dy, w, out); });
      };
    case Op::kConv2dGradWeight:
      return [=] {
        with_operands(dtype, a, x_size, b, y_size,
                      [&](auto* x, auto* dy) { conv_grad_weight(g, x, dy, out); });
      };
    case Op::kMaxPool2d:
    case Op::kMaxPool2dGrad:
      if (tiling(g)) {
        std::vector<int32_t> corner(static_cast<size_t>(oplane));
        for (int64_t i = 0; i < g.oh; ++i)
          for (int64_t j = 0; j < g.ow; ++j)
            corner[static_cast<size_t>(i * g.ow + j)] =
                static_cast<int32_t>(i * g.win.kh * g.w + j * g.win.kw);
        return [=, corner = std::move(corner)] {
          const auto* x = reinterpret_cast<const float*>(a);
          const auto* dy = reinterpret_cast<const float*>(b);  // null forward
          const int64_t planes = g.n * g.c;
          const bool two = g.win.kh == 2 && g.win.kw == 2 && avx512();
#pragma omp parallel for schedule(static) if (planes * plane > (int64_t{1} << 15))
          for (int64_t pl = 0; pl < planes; ++pl) {
            const float* dyp = dy ? dy + pl * oplane : nullptr;
            float* o = out + pl * (dy ? plane : oplane);
            if (two)
              max_pool_2x2_avx512(g, x + pl * plane, dyp, o);
            else
              max_pool_tiling(g, corner.data(), x + pl * plane, dyp, o);
          }
        };
      }
      if (node.op == Op::kMaxPool2dGrad) break;
      return [=] {
        const auto* x = reinterpret_cast<const float*>(a);
        for_outputs(g, [&](int64_t pl, int64_t i, int64_t j) {
          out[pl * oplane + i * g.ow + j] = x[pl * plane + window_argmax(g, x + pl * plane, i, j)];
        });
      };
    default: break;
  }
  switch (node.op) {
    case Op::kMaxPool2dGrad:
      return [=] {
        const auto* x = reinterpret_cast<const float*>(a);
        const auto* dy = reinterpret_cast<const float*>(b);
        std::memset(out, 0, static_cast<size_t>(x_size) * sizeof(float));
        for_outputs(g, [&](int64_t pl, int64_t i, int64_t j) {
          out[pl * plane + window_argmax(g, x + pl * plane, i, j)] += dy[pl * oplane + i * g.ow + j];
        });
      };
    case Op::kAvgPool2d:
      return [=] {
        const auto* x = reinterpret_cast<const float*>(a);
        for_outputs(g, [&](int64_t pl, int64_t i, int64_t j) {
          out[pl * oplane + i * g.ow + j] = avg_window(g, x + pl * plane, nullptr, 0.f, i, j);
        });
      };
    case Op::kAvgPool2dGrad:
      return [=] {
        const auto* dy = reinterpret_cast<const float*>(a);
        std::memset(out, 0, static_cast<size_t>(x_size) * sizeof(float));
        for_outputs(g, [&](int64_t pl, int64_t i, int64_t j) {
          avg_window(g, nullptr, out + pl * plane, dy[pl * oplane + i * g.ow + j], i, j);
        });
      };
    default: throw Error(std::string("[cpu] ") + ir::op_name(node.op) + " is not a window op");
  }
}

}  // namespace tg::backend::cpu
