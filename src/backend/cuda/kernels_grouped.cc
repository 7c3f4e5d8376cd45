// CUDA kernel templates of grouped_matmul and its weight gradient (ops.def, mixtures of experts;
// device code: kernels/grouped.cuh). The shapes are baked in; which rows belong to which expert
// is data (offsets), so every kernel finds its expert's rows at run time. The forward (and the
// input gradient, which is the other axis form of the forward) takes the gemv kernels when x
// has few rows (decoding: each expert matrix that has rows is streamed once a chunk of 16 rows),
// else 64 × 64 output tiles; the weight gradient always takes tiles, one expert a grid layer.
// Tiles of bf16 / f16 operands run on tensor cores where the device has them (sm_80+:
// grouped_mma.cuh), f32 ones on f32 FMAs (f32 products must stay f32-accurate).
#include <algorithm>
#include <string>

#include "backend/cuda/codegen.h"
#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

// The forward takes the gemv kernels up to this many rows of x: an expert then has few rows,
// and reading its matrix once a chunk beats tiles that are mostly empty. W_NK's gemv reads w[e]
// along K in 16-byte pieces and beats the tiles up to about 128 rows (32 experts); w [E, K, N]'s
// adds each row's slices through shared memory, and the tensor-core tiles beat it above 8.
constexpr int64_t kGemvRows = 64, kGemvRowsKN = 16, kGemvRowsKNTensorCores = 8;
// Rows of a segment the gemv kernels hold in registers at once.
constexpr int64_t kGemvChunk = 16;

std::string header(const GroupedShape& s, const char* what) {
  std::string h = std::string("// ") + what + " (kernels_grouped.cc)\n";
  h += group_prelude();
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
  return "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
         "(const IN_T* __restrict__ x, const IN_T* __restrict__ b, const int* __restrict__ off, "
         "float* __restrict__ out, int* err) {\n";
}

Launch finish(const std::string& name, std::string source, int threads, int64_t gx, int64_t gy, int64_t gz) {
  Launch l;
  l.name = name;
  l.source = std::move(source);
  l.block[0] = static_cast<unsigned>(threads);
  l.grid[0] = static_cast<unsigned>(std::max<int64_t>(gx, 1));
  l.grid[1] = static_cast<unsigned>(std::max<int64_t>(gy, 1));
  l.grid[2] = static_cast<unsigned>(std::max<int64_t>(gz, 1));
  return l;
}

// 64 × 64 output tiles: the forward over (expert, row tile) pairs × column tiles, or the weight
// gradient over (Q tile, P tile, expert); on tensor cores (`mma`: 128 threads) or f32 FMAs (256).
Launch tile_kernel(const std::string& name, const GroupedShape& s, bool mma) {
  constexpr int64_t kTile = 64;
  const int threads = mma ? 128 : 256;
  const int64_t p = s.w_nk ? s.n : s.k, q = s.w_nk ? s.k : s.n;  // the weight gradient's [P, Q]
  // Vector access where the leading dimension is a multiple of the vector (so are the offsets of
  // every row, expert and tile) and the pointers are aligned: loads of 16 bytes of 16-bit
  // elements (tensor cores) or 4 elements (FMAs); stores of 2 or 4 floats. Forward: A = x (ld K),
  // B = w (ld K when W_NK, else N), out (ld N); gradient: A (ld P), B (ld Q), out (ld Q).
  const int64_t lda = s.grad_weight ? p : s.k, ldb = s.grad_weight ? q : (s.w_nk ? s.k : s.n),
                ldc = s.grad_weight ? q : s.n;
  const int64_t vin = mma ? 8 : 4, vout = mma ? 2 : 4;
  std::string src = header(s, s.grad_weight ? "grouped_matmul_grad_weight, tiles" : "grouped_matmul, tiles");
  src += "constexpr int NT = " + std::to_string(threads) + ";\n";
  src += "constexpr bool VEC_A = " + flag(s.aligned && lda % vin == 0) +
         ", VEC_B = " + flag(s.aligned && ldb % vin == 0) +
         ", VEC_C = " + flag(s.aligned && ldc % vout == 0) + ";\n";
  src += kernel_source("grouped.cuh", "common");
  if (mma) {
    src += "constexpr bool IS_F16 = " + flag(s.dtype == DType::kF16) + ";\n";
    src += kernel_source("grouped_mma.cuh", "mma_tiles");
  } else {
    src += kernel_source("grouped.cuh", "tiles");
  }
  src += signature(name);
  src += kernel_source("grouped.cuh", s.grad_weight ? "tile_gw" : "tile_fwd");
  src += "}\n";
  if (s.grad_weight) {
    if (ceil_div(p, kTile) > 65535 || s.experts > 65535)
      throw Error(
          "[cuda] grouped_matmul_grad_weight: more than 65535 experts or 64-row tiles of the gradient");
    return finish(name, std::move(src), threads, ceil_div(q, kTile), ceil_div(p, kTile), s.experts);
  }
  if (ceil_div(s.n, kTile) > 65535) throw Error("[cuda] grouped_matmul: more than 65535 column tiles");
  // Σ over experts of ⌈rows_e / 64⌉ ≤ ⌈R / 64⌉ + (experts with rows).
  return finish(name, std::move(src), threads, ceil_div(s.rows, kTile) + std::min(s.experts, s.rows),
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
  const int64_t chunk = std::clamp<int64_t>(s.rows, 1, kGemvChunk);
  src += "constexpr int NT = 256, MAXR = " + std::to_string(chunk) + ";\n";
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
    const int64_t cw = is_half(s.dtype) && s.aligned && s.n % 8 == 0 && chunk <= 8 ? 8 : 4;
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
  return finish(name, std::move(src), 256, gx, s.experts, 1);
}

}  // namespace

bool grouped_uses_tensor_cores(const GroupedShape& s, const DeviceInfo& dev) {
  return is_half(s.dtype) && dev.sm_major >= 8;
}

bool grouped_uses_gemv(const GroupedShape& s, const DeviceInfo& dev) {
  const int64_t most = s.w_nk                              ? kGemvRows
                       : grouped_uses_tensor_cores(s, dev) ? kGemvRowsKNTensorCores
                                                           : kGemvRowsKN;
  return !s.grad_weight && s.rows <= most;
}

Launch grouped_matmul_kernel(const std::string& name, const GroupedShape& s, const DeviceInfo& dev,
                             GroupedPath path) {
  if (s.dtype != DType::kF32 && !is_half(s.dtype))
    throw Error(std::string("[cuda] grouped_matmul does not take ") + dtype_name(s.dtype));
  const int64_t big = int64_t{1} << 31;
  if (s.rows >= big || s.k >= big || s.n >= big || s.experts < 1)
    throw Error("[cuda] grouped_matmul: extents of 2^31 or more are not supported");
  const bool gemv = path == GroupedPath::kAuto ? grouped_uses_gemv(s, dev) : path == GroupedPath::kGemv;
  if (gemv && s.grad_weight) throw Error("[cuda] grouped_matmul: the gemv kernels take only the forward");
  if (gemv) return gemv_kernel_of(name, s, dev);
  return tile_kernel(name, s, path != GroupedPath::kFmaTiles && grouped_uses_tensor_cores(s, dev));
}

}  // namespace tg::backend::cuda
