// Skinny products (see small_matmul.h): the decode step's x·Wᵀ with a handful of rows, where
// the whole cost is reading W once. cuBLASLt's kernels reach only a fraction of the memory
// bandwidth on these shapes; this kernel streams W with 16-byte loads, one warp (or KS
// warps splitting K) per output column, reads the rows of x alongside (they stay in L1: every
// warp of an SM reads the same few KB), and applies the bias, the residual and GELU in the same
// pass. Optionally the rows are a layer/RMS norm's input: each block first computes the rows'
// statistics (two passes, as the norm kernels) and normalises x as it reads it, so the norm
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

namespace tg::backend::cuda {
namespace {

constexpr int kWarps = 8;        // per block
constexpr int64_t kMaxRows = 8;  // rows of x (the batch of a decode step)

std::string ll(int64_t v) { return std::to_string(v) + "LL"; }

}  // namespace

int64_t gemv_max_rows(bool bf16_weights) { return bf16_weights ? 1 : kMaxRows; }

bool gemv_applies(int64_t batch, int64_t m, int64_t n, int64_t k, const MatOperand& a, const MatOperand& b) {
  (void)a;
  return batch == 1 && m >= 1 && m <= kMaxRows && n >= 1 && k >= 32 && b.row_stride == 1 &&
         b.col_stride >= k && n * k >= (int64_t{1} << 16);
}

Launch gemv_kernel(const std::string& name, int64_t m, int64_t n, int64_t k, const MatOperand& a,
                   const MatOperand& b, GemvEpilogue epi, int64_t out_ld, int sm_count, GemvNorm norm, int ks,
                   GemvTypes types) {
  if (out_ld <= 0) out_ld = n;
  // Warps per column: enough blocks to cover the GPU's SMs twice.
  if (ks <= 0) {
    ks = 1;
    while (ks < kWarps && (n * ks + kWarps - 1) / kWarps < 2 * sm_count && k / (ks * 2) >= 256) ks *= 2;
  }
  const int cols_per_block = kWarps / ks;
  Launch l;
  l.name = name;
  l.block[0] = kWarps * 32;
  l.grid[0] = static_cast<unsigned>((n + cols_per_block - 1) / cols_per_block);
  // 16-byte loads of W and x when K and the strides allow (alignment is checked at run time):
  // four f32 or eight bf16 values of W a load.
  const int per = types.b_bf16 ? 8 : 4, a_per = types.a_bf16 ? 8 : 4;
  const bool vec = k % per == 0 && b.col_stride % per == 0 && a.col_stride == 1 && a.row_stride % a_per == 0;
  const bool affine = norm.on && (norm.w || norm.b);
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.9e", norm.eps);
  std::string s = "// gemv: out[" + std::to_string(m) + ", " + std::to_string(n) +
                  "] = x·W over k = " + std::to_string(k) +
                  (norm.on ? std::string(norm.layer ? ", x layer-normed" : ", x RMS-normed") : "") +
                  std::string(types.b_bf16 ? ", bf16 W" : "") + (types.a_bf16 ? ", bf16 x" : "") +
                  (types.round_a ? ", x rounded to bf16" : "") + " (gemv.cc)\n";
  s += "constexpr int M = " + std::to_string(m) + ", N = " + std::to_string(n) +
       ", K = " + std::to_string(k) + ", KS = " + std::to_string(ks) +
       ", CPB = " + std::to_string(cols_per_block) + ", NT = " + std::to_string(kWarps * 32) + ";\n";
  s += "constexpr long long A_RS = " + ll(a.row_stride) + ", A_CS = " + ll(a.col_stride) +
       ", B_CS = " + ll(b.col_stride) + ", OUT_LD = " + ll(out_ld) + ";\n";
  s += std::string("typedef ") + (types.a_bf16 ? "unsigned short" : "float") + " AT;\ntypedef " +
       (types.b_bf16 ? "unsigned short" : "float") + " BT;\n";
  s += std::string("constexpr bool A_BF = ") + (types.a_bf16 ? "true" : "false") +
       ", B_BF = " + (types.b_bf16 ? "true" : "false") + ", A_RND = " + (types.round_a ? "true" : "false") +
       ";\n";
  s += std::string("constexpr bool NORM = ") + (norm.on ? "true" : "false") +
       ", LAYER = " + (norm.layer ? "true" : "false") + ", NW = " + (norm.w ? "true" : "false") +
       ", NB = " + (norm.b ? "true" : "false") + ";\nconstexpr float EPS = " + eps + "f;\n";
  std::string params = "const AT* __restrict__ a";
  if (affine) params += ", const float* __restrict__ nw, const float* __restrict__ nb";
  params += ", const BT* __restrict__ b";
  if (epi.bias) params += ", const float* __restrict__ bias";
  if (epi.residual) params += ", const float* __restrict__ residual";
  params += ", float* __restrict__ out";
  if (!affine) s += "constexpr const float* nw = nullptr;\nconstexpr const float* nb = nullptr;\n";
  // Weights no kernel of the step writes may be read before the kernel before has ended.
  if (types.b_fixed) s += "#define TG_PDL_OWN_WAIT\n";
  s += "#ifndef TG_PDL_WAIT\n#define TG_PDL_WAIT()\n#endif\n";
  s += kernel_source("gemv.cuh", "helpers");
  s += "extern \"C\" __global__ void __launch_bounds__(NT) " + name + "(" + params + ") {\n";
  s += kernel_source("gemv.cuh", "start");
  if (vec) s += kernel_source("gemv.cuh", types.b_bf16 ? "vec8" : "vec");
  s += kernel_source("gemv.cuh", "rows");
  if (epi.bias) s += "    y += bias[j];\n";
  if (epi.residual) s += "    y += residual[i * (long long)N + j];\n";
  if (epi.gelu)
    s += "    y = 0.5f * y * (1.0f + tanhf(0.7978845608028654f * (y + 0.044715f * y * y * y)));\n";
  s += "    out[i * OUT_LD + j] = y;\n  }\n}\n";
  l.source = std::move(s);
  return l;
}

}  // namespace tg::backend::cuda
