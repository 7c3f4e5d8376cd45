// CUDA kernels of fused scaled dot-product attention (ops.def Attention / AttentionGrad), in
// the FlashAttention-2 spirit: the T×S score matrix never reaches global memory. Every kernel
// is generated per node with the shapes, the operands' strides, the scale and the causal flag
// baked in as constants (see kernels.h), and computes in fp32 on the CUDA cores.
//
// Parallel scheme, shared by the four kernels. A block is W warps and owns a tile of
// BR = 4·W·RPT "rows" of one (batch, head); it loops over tiles of BC = 8·CPT "columns" staged
// in shared memory. The score tile [BR × BC] is spread over the threads as a register tile of
// RPT rows × CPT columns each: a warp holds 4 row groups (lane / 8) × 8 column lanes
// (lane % 8), thread (ty = 4·warp + lane/8, tx = lane % 8) owns rows ty·RPT + i and columns
// tx + 8·j. Row reductions (softmax max / sum) are 8-lane shuffles. Head dim D ≤ 64: RPT = 4,
// CPT = 4, W = 4 (64 × 32 tiles) forward, W = 8 (128 × 32) for dkdv and dq; see geometry().
//   - A score tile is Σ_d A[row][d]·B[col][d]: the row operand is staged transposed, At[d][row]
//     (a thread reads its RPT rows as one vector per d), the column operand row-major,
//     Bs[col][d] (a thread reads 4 d of a column as one float4). Row strides are padded
//     (≡ 4 mod 8 floats) so that both reads and the staging writes are free of bank conflicts.
//   - A product P·X (P the probabilities or dS, X a row-major [BC, D] tile) goes through a
//     per-warp buffer Pw[col][row] in shared memory: the 8 lanes of a row group exchange
//     their P entries there, then each thread accumulates RPT rows × D/8 output columns
//     (columns (o / VW)·8·VW + tx·VW + o % VW, read as VW-wide vectors).
//
// Kernels:
//   forward  rows = queries, columns = keys of the kv head (GQA: q head h reads h / (Hq/Hkv)).
//            Online softmax in base 2 (q is pre-scaled by scale·log2 e): running max and sum
//            per row, the output accumulated in registers, rescaled when the max grows.
//   backward (deterministic, no atomics), three launches in order:
//     stats  the forward again, storing per query row lse = m + log2 l (base-2 units) and
//            delta = Σ_d dO·O in scratch [2, B·Hq·T].
//     dkdv   rows = keys of one (b, kv head), columns = queries of every q head of its group:
//            Pᵀ = exp2(K Qᵀ·scale·log2 e − lse), dV += Pᵀ dO, dPᵀ = V dOᵀ,
//            dSᵀ = Pᵀ ∘ (dPᵀ − delta), dK += dSᵀ Q (times scale at the end).
//     dq     rows = queries, columns = keys: P, dP = dO Vᵀ, dS as above, dQ += dS K · scale.
// Causal masking (key j hidden from query i when j > i + S − T) skips the tiles that are
// fully hidden and masks the rest element-wise; the blocks with the most tiles are numbered
// first. Global memory is read element by element into shared memory (coalesced along D), so
// operands need no alignment. TG_CUDA_ATTENTION_TILES overrides the tile geometry (tuning).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

constexpr int64_t kMaxSharedBytes = 227 * 1024;  // per block on sm_80/sm_90
constexpr int64_t kMaxHeadDim = 512;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// Tile geometry for a head dim: every quantity the device code names, in floats.
struct Geometry {
  int64_t warps;     // per block
  int64_t rpt, cpt;  // score rows / columns per thread
  int64_t br, bc;    // rows per block (4·warps·rpt), columns per staged tile (8·cpt)
  int64_t dw;        // D rounded up to 4: the d extent of score dot products (float4 steps)
  int64_t vw;        // vector width of output-column reads (4, 2 or 1)
  int64_t dp;        // D rounded up to 8·vw: the extent of row-major tiles and output columns
  int64_t rs;        // row stride of row-major tiles (dp + 4 ≡ 4 mod 8)
  int64_t ts;        // row stride of transposed tiles (br + 4 ≡ 4 mod 8)
  int64_t ps;        // row stride of the per-warp P buffer (4 row groups of rpt, + a pad)
  int64_t oc;        // output columns per thread (dp / 8)
};

enum class Kind { kForward, kDkDv, kDq };

Geometry geometry(int64_t d, Kind kind) {
  Geometry g{};
  // Blocks of 4 warps with 4×4 scores per thread (64 rows × 32 columns per tile); the
  // backward's two heavy kernels use 8 warps (128 rows) for small heads. Larger heads take
  // fewer rows per thread so that the accumulators (rpt × D/8 floats, two of them in dkdv)
  // stay in registers and the tiles in shared memory. Measured on an H200 at D = 64 (see the
  // test): this beat 64×64 tiles with 4×8 scores per thread by about 20% overall.
  g.warps = 4, g.cpt = 4;
  if (d <= 128) g.rpt = 4;
  else if (d <= 256) g.rpt = 2;
  else g.rpt = 1;
  if (d <= 64 && kind != Kind::kForward) g.warps = 8;
  // Tuning override: TG_CUDA_ATTENTION_TILES="<kind>:<warps>,<rpt>,<cpt>;..." with kind f, k or q.
  if (const char* env = std::getenv("TG_CUDA_ATTENTION_TILES")) {
    const char want = kind == Kind::kForward ? 'f' : kind == Kind::kDkDv ? 'k' : 'q';
    for (const char* p = env; *p; ++p) {
      int w = 0, r = 0, c = 0;
      if (p[0] != want || p[1] != ':' || std::sscanf(p + 2, "%d,%d,%d", &w, &r, &c) != 3) continue;
      if (w < 1 || w > 16 || (r != 1 && r != 2 && r != 4 && r != 8) || c < 1 || c > 16)
        throw Error(std::string("[cuda] TG_CUDA_ATTENTION_TILES: bad entry ") + p);
      g.warps = w, g.rpt = r, g.cpt = c;
    }
  }
  g.br = 4 * g.warps * g.rpt;
  g.bc = 8 * g.cpt;
  g.dw = round_up(d, 4);
  g.vw = d % 32 == 0 ? 4 : d % 16 == 0 ? 2 : 1;
  g.dp = round_up(d, 8 * g.vw);
  g.rs = g.dp + 4;
  g.ts = g.br + 4;
  g.ps = 4 * g.rpt + std::min<int64_t>(g.rpt, 4);
  g.oc = g.dp / 8;
  return g;
}

std::string float_literal(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.12e", x);
  return std::string("((float)") + buf + ")";
}

std::string ll(int64_t x) { return std::to_string(x) + "LL"; }

void check_operand(const Operand& op, const Shape& want, const char* what) {
  if (op.dtype != DType::kF32 || op.shape != want || op.strides.size() != 4)
    throw Error(std::string("[cuda] attention: operand ") + what + " is " + shape_str(op.shape) + ", expected f32 " +
                shape_str(want) + " with 4 strides");
}

void check_shape(const AttentionShape& s, const Operand& q, const Operand& k, const Operand& v) {
  if (s.batch < 1 || s.q_heads < 1 || s.kv_heads < 1 || s.t < 1 || s.s < 1 || s.d < 1)
    throw Error("[cuda] attention: every extent must be at least 1");
  if (s.q_heads % s.kv_heads != 0) throw Error("[cuda] attention: q heads must be a multiple of kv heads");
  if (s.d > kMaxHeadDim) throw Error("[cuda] attention: head dim " + std::to_string(s.d) + " above " + std::to_string(kMaxHeadDim));
  if (s.causal && s.t > s.s) throw Error("[cuda] attention: a causal mask needs at least as many keys as queries");
  if (!std::isfinite(s.scale)) throw Error("[cuda] attention: the scale must be finite");
  if (s.t > (int64_t{1} << 30) || s.s > (int64_t{1} << 30)) throw Error("[cuda] attention: sequence too long");
  check_operand(q, {s.batch, s.q_heads, s.t, s.d}, "q");
  check_operand(k, {s.batch, s.kv_heads, s.s, s.d}, "k");
  check_operand(v, {s.batch, s.kv_heads, s.s, s.d}, "v");
}

/// The constants every kernel of one node is specialised to.
std::string constants(const AttentionShape& s, const Geometry& g, const Operand& q, const Operand& k, const Operand& v) {
  std::string c = "#define NT " + std::to_string(32 * g.warps) + "\n";
  auto i = [&](const char* n, int64_t x) { c += std::string("constexpr int ") + n + " = " + std::to_string(x) + ";\n"; };
  auto l = [&](const char* n, int64_t x) { c += std::string("constexpr long long ") + n + " = " + ll(x) + ";\n"; };
  i("B", s.batch), i("HQ", s.q_heads), i("HKV", s.kv_heads), i("GRP", s.q_heads / s.kv_heads);
  i("T", s.t), i("S", s.s), i("D", s.d), i("SHIFT", s.s - s.t);
  i("RPT", g.rpt), i("CPT", g.cpt), i("BR", g.br), i("BC", g.bc), i("DW", g.dw), i("VW", g.vw), i("DP", g.dp);
  i("RS", g.rs), i("TS", g.ts), i("PS", g.ps), i("OC", g.oc);
  const char* qn[] = {"Q0", "Q1", "Q2", "Q3"};
  const char* kn[] = {"K0", "K1", "K2", "K3"};
  const char* vn[] = {"V0", "V1", "V2", "V3"};
  for (int a = 0; a < 4; ++a) l(qn[a], q.strides[a]), l(kn[a], k.strides[a]), l(vn[a], v.strides[a]);
  l("NQ", s.batch * s.q_heads * s.t * s.d);   // elements of dq (and of out, dout)
  l("NK", s.batch * s.kv_heads * s.s * s.d);  // elements of dk and of dv
  l("NROWS", s.batch * s.q_heads * s.t);      // query rows: lse and delta each
  c += "constexpr float SCALE = " + float_literal(s.scale) + ";\n";
  c += "constexpr float SCALE2 = " + float_literal(s.scale * 1.4426950408889634) + ";  // scale · log2 e\n";
  c += std::string("constexpr bool CAUSAL = ") + (s.causal ? "true" : "false") + ";\n";
  return c;
}

/// Device helpers shared by the kernels (see the file comment for the tile layouts).
constexpr const char* kHelpers = R"(
#define NEG_INF (-__int_as_float(0x7f800000))
#define POS_INF (__int_as_float(0x7f800000))

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

// Reductions over the 8 column lanes of a row group.
__device__ __forceinline__ float group_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
}
__device__ __forceinline__ float group_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x + __shfl_xor_sync(0xffffffffu, x, 4);
}

// Whether key c is visible to query r.
__device__ __forceinline__ bool visible(int r, int c) { return c < S && (!CAUSAL || c <= r + SHIFT); }

// Output column o of a thread (o < OC): VW-wide vectors, 8 lanes side by side.
__device__ __forceinline__ int out_col(int o, int tx) { return (o / VW) * (8 * VW) + tx * VW + o % VW; }

// Row-major tile: dst[r·RS + d] = mul·src[(row0 + r)·rstride + d·dstride] for r < ROWS, d < DP;
// zero where row0 + r ≥ limit or d ≥ D. Consecutive threads read consecutive d.
template <int ROWS>
__device__ __forceinline__ void load_rows(float* dst, const float* src, long long rstride, long long dstride, int row0,
                                          int limit, float mul) {
  for (int e = threadIdx.x; e < ROWS * DP; e += NT) {
    const int r = e / DP, d = e - r * DP;
    float x = 0.f;
    if (d < D && row0 + r < limit) x = mul * src[(long long)(row0 + r) * rstride + (long long)d * dstride];
    dst[r * RS + d] = x;
  }
}

// Transposed tile: dst[d·TS + r] (d < DW, r < ROWS), same source and zeros as load_rows. A warp
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

template <int N>
__device__ __forceinline__ void zero(float (&acc)[RPT][N]) {
#pragma unroll
  for (int i = 0; i < RPT; ++i)
#pragma unroll
    for (int o = 0; o < N; ++o) acc[i][o] = 0.f;
}

// Keys [0, key_end(q0)) are visible to some query of the row tile starting at q0.
__device__ __forceinline__ int key_end(int q0) {
  const int last = min(T, q0 + BR) - 1;
  return CAUSAL ? min(S, last + SHIFT + 1) : S;
}

// Block → (query tile, b·HQ + h) for kernels whose rows are queries; the tiles with the most
// keys (the last ones when causal) are handed out first.
__device__ __forceinline__ void query_block(int& q0, int& bh) {
  constexpr int NTILES = (T + BR - 1) / BR;
  bh = (int)(blockIdx.x % (B * HQ));
  q0 = (NTILES - 1 - (int)(blockIdx.x / (B * HQ))) * BR;
}
)";

/// The forward pass over one query tile; with STATS (the backward's first launch) it stores
/// lse and delta instead of the output.
constexpr const char* kForward = R"(
template <bool STATS>
__device__ __forceinline__ void forward_rows(const float* __restrict__ q, const float* __restrict__ k,
                                             const float* __restrict__ v, float* __restrict__ out,
                                             const float* __restrict__ dout, float* __restrict__ scratch) {
  extern __shared__ float4 smem4[];
  float* Qt = reinterpret_cast<float*>(smem4);  // [DW][TS]  queries, transposed, pre-scaled
  float* Ks = Qt + DW * TS;                     // [BC][RS]  keys
  float* Vs = Ks + BC * RS;                     // [BC][RS]  values
  const Lane L = lane_coords();
  float* Pw = Vs + BC * RS + L.warp * (BC * PS);  // this warp's probabilities [BC][PS]
  int q0, bh;
  query_block(q0, bh);
  const int b = bh / HQ, h = bh % HQ, g = h / GRP;
  const float* kh = k + b * K0 + g * K1;
  const float* vh = v + b * V0 + g * V1;
  load_cols<BR>(Qt, q + b * Q0 + h * Q1, Q2, Q3, q0, T, SCALE2);

  float o[RPT][OC], m[RPT], l[RPT];
  zero(o);
#pragma unroll
  for (int i = 0; i < RPT; ++i) m[i] = NEG_INF, l[i] = 0.f;  // l: this lane's part of the row sum
  const int r0 = q0 + L.ty * RPT, kend = key_end(q0);
  for (int k0 = 0; k0 < kend; k0 += BC) {
    __syncthreads();  // the previous tile's readers are done
    load_rows<BC>(Ks, kh, K2, K3, k0, S, 1.f);
    load_rows<BC>(Vs, vh, V2, V3, k0, S, 1.f);
    __syncthreads();
    float s[RPT][CPT];
    score_tile(s, Qt, Ks, L);
#pragma unroll
    for (int i = 0; i < RPT; ++i) {  // online softmax, base 2
      float mx = NEG_INF;
#pragma unroll
      for (int j = 0; j < CPT; ++j) {
        if (!visible(r0 + i, k0 + L.tx + 8 * j)) s[i][j] = NEG_INF;
        mx = fmaxf(mx, s[i][j]);
      }
      const float mnew = fmaxf(m[i], group_max(mx));
      const float base = mnew == NEG_INF ? 0.f : mnew;
      const float alpha = exp2f(m[i] - base);
      m[i] = mnew;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < CPT; ++j) sum += (s[i][j] = exp2f(s[i][j] - base));
      l[i] = l[i] * alpha + sum;
#pragma unroll
      for (int c = 0; c < OC; ++c) o[i][c] *= alpha;
    }
    store_tile(Pw, s, L);
    __syncwarp();
    accumulate(o, Pw, Vs, L);
  }

#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = r0 + i;
    const float total = group_sum(l[i]), inv = 1.f / total;
    const long long row = ((long long)bh * T + r) * D;
    if (!STATS) {
      if (r < T)
#pragma unroll
        for (int c = 0; c < OC; ++c)
          if (out_col(c, L.tx) < D) out[row + out_col(c, L.tx)] = o[i][c] * inv;
    } else {
      float dot = 0.f;  // delta = Σ_d dO·O
      if (r < T)
#pragma unroll
        for (int c = 0; c < OC; ++c)
          if (out_col(c, L.tx) < D) dot = fmaf(o[i][c] * inv, dout[row + out_col(c, L.tx)], dot);
      dot = group_sum(dot);
      if (r < T && L.tx == 0) {
        scratch[(long long)bh * T + r] = m[i] + log2f(total);
        scratch[NROWS + (long long)bh * T + r] = dot;
      }
    }
  }
}
)";

/// dK and dV of one key tile of one (b, kv head), over every query of the heads in its group.
constexpr const char* kDkDv = R"(
__device__ __forceinline__ void dkdv_rows(const float* __restrict__ q, const float* __restrict__ k,
                                          const float* __restrict__ v, const float* __restrict__ dout,
                                          float* __restrict__ grads, const float* __restrict__ scratch) {
  extern __shared__ float4 smem4[];
  float* Kt = reinterpret_cast<float*>(smem4);  // [DW][TS]  keys, transposed
  float* Vt = Kt + DW * TS;                     // [DW][TS]  values, transposed
  float* Qs = Vt + DW * TS;                     // [BC][RS]  queries
  float* Os = Qs + BC * RS;                     // [BC][RS]  output gradients
  float* Ls = Os + BC * RS;                     // [BC]      lse of the tile's queries
  float* Ds = Ls + BC;                          // [BC]      delta of the tile's queries
  const Lane L = lane_coords();
  float* Pw = Ds + BC + L.warp * (BC * PS);     // this warp's Pᵀ, then dSᵀ [BC][PS]
  const int bg = (int)(blockIdx.x % (B * HKV)), k0 = (int)(blockIdx.x / (B * HKV)) * BR;
  const int b = bg / HKV, g = bg % HKV;
  load_cols<BR>(Kt, k + b * K0 + g * K1, K2, K3, k0, S, 1.f);
  load_cols<BR>(Vt, v + b * V0 + g * V1, V2, V3, k0, S, 1.f);

  float dk[RPT][OC], dv[RPT][OC];
  zero(dk);
  zero(dv);
  const int c0 = k0 + L.ty * RPT;  // this thread's first key
  // Queries before q_begin see none of the tile's keys.
  const int q_begin = CAUSAL ? max(0, k0 - SHIFT) / BC * BC : 0;
  for (int h = g * GRP; h < (g + 1) * GRP; ++h) {
    const long long bh = (long long)b * HQ + h;
    for (int q0 = q_begin; q0 < T; q0 += BC) {
      __syncthreads();
      load_rows<BC>(Qs, q + b * Q0 + h * Q1, Q2, Q3, q0, T, 1.f);
      load_rows<BC>(Os, dout + bh * T * D, D, 1, q0, T, 1.f);
      for (int e = threadIdx.x; e < BC; e += NT) {
        const bool in = q0 + e < T;
        Ls[e] = in ? scratch[bh * T + q0 + e] : POS_INF;  // no probability for missing queries
        Ds[e] = in ? scratch[NROWS + bh * T + q0 + e] : 0.f;
      }
      __syncthreads();
      float s[RPT][CPT];
      score_tile(s, Kt, Qs, L);
#pragma unroll
      for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int j = 0; j < CPT; ++j) {
          const int r = q0 + L.tx + 8 * j;
          s[i][j] = (!CAUSAL || c0 + i <= r + SHIFT) ? exp2f(s[i][j] * SCALE2 - Ls[L.tx + 8 * j]) : 0.f;
        }
      store_tile(Pw, s, L);
      __syncwarp();
      accumulate(dv, Pw, Os, L);  // dV += Pᵀ dO
      score_tile(s, Vt, Os, L);   // dPᵀ = V dOᵀ
      __syncwarp();               // every lane is done reading Pᵀ
#pragma unroll
      for (int j = 0; j < CPT; ++j) {
        float* at = Pw + (L.tx + 8 * j) * PS + L.lg * RPT;
#pragma unroll
        for (int i = 0; i < RPT; ++i) at[i] = at[i] * (s[i][j] - Ds[L.tx + 8 * j]);  // dSᵀ = Pᵀ ∘ (dPᵀ − delta)
      }
      __syncwarp();
      accumulate(dk, Pw, Qs, L);  // dK += dSᵀ Q
    }
  }

  float* dkh = grads + NQ + ((long long)bg * S) * D;
  float* dvh = grads + NQ + NK + ((long long)bg * S) * D;
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    if (c0 + i >= S) continue;
#pragma unroll
    for (int c = 0; c < OC; ++c) {
      const int col = out_col(c, L.tx);
      if (col < D) {
        dkh[(long long)(c0 + i) * D + col] = dk[i][c] * SCALE;
        dvh[(long long)(c0 + i) * D + col] = dv[i][c];
      }
    }
  }
}
)";

/// dQ of one query tile, over the visible keys.
constexpr const char* kDq = R"(
__device__ __forceinline__ void dq_rows(const float* __restrict__ q, const float* __restrict__ k,
                                        const float* __restrict__ v, const float* __restrict__ dout,
                                        float* __restrict__ grads, const float* __restrict__ scratch) {
  extern __shared__ float4 smem4[];
  float* Qt = reinterpret_cast<float*>(smem4);  // [DW][TS]  queries, transposed, pre-scaled
  float* Ot = Qt + DW * TS;                     // [DW][TS]  output gradients, transposed
  float* Ks = Ot + DW * TS;                     // [BC][RS]  keys
  float* Vs = Ks + BC * RS;                     // [BC][RS]  values
  const Lane L = lane_coords();
  float* Pw = Vs + BC * RS + L.warp * (BC * PS);  // this warp's dS [BC][PS]
  int q0, bh;
  query_block(q0, bh);
  const int b = bh / HQ, h = bh % HQ, g = h / GRP;
  const float* kh = k + b * K0 + g * K1;
  const float* vh = v + b * V0 + g * V1;
  load_cols<BR>(Qt, q + b * Q0 + h * Q1, Q2, Q3, q0, T, SCALE2);
  load_cols<BR>(Ot, dout + (long long)bh * T * D, D, 1, q0, T, 1.f);
  const int r0 = q0 + L.ty * RPT;
  float lse[RPT], delta[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const bool in = r0 + i < T;
    lse[i] = in ? scratch[(long long)bh * T + r0 + i] : POS_INF;
    delta[i] = in ? scratch[NROWS + (long long)bh * T + r0 + i] : 0.f;
  }

  float dq[RPT][OC];
  zero(dq);
  const int kend = key_end(q0);
  for (int k0 = 0; k0 < kend; k0 += BC) {
    __syncthreads();
    load_rows<BC>(Ks, kh, K2, K3, k0, S, 1.f);
    load_rows<BC>(Vs, vh, V2, V3, k0, S, 1.f);
    __syncthreads();
    float p[RPT][CPT], dp[RPT][CPT];
    score_tile(p, Qt, Ks, L);
    score_tile(dp, Ot, Vs, L);
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
      for (int j = 0; j < CPT; ++j) {
        const float pij = visible(r0 + i, k0 + L.tx + 8 * j) ? exp2f(p[i][j] - lse[i]) : 0.f;
        dp[i][j] = pij * (dp[i][j] - delta[i]);  // dS
      }
    store_tile(Pw, dp, L);
    __syncwarp();
    accumulate(dq, Pw, Ks, L);
  }

#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    if (r0 + i >= T) continue;
    const long long row = ((long long)bh * T + r0 + i) * D;
#pragma unroll
    for (int c = 0; c < OC; ++c)
      if (out_col(c, L.tx) < D) grads[row + out_col(c, L.tx)] = dq[i][c] * SCALE;
  }
}
)";

constexpr const char* kGradParams =
    "(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v, "
    "const float* __restrict__ dout, float* __restrict__ grads, float* __restrict__ scratch)";

std::string kernel_head(const std::string& name, const char* params) {
  return "extern \"C\" __global__ void __launch_bounds__(NT) " + name + params;
}

Launch make_launch(const std::string& name, std::string source, const Geometry& g, int64_t blocks, int64_t shared_floats) {
  if (blocks > 0x7fffffff) throw Error("[cuda] attention: too many blocks for one launch");
  const int64_t bytes = shared_floats * 4;
  if (bytes > kMaxSharedBytes) throw Error("[cuda] attention: the tiles need more shared memory than a block has");
  Launch l;
  l.name = name;
  l.source = std::move(source);
  l.grid[0] = static_cast<unsigned>(blocks);
  l.block[0] = static_cast<unsigned>(32 * g.warps);
  l.shared_bytes = static_cast<unsigned>(bytes);
  return l;
}

int64_t row_tiles(int64_t n, const Geometry& g) { return (n + g.br - 1) / g.br; }

}  // namespace

bool attention_operand_ok(const Operand& op) {
  // Any batch / head / row strides; unit stride along D keeps the staging loads coalesced
  // (the kernels read element by element, so no alignment is needed).
  return op.dtype == DType::kF32 && op.shape.size() == 4 && op.strides.size() == 4 &&
         (op.strides[3] == 1 || op.shape[3] <= 1);
}

Launch attention_kernel(const std::string& name, const AttentionShape& s, const Operand& q, const Operand& k,
                        const Operand& v) {
  check_shape(s, q, k, v);
  const Geometry g = geometry(s.d, Kind::kForward);
  std::string src = constants(s, g, q, k, v) + kHelpers + kForward +
                    kernel_head(name, "(const float* __restrict__ q, const float* __restrict__ k, "
                                      "const float* __restrict__ v, float* __restrict__ out)") +
                    " {\n  forward_rows<false>(q, k, v, out, nullptr, nullptr);\n}\n";
  return make_launch(name, std::move(src), g, row_tiles(s.t, g) * s.batch * s.q_heads,
                     g.dw * g.ts + 2 * g.bc * g.rs + g.warps * g.bc * g.ps);
}

AttentionGradPlan attention_grad_kernels(const std::string& name, const AttentionShape& s, const Operand& q,
                                         const Operand& k, const Operand& v) {
  check_shape(s, q, k, v);
  AttentionGradPlan plan;
  plan.scratch_floats = 2 * s.batch * s.q_heads * s.t;
  const std::string stats = name + "_stats", dkdv = name + "_dkdv", dq = name + "_dq";
  const Geometry gf = geometry(s.d, Kind::kForward), gk = geometry(s.d, Kind::kDkDv), gq = geometry(s.d, Kind::kDq);
  plan.launches.push_back(make_launch(
      stats, constants(s, gf, q, k, v) + kHelpers + kForward + kernel_head(stats, kGradParams) +
                 " {\n  (void)grads;\n  forward_rows<true>(q, k, v, nullptr, dout, scratch);\n}\n",
      gf, row_tiles(s.t, gf) * s.batch * s.q_heads, gf.dw * gf.ts + 2 * gf.bc * gf.rs + gf.warps * gf.bc * gf.ps));
  plan.launches.push_back(make_launch(
      dkdv, constants(s, gk, q, k, v) + kHelpers + kDkDv + kernel_head(dkdv, kGradParams) +
                " {\n  dkdv_rows(q, k, v, dout, grads, scratch);\n}\n",
      gk, row_tiles(s.s, gk) * s.batch * s.kv_heads,
      2 * gk.dw * gk.ts + 2 * gk.bc * gk.rs + 2 * gk.bc + gk.warps * gk.bc * gk.ps));
  plan.launches.push_back(make_launch(
      dq, constants(s, gq, q, k, v) + kHelpers + kDq + kernel_head(dq, kGradParams) +
              " {\n  dq_rows(q, k, v, dout, grads, scratch);\n}\n",
      gq, row_tiles(s.t, gq) * s.batch * s.q_heads, 2 * gq.dw * gq.ts + 2 * gq.bc * gq.rs + gq.warps * gq.bc * gq.ps));
  return plan;
}

}  // namespace tg::backend::cuda
