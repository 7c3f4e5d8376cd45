// CUDA kernel templates of the window ops (device code: kernels/conv.cuh). The geometry is
// baked in as constants; see conv.cuh for the implicit-GEMM formulation of the three conv ops.
#include <algorithm>
#include <optional>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"
#include "util/switches.h"

namespace tg::backend::cuda {
namespace {

// The geometry as constants: long long for the gemm pieces, int for the tile pieces (whose
// tensors are below 2^31 elements, and whose index arithmetic is 32-bit).
std::string geometry(const ir::WindowGeom& g, bool as_int = false) {
  const ir::Window& w = g.win;
  std::string s;
  auto c = [&](const char* name, int64_t v) {
    s += std::string(as_int ? "constexpr int " : "constexpr long long ") + name + " = " +
         (as_int ? std::to_string(v) : ll(v)) + ";\n";
  };
  c("N", g.n), c("C", g.c), c("H", g.h), c("W", g.w), c("O", g.o), c("OH", g.oh), c("OW", g.ow);
  c("KH", w.kh), c("KW", w.kw), c("SH", w.sh), c("SW", w.sw), c("PH", w.ph), c("PW", w.pw);
  c("DH", w.dh), c("DW", w.dw), c("G", w.groups), c("CG", g.cg()), c("OG", g.og());
  return s;
}

Launch grid_stride(const std::string& name, std::string source, int64_t total, const DeviceInfo& dev) {
  Launch l;
  l.name = name;
  l.source = std::move(source);
  l.block[0] = 256;
  const int64_t want = std::max<int64_t>(1, (total + 255) / 256), cap = int64_t{dev.sm_count} * 16;
  l.grid[0] = static_cast<unsigned>(std::min(want, std::max<int64_t>(cap, 1)));
  return l;
}

// The tile kernels' shape of one conv op (conv.cuh, piece tile), or none where they do not
// apply: the gradient of the input with a stride, or tiles that do not fit in shared memory.
struct TilePlan {
  int bm = 0, wr = 0, wc = 0, mt = 0, nt8 = 0;  // the block's m rows and its warps' tiles
  int64_t rb = 0, bands = 0, rh = 0, wp = 0, cs = 0, sch = 0, ks = 0, nch = 1;
  int64_t ipb = 1, splits = 1, cps = 0, total_chunks = 0, column_tiles = 1;
  int64_t smem_bytes = 0;
};

std::optional<TilePlan> tile_plan(int mode, const ir::WindowGeom& g, const DeviceInfo& dev) {
  const ir::Window& w = g.win;
  if (mode == 1 && (w.sh != 1 || w.sw != 1)) return std::nullopt;
  // Shared memory for two blocks an SM, so that one can stage while the other multiplies (the
  // registers allow two where a thread holds up to 64 accumulators; with 72, the widest layout,
  // ptxas gives cnn_fashion's conv2 weight gradient 175 registers: one block an SM).
  const int64_t budget = std::min<int64_t>(dev.smem_per_block, dev.smem_per_sm / 2 - 1024);
  const int64_t khw = w.kh * w.kw, m = mode == 1 ? g.cg() : g.og();
  TilePlan t;
  t.bm = m <= 16 ? 16 : m <= 32 ? 32 : 64;
  // The warps' layout: WR warps along m with MT row tiles each, WC = 8 / WR along n with NT8
  // column tiles, at most 72 accumulators a thread (16 where k is a handful: those convolutions
  // are bound by writing their output and need many resident warps). Chosen for the fewest
  // instructions a warp issues per k step (4·MT + 4·NT8 shared-memory loads and address sums,
  // MT·NT8 mma), times the bands or column tiles the layout needs.
  const int64_t rows = mode == 0 ? g.oh : g.h, cols = mode == 0 ? g.ow : g.w;  // FWD, GI: a band's pixels
  const int acc_cap = mode != 2 && (mode == 0 ? g.cg() : g.og()) * khw <= 32 ? 16 : 72;
  int64_t best = -1;
  for (int wr = 1; wr <= std::min(t.bm / 16, 4); wr *= 2) {
    const int mt = t.bm / 16 / wr, wc = 8 / wr, nt8_max = acc_cap / (4 * mt);
    if (nt8_max < 1) continue;
    const int64_t bn_max = int64_t{8} * wc * nt8_max;
    int64_t tiles = 0, nt8 = 0;
    if (mode == 2) {
      nt8 = std::min<int64_t>(nt8_max, (g.k() + 8 * wc - 1) / (8 * wc));
      tiles = (g.k() + 8 * wc * nt8 - 1) / (8 * wc * nt8);
    } else {
      if (cols > bn_max) continue;
      tiles = (rows + bn_max / cols - 1) / (bn_max / cols);  // bands
      nt8 = ((rows + tiles - 1) / tiles * cols + 8 * wc - 1) / (8 * wc);
    }
    const int64_t cost = tiles * (4 * mt + 4 * nt8 + mt * nt8);
    if (best < 0 || cost < best) best = cost, t.wr = wr, t.mt = mt, t.wc = wc, t.nt8 = static_cast<int>(nt8);
  }
  if (best < 0) return std::nullopt;
  const int64_t bn_max = int64_t{8} * t.wc * (acc_cap / (4 * t.mt));
  // Channel strides ≡ 16 (mod 32) words: the 4 k of a fragment spread over the banks.
  auto channel_stride = [](int64_t words) { return round_up(words - 16, 32) + 16; };
  auto bytes = [&](int64_t ks, int64_t sch, int64_t cs) { return (t.bm * (ks + 4) + sch * cs + ks) * 4; };
  if (mode == 2) {
    const int64_t nn = g.k();
    const int64_t bn = int64_t{8} * t.wc * t.nt8;
    t.column_tiles = (nn + bn - 1) / bn;
    t.sch = std::min(g.cg(), (bn + 2 * khw - 2) / khw);
    t.wp = (g.ow - 1) * w.sw + (w.kw - 1) * w.dw + 1;
    for (t.rb = g.oh; t.rb >= 1; t.rb = t.rb == 1 ? 0 : (t.rb + 1) / 2) {  // the largest band that fits
      t.rh = (t.rb - 1) * w.sh + (w.kh - 1) * w.dh + 1;
      t.cs = channel_stride(t.rh * t.wp), t.ks = round_up(t.rb * g.ow, 8);
      if (bytes(t.ks, t.sch, t.cs) <= budget) break;
    }
    if (t.rb < 1) return std::nullopt;
    t.bands = (g.oh + t.rb - 1) / t.rb;
    t.rb = (g.oh + t.bands - 1) / t.bands;
    t.rh = (t.rb - 1) * w.sh + (w.kh - 1) * w.dh + 1;
    t.cs = channel_stride(t.rh * t.wp), t.ks = round_up(t.rb * g.ow, 8);
    t.total_chunks = g.n * t.bands;
    // Enough blocks to fill the device twice over.
    const int64_t tiles = ((m + t.bm - 1) / t.bm) * t.column_tiles * w.groups;
    t.splits =
        std::clamp<int64_t>(2 * int64_t{dev.sm_count} / std::max<int64_t>(tiles, 1), 1, t.total_chunks);
    t.cps = (t.total_chunks + t.splits - 1) / t.splits;
    t.splits = (t.total_chunks + t.cps - 1) / t.cps;
  } else {
    // A band of output rows (FWD) or input rows (GI) as the block's columns.
    t.bands = (rows + bn_max / cols - 1) / (bn_max / cols);
    t.rb = (rows + t.bands - 1) / t.bands;
    t.nt8 = static_cast<int>((t.rb * cols + 8 * t.wc - 1) / (8 * t.wc));
    t.rh = mode == 0 ? (t.rb - 1) * w.sh + (w.kh - 1) * w.dh + 1 : t.rb + (w.kh - 1) * w.dh;
    t.wp = mode == 0 ? (g.ow - 1) * w.sw + (w.kw - 1) * w.dw + 1 : g.w + (w.kw - 1) * w.dw;
    t.cs = channel_stride(t.rh * t.wp);
    const int64_t channels = mode == 0 ? g.cg() : g.og();  // the k's channels, chunked
    for (t.sch = channels; t.sch >= 1; t.sch = t.sch == 1 ? 0 : (t.sch + 1) / 2) {
      t.ks = round_up(t.sch * khw, 8);
      if (bytes(t.ks, t.sch, t.cs) <= budget) break;
    }
    if (t.sch < 1) return std::nullopt;
    t.nch = (channels + t.sch - 1) / t.sch;
    t.sch = (channels + t.nch - 1) / t.nch;
    t.ks = round_up(t.sch * khw, 8);
    // Images a block, where the weights (staged once, with one chunk) outweigh an image's
    // window: as many as keep about one block per resident slot (two an SM).
    const int64_t tiles = t.bands * ((m + t.bm - 1) / t.bm) * w.groups;
    if (t.nch == 1 && t.bm * t.ks > t.sch * t.cs)
      t.ipb = std::clamp<int64_t>((g.n * tiles + 2 * dev.sm_count - 1) / (2 * int64_t{dev.sm_count}), 1, 8);
  }
  t.smem_bytes = bytes(t.ks, t.sch, t.cs);
  return t;
}

std::string dtype_header(DType dtype) {
  std::string h = dtype == DType::kF32   ? "typedef float IN_T;\n"
                  : dtype == DType::kF16 ? "typedef unsigned short IN_T;  // f16 bits\n"
                                         : "typedef unsigned short IN_T;  // bf16 bits\n";
  h += std::string("#define HALF_F16 ") + (dtype == DType::kF16 ? "1" : "0") + "\n";
  h += kernel_source("prelude.cuh", "widen");
  h += kernel_source("half_loads.cuh", "loads");
  return h;
}

// The second launch of a split weight gradient: the SPLITS partials summed in order.
Launch splits_sum(const std::string& name, int64_t splits, int64_t total, const DeviceInfo& dev) {
  std::string r = "// conv2d weight gradient: the splits' sum (kernels_conv.cc)\n";
  r += "constexpr long long TOTAL = " + ll(total) + ", SPLITS = " + ll(splits) + ";\n";
  r += "extern \"C\" __global__ void " + name +
       "(const float* __restrict__ part, float* __restrict__ out) {\n";
  r += kernel_source("conv.cuh", "splits");
  r += "}\n";
  return grid_stride(name, std::move(r), total, dev);
}

ConvPlan tile_kernels(const std::string& name, int mode, const ir::WindowGeom& g, DType dtype,
                      const TilePlan& t, const DeviceInfo& dev) {
  const int64_t m = mode == 1 ? g.cg() : g.og(), nn = mode == 2 ? g.k() : 0;
  std::string s = "// conv2d, shared-memory tiles (kernels_conv.cc)\n" + dtype_header(dtype);
  auto c = [&](const char* key, int64_t v) {
    s += "constexpr int " + std::string(key) + " = " + std::to_string(v) + ";\n";
  };
  c("MODE", mode), c("M", m), c("NN", nn), c("BM", t.bm), c("BN", int64_t{8} * t.wc * t.nt8), c("WR", t.wr);
  c("WC", t.wc), c("MT", t.mt), c("NT8", t.nt8), c("RB", t.rb), c("BANDS", t.bands), c("RH", t.rh),
      c("WP", t.wp);
  c("CS", t.cs), c("SCH", t.sch), c("KS", t.ks), c("SA", t.ks + 4), c("NCH", t.nch), c("IPB", t.ipb),
      c("SPLITS", t.splits);
  c("CPS", t.cps), c("TOTAL_CHUNKS", t.total_chunks);
  s += geometry(g, /*as_int=*/true);
  s += kernel_source("conv.cuh", "tile_common");
  s += "extern \"C\" __global__ void __launch_bounds__(256) " + name +
       "(const IN_T* __restrict__ p0, const IN_T* __restrict__ p1, float* __restrict__ out) {\n";
  s += kernel_source("conv.cuh", "tile");
  s += "}\n";
  Launch l;
  l.name = name;
  l.source = std::move(s);
  l.block[0] = 256;
  l.shared_bytes = static_cast<unsigned>(t.smem_bytes);
  l.grid[0] = static_cast<unsigned>(mode == 2 ? t.column_tiles : t.bands);
  l.grid[1] = static_cast<unsigned>((m + t.bm - 1) / t.bm);
  const int64_t zs = mode == 2 ? g.win.groups * t.splits : (g.n + t.ipb - 1) / t.ipb * g.win.groups;
  l.grid[2] = static_cast<unsigned>(zs);
  if (zs > 65535) throw Error("[cuda] conv2d: more than 65535 (image, group) pairs in one call");
  ConvPlan plan;
  plan.launches.push_back(std::move(l));
  if (mode == 2 && t.splits > 1) {
    plan.scratch_floats = t.splits * g.o * g.k();
    plan.launches.push_back(splits_sum(name, t.splits, g.o * g.k(), dev));
  }
  plan.flops = 2 * g.n * g.o * g.oh * g.ow * g.k();
  return plan;
}

}  // namespace

bool conv_tiles_allowed() { return !env::equals(env::Switch::kCudaConv, "gather"); }

ConvPlan conv_kernels(const std::string& name, ir::Op op, const ir::WindowGeom& g, DType dtype, bool tf32,
                      const DeviceInfo& dev, bool tiles) {
  if (g.n * g.c * g.h * g.w >= (int64_t{1} << 31) || g.n * g.o * g.oh * g.ow >= (int64_t{1} << 31) ||
      g.o * g.k() >= (int64_t{1} << 31))
    throw Error("[cuda] conv2d: tensors of 2^31 elements or more are not supported yet");
  if (dtype != DType::kF32 && !is_half(dtype))
    throw Error(std::string("[cuda] conv2d does not take ") + dtype_name(dtype));
  const int mode = op == ir::Op::kConv2d ? 0 : op == ir::Op::kConv2dGradInput ? 1 : 2;
  const int64_t P = g.oh * g.ow, K = g.k();
  const std::optional<TilePlan> tp =
      tiles && (tf32 || is_half(dtype)) ? tile_plan(mode, g, dev) : std::nullopt;
  if (tp) return tile_kernels(name, mode, g, dtype, *tp, dev);
  int64_t m = 0, nn = 0, kk = 0, ktotal = 0, batch = 0, splits = 1;
  if (mode == 0) m = g.og(), nn = P, kk = K, batch = g.n * g.win.groups;
  if (mode == 1) m = g.cg(), nn = g.h * g.w, kk = g.og() * g.win.kh * g.win.kw, batch = g.n * g.win.groups;
  if (mode == 2) m = g.og(), nn = K, ktotal = g.n * P;
  // The smallest tiles that cover the problem's m and n (no threads idle on thin problems), up
  // to 64 × 64, or 64 × 128 on the tensor cores (wider SIMT tiles were slower: more registers a
  // thread); 32 of k a stage. Tensor cores for tf32 products, and for bf16 and f16 operands
  // (exact in tf32): 8 warps of 16 rows and at least one 8-column tile each. (Measurements: RESULTS.md.)
  constexpr int bk = 32;
  const bool tc_wanted = tf32 || is_half(dtype);
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
  std::string s = "// conv2d (kernels_conv.cc)\n" + dtype_header(dtype);
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
    plan.scratch_floats = splits * g.o * K;
    plan.launches.push_back(splits_sum(name, splits, g.o * K, dev));
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
