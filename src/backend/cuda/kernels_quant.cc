// CUDA kernel template for quant_matmul (ops.def; the device code is kernels/quant_matmul.cuh):
// x [rows, K] · (q · scale)ᵀ over dense operands, one warp per 1 to 4 output columns.
#include <algorithm>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {

Launch quant_matmul_kernel(const std::string& name, DType x_dtype, int64_t rows, int64_t cols, int64_t k,
                           int64_t groups, bool four, bool q_aligned, bool x_aligned) {
  if (x_dtype != DType::kF32 && !is_half(x_dtype))
    throw Error(std::string("[cuda] quant_matmul does not take x of ") + dtype_name(x_dtype));
  const int64_t group = k / groups;
  const bool vec = q_aligned && k % 16 == 0 && group % 16 == 0, xvec = vec && x_aligned;
  constexpr int kWarps = 4;
  std::string s = "// quant_matmul (kernels_quant.cc)\n";
  s += kernel_source("prelude.cuh", "widen");
  s += std::string("typedef ") + (x_dtype == DType::kF32 ? "float" : "unsigned short") + " XT;\n";
  s += std::string("constexpr bool X_BF = ") + (x_dtype == DType::kBF16 ? "true" : "false") +
       ", X_H = " + (x_dtype == DType::kF16 ? "true" : "false") + ", VEC = " + (vec ? "true" : "false") +
       ", XVEC = " + (xvec ? "true" : "false") + ", FOUR = " + (four ? "true" : "false") + ";\n";

  s += "constexpr long long ROWS = " + ll(rows) + ", COLS = " + ll(cols) + ", K = " + ll(k) +
       ", GROUP = " + ll(group) + ", GROUPS = " + ll(groups) + ";\n";
  // Columns a warp: with several rows of x, up to 4 where there are enough columns to keep ~1024
  // warps busy (x's chunk, then read once for them, is the larger cost); with one or two rows one
  // column a warp, its loop unrolled further instead (more warps, each with its loads in flight).
  const int64_t per_warp = rows >= 4 ? std::clamp<int64_t>(cols / 1024, 1, 4) : 1;
  s += "constexpr int RB = " + std::to_string(std::clamp<int64_t>(rows, 1, 8)) +
       ", WARPS = " + std::to_string(kWarps) + ", CPW = " + std::to_string(per_warp) +
       ", UNROLL = " + std::to_string(per_warp == 1 ? 4 : 2) + ";\n";
  s += kernel_source("quant_matmul.cuh", "helpers");
  s += "extern \"C\" __global__ void " + name +
       "(const XT* x, const signed char* q, const float* scale, const float* offset, float* out) {\n";
  s += kernel_source("quant_matmul.cuh", "body");
  s += "}\n";
  Launch l;
  l.name = name;
  l.source = std::move(s);
  l.block[0] = 32 * kWarps;
  l.grid[0] = static_cast<unsigned>((cols + kWarps * per_warp - 1) / (kWarps * per_warp));
  return l;
}

}  // namespace tg::backend::cuda
