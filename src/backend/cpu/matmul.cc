// Matmul of the CPU backend: [..., m, k] @ [..., k, n] with NumPy batch broadcasting, one
// cblas_sgemm per output batch (OpenBLAS parallelises inside each call). Operands are
// views, so a permute swapping the last two axes arrives as strides that become a BLAS
// transpose flag, and a broadcast batch axis arrives as stride 0 (the same matrix pointer
// for every batch) — neither is copied. When the right operand is shared by every batch and
// the left one's batches are stacked rows, the whole batch is one sgemm with m·batch rows.
#include <cblas.h>

#include <cstring>
#include <string>

#include "backend/cpu/cpu_kernels.h"
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
                   const View& b, float* out) {
  const size_t rank = out_shape.size(), batch_rank = rank - 2;
  const int64_t m = out_shape[rank - 2], n = out_shape[rank - 1], k = a_shape.back();
  const std::optional<BlasOperand> oa = blas_operand(a, a_shape), ob = blas_operand(b, b_shape);
  if (!oa || !ob) throw Error("[cpu] matmul operand is not BLAS-addressable (planner bug)");

  // Every output batch's operand offsets, computed once: an odometer over the batch axes.
  int64_t batches = 1;
  for (size_t i = 0; i < batch_rank; ++i) batches *= out_shape[i];
  const std::vector<int64_t> sa = batch_strides(batch_rank, a_shape, a), sb = batch_strides(batch_rank, b_shape, b);
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
  const blasint rows = blas_int(fold ? m * batches : m), bn = blas_int(n), bk = blas_int(k);
  const blasint lda = blas_int(oa->ld), ldb = blas_int(ob->ld), ldc = blas_int(std::max<int64_t>(1, n));
  const CBLAS_TRANSPOSE ta = oa->trans ? CblasTrans : CblasNoTrans, tb = ob->trans ? CblasTrans : CblasNoTrans;
  if (fold) {
    a_off.resize(1);
    b_off.resize(1);
  }
  const auto* A = reinterpret_cast<const float*>(a.data);
  const auto* B = reinterpret_cast<const float*>(b.data);
  const int64_t out_numel = numel(out_shape), c_step = fold ? 0 : m * n;
  return [=] {
    if (out_numel == 0) return;
    if (k == 0) {  // an empty sum; not every BLAS writes C when k == 0
      std::memset(out, 0, static_cast<size_t>(out_numel) * sizeof(float));
      return;
    }
    for (size_t bi = 0; bi < a_off.size(); ++bi)
      cblas_sgemm(CblasRowMajor, ta, tb, rows, bn, bk, 1.0f, A + a_off[bi], lda, B + b_off[bi], ldb, 0.0f,
                  out + static_cast<int64_t>(bi) * c_step, ldc);
  };
}

}  // namespace tg::backend::cpu
