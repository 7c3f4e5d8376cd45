// Matmul of the CPU backend: [..., m, k] @ [..., k, n] with NumPy batch broadcasting, one
// GEMM per output batch. Where the AVX-512 sgemm_small kernel is built (gemm_small.h), every
// product runs on it, the rows split across the threads (or the batches, when there are
// several), small or large: there it is at least as fast as OpenBLAS (see gemm_small.cc).
// Otherwise OpenBLAS runs each call, except for the degenerate shapes prefer_sgemm_small
// picks. Operands are
// views, so a permute swapping the last two axes arrives as strides that become a BLAS
// transpose flag, and a broadcast batch axis arrives as stride 0 (the same matrix pointer
// for every batch) — neither is copied. When the right operand is shared by every batch and
// the left one's batches are stacked rows, the whole batch is one sgemm with m·batch rows.
#include <cblas.h>

#include <omp.h>

#include <cstring>
#include <string>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_small.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {
namespace {

blasint blas_int(int64_t v) {
  if (v > std::numeric_limits<blasint>::max())
    throw Error("[cpu] matmul extent " + std::to_string(v) + " exceeds the BLAS integer range");
  return static_cast<blasint>(v);
}

/// Per output batch axis, the operand's stride (0 where the operand broadcasts).
std::vector<int64_t> batch_strides(size_t batch_rank, const Shape& shape, const View& view) {
  std::vector<int64_t> st(batch_rank, 0);
  const size_t own = shape.size() - 2, lead = batch_rank - own;
  for (size_t i = 0; i < own; ++i) st[lead + i] = shape[i] == 1 ? 0 : view.strides[i];
  return st;
}

/// MACs below which a product stays on one thread: for a product this small the fork-join
/// costs more than the second thread saves.
constexpr int64_t kParallelMacs = int64_t{1} << 21;

/// Runs part(r0, r1) over row ranges [r0, r1) of op(A) and C covering [0, m), in whole 8-row
/// strips, one range per thread when may_fork and the product is big enough, else one range.
template <class Part>
void split_rows(int64_t m, int64_t n, int64_t k, bool may_fork, const Part& part) {
  const int threads = may_fork && m * n * k >= kParallelMacs ? std::max(1, omp_get_max_threads()) : 1;
  const int64_t parts = std::min<int64_t>(threads, std::max<int64_t>(1, m / 16));
  if (parts <= 1) {
    part(0, m);
    return;
  }
  const int64_t strips = (m + 7) / 8;
#pragma omp parallel for schedule(static) num_threads(static_cast <int>(parts))
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t r0 = std::min(m, strips * p / parts * 8), r1 = std::min(m, strips * (p + 1) / parts * 8);
    if (r1 > r0) part(r0, r1);
  }
}

/// Runs part(c0, c1) over column ranges [c0, c1) of op(B) and C covering [0, n), in whole
/// 64-column blocks, one range per thread when may_fork and the product is big enough: the
/// split for products of a few rows (a decode step's), which split_rows leaves on one thread.
template <class Part>
void split_cols(int64_t m, int64_t n, int64_t k, bool may_fork, const Part& part) {
  const int threads = may_fork && m * n * k >= kParallelMacs ? std::max(1, omp_get_max_threads()) : 1;
  const int64_t blocks = (n + 63) / 64, parts = std::min<int64_t>(threads, blocks);
  if (parts <= 1) {
    part(0, n);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(static_cast <int>(parts))
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t c0 = std::min(n, blocks * p / parts * 64), c1 = std::min(n, blocks * (p + 1) / parts * 64);
    if (c1 > c0) part(c0, c1);
  }
}

/// Rows below which a product splits its columns across the threads instead of its rows.
constexpr int64_t kFewRows = 16;

/// One product C = op(A)·op(B) (beta 0), on sgemm_small split by rows (by columns for a few
/// rows) or on OpenBLAS.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
          int64_t ldb, float* C, int64_t ldc, bool may_fork) {
  // Two families go to threaded OpenBLAS: weight gradients (Aᵀ·B over a long K, large
  // output) and products both tall and wide (outputs of 1024 × 1024 and more), whose packed
  // op(B) outgrows the L2 cache that sgemm_small keeps it in.
  const bool long_k_weight_grad = ta && k >= 1024 && m * n >= (int64_t{1} << 18);
  const bool tall_and_wide = m >= 1024 && n >= 1024;
  if ((!sgemm_small_everywhere() && !prefer_sgemm_small(ta, tb, m, n, k)) ||
      (may_fork && (long_k_weight_grad || tall_and_wide))) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, blas_int(m),
                blas_int(n), blas_int(k), 1.0f, A, blas_int(lda), B, blas_int(ldb), 0.0f, C, blas_int(ldc));
    return;
  }
  if (m < kFewRows) {
    split_cols(m, n, k, may_fork, [&](int64_t c0, int64_t c1) {
      sgemm_small(ta, tb, m, c1 - c0, k, 1.0f, A, lda, tb ? B + c0 * ldb : B + c0, ldb, 0.0f, C + c0, ldc);
    });
    return;
  }
  split_rows(m, n, k, may_fork, [&](int64_t r0, int64_t r1) {
    sgemm_small(ta, tb, r1 - r0, n, k, 1.0f, ta ? A + r0 : A + r0 * lda, lda, B, ldb, 0.0f, C + r0 * ldc,
                ldc);
  });
}

/// The same product of half operands held as uint16 words. bf16: a few rows against a weight as
/// dot products (gemv_bf16_dot) split by columns, others on AMX or vdpbf16ps (gemm_bf16_kernel)
/// split by rows where the CPU has one. Otherwise, and always for f16 (no f16 product kernel
/// here), both operands are widened to f32 (exact) into per-thread memory and multiplied by gemm().
void gemm_half(DType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float* C, int64_t ldc, bool may_fork) {
  const bool bf16 = dtype == DType::kBF16;
  if (bf16 && bf16_dot_enabled() && !ta && tb && m <= 8) {  // a few rows against a weight: no packing
    split_cols(m, n, k, may_fork, [&](int64_t c0, int64_t c1) {
      gemv_bf16_dot(m, c1 - c0, k, A, lda, B + c0 * ldb, ldb, C + c0, ldc);
    });
    return;
  }
  if (bf16 && bf16_kernel_enabled()) {
    split_rows(m, n, k, may_fork, [&](int64_t r0, int64_t r1) {
      gemm_bf16_kernel(ta, tb, r1 - r0, n, k, ta ? A + r0 : A + r0 * lda, lda, B, ldb, C + r0 * ldc, ldc);
    });
    return;
  }
  thread_local std::vector<float> wide_a, wide_b;
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  wide_a.resize(static_cast<size_t>(a_rows * a_cols));
  wide_b.resize(static_cast<size_t>(b_rows * b_cols));
  const auto widen = bf16 ? widen_bf16 : widen_f16;
  widen(A, a_rows, a_cols, lda, wide_a.data());
  widen(B, b_rows, b_cols, ldb, wide_b.data());
  gemm(ta, tb, m, n, k, wide_a.data(), std::max<int64_t>(1, a_cols), wide_b.data(),
       std::max<int64_t>(1, b_cols), C, ldc, may_fork);
}

}  // namespace

std::optional<BlasOperand> blas_operand(const View& view, const Shape& shape) {
  const size_t r = shape.size();
  const int64_t rows = shape[r - 2], cols = shape[r - 1];
  const int64_t sr = view.strides[r - 2], sc = view.strides[r - 1];
  if (numel(shape) == 0) return BlasOperand{false, std::max<int64_t>(1, cols)};
  // Extent-1 axes are never stepped, so their strides are free to be whatever BLAS needs.
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= std::max<int64_t>(1, cols)))
    return BlasOperand{false, rows == 1 ? std::max<int64_t>(1, cols) : sr};
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= std::max<int64_t>(1, rows)))
    return BlasOperand{true, cols == 1 ? std::max<int64_t>(1, rows) : sc};
  return std::nullopt;
}

Kernel make_matmul(const Shape& out_shape, const Shape& a_shape, const View& a, const Shape& b_shape,
                   const View& b, float* out, DType dtype) {
  const size_t rank = out_shape.size(), batch_rank = rank - 2;
  const int64_t m = out_shape[rank - 2], n = out_shape[rank - 1], k = a_shape.back();
  const std::optional<BlasOperand> oa = blas_operand(a, a_shape), ob = blas_operand(b, b_shape);
  if (!oa || !ob) throw Error("[cpu] matmul operand is not BLAS-addressable (planner bug)");

  // Every output batch's operand offsets, computed once: an odometer over the batch axes.
  int64_t batches = 1;
  for (size_t i = 0; i < batch_rank; ++i) batches *= out_shape[i];
  const std::vector<int64_t> sa = batch_strides(batch_rank, a_shape, a),
                             sb = batch_strides(batch_rank, b_shape, b);
  std::vector<int64_t> a_off(static_cast<size_t>(batches)), b_off(static_cast<size_t>(batches));
  std::vector<int64_t> idx(batch_rank, 0);
  int64_t pa = 0, pb = 0;
  for (int64_t bi = 0; bi < batches; ++bi) {
    a_off[static_cast<size_t>(bi)] = pa;
    b_off[static_cast<size_t>(bi)] = pb;
    for (size_t d = batch_rank; d-- > 0;) {
      pa += sa[d];
      pb += sb[d];
      if (++idx[d] < out_shape[d]) break;
      pa -= sa[d] * out_shape[d];
      pb -= sb[d] * out_shape[d];
      idx[d] = 0;
    }
  }

  bool fold = batches > 1 && !oa->trans;
  for (int64_t bi = 1; fold && bi < batches; ++bi)
    fold = b_off[static_cast<size_t>(bi)] == b_off[0] &&
           a_off[static_cast<size_t>(bi)] == a_off[0] + bi * m * oa->ld;
  const int64_t rows = fold ? m * batches : m;
  const int64_t lda = oa->ld, ldb = ob->ld, ldc = std::max<int64_t>(1, n);
  const bool ta = oa->trans, tb = ob->trans;
  blas_int(rows), blas_int(n), blas_int(k), blas_int(lda), blas_int(ldb);  // range checks, once
  if (fold) {
    a_off.resize(1);
    b_off.resize(1);
  }
  const bool half = is_half(dtype);
  const auto* A = reinterpret_cast<const float*>(a.data);
  const auto* B = reinterpret_cast<const float*>(b.data);
  const auto* A16 = reinterpret_cast<const uint16_t*>(a.data);
  const auto* B16 = reinterpret_cast<const uint16_t*>(b.data);
  const int64_t out_numel = numel(out_shape), c_step = fold ? 0 : m * n;
  const auto count = static_cast<int64_t>(a_off.size());
  // Whether each product runs on one thread by itself (then several run side by side), or on
  // OpenBLAS, which brings its own threads.
  const bool own_kernel = dtype == DType::kBF16 && bf16_kernel_enabled() ? true : sgemm_small_everywhere();
  auto product = [=](int64_t bi, bool may_fork) {
    const auto at = static_cast<size_t>(bi);
    if (half)
      gemm_half(dtype, ta, tb, rows, n, k, A16 + a_off[at], lda, B16 + b_off[at], ldb, out + bi * c_step, ldc,
                may_fork);
    else
      gemm(ta, tb, rows, n, k, A + a_off[at], lda, B + b_off[at], ldb, out + bi * c_step, ldc, may_fork);
  };
  return [=] {
    if (out_numel == 0) return;
    if (k == 0) {  // an empty sum; not every BLAS writes C when k == 0
      std::memset(out, 0, static_cast<size_t>(out_numel) * sizeof(float));
      return;
    }
    if (count == 1 || !own_kernel) {
      for (int64_t bi = 0; bi < count; ++bi) product(bi, true);
      return;
    }
    // Several independent products: one per thread at a time.
#pragma omp parallel for schedule(static) if (count * rows * n * k >= kParallelMacs)
    for (int64_t bi = 0; bi < count; ++bi) product(bi, false);
  };
}

Kernel make_grouped_matmul(const ir::Node& node, const Shape& x_shape, const Shape& b_shape, DType dtype,
                           const std::byte* x, const std::byte* b, const int32_t* offsets, float* out) {
  const bool grad = node.op == ir::Op::kGroupedMatmulGradWeight, w_nk = node.attrs.axes[0] == 2;
  const int64_t rows = x_shape[0], k = x_shape[1], experts = grad ? node.shape[0] : b_shape[0];
  const int64_t cols = grad ? b_shape[1] : node.shape[1];  // N
  blas_int(rows), blas_int(k), blas_int(cols);
  const int64_t esize = dtype_size(dtype);
  // One product per expert, on its rows only:
  //   forward:  out[rows of e] (m_e × N) = x[rows of e] (m_e × K) · op(w[e]),  op = ᵀ for w [E, N, K]
  //   gradient: out[e] = dy[rows of e]ᵀ · x[rows of e] (N × K), or x[rows]ᵀ · dy[rows] (K × N).
  auto product = [=](bool ta, bool tb, int64_t m, int64_t n, int64_t kk, const std::byte* A, int64_t lda,
                     const std::byte* B, int64_t ldb, float* C, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (kk == 0) {
      for (int64_t i = 0; i < m; ++i) std::memset(C + i * ldc, 0, static_cast<size_t>(n) * sizeof(float));
      return;
    }
    if (is_half(dtype))
      gemm_half(dtype, ta, tb, m, n, kk, reinterpret_cast<const uint16_t*>(A), lda,
                reinterpret_cast<const uint16_t*>(B), ldb, C, ldc, true);
    else
      gemm(ta, tb, m, n, kk, reinterpret_cast<const float*>(A), lda, reinterpret_cast<const float*>(B), ldb,
           C, ldc, true);
  };
  return [=] {
    for (int64_t e = 0; e <= experts; ++e) {
      const int32_t o = offsets[e], prev = e == 0 ? 0 : offsets[e - 1];
      if (o < prev || o > rows || (e == 0 && o != 0) || (e == experts && o != rows))
        throw InputError(std::string("[") + ir::op_name(node.op) + "] offsets must rise from 0 to " +
                         std::to_string(rows) + " (x's rows); offsets[" + std::to_string(e) + "] is " +
                         std::to_string(o));
    }
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t r0 = offsets[e], m = offsets[e + 1] - r0;
      const std::byte* xs = x + r0 * k * esize;
      if (!grad) {
        product(false, w_nk, m, cols, k, xs, k, b + e * cols * k * esize, w_nk ? k : cols, out + r0 * cols,
                cols);
        continue;
      }
      const std::byte* dys = b + r0 * cols * esize;
      float* oe = out + e * cols * k;
      if (m == 0)
        std::memset(oe, 0, static_cast<size_t>(cols * k) * sizeof(float));
      else if (w_nk)
        product(true, false, cols, k, m, dys, cols, xs, k, oe, k);
      else
        product(true, false, k, cols, m, xs, k, dys, cols, oe, cols);
    }
  };
}

}  // namespace tg::backend::cpu
