// Skinny products (see small_matmul.h): the decode step's x·Wᵀ with a handful of rows, where
// the whole cost is reading W once. cuBLASLt's kernels reach only a fraction of the memory
// bandwidth on these shapes; these kernels stream W with 16-byte loads, one warp (or KS warps
// splitting K) per output column, and apply the bias, the residual and GELU in the same pass.
// Two of them: the staged kernel copies each block's rows into shared memory once (normalised
// and rounded as the product reads them) and keeps several columns a warp in flight over a grid
// of kGemvBlocksPerSm blocks an SM; the direct kernel reads the rows from L1 per column (every warp
// of an SM reads the same few KB), for products the staged one does not take (staged_split).
// Optionally the rows are a layer/RMS norm's input, normalised as they are read, so the norm
// needs no kernel of its own. W and x may be bf16 (a decode step under Precision::kBf16 reads the
// weights' bf16 copies: half the bytes), and an f32 x may be rounded to bf16 as it is read (the
// cast before the product, absorbed). Sums run in f32 in a fixed order: deterministic.
//
// The device code is in kernels/gemv.cuh.
#include <algorithm>
#include <cstdio>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/small_matmul.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

constexpr int kWarps = 8;                 // per block
constexpr int64_t kMaxRows = 8;           // rows of x (the batch of a decode step)
constexpr int64_t kStagedFloats = 10240;  // rows the staged kernel holds in shared memory (40 KB)
constexpr int kGemvBlocksPerSm = 3;       // the staged kernel's grid (its launch bounds)

/// The direct kernel's warps per column: enough blocks to cover the GPU's SMs twice.
int direct_split(int64_t n, int64_t k, int sm_count) {
  int ks = 1;
  while (ks < kWarps && (n * ks + kWarps - 1) / kWarps < 2 * sm_count && k / (ks * 2) >= 256) ks *= 2;
  return ks;
}

/// The staged kernel's split of a column over warps, or 0 for the direct kernel. The staged
/// kernel pays for its copy of the rows with one statistics pass per block (a direct kernel's
/// warps each recompute a norm's) and keeps more weight bytes in flight; the direct kernel is
/// taken only for products without a norm whose grid is one resident wave of three to four
/// blocks an SM (its occupancy), where it measured faster in decode steps. The staged split
/// keeps each lane's loads of a column slice within kMaxLoads, then grows while the grid is
/// under kGemvBlocksPerSm blocks an SM and each slice still spans a load per lane.
/// (4-bit weights, vpl 32, have no direct kernel: only the first two conditions hold for them.)
int staged_split(int64_t m, int64_t n, int64_t k, int vpl, bool norm, int sm_count, int ks) {
  constexpr int kMaxLoads = 4;
  if (k % vpl != 0 || m * k > kStagedFloats) return 0;
  if (ks > 0) return (k + ks * 32 * vpl - 1) / (ks * 32 * vpl) <= 2 * kMaxLoads ? ks : 0;
  ks = 1;
  while (ks <= kWarps && k > int64_t{ks} * 32 * vpl * kMaxLoads) ks *= 2;
  if (ks > kWarps) return 0;
  if (!norm && vpl != 32) {
    const int64_t direct_grid = (n * direct_split(n, k, sm_count) + kWarps - 1) / kWarps;
    if (direct_grid >= 3 * sm_count && direct_grid <= 4 * sm_count) return 0;
  }
  while (ks < kWarps && (n * ks + kWarps - 1) / kWarps < kGemvBlocksPerSm * sm_count &&
         k / (ks * 2) >= 32 * vpl)
    ks *= 2;
  return ks;
}

}  // namespace

int64_t gemv_max_rows(bool narrow_weights) { return narrow_weights ? 1 : kMaxRows; }

bool gemv_takes_int4(int64_t m, int64_t n, int64_t k, int64_t group, bool norm, int sm_count) {
  // Products of fewer than 2^23 weights only: for small products the fusions pay; for larger
  // ones quant_matmul_kernel's warp per column streams the codes faster than the staged kernel,
  // whose 32 codes a load cost registers and instructions its three blocks an SM do not hide
  // (measured: bench/RESULTS.md).
  return group > 0 && group % 32 == 0 && k % 32 == 0 && n * k < (int64_t{1} << 23) &&
         staged_split(m, n, k, 32, norm, sm_count, 0) > 0;
}

bool gemv_applies(int64_t batch, int64_t m, int64_t n, int64_t k, const MatOperand& a, const MatOperand& b) {
  (void)a;
  return batch == 1 && m >= 1 && m <= kMaxRows && n >= 1 && k >= 32 && b.row_stride == 1 &&
         b.col_stride >= k && n * k >= (int64_t{1} << 16);
}

Launch gemv_kernel(const std::string& name, int64_t m, int64_t n, int64_t k, const MatOperand& a,
                   const MatOperand& b, GemvEpilogue epi, int64_t out_ld, int sm_count, GemvNorm norm, int ks,
                   GemvTypes types) {
  if (out_ld <= 0) out_ld = n;
  const int per = types.b_i4 ? 32 : types.b_i8 ? 16 : types.b_bf16 ? 8 : 4, a_per = types.a_bf16 ? 8 : 4;
  // int8 W: a 16-byte load must lie in one scale group for the vector paths.
  const bool whole_groups = !types.b_i8 || (types.group > 0 && types.group % per == 0);
  const int staged_ks = whole_groups ? staged_split(m, n, k, per, norm.on, sm_count, ks) : 0;
  if (types.b_i4 && staged_ks == 0)
    throw Error("[cuda] gemv_kernel: 4-bit weights take the staged kernel only (gemv_takes_int4)");
  if (staged_ks > 0) ks = staged_ks;
  if (ks <= 0) ks = direct_split(n, k, sm_count);
  const int cols_per_block = kWarps / ks;
  Launch l;
  l.name = name;
  l.block[0] = kWarps * 32;
  // The staged kernel's loads of W per lane and column slice, and columns a warp takes a turn.
  const int64_t pre = (k + ks * 32 * per - 1) / (ks * 32 * per);
  // (Half as many for int8 W: a chunk widens to sixteen values and each load has its scale, in
  // the registers the launch bounds leave.)
  int64_t cols = staged_ks == 0 ? 1 : std::max<int64_t>(1, (types.b_i8 ? 4 : 8) / pre);
  // A narrow product (a decode step's k or v projection, n = 256) takes fewer columns a turn
  // rather than leave most SMs idle: its bandwidth grows with the blocks streaming it.
  while (cols > 1 && (n + cols_per_block * cols - 1) / (cols_per_block * cols) < sm_count) cols /= 2;
  const int64_t column_blocks = (n + cols_per_block * cols - 1) / (cols_per_block * cols);
  l.grid[0] = static_cast<unsigned>(column_blocks);
  if (staged_ks > 0) {  // at most kGemvBlocksPerSm blocks an SM, each taking the same number of turns
    const int64_t turns = (column_blocks + kGemvBlocksPerSm * sm_count - 1) / (kGemvBlocksPerSm * sm_count);
    l.grid[0] = static_cast<unsigned>((column_blocks + turns - 1) / turns);
  }
  // 16-byte loads of W and x when K and the strides allow (alignment is checked at run time):
  // four f32 or eight bf16 values of W a load.
  const bool vec = whole_groups && k % per == 0 && b.col_stride % per == 0 && a.col_stride == 1 &&
                   a.row_stride % a_per == 0;
  const bool affine = norm.on && (norm.w || norm.b);
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.9e", norm.eps);
  std::string s = "// gemv: out[" + std::to_string(m) + ", " + std::to_string(n) +
                  "] = x·W over k = " + std::to_string(k) +
                  (norm.on ? std::string(norm.layer ? ", x layer-normed" : ", x RMS-normed") : "") +
                  std::string(types.b_bf16 ? ", bf16 W"
                              : types.b_i4 ? ", 4-bit W"
                              : types.b_i8 ? ", int8 W"
                                           : "") +
                  (types.a_bf16 ? ", bf16 x" : "") + (types.round_a ? ", x rounded to bf16" : "") +
                  (staged_ks > 0 ? ", rows staged" : "") + " (gemv.cc)\n";
  s += "constexpr int M = " + std::to_string(m) + ", N = " + std::to_string(n) +
       ", K = " + std::to_string(k) + ", KS = " + std::to_string(ks) +
       ", CPB = " + std::to_string(cols_per_block) + ", NT = " + std::to_string(kWarps * 32) + ";\n";
  s += "constexpr long long A_RS = " + ll(a.row_stride) + ", A_CS = " + ll(a.col_stride) +
       ", B_CS = " + ll(types.b_i4 ? b.col_stride / 2 : b.col_stride) + ", OUT_LD = " + ll(out_ld) +
       ";  // (4-bit W: bytes)\n";
  s += std::string("typedef ") + (types.a_bf16 ? "unsigned short" : "float") + " AT;\ntypedef " +
       (types.b_i8     ? "signed char"
        : types.b_bf16 ? "unsigned short"
                       : "float") +
       " BT;\n";
  s += std::string("constexpr bool A_BF = ") + (types.a_bf16 ? "true" : "false") +
       ", B_BF = " + (types.b_bf16 ? "true" : "false") + ", B_I8 = " + (types.b_i8 ? "true" : "false") +
       ", B_I4 = " + (types.b_i4 ? "true" : "false") + ", A_RND = " + (types.round_a ? "true" : "false") +
       ";\n";
  const int64_t group = types.b_i8 ? types.group : 1;
  s += "constexpr long long GROUP = " + ll(group) + ", GROUPS = " + ll(types.b_i8 ? k / group : 1) + ";\n";
  s += std::string("constexpr bool NORM = ") + (norm.on ? "true" : "false") +
       ", LAYER = " + (norm.layer ? "true" : "false") + ", NW = " + (norm.w ? "true" : "false") +
       ", NB = " + (norm.b ? "true" : "false") + ";\nconstexpr float EPS = " + eps + "f;\n";
  std::string params = "const AT* __restrict__ a";
  if (affine) params += ", const float* __restrict__ nw, const float* __restrict__ nb";
  params += ", const BT* __restrict__ b";
  if (types.b_i8) params += ", const float* __restrict__ bs";
  if (types.b_i4) params += ", const float* __restrict__ bo";
  if (epi.bias) params += ", const float* __restrict__ bias";
  if (epi.residual) params += ", const float* __restrict__ residual";
  params += ", float* __restrict__ out";
  if (!affine) s += "constexpr const float* nw = nullptr;\nconstexpr const float* nb = nullptr;\n";
  if (!types.b_i8) s += "constexpr const float* bs = nullptr;\n";
  if (!types.b_i4) s += "constexpr const float* bo = nullptr;\n";
  // Weights no kernel of the step writes may be read before the kernel before has ended.
  if (types.b_fixed) s += "#define TG_PDL_OWN_WAIT\n";
  s += "#ifndef TG_PDL_WAIT\n#define TG_PDL_WAIT()\n#endif\n";
  s += "#define EPI(y, i, j) {";
  if (epi.bias) s += " y += bias[j];";
  if (epi.residual) s += " y += residual[(i) * (long long)N + (j)];";
  if (epi.gelu) s += " y = 0.5f * y * (1.0f + tanhf(0.7978845608028654f * (y + 0.044715f * y * y * y)));";
  s += " }\n";
  s += kernel_source("gemv.cuh", "helpers");
  if (staged_ks > 0) {
    s += "constexpr int VPL = " + std::to_string(per) + ", PRE = " + std::to_string(pre) +
         ", COLS = " + std::to_string(cols) + ";\n";
    s += "extern \"C\" __global__ void __launch_bounds__(NT, " + std::to_string(kGemvBlocksPerSm) + ") " +
         name + "(" + params + ") {\n";
    s += kernel_source("gemv.cuh", "staged");
  } else {
    s += "extern \"C\" __global__ void __launch_bounds__(NT) " + name + "(" + params + ") {\n";
    s += kernel_source("gemv.cuh", "start");
    if (vec) s += kernel_source("gemv.cuh", types.b_i8 ? "vec16" : types.b_bf16 ? "vec8" : "vec");
    s += kernel_source("gemv.cuh", "rows");
  }
  l.source = std::move(s);
  return l;
}

}  // namespace tg::backend::cuda
