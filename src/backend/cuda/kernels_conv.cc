// CUDA kernel templates of the window ops (device code: kernels/conv.cuh). The geometry is
// baked in as constants; see conv.cuh for the implicit-GEMM formulation of the three conv ops.
#include <algorithm>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

std::string ll(int64_t v) { return std::to_string(v) + "LL"; }

std::string geometry(const ir::WindowGeom& g) {
  const ir::Window& w = g.win;
  std::string s;
  auto c = [&](const char* name, int64_t v) {
    s += std::string("constexpr long long ") + name + " = " + ll(v) + ";\n";
  };
  c("N", g.n), c("C", g.c), c("H", g.h), c("W", g.w), c("O", g.o), c("OH", g.oh), c("OW", g.ow);
  c("KH", w.kh), c("KW", w.kw), c("SH", w.sh), c("SW", w.sw), c("PH", w.ph), c("PW", w.pw);
  c("DH", w.dh), c("DW", w.dw), c("G", w.groups), c("CG", g.cg()), c("OG", g.og());
  return s;
}

constexpr const char* kLoads =
    R"(__device__ __forceinline__ float in_ld(const float* p) { return __ldg(p); }
__device__ __forceinline__ float in_ld(const unsigned short* p) { return __uint_as_float((unsigned)__ldg(p) << 16); }
)";

Launch grid_stride(const std::string& name, std::string source, int64_t total, const DeviceInfo& dev) {
  Launch l;
  l.name = name;
  l.source = std::move(source);
  l.block[0] = 256;
  const int64_t want = std::max<int64_t>(1, (total + 255) / 256), cap = int64_t{dev.sm_count} * 16;
  l.grid[0] = static_cast<unsigned>(std::min(want, std::max<int64_t>(cap, 1)));
  return l;
}

}  // namespace

ConvPlan conv_kernels(const std::string& name, ir::Op op, const ir::WindowGeom& g, DType dtype, bool tf32,
                      const DeviceInfo& dev) {
  if (g.n * g.c * g.h * g.w >= (int64_t{1} << 31) || g.n * g.o * g.oh * g.ow >= (int64_t{1} << 31))
    throw Error("[cuda] conv2d: tensors of 2^31 elements or more are not supported yet");
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw Error(std::string("[cuda] conv2d does not take ") + dtype_name(dtype));
  const int mode = op == ir::Op::kConv2d ? 0 : op == ir::Op::kConv2dGradInput ? 1 : 2;
  const int64_t P = g.oh * g.ow, K = g.k();
  int64_t m = 0, nn = 0, kk = 0, ktotal = 0, batch = 0, splits = 1;
  if (mode == 0) m = g.og(), nn = P, kk = K, batch = g.n * g.win.groups;
  if (mode == 1) m = g.cg(), nn = g.h * g.w, kk = g.og() * g.win.kh * g.win.kw, batch = g.n * g.win.groups;
  if (mode == 2) m = g.og(), nn = K, ktotal = g.n * P;
  // The smallest tiles that cover the problem's m and n (no threads idle on thin problems), up
  // to 64 × 64, or 64 × 128 on the tensor cores (wider SIMT tiles were slower: more registers a
  // thread); 32 of k a stage. Tensor cores for tf32 products, and for bf16 operands (exact in
  // tf32): 8 warps of 16 rows and at least one 8-column tile each. (Measurements: RESULTS.md.)
  constexpr int bk = 32;
  const bool tc_wanted = tf32 || dtype == DType::kBF16;
  const int bm = m <= 32 ? 32 : 64;
  const int bn = nn <= 16 ? 16 : nn <= 32 ? 32 : nn <= 64 || !tc_wanted ? 64 : 128;
  const bool tc = tc_wanted && bn / (8 * (8 / (bm / 16))) >= 1;
  if (mode == 2) {
    // Enough blocks to fill the device twice over, each with at least 256 of k to sum.
    const int64_t tiles = ((m + bm - 1) / bm) * ((nn + bn - 1) / bn) * g.win.groups;
    splits = std::clamp<int64_t>(2 * int64_t{dev.sm_count} / std::max<int64_t>(tiles, 1), 1,
                                 std::max<int64_t>(ktotal / 256, 1));
    kk = (ktotal + splits - 1) / splits;
    kk = (kk + bk - 1) / bk * bk;
    splits = (ktotal + kk - 1) / kk;
    batch = g.win.groups * splits;
  }
  std::string s = "// conv2d (kernels_conv.cc)\n";
  s += dtype == DType::kBF16 ? "typedef unsigned short IN_T;  // bf16 bits\n" : "typedef float IN_T;\n";
  s += kLoads;
  s += "constexpr int MODE = " + std::to_string(mode) + ", BM = " + std::to_string(bm) +
       ", BN = " + std::to_string(bn) + ", BK = " + std::to_string(bk) + ";\n";
  s += std::string("constexpr bool TC = ") + (tc ? "true" : "false") + ";\n";
  s += geometry(g);
  s += "constexpr long long M = " + ll(m) + ", NN = " + ll(nn) + ", KK = " + ll(kk) +
       ", KTOTAL = " + ll(ktotal) + ", SPLITS = " + ll(splits) + ";\n";
  s += kernel_source("conv.cuh", "gemm_common");
  s += "extern \"C\" __global__ void __launch_bounds__(256) " + name +
       "(const IN_T* __restrict__ p0, const IN_T* __restrict__ p1, float* __restrict__ out) {\n";
  s += kernel_source("conv.cuh", tc ? "gemm_tc" : "gemm");
  s += "}\n";
  ConvPlan plan;
  Launch l;
  l.name = name;
  l.source = std::move(s);
  l.block[0] = 256;
  l.grid[0] = static_cast<unsigned>((nn + bn - 1) / bn);
  l.grid[1] = static_cast<unsigned>((m + bm - 1) / bm);
  l.grid[2] = static_cast<unsigned>(batch);
  if (batch > 65535) throw Error("[cuda] conv2d: more than 65535 (image, group) pairs in one call");
  plan.launches.push_back(std::move(l));
  if (splits > 1) {
    const int64_t total = g.o * K;
    plan.scratch_floats = splits * total;
    std::string r = "// conv2d weight gradient: the splits' sum (kernels_conv.cc)\n";
    r += "constexpr long long TOTAL = " + ll(total) + ", SPLITS = " + ll(splits) + ";\n";
    r += "extern \"C\" __global__ void " + name +
         "(const float* __restrict__ part, float* __restrict__ out) {\n";
    r += kernel_source("conv.cuh", "splits");
    r += "}\n";
    plan.launches.push_back(grid_stride(name, std::move(r), total, dev));
  }
  plan.flops = 2 * g.n * g.o * P * K;
  return plan;
}

Launch pool_kernel(const std::string& name, ir::Op op, const ir::WindowGeom& g, const DeviceInfo& dev) {
  const int mode = op == ir::Op::kMaxPool2d       ? 3
                   : op == ir::Op::kAvgPool2d     ? 4
                   : op == ir::Op::kMaxPool2dGrad ? 5
                                                  : 6;
  std::string s = "// pooling (kernels_conv.cc)\n";
  s += "constexpr int MODE = " + std::to_string(mode) + ";\n";
  s += geometry(g);
  s += std::string("constexpr bool COUNT_PAD = ") + (g.win.count_pad ? "true" : "false") + ";\n";
  s += kernel_source("conv.cuh", "pool_common");
  s += "extern \"C\" __global__ void " + name +
       "(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out) {\n";
  s += kernel_source("conv.cuh", "pool");
  s += "}\n";
  const ir::Window& w = g.win;
  const bool exact = w.sh == w.kh && w.sw == w.kw && w.ph == 0 && w.pw == 0 && w.dh == 1 && w.dw == 1 &&
                     g.h % w.kh == 0 && g.w % w.kw == 0;  // conv.cuh's EXACT
  return grid_stride(name, std::move(s), mode <= 4 || exact ? g.n * g.c * g.oh * g.ow : g.n * g.c * g.h * g.w,
                     dev);
}

}  // namespace tg::backend::cuda
