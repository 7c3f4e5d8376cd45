// CUDA kernels of fused scaled dot-product attention (ops.def Attention / AttentionGrad), in
// the FlashAttention-2 spirit: the T×S score matrix never reaches global memory. Every kernel
// is generated per node with the shapes, the operands' strides, the scale and the causal flag
// baked in as constants (see kernels.h), and computes in fp32 on the CUDA cores. q, k, v and
// the forward's out / the backward's dout go through their strides (O0..O3 for out and dout,
// e.g. a [B, T, Hq, D] buffer seen as [B, Hq, T, D]); the gradients dq, dk, dv are dense.
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
//
// Two other paths, chosen per node (see the comments at kSmall and kMma):
//   small  T, S ≤ 64 and D ≤ 64 (backward D ≤ 32): whole (batch, kv head) groups per block in
//          shared memory, one thread per query row; the backward is ONE launch (lse, delta and
//          dq per query thread, then dk and dv per key thread), no scratch. Exact fp32.
//   tf32   AttentionShape::tf32 and D ≤ 128: the same four kernels on tensor cores (mma.sync
//          m16n8k8 tf32), 16 rows per warp. TG_CUDA_ATTENTION_MMA overrides its tiles.
// Every path is deterministic (no atomics): each output element is written by one thread.
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

void check_shape(const AttentionShape& s, const Operand& q, const Operand& k, const Operand& v, const Operand& o,
                 const char* o_name) {
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
  check_operand(o, {s.batch, s.q_heads, s.t, s.d}, o_name);
  if (!attention_operand_ok(o))
    throw Error(std::string("[cuda] attention: operand ") + o_name + " needs unit stride along the head dim");
}

/// The constants of the problem itself (shapes, strides, scale, mask), shared by every path.
/// O0..O3 are the strides of the forward's out or of the backward's dout.
std::string shape_constants(const AttentionShape& s, const Operand& q, const Operand& k, const Operand& v,
                            const Operand& o) {
  std::string c;
  auto i = [&](const char* n, int64_t x) { c += std::string("constexpr int ") + n + " = " + std::to_string(x) + ";\n"; };
  auto l = [&](const char* n, int64_t x) { c += std::string("constexpr long long ") + n + " = " + ll(x) + ";\n"; };
  i("B", s.batch), i("HQ", s.q_heads), i("HKV", s.kv_heads), i("GRP", s.q_heads / s.kv_heads);
  i("T", s.t), i("S", s.s), i("D", s.d), i("SHIFT", s.s - s.t);
  const char* qn[] = {"Q0", "Q1", "Q2", "Q3"};
  const char* kn[] = {"K0", "K1", "K2", "K3"};
  const char* vn[] = {"V0", "V1", "V2", "V3"};
  const char* on[] = {"O0", "O1", "O2", "O3"};
  for (int a = 0; a < 4; ++a)
    l(qn[a], q.strides[a]), l(kn[a], k.strides[a]), l(vn[a], v.strides[a]), l(on[a], o.strides[a]);
  l("NQ", s.batch * s.q_heads * s.t * s.d);   // elements of dq
  l("NK", s.batch * s.kv_heads * s.s * s.d);  // elements of dk and of dv
  l("NROWS", s.batch * s.q_heads * s.t);      // query rows: lse and delta each
  c += "constexpr float SCALE = " + float_literal(s.scale) + ";\n";
  c += "constexpr float SCALE2 = " + float_literal(s.scale * 1.4426950408889634) + ";  // scale · log2 e\n";
  c += std::string("constexpr bool CAUSAL = ") + (s.causal ? "true" : "false") + ";\n";
  return c;
}

/// The constants every kernel of the fp32 tiled path is specialised to.
std::string constants(const AttentionShape& s, const Geometry& g, const Operand& q, const Operand& k, const Operand& v,
                      const Operand& o) {
  std::string c = "#define NT " + std::to_string(32 * g.warps) + "\n";
  auto i = [&](const char* n, int64_t x) { c += std::string("constexpr int ") + n + " = " + std::to_string(x) + ";\n"; };
  i("RPT", g.rpt), i("CPT", g.cpt), i("BR", g.br), i("BC", g.bc), i("DW", g.dw), i("VW", g.vw), i("DP", g.dp);
  i("RS", g.rs), i("TS", g.ts), i("PS", g.ps), i("OC", g.oc);
  return c + shape_constants(s, q, k, v, o);
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
    const long long row = b * O0 + h * O1 + (long long)r * O2;  // out / dout row (O3 = 1)
    if (!STATS) {
      if (r < T)
#pragma unroll
        for (int c = 0; c < OC; ++c)
          if (out_col(c, L.tx) < D) out[row + out_col(c, L.tx) * O3] = o[i][c] * inv;
    } else {
      float dot = 0.f;  // delta = Σ_d dO·O
      if (r < T)
#pragma unroll
        for (int c = 0; c < OC; ++c)
          if (out_col(c, L.tx) < D) dot = fmaf(o[i][c] * inv, dout[row + out_col(c, L.tx) * O3], dot);
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
      load_rows<BC>(Os, dout + b * O0 + h * O1, O2, O3, q0, T, 1.f);
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
  load_cols<BR>(Ot, dout + b * O0 + h * O1, O2, O3, q0, T, 1.f);
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

/// Small problems (T, S ≤ 64, D ≤ 64, backward D ≤ 32): a block handles NG whole (batch, kv head) groups with
/// their keys and values (and, backward, queries and output gradients) in shared memory, one
/// thread per query row (then, backward, per key row). Row stride DS = D + 1 (odd) keeps the
/// per-thread row reads free of bank conflicts; the other operand is a broadcast.
constexpr const char* kSmall = R"(
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
__device__ __forceinline__ long long row_addr(int gid, int r, int d) {  // dense [B, HQ, T, D] (dq)
  const int b = gid / HKV, h = (gid % HKV) * GRP + r / T;
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
      float* dkr = grads + NQ + ((long long)gid * S + j) * D;
      float* dvr = grads + NQ + NK + ((long long)gid * S + j) * D;
#pragma unroll
      for (int d = 0; d < D; ++d) dkr[d] = dk[d] * SCALE, dvr[d] = dv[d];
    }
  }
}
)";

/// TF32 tensor-core path (AttentionShape::tf32): mma.sync m16n8k8 through inline PTX. A block
/// is WM warps of 16 rows each (BR = 16·WM); tiles of BC columns are staged in shared memory,
/// row-major with stride RS = DP + 4 (DP = D rounded up to 8, zero padded) and rounded to TF32
/// once when staged. With g = lane / 4, t = lane % 4, a score tile Σ_d A[row][d]·B[col][d]
/// reads A fragments A[g (+8)][8kk + t (+4)] and B fragments B[8n + g][8kk + t (+4)]: RS ≡ 4
/// mod 8 spreads both over the 32 banks. The product P·X of an accumulator-layout P (thread
/// holds columns 2t, 2t+1 of rows g, g+8 of each 8-column tile) uses it directly as the A
/// fragment by permuting the reduction index (A column t ↔ key 2t, t+4 ↔ 2t+1), so X is read
/// as X[8n + 2t (+1)][8dn + g], again conflict-free. Kernels mirror the fp32 path's four.
constexpr const char* kMma = R"(
#define NEG_INF (-__int_as_float(0x7f800000))
#define POS_INF (__int_as_float(0x7f800000))
constexpr int NN = BC / 8, ND = DP / 8;

__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void mma8(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// dst[r·RS + d] = tf32(mul·src[(row0 + r)·rstride + d·dstride]) for r < ROWS, d < DP; zero
// where row0 + r ≥ limit or d ≥ D.
template <int ROWS>
__device__ __forceinline__ void load_tile(float* dst, const float* src, long long rstride, long long dstride, int row0,
                                          int limit, float mul) {
  for (int e = threadIdx.x; e < ROWS * DP; e += NT) {
    const int r = e / DP, d = e - r * DP;
    float x = 0.f;
    if (d < D && row0 + r < limit) x = mul * src[(long long)(row0 + r) * rstride + (long long)d * dstride];
    dst[r * RS + d] = __uint_as_float(to_tf32(x));
  }
}

// c[n] += A[16 rows]·B[8n .. 8n + 7]ᵀ over DP, A and B staged tiles (A at the warp's first row).
template <int M>
__device__ __forceinline__ void mma_abt(float (&c)[M][4], const float* A, const float* Bm, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < ND; ++kk) {
    unsigned a[4];
    a[0] = __float_as_uint(A[g * RS + 8 * kk + t]);
    a[1] = __float_as_uint(A[(g + 8) * RS + 8 * kk + t]);
    a[2] = __float_as_uint(A[g * RS + 8 * kk + t + 4]);
    a[3] = __float_as_uint(A[(g + 8) * RS + 8 * kk + t + 4]);
#pragma unroll
    for (int n = 0; n < M; ++n) {
      unsigned b[2];
      b[0] = __float_as_uint(Bm[(8 * n + g) * RS + 8 * kk + t]);
      b[1] = __float_as_uint(Bm[(8 * n + g) * RS + 8 * kk + t + 4]);
      mma8(c[n], a, b);
    }
  }
}

// acc += P·X: P [16 × 8M] in accumulator layout, X a staged tile whose rows are P's columns.
template <int M>
__device__ __forceinline__ void mma_px(float (&acc)[ND][4], const float (&p)[M][4], const float* X, int g, int t) {
#pragma unroll
  for (int n = 0; n < M; ++n) {
    unsigned a[4];
    a[0] = to_tf32(p[n][0]);
    a[1] = to_tf32(p[n][2]);
    a[2] = to_tf32(p[n][1]);
    a[3] = to_tf32(p[n][3]);
#pragma unroll
    for (int dn = 0; dn < ND; ++dn) {
      unsigned b[2];
      b[0] = __float_as_uint(X[(8 * n + 2 * t) * RS + 8 * dn + g]);
      b[1] = __float_as_uint(X[(8 * n + 2 * t + 1) * RS + 8 * dn + g]);
      mma8(acc[dn], a, b);
    }
  }
}

template <int M, int N>
__device__ __forceinline__ void zero(float (&c)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) c[i][j] = 0.f;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__device__ __forceinline__ bool visible(int r, int c) { return c < S && (!CAUSAL || c <= r + SHIFT); }

__device__ __forceinline__ int key_end(int q0) {
  const int last = min(T, q0 + BR) - 1;
  return CAUSAL ? min(S, last + SHIFT + 1) : S;
}

__device__ __forceinline__ void query_block(int& q0, int& bh) {
  constexpr int NTILES = (T + BR - 1) / BR;
  bh = (int)(blockIdx.x % (B * HQ));
  q0 = (NTILES - 1 - (int)(blockIdx.x / (B * HQ))) * BR;
}

template <bool STATS>
__device__ __forceinline__ void mma_forward(const float* __restrict__ q, const float* __restrict__ k,
                                            const float* __restrict__ v, float* __restrict__ out,
                                            const float* __restrict__ dout, float* __restrict__ scratch) {
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);  // [BR][RS] queries · scale·log2 e
  float* Ks = Qs + BR * RS;                     // [BC][RS]
  float* Vs = Ks + BC * RS;                     // [BC][RS]
  const int warp = threadIdx.x >> 5, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
  int q0, bh;
  query_block(q0, bh);
  const int b = bh / HQ, h = bh % HQ, kvh = h / GRP;
  const float* kh = k + b * K0 + kvh * K1;
  const float* vh = v + b * V0 + kvh * V1;
  load_tile<BR>(Qs, q + b * Q0 + h * Q1, Q2, Q3, q0, T, SCALE2);
  const float* Qw = Qs + warp * 16 * RS;
  const int w0 = q0 + warp * 16, ra = w0 + g;  // rows ra and ra + 8
  float o[ND][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
  zero(o);
  const int kend = key_end(q0);
  for (int k0 = 0; k0 < kend; k0 += BC) {
    __syncthreads();
    load_tile<BC>(Ks, kh, K2, K3, k0, S, 1.f);
    load_tile<BC>(Vs, vh, V2, V3, k0, S, 1.f);
    __syncthreads();
    if (CAUSAL && k0 > w0 + 15 + SHIFT) continue;  // hidden from every row of this warp
    float s[NN][4];
    zero(s);
    mma_abt(s, Qw, Ks, g, t);
    float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int n = 0; n < NN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (!visible(ra + 8 * (e >> 1), k0 + 8 * n + 2 * t + (e & 1))) s[n][e] = NEG_INF;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
      }
    float base[2], alpha[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const float mnew = fmaxf(m[rr], quad_max(mx[rr]));
      base[rr] = mnew == NEG_INF ? 0.f : mnew;
      alpha[rr] = exp2f(m[rr] - base[rr]);
      m[rr] = mnew;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[e >> 1] += (s[n][e] = exp2f(s[n][e] - base[e >> 1]));
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) l[rr] = l[rr] * alpha[rr] + sum[rr];
#pragma unroll
    for (int dn = 0; dn < ND; ++dn) {
      o[dn][0] *= alpha[0], o[dn][1] *= alpha[0];
      o[dn][2] *= alpha[1], o[dn][3] *= alpha[1];
    }
    mma_px(o, s, Vs, g, t);
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = ra + 8 * rr;
    const float total = quad_sum(l[rr]), inv = 1.f / total;
    const long long row = b * O0 + h * O1 + (long long)r * O2;  // out / dout row
    if (!STATS) {
      if (r < T)
#pragma unroll
        for (int dn = 0; dn < ND; ++dn)
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int col = 8 * dn + 2 * t + u;
            if (col < D) out[row + col * O3] = o[dn][2 * rr + u] * inv;
          }
    } else {
      float dot = 0.f;
      if (r < T)
#pragma unroll
        for (int dn = 0; dn < ND; ++dn)
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int col = 8 * dn + 2 * t + u;
            if (col < D) dot = fmaf(o[dn][2 * rr + u] * inv, dout[row + col * O3], dot);
          }
      dot = quad_sum(dot);
      if (r < T && t == 0) {
        scratch[(long long)bh * T + r] = m[rr] + log2f(total);
        scratch[NROWS + (long long)bh * T + r] = dot;
      }
    }
  }
}

// dK, dV of BR keys of one (b, kv head) over every query of its group. Queries are staged
// pre-scaled by scale·log2 e like the stats pass (so the scores match its lse); dK is
// rescaled by 1 / log2 e at the end.
__device__ __forceinline__ void mma_dkdv(const float* __restrict__ q, const float* __restrict__ k,
                                         const float* __restrict__ v, const float* __restrict__ dout,
                                         float* __restrict__ grads, const float* __restrict__ scratch) {
  extern __shared__ float4 smem4[];
  float* Ks = reinterpret_cast<float*>(smem4);  // [BR][RS]
  float* Vs = Ks + BR * RS;                     // [BR][RS]
  float* Qs = Vs + BR * RS;                     // [BC][RS]
  float* Os = Qs + BC * RS;                     // [BC][RS]
  float* Ls = Os + BC * RS;                     // [BC]
  float* Ds = Ls + BC;                          // [BC]
  const int warp = threadIdx.x >> 5, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
  const int bg = (int)(blockIdx.x % (B * HKV)), k0 = (int)(blockIdx.x / (B * HKV)) * BR;
  const int b = bg / HKV, kvh = bg % HKV;
  load_tile<BR>(Ks, k + b * K0 + kvh * K1, K2, K3, k0, S, 1.f);
  load_tile<BR>(Vs, v + b * V0 + kvh * V1, V2, V3, k0, S, 1.f);
  const float* Kw = Ks + warp * 16 * RS;
  const float* Vw = Vs + warp * 16 * RS;
  const int w0 = k0 + warp * 16, ka = w0 + g;  // keys ka and ka + 8
  float dk[ND][4], dv[ND][4];
  zero(dk);
  zero(dv);
  const int q_begin = CAUSAL ? max(0, k0 - SHIFT) / BC * BC : 0;
  for (int h = kvh * GRP; h < (kvh + 1) * GRP; ++h) {
    const long long bh = (long long)b * HQ + h;
    for (int q0 = q_begin; q0 < T; q0 += BC) {
      __syncthreads();
      load_tile<BC>(Qs, q + b * Q0 + h * Q1, Q2, Q3, q0, T, SCALE2);
      load_tile<BC>(Os, dout + b * O0 + h * O1, O2, O3, q0, T, 1.f);
      for (int e = threadIdx.x; e < BC; e += NT) {
        const bool in = q0 + e < T;
        Ls[e] = in ? scratch[bh * T + q0 + e] : POS_INF;
        Ds[e] = in ? scratch[NROWS + bh * T + q0 + e] : 0.f;
      }
      __syncthreads();
      if (CAUSAL && w0 > q0 + BC - 1 + SHIFT) continue;  // every key of this warp hidden
      float s[NN][4], dp[NN][4];
      zero(s);
      zero(dp);
      mma_abt(s, Kw, Qs, g, t);   // Sᵀ (base-2 units)
      mma_abt(dp, Vw, Os, g, t);  // dPᵀ = V dOᵀ
#pragma unroll
      for (int n = 0; n < NN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = 8 * n + 2 * t + (e & 1);
          const float p = (!CAUSAL || ka + 8 * (e >> 1) <= q0 + c + SHIFT) ? exp2f(s[n][e] - Ls[c]) : 0.f;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - Ds[c]);
        }
      mma_px(dv, s, Os, g, t);   // dV += Pᵀ dO
      mma_px(dk, dp, Qs, g, t);  // dK += dSᵀ Q (Q scaled)
    }
  }
  constexpr float DKMUL = SCALE / SCALE2;
  float* dkh = grads + NQ + ((long long)bg * S) * D;
  float* dvh = grads + NQ + NK + ((long long)bg * S) * D;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int key = ka + 8 * rr;
    if (key >= S) continue;
#pragma unroll
    for (int dn = 0; dn < ND; ++dn)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int col = 8 * dn + 2 * t + u;
        if (col < D) {
          dkh[(long long)key * D + col] = dk[dn][2 * rr + u] * DKMUL;
          dvh[(long long)key * D + col] = dv[dn][2 * rr + u];
        }
      }
  }
}

__device__ __forceinline__ void mma_dq(const float* __restrict__ q, const float* __restrict__ k,
                                       const float* __restrict__ v, const float* __restrict__ dout,
                                       float* __restrict__ grads, const float* __restrict__ scratch) {
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);  // [BR][RS] queries · scale·log2 e
  float* Os = Qs + BR * RS;                     // [BR][RS] output gradients
  float* Ks = Os + BR * RS;                     // [BC][RS]
  float* Vs = Ks + BC * RS;                     // [BC][RS]
  const int warp = threadIdx.x >> 5, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
  int q0, bh;
  query_block(q0, bh);
  const int b = bh / HQ, h = bh % HQ, kvh = h / GRP;
  const float* kh = k + b * K0 + kvh * K1;
  const float* vh = v + b * V0 + kvh * V1;
  load_tile<BR>(Qs, q + b * Q0 + h * Q1, Q2, Q3, q0, T, SCALE2);
  load_tile<BR>(Os, dout + b * O0 + h * O1, O2, O3, q0, T, 1.f);
  const float* Qw = Qs + warp * 16 * RS;
  const float* Ow = Os + warp * 16 * RS;
  const int w0 = q0 + warp * 16, ra = w0 + g;
  float lse[2], delta[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const bool in = ra + 8 * rr < T;
    lse[rr] = in ? scratch[(long long)bh * T + ra + 8 * rr] : POS_INF;
    delta[rr] = in ? scratch[NROWS + (long long)bh * T + ra + 8 * rr] : 0.f;
  }
  float dq[ND][4];
  zero(dq);
  const int kend = key_end(q0);
  for (int k0 = 0; k0 < kend; k0 += BC) {
    __syncthreads();
    load_tile<BC>(Ks, kh, K2, K3, k0, S, 1.f);
    load_tile<BC>(Vs, vh, V2, V3, k0, S, 1.f);
    __syncthreads();
    if (CAUSAL && k0 > w0 + 15 + SHIFT) continue;
    float s[NN][4], dp[NN][4];
    zero(s);
    zero(dp);
    mma_abt(s, Qw, Ks, g, t);
    mma_abt(dp, Ow, Vs, g, t);
#pragma unroll
    for (int n = 0; n < NN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int rr = e >> 1;
        const float p = visible(ra + 8 * rr, k0 + 8 * n + 2 * t + (e & 1)) ? exp2f(s[n][e] - lse[rr]) : 0.f;
        dp[n][e] = p * (dp[n][e] - delta[rr]);
      }
    mma_px(dq, dp, Ks, g, t);
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = ra + 8 * rr;
    if (r >= T) continue;
    const long long row = ((long long)bh * T + r) * D;
#pragma unroll
    for (int dn = 0; dn < ND; ++dn)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int col = 8 * dn + 2 * t + u;
        if (col < D) grads[row + col] = dq[dn][2 * rr + u] * SCALE;
      }
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

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Launch make_launch_raw(const std::string& name, std::string source, int64_t threads, int64_t blocks,
                       int64_t shared_floats) {
  if (blocks > 0x7fffffff) throw Error("[cuda] attention: too many blocks for one launch");
  const int64_t bytes = shared_floats * 4;
  if (bytes > kMaxSharedBytes) throw Error("[cuda] attention: the tiles need more shared memory than a block has");
  Launch l;
  l.name = name;
  l.source = std::move(source);
  l.grid[0] = static_cast<unsigned>(blocks);
  l.block[0] = static_cast<unsigned>(threads);
  l.shared_bytes = static_cast<unsigned>(bytes);
  return l;
}

/// The small-problem path (see kSmall): ng (kv groups per block) is 0 where it does not apply.
struct SmallPlan {
  int64_t ng = 0, threads = 0, blocks = 0, shared_floats = 0, ds = 0;
};

SmallPlan small_plan(const AttentionShape& s, bool backward) {
  SmallPlan p;
  const int64_t qpg = s.t * (s.q_heads / s.kv_heads), groups = s.batch * s.kv_heads;
  // Backward: a key thread keeps its k, v rows and dk, dv accumulators in registers (4·D).
  if (s.t > 64 || s.s > 64 || s.d > (backward ? 32 : 64) || qpg > 256) return p;
  p.ds = s.d + 1;
  auto floats = [&](int64_t ng) {
    return backward ? ng * (2 * qpg * p.ds + 2 * s.s * p.ds + 2 * qpg) : ng * 2 * s.s * p.ds;
  };
  if (floats(1) * 4 > 96 * 1024) return p;
  const int64_t rows = backward ? std::max(qpg, s.s) : qpg;
  // About 128 threads per block, but enough blocks to cover the GPU twice over.
  int64_t ng = std::max<int64_t>(1, std::min(128 / rows, groups / 264));
  while (ng > 1 && floats(ng) * 4 > 96 * 1024) --ng;
  p.ng = ng;
  p.threads = round_up(ng * rows, 32);
  p.blocks = ceil_div(groups, ng);
  p.shared_floats = floats(ng);
  return p;
}

std::string small_constants(const AttentionShape& s, const SmallPlan& p, const Operand& q, const Operand& k,
                            const Operand& v, const Operand& o) {
  return "#define NT " + std::to_string(p.threads) + "\nconstexpr int NG = " + std::to_string(p.ng) +
         ";\nconstexpr int DS = " + std::to_string(p.ds) + ";\n" + shape_constants(s, q, k, v, o);
}

/// The TF32 tensor-core path (see kMma).
struct MmaGeometry {
  int64_t warps, br, bc, dp, rs;
};

bool use_mma(const AttentionShape& s) { return s.tf32 && s.d <= 128; }

MmaGeometry mma_geometry(int64_t d, int64_t t, Kind kind) {
  MmaGeometry g{};
  // Measured on an H200 at D = 64, T = 256 and 1024 (see the test's TileSweep): forward and
  // stats 32-key tiles (8 warps from T = 512 up), dkdv 8 warps × 64 queries, dq 4 warps × 32 keys.
  g.warps = kind == Kind::kDkDv || (kind == Kind::kForward && t >= 512) ? 8 : 4;
  g.bc = kind == Kind::kDkDv ? 64 : 32;
  if (d > 64) g.bc = 32;  // accumulators of larger heads leave fewer registers for the scores
  // Tuning override: TG_CUDA_ATTENTION_MMA="<kind>:<warps>,<bc>;..." with kind f, k or q.
  if (const char* env = std::getenv("TG_CUDA_ATTENTION_MMA")) {
    const char want = kind == Kind::kForward ? 'f' : kind == Kind::kDkDv ? 'k' : 'q';
    for (const char* p = env; *p; ++p) {
      int w = 0, c = 0;
      if (p[0] != want || p[1] != ':' || std::sscanf(p + 2, "%d,%d", &w, &c) != 2) continue;
      if (w < 1 || w > 16 || c < 8 || c > 128 || c % 8 != 0)
        throw Error(std::string("[cuda] TG_CUDA_ATTENTION_MMA: bad entry ") + p);
      g.warps = w, g.bc = c;
    }
  }
  g.br = 16 * g.warps;
  g.dp = round_up(d, 8);
  g.rs = g.dp + 4;
  return g;
}

std::string mma_constants(const AttentionShape& s, const MmaGeometry& g, const Operand& q, const Operand& k,
                          const Operand& v, const Operand& o) {
  std::string c = "#define NT " + std::to_string(32 * g.warps) + "\n";
  auto i = [&](const char* n, int64_t x) { c += std::string("constexpr int ") + n + " = " + std::to_string(x) + ";\n"; };
  i("BR", g.br), i("BC", g.bc), i("DP", g.dp), i("RS", g.rs);
  return c + shape_constants(s, q, k, v, o);
}

}  // namespace

bool attention_operand_ok(const Operand& op) {
  // Any batch / head / row strides; unit stride along D keeps the staging loads coalesced
  // (the kernels read element by element, so no alignment is needed).
  return op.dtype == DType::kF32 && op.shape.size() == 4 && op.strides.size() == 4 &&
         (op.strides[3] == 1 || op.shape[3] <= 1);
}

Launch attention_kernel(const std::string& name, const AttentionShape& s, const Operand& q, const Operand& k,
                        const Operand& v, const Operand& out) {
  check_shape(s, q, k, v, out, "out");
  if (const SmallPlan sp = small_plan(s, false); sp.ng > 0) {
    std::string src = small_constants(s, sp, q, k, v, out) + kSmall +
                      "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
                      "(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v, "
                      "float* __restrict__ out) {\n  small_forward(q, k, v, out);\n}\n";
    return make_launch_raw(name, std::move(src), sp.threads, sp.blocks, sp.shared_floats);
  }
  if (use_mma(s)) {
    const MmaGeometry g = mma_geometry(s.d, s.t, Kind::kForward);
    std::string src = mma_constants(s, g, q, k, v, out) + kMma +
                      kernel_head(name, "(const float* __restrict__ q, const float* __restrict__ k, "
                                        "const float* __restrict__ v, float* __restrict__ out)") +
                      " {\n  mma_forward<false>(q, k, v, out, nullptr, nullptr);\n}\n";
    return make_launch_raw(name, std::move(src), 32 * g.warps, ceil_div(s.t, g.br) * s.batch * s.q_heads,
                           (g.br + 2 * g.bc) * g.rs);
  }
  const Geometry g = geometry(s.d, Kind::kForward);
  std::string src = constants(s, g, q, k, v, out) + kHelpers + kForward +
                    kernel_head(name, "(const float* __restrict__ q, const float* __restrict__ k, "
                                      "const float* __restrict__ v, float* __restrict__ out)") +
                    " {\n  forward_rows<false>(q, k, v, out, nullptr, nullptr);\n}\n";
  return make_launch(name, std::move(src), g, row_tiles(s.t, g) * s.batch * s.q_heads,
                     g.dw * g.ts + 2 * g.bc * g.rs + g.warps * g.bc * g.ps);
}

AttentionGradPlan attention_grad_kernels(const std::string& name, const AttentionShape& s, const Operand& q,
                                         const Operand& k, const Operand& v, const Operand& dout) {
  check_shape(s, q, k, v, dout, "dout");
  AttentionGradPlan plan;
  if (const SmallPlan sp = small_plan(s, true); sp.ng > 0) {
    // One launch computes everything; the scratch is unused.
    plan.scratch_floats = 0;
    std::string src = small_constants(s, sp, q, k, v, dout) + kSmall + kernel_head(name, kGradParams) +
                      " {\n  (void)scratch;\n  small_backward(q, k, v, dout, grads);\n}\n";
    plan.launches.push_back(make_launch_raw(name, std::move(src), sp.threads, sp.blocks, sp.shared_floats));
    return plan;
  }
  plan.scratch_floats = 2 * s.batch * s.q_heads * s.t;
  const std::string stats = name + "_stats", dkdv = name + "_dkdv", dq = name + "_dq";
  if (use_mma(s)) {
    const MmaGeometry gf = mma_geometry(s.d, s.t, Kind::kForward), gk = mma_geometry(s.d, s.t, Kind::kDkDv),
                      gq = mma_geometry(s.d, s.t, Kind::kDq);
    plan.launches.push_back(make_launch_raw(
        stats, mma_constants(s, gf, q, k, v, dout) + kMma + kernel_head(stats, kGradParams) +
                   " {\n  (void)grads;\n  mma_forward<true>(q, k, v, nullptr, dout, scratch);\n}\n",
        32 * gf.warps, ceil_div(s.t, gf.br) * s.batch * s.q_heads, (gf.br + 2 * gf.bc) * gf.rs));
    plan.launches.push_back(make_launch_raw(
        dkdv, mma_constants(s, gk, q, k, v, dout) + kMma + kernel_head(dkdv, kGradParams) +
                  " {\n  mma_dkdv(q, k, v, dout, grads, scratch);\n}\n",
        32 * gk.warps, ceil_div(s.s, gk.br) * s.batch * s.kv_heads, (2 * gk.br + 2 * gk.bc) * gk.rs + 2 * gk.bc));
    plan.launches.push_back(make_launch_raw(
        dq, mma_constants(s, gq, q, k, v, dout) + kMma + kernel_head(dq, kGradParams) +
                " {\n  mma_dq(q, k, v, dout, grads, scratch);\n}\n",
        32 * gq.warps, ceil_div(s.t, gq.br) * s.batch * s.q_heads, (2 * gq.br + 2 * gq.bc) * gq.rs));
    return plan;
  }
  const Geometry gf = geometry(s.d, Kind::kForward), gk = geometry(s.d, Kind::kDkDv), gq = geometry(s.d, Kind::kDq);
  plan.launches.push_back(make_launch(
      stats, constants(s, gf, q, k, v, dout) + kHelpers + kForward + kernel_head(stats, kGradParams) +
                 " {\n  (void)grads;\n  forward_rows<true>(q, k, v, nullptr, dout, scratch);\n}\n",
      gf, row_tiles(s.t, gf) * s.batch * s.q_heads, gf.dw * gf.ts + 2 * gf.bc * gf.rs + gf.warps * gf.bc * gf.ps));
  plan.launches.push_back(make_launch(
      dkdv, constants(s, gk, q, k, v, dout) + kHelpers + kDkDv + kernel_head(dkdv, kGradParams) +
                " {\n  dkdv_rows(q, k, v, dout, grads, scratch);\n}\n",
      gk, row_tiles(s.s, gk) * s.batch * s.kv_heads,
      2 * gk.dw * gk.ts + 2 * gk.bc * gk.rs + 2 * gk.bc + gk.warps * gk.bc * gk.ps));
  plan.launches.push_back(make_launch(
      dq, constants(s, gq, q, k, v, dout) + kHelpers + kDq + kernel_head(dq, kGradParams) +
              " {\n  dq_rows(q, k, v, dout, grads, scratch);\n}\n",
      gq, row_tiles(s.t, gq) * s.batch * s.q_heads, 2 * gq.dw * gq.ts + 2 * gq.bc * gq.rs + gq.warps * gq.bc * gq.ps));
  return plan;
}

}  // namespace tg::backend::cuda
