// The fused norm backward's kernels (the step: passes/schedule_fused.cc). Autograd leaves, per
// affine norm, dy = dz·w, x̂ = norm(x) again, dw = Σrows dz·x̂, db = Σrows dz and dx =
// norm_grad(x, dy): five kernels that read dz four times and x twice. This row kernel reads x
// and dz once, writes dx, and accumulates per-column partials of dz·x̂ and dz in registers
// across the rows each block walks; a second small kernel adds each column's block partials in
// block order (deterministic: no atomics). The parts are optional: without a mul, dy is dz;
// without the sums, no partials. The device code is in kernels/norm_backward.cuh.
#include <cstdio>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"

namespace tg::backend::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row (capabilities.cc: norm_backward_blocks)

}  // namespace

Launch norm_backward_kernel(const std::string& name, int64_t rows, int64_t cols, double eps, bool layer,
                            bool has_w, bool dw, bool db, int64_t blocks) {
  const int64_t per_lane = (cols + 31) / 32;
  Launch l;
  l.name = name;
  char e[64];
  std::snprintf(e, sizeof e, "%.9ef", eps);
  std::string s = "// norm backward (norm_fusion.cc)\n";
  s += "constexpr long long ROWS = " + ll(rows) + ";\nconstexpr int C = " + std::to_string(cols) + ";\n";
  s += "constexpr int J = " + std::to_string(per_lane) + ";  // columns per lane\n";
  s += "constexpr int G = " + std::to_string(blocks) + ";\nconstexpr float EPS = " + e + ";\n";
  s += std::string("constexpr bool LAYER = ") + (layer ? "true" : "false") +
       ", DW = " + (dw ? "true" : "false") + ", DB = " + (db ? "true" : "false") + ";\n";
  s += kernel_source("norm_backward.cuh", "helpers");
  s += "extern \"C\" __global__ void __launch_bounds__(256) " + name +
       "(const float* __restrict__ x, const float* __restrict__ dz, ";
  s += has_w ? "const float* __restrict__ w, " : "";
  s += "float* __restrict__ dx, float* __restrict__ part) {\n";
  s += kernel_source("norm_backward.cuh", "rows");
  s += has_w ? "      g[j] *= __ldg(w + c);\n" : "";
  s += kernel_source("norm_backward.cuh", "tail");
  l.source = std::move(s);
  l.block[0] = 32 * kRowsPerBlock;
  l.grid[0] = static_cast<unsigned>(blocks);
  return l;
}

Launch norm_partials_kernel(const std::string& name, int64_t cols, int64_t blocks, bool dw, bool db) {
  Launch l;
  l.name = name;
  std::string s = "// norm backward partials (norm_fusion.cc)\n";
  s += "constexpr int C = " + std::to_string(cols) + ", G = " + std::to_string(blocks) + ";\n";
  s += "extern \"C\" __global__ void " + name + "(const float* __restrict__ part";
  if (dw) s += ", float* __restrict__ dw";
  if (db) s += ", float* __restrict__ db";
  s += ") {\n  const int c = blockIdx.x * 32 + threadIdx.x;\n";
  s += std::string("  const int k = ") + (dw && db ? "blockIdx.y" : dw ? "0" : "1") + ";\n";
  s += R"(  float a = 0.0f;
  if (c < C)
    for (int b = threadIdx.y; b < G; b += 8) a += part[((long long)k * G + b) * C + c];
  __shared__ float sh[8][32];
  sh[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int r = 1; r < 8; ++r) a += sh[r][threadIdx.x];
)";
  if (dw && db)
    s += "  (k == 0 ? dw : db)[c] = a;\n}\n";
  else
    s += std::string("  ") + (dw ? "dw" : "db") + "[c] = a;\n}\n";
  l.source = std::move(s);
  l.block[0] = 32;
  l.block[1] = 8;
  l.grid[0] = static_cast<unsigned>((cols + 31) / 32);
  l.grid[1] = dw && db ? 2 : 1;
  return l;
}

}  // namespace tg::backend::cuda
