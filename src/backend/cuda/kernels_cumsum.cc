// CUDA kernel template for cumsum (ops.def; the device code is kernels/cumsum.cuh). The node is
// seen as [outer, len, inner] around its axis. Rows along the innermost axis (inner = 1, the
// common case: a prefix over a vocabulary or a sequence) take a block each and scan it in
// rounds; otherwise each thread walks one line, consecutive threads on consecutive columns.
#include <algorithm>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

/// `in_offset(o, a, j)`: o and j unravelled over the outer and inner axes of `in` (innermost
/// first), each index times its axis's element stride.
std::string offset_function(const Operand& in, int axis) {
  std::string s = "__device__ __forceinline__ long long in_offset(long long o, long long a, long long j) {\n";
  s += "  long long off = a * " + ll(in.strides[static_cast<size_t>(axis)]) + ";\n";
  for (size_t k = in.shape.size(); k-- > static_cast<size_t>(axis) + 1;)
    s +=
        "  off += (j % " + ll(in.shape[k]) + ") * " + ll(in.strides[k]) + "; j /= " + ll(in.shape[k]) + ";\n";
  for (size_t k = static_cast<size_t>(axis); k-- > 0;)
    s +=
        "  off += (o % " + ll(in.shape[k]) + ") * " + ll(in.strides[k]) + "; o /= " + ll(in.shape[k]) + ";\n";
  return s + "  (void)o; (void)j;\n  return off;\n}\n";
}

}  // namespace

Launch cumsum_kernel(const std::string& name, const Operand& in, int axis, bool reverse) {
  if (in.dtype != DType::kF32 && in.dtype != DType::kI32)
    throw Error(std::string("[cuda] cumsum does not take ") + dtype_name(in.dtype));
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < axis; ++k) outer *= in.shape[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(axis) + 1; k < in.shape.size(); ++k) inner *= in.shape[k];
  const int64_t len = in.shape[static_cast<size_t>(axis)];
  const bool rows = inner == 1 && len >= 64;
  int64_t threads = 256;
  if (rows) {
    threads = 32;
    while (threads < len && threads < 1024) threads *= 2;
  }
  const bool f32 = in.dtype == DType::kF32;
  std::string s = "// cumsum (kernels_cumsum.cc)\n";
  s += std::string("typedef ") +
       (f32 ? "float T;\ntypedef double ACC;\n" : "int T;\ntypedef unsigned int ACC;\n");
  s += "constexpr long long OUTER = " + ll(outer) + ", LEN = " + ll(len) + ", INNER = " + ll(inner) + ";\n";
  s += std::string("constexpr bool REVERSE = ") + (reverse ? "true" : "false") + ";\n";
  s += "constexpr int NT = " + std::to_string(threads) + ";\n";
  s += offset_function(in, axis);
  s += "extern \"C\" __global__ void " + name + "(const T* in, T* out) {\n";
  s += kernel_source("cumsum.cuh", rows ? "rows" : "lines");
  s += "}\n";
  Launch l;
  l.name = name;
  l.source = std::move(s);
  l.block[0] = static_cast<unsigned>(threads);
  const int64_t blocks = std::max<int64_t>(1, rows ? outer : (outer * inner + threads - 1) / threads);
  l.grid[0] = static_cast<unsigned>(std::min<int64_t>(blocks, int64_t{1} << 30));
  return l;
}

}  // namespace tg::backend::cuda
