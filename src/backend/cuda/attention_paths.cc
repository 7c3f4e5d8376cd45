// Device code of the attention paths (see attention.cc, which generates the constants each is
// compiled with and chooses the path per node): the helpers both tiled paths share, the
// one-launch path for short sequences and the fp32 tiled path's helpers; the TF32
// tensor-core path is in attention_mma.cc. Kept apart from attention.cc to keep files small.
#include "backend/cuda/attention_paths.h"

namespace tg::backend::cuda::attention_paths {

/// Device helpers both tiled paths (fp32 and tf32) share; emitted after their constants, which
/// name BR, BC, DP, RS and NT for the path's own tiles.
const char* const kCommon = R"(
#define NEG_INF (-__int_as_float(0x7f800000))
#define POS_INF (__int_as_float(0x7f800000))

// Reductions over LANES adjacent lanes (a power of two ≤ 32): 8 for a row group of the fp32
// path, 4 for a quad of the mma fragments.
template <int LANES>
__device__ __forceinline__ float lanes_max(float x) {
#pragma unroll
  for (int o = 1; o < LANES; o <<= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
template <int LANES>
__device__ __forceinline__ float lanes_sum(float x) {
#pragma unroll
  for (int o = 1; o < LANES; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <int M, int N>
__device__ __forceinline__ void zero(float (&c)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) c[i][j] = 0.f;
}

// Whether key c is visible to query r.
__device__ __forceinline__ bool visible(int r, int c) { return c < S && (!CAUSAL || c <= r + SHIFT); }

// Keys [0, key_end(q0)) are visible to some query of the row tile starting at q0.
__device__ __forceinline__ int key_end(int q0) {
  const int last = min(T, q0 + BR) - 1;
  return CAUSAL ? min(S, last + SHIFT + 1) : S;
}

// Block → query tile q0 of (b, h) (bh = b·HQ + h) for kernels whose rows are queries, with the
// keys and values of its kv head; the tiles with the most keys (the last ones when causal) are
// handed out first.
struct QueryBlock {
  int q0, bh, b, h;
  const float* kh;
  const float* vh;
};
__device__ __forceinline__ QueryBlock query_block(const float* k, const float* v) {
  constexpr int NTILES = (T + BR - 1) / BR;
  QueryBlock qb;
  qb.bh = (int)(blockIdx.x % (B * HQ));
  qb.q0 = (NTILES - 1 - (int)(blockIdx.x / (B * HQ))) * BR;
  qb.b = qb.bh / HQ, qb.h = qb.bh % HQ;
  const int kvh = qb.h / GRP;
  qb.kh = k + qb.b * K0 + kvh * K1;
  qb.vh = v + qb.b * V0 + kvh * V1;
  return qb;
}

// Conversion of staged values: kept (Exact) on the fp32 path, rounded to TF32 on the mma path.
struct Exact {
  __device__ __forceinline__ float operator()(float x) const { return x; }
};

// 2^x in one MUFU instruction; results below 2^-126 flush to 0 (a probability that small adds
// nothing to a row whose largest term is 1). exp2f also handles subnormal results, at a few
// more instructions per score.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A tile of ROWS rows × DP floats on its way from global to shared memory, held in registers
// in between, so that the next tile's loads are in flight while the current one is computed:
//   fetch(src, rstride, dstride, row0, limit, mul, vec) issues the loads of mul·src[(row0 + r)·
//   rstride + d·dstride] for r < ROWS, d < DP (0 where row0 + r ≥ limit or d ≥ D); put(dst)
//   stores cvt of them at dst[r·RS + d].
// Each thread moves float4 slots e = i·NT + threadIdx.x (row e / (DP/4), columns 4·(e % (DP/4))
// ..+3); `vec` (unit stride along D, D and the row stride multiples of 4, the row 16-byte
// aligned) reads them as one 16-byte load, otherwise element by element.
template <int ROWS, class Cvt = Exact>
struct Stage {
  static constexpr int SLOTS = ROWS * (DP / 4), PER = (SLOTS + NT - 1) / NT;
  float4 v[PER];
  __device__ __forceinline__ void fetch(const float* src, long long rstride, long long dstride, int row0, int limit,
                                        float mul, bool vec) {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = i * NT + threadIdx.x, r = e / (DP / 4), d = e % (DP / 4) * 4;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if ((SLOTS % NT == 0 || e < SLOTS) && row0 + r < limit) {
        const float* p = src + (long long)(row0 + r) * rstride;
        if (vec) {
          if (d < D) x = __ldg(reinterpret_cast<const float4*>(p + d));
        } else {
          if (d < D) x.x = __ldg(p + (long long)d * dstride);
          if (d + 1 < D) x.y = __ldg(p + (long long)(d + 1) * dstride);
          if (d + 2 < D) x.z = __ldg(p + (long long)(d + 2) * dstride);
          if (d + 3 < D) x.w = __ldg(p + (long long)(d + 3) * dstride);
        }
      }
      v[i] = make_float4(x.x * mul, x.y * mul, x.z * mul, x.w * mul);
    }
  }
  __device__ __forceinline__ void put(float* dst) const {
    const Cvt cvt;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = i * NT + threadIdx.x, r = e / (DP / 4), d = e % (DP / 4) * 4;
      if (SLOTS % NT == 0 || e < SLOTS)
        *reinterpret_cast<float4*>(dst + r * RS + d) = make_float4(cvt(v[i].x), cvt(v[i].y), cvt(v[i].z), cvt(v[i].w));
    }
  }
};
// Whether a loop holds the next tile of ROWS rows in registers while computing the current one:
// when that takes at most 16 registers per operand (char and GPT-2 heads, D = 64); larger heads
// load each tile just before storing it, as the registers would otherwise spill.
template <int ROWS>
constexpr bool PREFETCH = Stage<ROWS>::PER <= 4;
// The key-tile loop of the forward kernels and of the TF32 dq kernel: K and V tiles of BC rows
// staged into Ks and Vs through kt and vt, with PREFETCH<BC> the next tile fetched while this
// one is computed (names as in those kernels: kh, vh, K2, K3, V2, V3, vk, vv, S, k0, kend).
// Macros, not a device function: these kernels are codegen-sensitive (a helper function moved
// address arithmetic in 34 of 72 kernels' PTX), and a macro expands to the very tokens each
// kernel had written out.
#define TG_FIRST_KEY_TILE()              \
  if (PREFETCH<BC>) {                    \
    kt.fetch(kh, K2, K3, 0, S, 1.f, vk); \
    vt.fetch(vh, V2, V3, 0, S, 1.f, vv); \
  }
#define TG_STAGE_KEY_TILE()                   \
  __syncthreads();                            \
  if (!PREFETCH<BC>) {                        \
    kt.fetch(kh, K2, K3, k0, S, 1.f, vk);     \
    vt.fetch(vh, V2, V3, k0, S, 1.f, vv);     \
  }                                           \
  kt.put(Ks);                                 \
  vt.put(Vs);                                 \
  __syncthreads();                            \
  if (PREFETCH<BC> && k0 + BC < kend) {       \
    kt.fetch(kh, K2, K3, k0 + BC, S, 1.f, vk); \
    vt.fetch(vh, V2, V3, k0 + BC, S, 1.f, vv); \
  }
// Whether an operand's rows can be read as float4 (see Stage): strides are compile-time
// constants, the base pointer is checked at run time (one uniform branch).
__device__ __forceinline__ bool rows_vec(const float* base, long long rstride, long long dstride) {
  return D % 4 == 0 && dstride == 1 && rstride % 4 == 0 && (reinterpret_cast<unsigned long long>(base) & 15) == 0;
}

// What a forward kernel stores (forward_rows / mma_forward<MODE>): the output; lse and delta
// (the backward's stats launch); the output and lse (a forward that keeps its statistics).
constexpr int OUT = 0, STATS = 1, OUT_LSE = 2;

// The stats pass's results (scratch [2, NROWS]: lse, then delta) for query r of bh.
__device__ __forceinline__ void store_stats(float* scratch, long long bh, int r, float lse, float delta) {
  scratch[bh * T + r] = lse;
  scratch[NROWS + bh * T + r] = delta;
}
__device__ __forceinline__ void load_stats(const float* scratch, long long bh, int r, float& lse, float& delta) {
  const bool in = r < T;
  lse = in ? scratch[bh * T + r] : POS_INF;  // no probability for missing queries
  delta = in ? scratch[NROWS + bh * T + r] : 0.f;
}
// lse and delta of the BC queries from q0 into shared memory.
__device__ __forceinline__ void stage_stats(float* Ls, float* Ds, const float* scratch, long long bh, int q0) {
  for (int e = threadIdx.x; e < BC; e += NT) load_stats(scratch, bh, q0 + e, Ls[e], Ds[e]);
}

// Where dq's row r of bh = b·HQ + h starts in grads: dense [B, HQ, T, D], or with GRADS_BTHD
// [B, T, HQ, D] (and dk, dv [B, S, HKV, D]), the layout the qkv projection's gradient wants,
// or with GRADS_PACKED (T = S) [B, T, GRS]: each token's [dq | dk | dv] side by side, the
// gradient of a packed qkv projection itself.
__device__ __forceinline__ long long dq_row(long long bh, int r) {
  if (GRADS_PACKED) return ((bh / HQ) * T + r) * GRS + (bh % HQ) * D;
  return GRADS_BTHD ? (((bh / HQ) * T + r) * HQ + bh % HQ) * D : (bh * T + r) * D;
}
// dK and dV of key row `key` (< S) of kv group bg = b·HKV + kv head: [B, HKV, S, D] each, or
// [B, S, HKV, D] with GRADS_BTHD, or inside the packed rows.
__device__ __forceinline__ void store_dkdv(float* grads, int bg, int key, int col, float dk, float dv) {
  if (GRADS_PACKED) {
    const long long at = ((long long)(bg / HKV) * S + key) * GRS + HQ * D + (bg % HKV) * D + col;
    grads[at] = dk;
    grads[at + HKV * D] = dv;
    return;
  }
  const long long at = (GRADS_BTHD ? ((long long)(bg / HKV) * S + key) * HKV + bg % HKV : (long long)bg * S + key) * D + col;
  grads[NQ + at] = dk;
  grads[NQ + NK + at] = dv;
}
)";

/// Small problems (T, S ≤ 64, D ≤ 64, backward D ≤ 32): a block handles NG whole (batch, kv head) groups with
/// their keys and values (and, backward, queries and output gradients) in shared memory, one
/// thread per query row (then, backward, per key row). Row stride DS = D + 1 (odd) keeps the
/// per-thread row reads free of bank conflicts; the other operand is a broadcast.
const char* const kSmall = R"(
#define NEG_INF (-__int_as_float(0x7f800000))
constexpr int QPG = GRP * T;       // query rows of one kv group
constexpr int NGROUPS = B * HKV;

// Stage rows [0, ROWS) of NG groups: dst[(gl·ROWS + r)·DS + d]; `addr(gid, r, d)` the source
// index. Loads go out in batches of 16 per thread (the problem is latency bound).
template <int ROWS, class F>
__device__ __forceinline__ void stage(float* __restrict__ dst, const float* __restrict__ src, F addr) {
  constexpr int TOTAL = NG * ROWS * D, U = 16;
  for (int e0 = threadIdx.x; e0 < TOTAL; e0 += U * NT) {
    float x[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int e = e0 + u * NT, gl = e / (ROWS * D), rem = e - gl * (ROWS * D), r = rem / D, d = rem - r * D;
      const int gid = blockIdx.x * NG + gl;
      x[u] = e < TOTAL && gid < NGROUPS ? src[addr(gid, r, d)] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int e = e0 + u * NT, gl = e / (ROWS * D), rem = e - gl * (ROWS * D), r = rem / D, d = rem - r * D;
      if (e < TOTAL) dst[(gl * ROWS + r) * DS + d] = x[u];
    }
  }
}
__device__ __forceinline__ long long k_addr(int gid, int j, int d) {
  return (gid / HKV) * K0 + (gid % HKV) * K1 + j * K2 + d * K3;
}
__device__ __forceinline__ long long v_addr(int gid, int j, int d) {
  return (gid / HKV) * V0 + (gid % HKV) * V1 + j * V2 + d * V3;
}
// Query row r of group gid (r = head-in-group·T + i).
__device__ __forceinline__ long long q_addr(int gid, int r, int d) {
  const int b = gid / HKV, h = (gid % HKV) * GRP + r / T;
  return b * Q0 + h * Q1 + (r % T) * Q2 + d * Q3;
}
__device__ __forceinline__ long long row_addr(int gid, int r, int d) {  // dq: dense [B, HQ, T, D], or packed rows
  const int b = gid / HKV, h = (gid % HKV) * GRP + r / T;
  if (GRADS_PACKED) return ((long long)b * T + r % T) * GRS + h * D + d;
  return ((long long)(b * HQ + h) * T + r % T) * D + d;
}
__device__ __forceinline__ long long o_addr(int gid, int r, int d) {  // out / dout, strides O0..O3
  const int b = gid / HKV, h = (gid % HKV) * GRP + r / T;
  return b * O0 + h * O1 + (r % T) * O2 + d * O3;
}
__device__ __forceinline__ float dot_row(const float (&a)[D], const float* b) {
  float x = 0.f;
#pragma unroll
  for (int d = 0; d < D; ++d) x = fmaf(a[d], b[d], x);
  return x;
}
__device__ __forceinline__ float dot_rows(const float* a, const float* b) {
  float x = 0.f;
#pragma unroll
  for (int d = 0; d < D; ++d) x = fmaf(a[d], b[d], x);
  return x;
}

__device__ __forceinline__ void small_forward(const float* __restrict__ q, const float* __restrict__ k,
                                              const float* __restrict__ v, float* __restrict__ out) {
  extern __shared__ float smem[];
  float* Ks = smem;              // [NG][S][DS]
  float* Vs = Ks + NG * S * DS;  // [NG][S][DS]
  const int r = threadIdx.x, gl = r / QPG, gid = blockIdx.x * NG + gl;
  const bool active = r < NG * QPG && gid < NGROUPS;
  const int qr = r % QPG, i = qr % T;
  float qv[D];  // loaded before the staging so that the two overlap
#pragma unroll
  for (int d = 0; d < D; ++d) qv[d] = active ? q[q_addr(gid, qr, d)] * SCALE2 : 0.f;
  stage<S>(Ks, k, k_addr);
  stage<S>(Vs, v, v_addr);
  __syncthreads();
  if (!active) return;
  const float* kg = Ks + gl * S * DS;
  const float* vg = Vs + gl * S * DS;
  const int jend = CAUSAL ? i + SHIFT + 1 : S;
  float m = NEG_INF;
  for (int j = 0; j < jend; ++j) m = fmaxf(m, dot_row(qv, kg + j * DS));
  float o[D], l = 0.f;
#pragma unroll
  for (int d = 0; d < D; ++d) o[d] = 0.f;
  for (int j = 0; j < jend; ++j) {
    const float p = exp2f(dot_row(qv, kg + j * DS) - m);
    l += p;
#pragma unroll
    for (int d = 0; d < D; ++d) o[d] = fmaf(p, vg[j * DS + d], o[d]);
  }
  const float inv = 1.f / l;
#pragma unroll
  for (int d = 0; d < D; ++d) out[o_addr(gid, qr, d)] = o[d] * inv;
}

__device__ __forceinline__ void small_backward(const float* __restrict__ q, const float* __restrict__ k,
                                               const float* __restrict__ v, const float* __restrict__ dout,
                                               float* __restrict__ grads) {
  extern __shared__ float smem[];
  float* Qs = smem;                // [NG][QPG][DS] queries
  float* Os = Qs + NG * QPG * DS;  // [NG][QPG][DS] output gradients
  float* Ks = Os + NG * QPG * DS;  // [NG][S][DS]
  float* Vs = Ks + NG * S * DS;    // [NG][S][DS]
  float* Ls = Vs + NG * S * DS;    // [NG][QPG] lse (base 2)
  float* Dl = Ls + NG * QPG;       // [NG][QPG] delta = Σ_j p·dp = dO·O
  stage<QPG>(Qs, q, q_addr);
  stage<QPG>(Os, dout, o_addr);
  stage<S>(Ks, k, k_addr);
  stage<S>(Vs, v, v_addr);
  __syncthreads();
  {  // one thread per query row: lse, delta, dq
    const int r = threadIdx.x, gl = r / QPG, gid = blockIdx.x * NG + gl;
    if (r < NG * QPG && gid < NGROUPS) {
      const int qr = r % QPG, i = qr % T;
      const float* qrow = Qs + (gl * QPG + qr) * DS;
      const float* orow = Os + (gl * QPG + qr) * DS;
      const float* kg = Ks + gl * S * DS;
      const float* vg = Vs + gl * S * DS;
      // Scores as the key pass computes them (q·k, then scaled), so that p matches there.
      const int jend = CAUSAL ? i + SHIFT + 1 : S;
      float m = NEG_INF, l = 0.f;
#pragma unroll 1
      for (int j = 0; j < jend; ++j) {
        const float s = dot_rows(qrow, kg + j * DS) * SCALE2, mnew = fmaxf(m, s);
        l = l * exp2f(m - mnew) + exp2f(s - mnew);
        m = mnew;
      }
      const float lse = m + log2f(l);
      float delta = 0.f;
#pragma unroll 1
      for (int j = 0; j < jend; ++j)
        delta = fmaf(exp2f(dot_rows(qrow, kg + j * DS) * SCALE2 - lse), dot_rows(orow, vg + j * DS), delta);
      float dq[D];
#pragma unroll
      for (int d = 0; d < D; ++d) dq[d] = 0.f;
#pragma unroll 1
      for (int j = 0; j < jend; ++j) {
        const float p = exp2f(dot_rows(qrow, kg + j * DS) * SCALE2 - lse);
        const float ds = p * (dot_rows(orow, vg + j * DS) - delta);
#pragma unroll
        for (int d = 0; d < D; ++d) dq[d] = fmaf(ds, kg[j * DS + d], dq[d]);
      }
#pragma unroll
      for (int d = 0; d < D; ++d) grads[row_addr(gid, qr, d)] = dq[d] * SCALE;
      Ls[gl * QPG + qr] = lse;
      Dl[gl * QPG + qr] = delta;
    }
  }
  __syncthreads();
  {  // one thread per key row: dk, dv over the group's queries
    const int r = threadIdx.x, gl = r / S, gid = blockIdx.x * NG + gl;
    if (r < NG * S && gid < NGROUPS) {
      const int j = r % S;
      const float* krow = Ks + (gl * S + j) * DS;
      const float* vrow = Vs + (gl * S + j) * DS;
      float dk[D], dv[D];
#pragma unroll
      for (int d = 0; d < D; ++d) dk[d] = dv[d] = 0.f;
#pragma unroll 1
      for (int hl = 0; hl < GRP; ++hl)
#pragma unroll 1
        for (int i = CAUSAL ? max(0, j - SHIFT) : 0; i < T; ++i) {
          const int qr = hl * T + i;
          const float* qrow = Qs + (gl * QPG + qr) * DS;
          const float* orow = Os + (gl * QPG + qr) * DS;
          const float p = exp2f(dot_rows(qrow, krow) * SCALE2 - Ls[gl * QPG + qr]);
          const float ds = p * (dot_rows(orow, vrow) - Dl[gl * QPG + qr]);
#pragma unroll
          for (int d = 0; d < D; ++d) {
            dv[d] = fmaf(p, orow[d], dv[d]);
            dk[d] = fmaf(ds, qrow[d], dk[d]);
          }
        }
      float* dkr = GRADS_PACKED ? grads + ((long long)(gid / HKV) * S + j) * GRS + HQ * D + (gid % HKV) * D
                                : grads + NQ + ((long long)gid * S + j) * D;
      float* dvr = GRADS_PACKED ? dkr + HKV * D : grads + NQ + NK + ((long long)gid * S + j) * D;
#pragma unroll
      for (int d = 0; d < D; ++d) dkr[d] = dk[d] * SCALE, dvr[d] = dv[d];
    }
  }
}
)";

/// Device helpers of the fp32 tiled kernels (see attention.cc's file comment for the tile layouts).
const char* const kFp32Helpers = R"(
template <int N> __device__ __forceinline__ void ldv(float* r, const float* p);
template <> __device__ __forceinline__ void ldv<1>(float* r, const float* p) { r[0] = p[0]; }
template <> __device__ __forceinline__ void ldv<2>(float* r, const float* p) {
  const float2 t = *reinterpret_cast<const float2*>(p);
  r[0] = t.x; r[1] = t.y;
}
template <> __device__ __forceinline__ void ldv<4>(float* r, const float* p) {
  const float4 t = *reinterpret_cast<const float4*>(p);
  r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
}
template <> __device__ __forceinline__ void ldv<8>(float* r, const float* p) {
  ldv<4>(r, p);
  ldv<4>(r + 4, p + 4);
}
template <int N> __device__ __forceinline__ void stv(float* p, const float* r);
template <> __device__ __forceinline__ void stv<1>(float* p, const float* r) { p[0] = r[0]; }
template <> __device__ __forceinline__ void stv<2>(float* p, const float* r) {
  *reinterpret_cast<float2*>(p) = make_float2(r[0], r[1]);
}
template <> __device__ __forceinline__ void stv<4>(float* p, const float* r) {
  *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
}
template <> __device__ __forceinline__ void stv<8>(float* p, const float* r) {
  stv<4>(p, r);
  stv<4>(p + 4, r + 4);
}

// Thread coordinates: tx = column lane (0..7), lg = row group in the warp (0..3), ty = row group in the block.
struct Lane {
  int warp, tx, lg, ty;
};
__device__ __forceinline__ Lane lane_coords() {
  Lane l;
  l.warp = threadIdx.x >> 5;
  l.tx = threadIdx.x & 7;
  l.lg = (threadIdx.x >> 3) & 3;
  l.ty = l.warp * 4 + l.lg;
  return l;
}

// Output column o of a thread (o < OC): VW-wide vectors, 8 lanes side by side.
__device__ __forceinline__ int out_col(int o, int tx) { return (o / VW) * (8 * VW) + tx * VW + o % VW; }

// Transposed tile: dst[d·TS + r] (d < DW, r < ROWS), same source and zeros as Stage. A warp
// step covers 8 d × 4 rows: 32-byte runs of global memory, conflict-free shared stores (TS ≡ 4 mod 8).
template <int ROWS>
__device__ __forceinline__ void load_cols(float* dst, const float* src, long long rstride, long long dstride, int row0,
                                          int limit, float mul) {
  constexpr int DG = (DW + 7) / 8, TASKS = (ROWS / 4) * DG;
  for (int e = threadIdx.x; e < TASKS * 32; e += NT) {
    const int lane = e & 31, task = e >> 5;
    const int d = (task % DG) * 8 + (lane & 7), r = (task / DG) * 4 + (lane >> 3);
    if (d >= DW) continue;
    float x = 0.f;
    if (d < D && row0 + r < limit) x = mul * src[(long long)(row0 + r) * rstride + (long long)d * dstride];
    dst[d * TS + r] = x;
  }
}

// s[i][j] = Σ_d At[d][ty·RPT + i] · Bs[tx + 8j][d].
__device__ __forceinline__ void score_tile(float (&s)[RPT][CPT], const float* At, const float* Bs, const Lane& L) {
#pragma unroll
  for (int i = 0; i < RPT; ++i)
#pragma unroll
    for (int j = 0; j < CPT; ++j) s[i][j] = 0.f;
#pragma unroll 2
  for (int d = 0; d < DW; d += 4) {
    float a[4][RPT];
#pragma unroll
    for (int u = 0; u < 4; ++u) ldv<RPT>(a[u], At + (d + u) * TS + L.ty * RPT);
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      float b[4];
      ldv<4>(b, Bs + (L.tx + 8 * j) * RS + d);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int i = 0; i < RPT; ++i) s[i][j] = fmaf(a[u][i], b[u], s[i][j]);
    }
  }
}

// The thread's scores into its warp's buffer: Pw[col][lg·RPT + i].
__device__ __forceinline__ void store_tile(float* Pw, const float (&s)[RPT][CPT], const Lane& L) {
#pragma unroll
  for (int j = 0; j < CPT; ++j) {
    float t[RPT];
#pragma unroll
    for (int i = 0; i < RPT; ++i) t[i] = s[i][j];
    stv<RPT>(Pw + (L.tx + 8 * j) * PS + L.lg * RPT, t);
  }
}

// acc[i][o] += Σ_c Pw[c][lg·RPT + i] · Xs[c][out_col(o)] over the BC columns of the tile.
__device__ __forceinline__ void accumulate(float (&acc)[RPT][OC], const float* Pw, const float* Xs, const Lane& L) {
#pragma unroll 4
  for (int c = 0; c < BC; ++c) {
    float p[RPT];
    ldv<RPT>(p, Pw + c * PS + L.lg * RPT);
#pragma unroll
    for (int g = 0; g < OC / VW; ++g) {
      float x[VW];
      ldv<VW>(x, Xs + c * RS + g * (8 * VW) + L.tx * VW);
#pragma unroll
      for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int w = 0; w < VW; ++w) acc[i][g * VW + w] = fmaf(p[i], x[w], acc[i][g * VW + w]);
    }
  }
}
)";

}  // namespace tg::backend::cuda::attention_paths
