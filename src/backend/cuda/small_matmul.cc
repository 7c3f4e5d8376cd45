// Small f32 matrix products as one generated kernel (see small_matmul.h for the scheme).
//
// The device code is in kernels/small_matmul.cuh.
#include "backend/cuda/small_matmul.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "backend/cuda/kernel_sources.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

/// Stages of the cp.async ring buffer.
int ring_stages(int64_t stages) { return static_cast<int>(std::clamp<int64_t>(stages, 2, 4)); }

struct Derived {
  int64_t tiles_m, tiles_n, kb, stages;
  int ring;
  int64_t pa, pb, smem_floats;
};

Derived derive(const SmallMatmulConfig& c, int64_t m, int64_t n, int64_t k) {
  Derived d{};
  d.tiles_m = ceil_div(m, c.bm);
  d.tiles_n = ceil_div(n, c.bn);
  d.kb = round_up(std::max<int64_t>(ceil_div(k, c.cl), 1), c.bk);
  d.stages = d.kb / c.bk;
  d.ring = ring_stages(d.stages);
  d.pa = c.bm + 4;
  d.pb = c.bn + 4;
  const int64_t tiles = d.ring * c.bk * (d.pa + d.pb);
  const int64_t partial = (c.ks > 1 || c.cl > 1) ? int64_t{c.ks} * c.bm * c.bn : 0;
  d.smem_floats = std::max(tiles, partial);
  return d;
}

/// Shared-memory wavefronts of one warp's vector read of `per_thread` floats when `distinct`
/// threads of the warp read different addresses.
double wavefronts(int64_t distinct, int per_thread) {
  return std::max(1.0, static_cast<double>(distinct * per_thread * 4) / 128.0);
}

/// Rough cycle estimate of one configuration on `dev`.
double estimate(const SmallMatmulConfig& c, int64_t batch, int64_t m, int64_t n, int64_t k,
                const DeviceInfo& dev) {
  const double sms = dev.sm_count;
  const Derived d = derive(c, m, n, k);
  const int64_t blocks = batch * d.tiles_m * d.tiles_n * c.cl;
  const int rx = c.bn / c.tn;
  const double warps = c.threads() / 32.0;
  const double ksteps = static_cast<double>(d.kb) / c.ks;
  const int64_t rows_in_warp = ceil_div(32, rx);
  const double lds = wavefronts(std::min<int64_t>(rows_in_warp, c.bm / c.tm), c.tm) +
                     wavefronts(std::min<int64_t>(rx, 32), c.tn);
  const double per_k = std::max(c.tm * c.tn / 4.0, lds) + 0.15 * c.tm * c.tn;
  const double block = warps * ksteps * per_k;
  // Co-resident blocks per SM are limited by threads and shared memory (1 KiB of it reserved
  // per block; the largest block allocation stands for the SM's usable total).
  const double by_threads = std::floor(static_cast<double>(dev.threads_per_sm) / c.threads());
  const double by_smem = std::floor(static_cast<double>(dev.smem_per_block) / (d.smem_floats * 4 + 1024));
  const double resident = std::max(1.0, std::min({by_threads, by_smem, 32.0}));
  const double per_sm = std::ceil(blocks / sms);
  const double waves = std::ceil(per_sm / resident);
  const double traffic = per_sm * (c.bm + c.bn) * d.kb * 4.0 / 48.0;  // L2 → SM bytes per cycle
  double t = 1200 + waves * 400 + std::max(per_sm * block, traffic) + d.stages * 60;
  if (c.cl > 1) t += 700;
  if (c.ks > 1 || c.cl > 1) t += 150 + static_cast<double>(c.bm) * c.bn * c.ks / c.threads() * 8;
  return t;
}

bool valid(const SmallMatmulConfig& c) {
  if (c.bm % c.tm || c.bn % c.tn) return false;
  if (c.bk % (8 * c.ks)) return false;
  if (c.cl < 1 || c.cl > 8) return false;
  const int t = c.threads();
  return t >= 32 && t <= 1024 && t % 32 == 0;
}

}  // namespace

SmallMatmulConfig small_matmul_config(int64_t batch, int64_t m, int64_t n, int64_t k, const DeviceInfo& dev) {
  struct Tile {
    int bm, bn, tm, tn;
  };
  static const Tile kTiles[] = {
      {64, 64, 4, 4}, {32, 64, 2, 4}, {64, 32, 4, 2},  {32, 32, 2, 2}, {32, 32, 4, 4}, {16, 64, 1, 4},
      {16, 64, 2, 4}, {64, 16, 4, 1}, {16, 32, 2, 2},  {8, 64, 1, 4},  {8, 64, 1, 2},  {8, 32, 1, 2},
      {16, 16, 1, 1}, {8, 16, 1, 1},  {128, 64, 4, 4},  // no 4×8: 2× the accumulators, half the warps
  };
  SmallMatmulConfig best;
  double best_t = 1e300;
  for (const Tile& tl : kTiles)
    for (int bk : {16, 32, 64})
      for (int ks : {1, 2, 4})
        for (int cl : {1, 2, 4, 8}) {
          if (cl > 1 && dev.sm_major < 9) continue;
          SmallMatmulConfig c{tl.bm, tl.bn, bk, tl.tm, tl.tn, ks, cl};
          if (!valid(c)) continue;
          if (c.threads() < 128 || c.threads() > 512) continue;  // fewer warps: latency-bound
          if (bk > 16 && round_up(k, 8) <= 16) continue;         // a stage mostly of zeros
          if (bk > 32 && ceil_div(k, cl) < 256) continue;
          if (cl > 1 && ceil_div(k, cl) < 64) continue;
          if (cl > 1 && bk > 32) continue;  // split K: shallower stages, more of them a rank
          // Tiles far larger than the output only add padding.
          if (tl.bm > 8 && tl.bm / 2 >= m) continue;
          if (tl.bn > 16 && tl.bn / 2 >= n) continue;
          const Derived d = derive(c, m, n, k);
          if (d.smem_floats * 4 > std::min<int64_t>(200 * 1024, dev.smem_per_block)) continue;
          const double t = estimate(c, batch, m, n, k, dev);
          if (t < best_t * 0.98) {
            best_t = t;
            best = c;
          }
        }
  return best;
}

Launch small_matmul_kernel(const std::string& name, int64_t batch, int64_t m, int64_t n, int64_t k,
                           const MatOperand& a, const MatOperand& b, bool /*tf32*/, int64_t out_row_stride,
                           const DeviceInfo& dev) {
  return small_matmul_kernel_with(small_matmul_config(batch, m, n, k, dev), name, batch, m, n, k, a, b,
                                  out_row_stride);
}

Launch small_matmul_kernel_with(const SmallMatmulConfig& c, const std::string& name, int64_t batch, int64_t m,
                                int64_t n, int64_t k, const MatOperand& a, const MatOperand& b,
                                int64_t out_row_stride) {
  if (!valid(c)) throw Error("[cuda] small_matmul: invalid tiling");
  if (batch < 1 || m < 1 || n < 1 || k < 1) throw Error("[cuda] small_matmul: empty product");
  const Derived d = derive(c, m, n, k);
  const int64_t ors = out_row_stride > 0 ? out_row_stride : n;
  const int rx = c.bn / c.tn, ry = c.bm / c.tm, tg = rx * ry, threads = c.threads();
  // Load order: along whichever axis has unit stride (k-fast in runs of 8 floats = one sector,
  // which also spreads the transposing shared-memory stores over all banks).
  const bool a_kfast = a.col_stride == 1 && !(a.row_stride == 1 && m > 1);
  const bool b_kfast = b.row_stride == 1 && !(b.col_stride == 1 && n > 1);
  const bool reduce = c.ks > 1 || c.cl > 1;
  const int64_t la = ceil_div(int64_t{c.bm} * c.bk, threads), lb = ceil_div(int64_t{c.bn} * c.bk, threads);

  std::ostringstream s;
  s << "// small matmul [" << batch << ", " << m << ", " << k << "] x [" << k << ", " << n << "], tile "
    << c.bm << "x" << c.bn << "x" << c.bk << ", micro " << c.tm << "x" << c.tn << ", ks " << c.ks
    << ", cluster " << c.cl << "\n";
  s << "#define M " << ll(m) << "\n#define N " << ll(n) << "\n#define K " << ll(k) << "\n";
  s << "#define A_RS " << ll(a.row_stride) << "\n#define A_CS " << ll(a.col_stride) << "\n#define A_BS "
    << ll(a.batch_stride) << "\n";
  s << "#define B_RS " << ll(b.row_stride) << "\n#define B_CS " << ll(b.col_stride) << "\n#define B_BS "
    << ll(b.batch_stride) << "\n";
  s << "#define O_RS " << ll(ors) << "\n#define O_BS " << ll(m * ors) << "\n";
  s << "#define BM " << c.bm << "\n#define BN " << c.bn << "\n#define BK " << c.bk << "\n#define TM " << c.tm
    << "\n#define TN " << c.tn << "\n#define KS " << c.ks << "\n#define CL " << c.cl << "\n#define RX " << rx
    << "\n#define TG " << tg << "\n#define NT " << threads << "\n#define PA " << d.pa << "\n#define PB "
    << d.pb << "\n#define KB " << ll(d.kb) << "\n#define STAGES " << d.stages << "\n#define RING " << d.ring
    << "\n#define LA " << la << "\n#define LB " << lb << "\n#define KSL " << c.bk / c.ks << "\n";
  s << "#define A_KFAST " << (a_kfast ? 1 : 0) << "\n#define B_KFAST " << (b_kfast ? 1 : 0) << "\n";
  s << kernel_source("small_matmul.cuh", "helpers");
  if (c.cl > 1) s << kernel_source("small_matmul.cuh", "cluster");
  s << "extern \"C\" __global__ void ";
  if (c.cl > 1) s << "__cluster_dims__(1, 1, " << c.cl << ") ";
  s << "__launch_bounds__(" << threads << ") " << name
    << "(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out) {\n";
  s << kernel_source("small_matmul.cuh", "body");
  if (!reduce) {
    s << kernel_source("small_matmul.cuh", "store");
  } else {
    s << R"(  cp_wait<0>();
  __syncthreads();  // the tiles are dead: the partial tiles take their place
  float* const P = smem;  // [KS][BM][BN]
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) P[(g * BM + ty * TM + i) * BN + tx * TN + j] = acc[i][j];
)";
    if (c.cl > 1)
      s << R"(  cluster_sync();
  const unsigned me = cluster_rank();
  unsigned base[CL];
#pragma unroll
  for (int q = 0; q < CL; ++q) base[q] = map_rank(P, q);
)";
    else
      s << "  __syncthreads();\n  const unsigned me = 0;\n";
    s << R"(  float* const ob = out + (long long)bat * O_BS;
  for (int e = me * NT + tid; e < BM * BN; e += CL * NT) {
    float v = 0.f;
)";
    if (c.cl > 1)
      s << R"(#pragma unroll
    for (int q = 0; q < CL; ++q)
#pragma unroll
      for (int h = 0; h < KS; ++h) v += ld_cluster(base[q] + 4u * (unsigned)(h * BM * BN + e));
)";
    else
      s << R"(#pragma unroll
    for (int h = 0; h < KS; ++h) v += P[h * BM * BN + e];
)";
    s << R"(    const long long r = m0 + e / BN, col = n0 + e % BN;
    if (r < M && col < N) ob[r * O_RS + col] = v;
  }
)";
    if (c.cl > 1) s << "  cluster_sync();  // no block leaves while others read its shared memory\n";
    s << "}\n";
  }

  Launch l;
  l.name = name;
  l.source = s.str();
  l.grid[0] = static_cast<unsigned>(d.tiles_n);
  l.grid[1] = static_cast<unsigned>(d.tiles_m);
  l.grid[2] = static_cast<unsigned>(batch * c.cl);
  l.block[0] = static_cast<unsigned>(threads);
  l.shared_bytes = static_cast<unsigned>(d.smem_floats * 4);
  return l;
}

bool small_matmul_preferred(int64_t batch, int64_t m, int64_t n, int64_t k) {
  // Inside CUDA graphs the kernel beats cuBLASLt fp32 while cuBLASLt's fixed overhead is most
  // of a product's time: up to a few tens of MFLOP with K ≤ 512. Larger products are bound by
  // the FMA peak, where cuBLASLt's kernels are better, and so are long-K weight gradients,
  // where the cluster split-K falls behind (tests/backend/cuda_small_matmul_test.cc compares).
  const double flops = 2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
                       static_cast<double>(k);
  return flops <= 48e6 && k <= 512;
}

}  // namespace tg::backend::cuda
