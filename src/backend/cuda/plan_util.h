// Helpers the placement files of the CUDA executable share (plan.cc, plan_products.cc,
// plan_scan.cc, norm_fusion.cc).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/program.h"  // kAlign, Shape

namespace tg::backend::cuda::plan_util {

/// Every generated kernel has this name: each lives in its own module, and identical sources
/// (the same shapes in every layer) then compile, cache and load once.
inline constexpr const char* kKernelName = "tg_kernel";

inline int64_t aligned(int64_t bytes) { return (std::max<int64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign; }

/// Rows this long whose length is not a multiple of 64 are laid out 64-aligned apart (a
/// vocabulary of 50257 in rows of 50304): the products reading and writing them then run on
/// cuBLASLt's aligned kernels, much faster than its unaligned ones on GPT-2's head.
inline int64_t padded_row(int64_t cols) { return cols >= 1024 && cols % 64 != 0 ? (cols + 63) / 64 * 64 : cols; }

/// Strides of `shape` with its rows `ld` elements apart and everything else dense.
inline std::vector<int64_t> row_padded_strides(const Shape& shape, int64_t ld) {
  std::vector<int64_t> st(shape.size(), 1);
  if (shape.size() >= 2) st[shape.size() - 2] = ld;
  for (size_t d = shape.size() - 1; d-- > 1;) st[d - 1] = st[d] * shape[d];
  return st;
}

}  // namespace tg::backend::cuda::plan_util
