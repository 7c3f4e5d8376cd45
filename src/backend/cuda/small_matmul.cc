// Small f32 matrix products as one generated kernel (see small_matmul.h for the scheme).
#include "backend/cuda/small_matmul.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

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

/// Rough cycle estimate of one configuration on an H200-like part (132 SMs).
double estimate(const SmallMatmulConfig& c, int64_t batch, int64_t m, int64_t n, int64_t k) {
  constexpr double kSms = 132;
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
  // Co-resident blocks per SM are limited by threads and shared memory.
  const double by_threads = std::floor(2048.0 / c.threads());
  const double by_smem = std::floor(227.0 * 1024 / (d.smem_floats * 4 + 1024));
  const double resident = std::max(1.0, std::min({by_threads, by_smem, 32.0}));
  const double per_sm = std::ceil(blocks / kSms);
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

std::string ll(int64_t v) { return std::to_string(v) + "LL"; }

}  // namespace

SmallMatmulConfig small_matmul_config(int64_t batch, int64_t m, int64_t n, int64_t k, int sm_major) {
  struct Tile {
    int bm, bn, tm, tn;
  };
  static const Tile kTiles[] = {
      {64, 64, 4, 4}, {32, 64, 2, 4}, {64, 32, 4, 2}, {32, 32, 2, 2}, {32, 32, 4, 4}, {16, 64, 1, 4},
      {16, 64, 2, 4}, {64, 16, 4, 1}, {16, 32, 2, 2}, {8, 64, 1, 4},  {8, 64, 1, 2},  {8, 32, 1, 2},
      {16, 16, 1, 1}, {8, 16, 1, 1},  {128, 64, 4, 4},  // 4×8 micro-tiles measured 2× slower
  };
  SmallMatmulConfig best;
  double best_t = 1e300;
  for (const Tile& tl : kTiles)
    for (int bk : {16, 32, 64})
      for (int ks : {1, 2, 4})
        for (int cl : {1, 2, 4, 8}) {
          if (cl > 1 && sm_major < 9) continue;
          SmallMatmulConfig c{tl.bm, tl.bn, bk, tl.tm, tl.tn, ks, cl};
          if (!valid(c)) continue;
          if (c.threads() < 128 || c.threads() > 512) continue;  // fewer warps: latency-bound (measured)
          if (bk > 16 && round_up(k, 8) <= 16) continue;  // a stage mostly of zeros
          if (bk > 32 && ceil_div(k, cl) < 256) continue;
          if (cl > 1 && ceil_div(k, cl) < 64) continue;
          if (cl > 1 && bk > 32) continue;  // measured: 32-deep stages split better
          // Tiles far larger than the output only add padding.
          if (tl.bm > 8 && tl.bm / 2 >= m) continue;
          if (tl.bn > 16 && tl.bn / 2 >= n) continue;
          const Derived d = derive(c, m, n, k);
          if (d.smem_floats * 4 > 200 * 1024) continue;
          const double t = estimate(c, batch, m, n, k);
          if (t < best_t * 0.98) {
            best_t = t;
            best = c;
          }
        }
  return best;
}

Launch small_matmul_kernel(const std::string& name, int64_t batch, int64_t m, int64_t n, int64_t k,
                           const MatOperand& a, const MatOperand& b, bool /*tf32*/, int64_t out_row_stride,
                           int sm_major) {
  return small_matmul_kernel_with(small_matmul_config(batch, m, n, k, sm_major), name, batch, m, n, k, a, b,
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
  s << "// small matmul [" << batch << ", " << m << ", " << k << "] x [" << k << ", " << n << "], tile " << c.bm << "x"
    << c.bn << "x" << c.bk << ", micro " << c.tm << "x" << c.tn << ", ks " << c.ks << ", cluster " << c.cl << "\n";
  s << "#define M " << ll(m) << "\n#define N " << ll(n) << "\n#define K " << ll(k) << "\n";
  s << "#define A_RS " << ll(a.row_stride) << "\n#define A_CS " << ll(a.col_stride) << "\n#define A_BS "
    << ll(a.batch_stride) << "\n";
  s << "#define B_RS " << ll(b.row_stride) << "\n#define B_CS " << ll(b.col_stride) << "\n#define B_BS "
    << ll(b.batch_stride) << "\n";
  s << "#define O_RS " << ll(ors) << "\n#define O_BS " << ll(m * ors) << "\n";
  s << "#define BM " << c.bm << "\n#define BN " << c.bn << "\n#define BK " << c.bk << "\n#define TM " << c.tm
    << "\n#define TN " << c.tn << "\n#define KS " << c.ks << "\n#define CL " << c.cl << "\n#define RX " << rx
    << "\n#define TG " << tg << "\n#define NT " << threads << "\n#define PA " << d.pa << "\n#define PB " << d.pb
    << "\n#define KB " << ll(d.kb) << "\n#define STAGES " << d.stages << "\n#define RING " << d.ring
    << "\n#define LA " << la << "\n#define LB " << lb << "\n#define KSL " << c.bk / c.ks << "\n";
  s << "#define A_KFAST " << (a_kfast ? 1 : 0) << "\n#define B_KFAST " << (b_kfast ? 1 : 0) << "\n";
  s << R"(
__device__ __forceinline__ void cp4(float* dst, const float* src, bool ok) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(d), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int n> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(n) : "memory"); }

template <int L> __device__ __forceinline__ void read_vec(const float* p, float* v) {
  if constexpr (L == 8) {
    const float4 x = *reinterpret_cast<const float4*>(p), y = *reinterpret_cast<const float4*>(p + 4);
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w; v[4] = y.x; v[5] = y.y; v[6] = y.z; v[7] = y.w;
  } else if constexpr (L == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
  } else if constexpr (L == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x; v[1] = x.y;
  } else {
    v[0] = p[0];
  }
}
)";
  if (c.cl > 1)
    s << R"(
__device__ __forceinline__ unsigned cluster_rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ unsigned map_rank(const float* p, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
  return r;
}
__device__ __forceinline__ float ld_cluster(unsigned addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
)";
  s << "extern \"C\" __global__ void ";
  if (c.cl > 1) s << "__cluster_dims__(1, 1, " << c.cl << ") ";
  s << "__launch_bounds__(" << threads << ") " << name
    << "(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out) {\n";
  s << R"(  extern __shared__ __align__(16) float smem[];
  float* const As = smem;                   // [RING][BK][PA]
  float* const Bs = smem + RING * BK * PA;  // [RING][BK][PB]
  const int tid = threadIdx.x;
  const int g = tid / TG, lt = tid % TG, ty = lt / RX, tx = lt % RX;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
  const int bat = blockIdx.z / CL, rank = blockIdx.z % CL;
  const long long kbeg = (long long)rank * KB;
  const float* const ab = a + (long long)bat * A_BS;
  const float* const bb = b + (long long)bat * B_BS;

  auto issue = [&](int st) {
    const int buf = st % RING;
    const long long k0 = kbeg + (long long)st * BK;
#pragma unroll
    for (int l = 0; l < LA; ++l) {
      const int t = tid + l * NT;
      if ((BM * BK) % NT == 0 || t < BM * BK) {
#if A_KFAST
        const int kk = (t / (8 * BM)) * 8 + (t & 7), i = (t >> 3) % BM;
#else
        const int i = t % BM, kk = t / BM;
#endif
        const long long gi = m0 + i, gk = k0 + kk;
        const bool ok = gi < M && gk < K;
        cp4(As + (buf * BK + kk) * PA + i, ok ? ab + gi * A_RS + gk * A_CS : ab, ok);
      }
    }
#pragma unroll
    for (int l = 0; l < LB; ++l) {
      const int t = tid + l * NT;
      if ((BN * BK) % NT == 0 || t < BN * BK) {
#if B_KFAST
        const int kk = (t / (8 * BN)) * 8 + (t & 7), j = (t >> 3) % BN;
#else
        const int j = t % BN, kk = t / BN;
#endif
        const long long gj = n0 + j, gk = k0 + kk;
        const bool ok = gj < N && gk < K;
        cp4(Bs + (buf * BK + kk) * PB + j, ok ? bb + gk * B_RS + gj * B_CS : bb, ok);
      }
    }
  };

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

#pragma unroll
  for (int st = 0; st < RING - 1; ++st) {
    if (st < STAGES) issue(st);
    cp_commit();
  }
#pragma unroll 1
  for (int st = 0; st < STAGES; ++st) {
    cp_wait<RING - 2>();
    __syncthreads();
    if (st + RING - 1 < STAGES) issue(st + RING - 1);
    cp_commit();
    const float* const at = As + (st % RING) * BK * PA + ty * TM;
    const float* const bt = Bs + (st % RING) * BK * PB + tx * TN;
#pragma unroll
    for (int q = 0; q < KSL; ++q) {
      const int kk = g * KSL + q;
      float av[TM], bv[TN];
      read_vec<TM>(at + kk * PA, av);
      read_vec<TN>(bt + kk * PB, bv);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
)";
  if (!reduce) {
    s << R"(  float* const ob = out + (long long)bat * O_BS;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const long long r = m0 + ty * TM + i;
    if (r < M) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const long long col = n0 + tx * TN + j;
        if (col < N) ob[r * O_RS + col] = acc[i][j];
      }
    }
  }
}
)";
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
  // Measured on an H200 inside CUDA graphs (tests/backend/cuda_small_matmul_test.cc): against
  // cuBLASLt fp32 the kernel wins up to ~40 MFLOP with K ≤ 512 (e.g. 4096×64×64 3.9 vs 6.2 µs,
  // 256×64×256 3.8 vs 6.5 µs, 4096×192×16 3.1 vs 4.5 µs) and ties at batch 512, m = 8; it loses
  // from ~134 MFLOP on (fp32 FMA peak: 134 MFLOP alone is ≥ 2 µs on 132 SMs) and on long-K
  // weight gradients (K = 4096: the cluster split-K runs at 11–15 µs against 8–9 µs).
  const double flops = 2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
                       static_cast<double>(k);
  return flops <= 48e6 && k <= 512;
}

}  // namespace tg::backend::cuda
