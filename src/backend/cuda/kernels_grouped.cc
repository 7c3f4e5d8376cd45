// CUDA kernel templates of grouped_matmul and its weight gradient (ops.def, mixtures of experts;
// device code: kernels/grouped.cuh). The shapes are baked in; which rows belong to which expert
// is data (offsets), so every kernel finds its expert's rows at run time. The forward (and the
// input gradient, which is the other axis form of the forward) takes the gemv kernels when x
// has few rows (decoding: each expert matrix that has rows is streamed once), else 64 × 64
// output tiles; the weight gradient always takes tiles, one expert a grid layer.
#include <algorithm>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

std::string ll(int64_t v) { return std::to_string(v) + "LL"; }
std::string flag(bool v) { return v ? "true" : "false"; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The forward takes the gemv kernels up to this many rows of x (their registers hold every
// row of an expert's segment).
constexpr int64_t kGemvRows = 16;

std::string header(const GroupedShape& s, const char* what) {
  std::string h = std::string("// ") + what + " (kernels_grouped.cc)\n";
  h += kernel_source("prelude.cuh", "prelude");
  if (s.dtype == DType::kF32)
    h += "typedef float IN_T;\n__device__ __forceinline__ float in_f(float v) { return v; }\n";
  else
    h += std::string("typedef unsigned short IN_T;  // ") + dtype_name(s.dtype) +
         " bits\n__device__ __forceinline__ float in_f(unsigned short v) { return " +
         (s.dtype == DType::kBF16 ? "tg_bf2f" : "tg_h2f") + "(v); }\n";
  h += "constexpr long long E = " + ll(s.experts) + ", R = " + ll(s.rows) + ", K = " + ll(s.k) +
       ", N = " + ll(s.n) + ";\n";
  h += "constexpr bool W_NK = " + flag(s.w_nk) + ";\n";
  return h;
}

std::string signature(const std::string& name) {
  return "extern \"C\" __global__ void __launch_bounds__(256) " + name +
         "(const IN_T* __restrict__ x, const IN_T* __restrict__ b, const int* __restrict__ off, "
         "float* __restrict__ out, int* err) {\n";
}

Launch finish(const std::string& name, std::string source, int64_t gx, int64_t gy, int64_t gz) {
  Launch l;
  l.name = name;
  l.source = std::move(source);
  l.block[0] = 256;
  l.grid[0] = static_cast<unsigned>(std::max<int64_t>(gx, 1));
  l.grid[1] = static_cast<unsigned>(std::max<int64_t>(gy, 1));
  l.grid[2] = static_cast<unsigned>(std::max<int64_t>(gz, 1));
  return l;
}

// 64 × 64 output tiles: the forward over (expert, row tile) pairs × column tiles, or the weight
// gradient over (Q tile, P tile, expert).
Launch tile_kernel(const std::string& name, const GroupedShape& s) {
  constexpr int64_t kTile = 64;
  const int64_t p = s.w_nk ? s.n : s.k, q = s.w_nk ? s.k : s.n;  // the weight gradient's [P, Q]
  // Vector access where the leading dimension is a multiple of 4 (so are the offsets of every
  // row, expert and tile) and the pointers are aligned. Forward: A = x (ld K), B = w (ld K when
  // W_NK, else N), out (ld N); gradient: A (ld P), B (ld Q), out (ld Q).
  const int64_t lda = s.grad_weight ? p : s.k, ldb = s.grad_weight ? q : (s.w_nk ? s.k : s.n),
                ldc = s.grad_weight ? q : s.n;
  std::string src = header(s, s.grad_weight ? "grouped_matmul_grad_weight, tiles" : "grouped_matmul, tiles");
  src += "constexpr bool VEC_A = " + flag(s.aligned && lda % 4 == 0) +
         ", VEC_B = " + flag(s.aligned && ldb % 4 == 0) + ", VEC_C = " + flag(s.aligned && ldc % 4 == 0) +
         ";\n";
  src += kernel_source("grouped.cuh", "common");
  src += kernel_source("grouped.cuh", "tiles");
  src += signature(name);
  src += kernel_source("grouped.cuh", s.grad_weight ? "tile_gw" : "tile_fwd");
  src += "}\n";
  if (s.grad_weight) {
    if (ceil_div(p, kTile) > 65535 || s.experts > 65535)
      throw Error(
          "[cuda] grouped_matmul_grad_weight: more than 65535 experts or 64-row tiles of the gradient");
    return finish(name, std::move(src), ceil_div(q, kTile), ceil_div(p, kTile), s.experts);
  }
  if (ceil_div(s.n, kTile) > 65535) throw Error("[cuda] grouped_matmul: more than 65535 column tiles");
  // Σ over experts of ⌈rows_e / 64⌉ ≤ ⌈R / 64⌉ + (experts with rows).
  return finish(name, std::move(src), ceil_div(s.rows, kTile) + std::min(s.experts, s.rows),
                ceil_div(s.n, kTile), 1);
}

// The forward with few rows: a block per (column group, expert); experts without rows exit.
// The column groups are sized so that the experts that can have rows (at most one a row) fill
// the device about twice.
Launch gemv_kernel_of(const std::string& name, const GroupedShape& s, const DeviceInfo& dev) {
  if (s.experts > 65535) throw Error("[cuda] grouped_matmul: more than 65535 experts");
  const int64_t active = std::max<int64_t>(std::min(s.experts, s.rows), 1),
                target = 2 * std::max<int64_t>(dev.sm_count, 1);
  std::string src = header(s, s.w_nk ? "grouped_matmul, gemv along K" : "grouped_matmul, gemv along N");
  src += "constexpr int MAXR = " + std::to_string(std::max<int64_t>(s.rows, 1)) + ";\n";
  int64_t gx = 0;
  if (s.w_nk) {
    // A warp per GC columns (2 when that still gives enough blocks); 16-byte loads along K
    // when every row starts 16-byte aligned.
    const int64_t gc = ceil_div(s.n, 16) * active >= target ? 2 : 1;
    const int64_t vw = 16 / dtype_size(s.dtype);
    src += "constexpr int GC = " + std::to_string(gc) +
           ", VW = " + std::to_string(s.aligned && s.k % vw == 0 ? vw : 1) + ";\n";
    gx = ceil_div(s.n, 8 * gc);
  } else {
    // TC threads along N, CW columns each (a 16-byte load of 16-bit weights where N and the
    // registers allow, else 4): the widest TC that still gives enough blocks.
    const int64_t cw = is_half(s.dtype) && s.aligned && s.n % 8 == 0 && s.rows <= 8 ? 8 : 4;
    int64_t tc = 64;
    while (tc > 8 && ceil_div(s.n, cw * tc) * active < target) tc /= 2;
    src += "constexpr int TC = " + std::to_string(tc) + ", KS = " + std::to_string(256 / tc) +
           ", CW = " + std::to_string(cw) + ";\nconstexpr bool VEC_B = " + flag(s.aligned && s.n % cw == 0) +
           ";\n";
    gx = ceil_div(s.n, cw * tc);
  }
  src += kernel_source("grouped.cuh", "common");
  src += signature(name);
  src += kernel_source("grouped.cuh", s.w_nk ? "gemv_nk" : "gemv_kn");
  src += "}\n";
  return finish(name, std::move(src), gx, s.experts, 1);
}

}  // namespace

bool grouped_uses_gemv(const GroupedShape& s) { return !s.grad_weight && s.rows <= kGemvRows; }

Launch grouped_matmul_kernel(const std::string& name, const GroupedShape& s, const DeviceInfo& dev,
                             GroupedPath path) {
  if (s.dtype != DType::kF32 && !is_half(s.dtype))
    throw Error(std::string("[cuda] grouped_matmul does not take ") + dtype_name(s.dtype));
  const int64_t big = int64_t{1} << 31;
  if (s.rows >= big || s.k >= big || s.n >= big || s.experts < 1)
    throw Error("[cuda] grouped_matmul: extents of 2^31 or more are not supported");
  const bool gemv = path == GroupedPath::kAuto ? grouped_uses_gemv(s) : path == GroupedPath::kGemv;
  if (gemv && (s.grad_weight || s.rows > kGemvRows))
    throw Error("[cuda] grouped_matmul: the gemv kernels take the forward of at most 16 rows");
  return gemv ? gemv_kernel_of(name, s, dev) : tile_kernel(name, s);
}

}  // namespace tg::backend::cuda
