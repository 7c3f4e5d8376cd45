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
// first. A key mask (bool [B, S], AttentionShape::key_mask) hides keys element-wise in every
// tile; a query left with no key gets 0 and lse = +∞. Tiles move from global to shared memory through
// registers (Stage): the next tile's loads are issued before the current tile is computed, 16 bytes at a time
// where an operand's rows are aligned and element by element (coalesced along D) otherwise, so operands need
// no alignment. AttentionShape::tiles overrides the tile geometry (tuning sweeps).
//
// Two other paths, chosen per node (see kernels/attention_small.cuh and kernels/attention_mma.cuh):
//   small  T, S ≤ 64 and D ≤ 64 (backward D ≤ 32): whole (batch, kv head) groups per block in
//          shared memory, one thread per query row; the backward is ONE launch (lse, delta and
//          dq per query thread, then dk and dv per key thread), no scratch. Exact fp32.
//   tf32   AttentionShape::tf32 and D ≤ 128: the same four kernels on tensor cores (mma.sync
//          m16n8k8 tf32), 16 rows per warp. AttentionShape::tiles overrides its tiles.
//   bf16   bf16 q, k, v (and dout) and D ≤ 128: the tensor-core kernels with bf16 tiles and
//          mma.sync m16n8k16 bf16 (kernels/attention_mma_bf16.cuh); P and dS are rounded to
//          bf16 once for their products, as in FlashAttention-2. f16 q, k, v take the same
//          kernels with f16 tiles, f16 rounding and mma.sync m16n8k16 f16 (HALF_F16). Every
//          other path widens bf16 and f16 operands to f32 as it loads them.
// Every path is deterministic (no atomics): each output element is written by one thread.
//
// The device code is in kernels/attention_common.cuh, attention_tiled.cuh, attention_small.cuh
// and attention_mma.cuh; this file generates the constants each is compiled with.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

constexpr int64_t kMaxHeadDim = 512;

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

Geometry geometry(const AttentionShape& s, Kind kind) {
  const int64_t d = s.d;
  Geometry g{};
  // Blocks of 4 warps with 4×4 scores per thread (64 rows × 32 columns per tile); the
  // backward's two heavy kernels use 8 warps (128 rows) for small heads. Larger heads take
  // fewer rows per thread so that the accumulators (rpt × D/8 floats, two of them in dkdv)
  // stay in registers and the tiles in shared memory.
  g.warps = 4, g.cpt = 4;
  if (d <= 128)
    g.rpt = 4;
  else if (d <= 256)
    g.rpt = 2;
  else
    g.rpt = 1;
  if (d <= 64 && kind != Kind::kForward) g.warps = 8;
  // Tuning override (AttentionShape::tiles): "<kind>:<warps>,<rpt>,<cpt>;..." with kind f, k or q.
  const char want = kind == Kind::kForward ? 'f' : kind == Kind::kDkDv ? 'k' : 'q';
  for (const char* p = s.tiles.c_str(); *p; ++p) {
    int w = 0, r = 0, c = 0;
    if (p[0] != want || p[1] != ':' || std::sscanf(p + 2, "%d,%d,%d", &w, &r, &c) != 3) continue;
    if (w < 1 || w > 16 || (r != 1 && r != 2 && r != 4 && r != 8) || c < 1 || c > 16)
      throw Error(std::string("[cuda] attention tiles: bad entry ") + p);
    g.warps = w, g.rpt = r, g.cpt = c;
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

void check_operand(const Operand& op, const Shape& want, const char* what, DType dtype) {
  if (op.dtype != dtype || op.shape != want || op.strides.size() != 4)
    throw Error(std::string("[cuda] attention: operand ") + what + " is " + dtype_name(op.dtype) +
                shape_str(op.shape) + ", expected " + dtype_name(dtype) + shape_str(want) +
                " with 4 strides");
}

/// o: the forward's out (f32) or the backward's dout (q's type), `o_dtype`.
void check_shape(const AttentionShape& s, const Operand& q, const Operand& k, const Operand& v,
                 const Operand& o, const char* o_name, DType o_dtype) {
  if (s.batch < 1 || s.q_heads < 1 || s.kv_heads < 1 || s.t < 1 || s.s < 1 || s.d < 1)
    throw Error("[cuda] attention: every extent must be at least 1");
  if (s.q_heads % s.kv_heads != 0) throw Error("[cuda] attention: q heads must be a multiple of kv heads");
  if (s.d > kMaxHeadDim)
    throw Error("[cuda] attention: head dim " + std::to_string(s.d) + " above " +
                std::to_string(kMaxHeadDim));
  if (s.causal && s.t > s.s)
    throw Error("[cuda] attention: a causal mask needs at least as many keys as queries");
  // The kernels stage queries times scale·log2 e in f32: that product must be finite too.
  if (!std::isfinite(s.scale) || !std::isfinite(static_cast<float>(s.scale * 1.4426950408889634)))
    throw Error("[cuda] attention: the scale must be finite (and scale·log2 e a finite float), got " +
                std::to_string(s.scale));
  if (s.t > (int64_t{1} << 30) || s.s > (int64_t{1} << 30))
    throw Error("[cuda] attention: sequence too long");
  // q, k, v (and the backward's dout) share one element type, f32, bf16 or f16; the forward's
  // out is f32.
  if (q.dtype != DType::kF32 && !is_half(q.dtype))
    throw Error(std::string("[cuda] attention: q is ") + dtype_name(q.dtype) + ", expected f32, bf16 or f16");
  check_operand(q, {s.batch, s.q_heads, s.t, s.d}, "q", q.dtype);
  check_operand(k, {s.batch, s.kv_heads, s.s, s.d}, "k", q.dtype);
  check_operand(v, {s.batch, s.kv_heads, s.s, s.d}, "v", q.dtype);
  check_operand(o, {s.batch, s.q_heads, s.t, s.d}, o_name, o_dtype);
  if (!attention_operand_ok(o))
    throw Error(std::string("[cuda] attention: operand ") + o_name + " needs unit stride along the head dim");
}

/// A piece of the attention templates (kernels/attention_*.cuh).
std::string piece(const char* file, const char* name) { return std::string(kernel_source(file, name)); }

/// The fp32 tiled path's device helpers, then one kernel's device function (forward, dkdv or dq).
std::string tiled(const char* kernel) {
  return piece("attention_tiled.cuh", "helpers") + piece("attention_tiled.cuh", kernel);
}

/// The constants of the problem itself (shapes, strides, scale, mask), shared by every path.
/// O0..O3 are the strides of the forward's out or of the backward's dout.
std::string shape_constants(const AttentionShape& s, const Operand& q, const Operand& k, const Operand& v,
                            const Operand& o) {
  std::string c = q.dtype == DType::kBF16  ? "typedef unsigned short IN_T;  // q, k, v, dout: bf16 bits\n"
                  : q.dtype == DType::kF16 ? "typedef unsigned short IN_T;  // q, k, v, dout: f16 bits\n"
                                           : "typedef float IN_T;  // q, k, v, dout\n";
  c += std::string("#define HALF_F16 ") + (q.dtype == DType::kF16 ? "1" : "0") + "\n";
  c += kernel_source("prelude.cuh", "widen");
  c += kernel_source("half_loads.cuh", "loads");
  auto i = [&](const char* n, int64_t x) {
    c += std::string("constexpr int ") + n + " = " + std::to_string(x) + ";\n";
  };
  auto l = [&](const char* n, int64_t x) {
    c += std::string("constexpr long long ") + n + " = " + ll(x) + ";\n";
  };
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
  c += std::string("constexpr bool GRADS_BTHD = ") + (s.grads_bthd ? "true" : "false") + ";\n";
  c += std::string("constexpr bool GRADS_PACKED = ") + (s.grads_packed ? "true" : "false") + ";\n";
  c += std::string("constexpr bool MASKED = ") + (s.key_mask ? "true" : "false") + ";\n";
  l("GRS", (s.q_heads + 2 * s.kv_heads) * s.d);  // a packed gradient's row: [dq | dk | dv] of one token
  return c;
}

/// The constants every kernel of the fp32 tiled path is specialised to, then the shared
/// device helpers (kernels/attention_common.cuh).
std::string constants(const AttentionShape& s, const Geometry& g, const Operand& q, const Operand& k,
                      const Operand& v, const Operand& o) {
  std::string c = "#define NT " + std::to_string(32 * g.warps) + "\n";
  auto i = [&](const char* n, int64_t x) {
    c += std::string("constexpr int ") + n + " = " + std::to_string(x) + ";\n";
  };
  i("RPT", g.rpt), i("CPT", g.cpt), i("BR", g.br), i("BC", g.bc), i("DW", g.dw), i("VW", g.vw), i("DP", g.dp);
  i("RS", g.rs), i("TS", g.ts), i("PS", g.ps), i("OC", g.oc);
  return c + shape_constants(s, q, k, v, o) + piece("attention_common.cuh", "common");
}

constexpr const char* kGradParams =
    "(const IN_T* __restrict__ q, const IN_T* __restrict__ k, const IN_T* __restrict__ v, "
    "const IN_T* __restrict__ dout, float* __restrict__ grads, float* __restrict__ scratch";

/// A kernel's head: `params` is the list without its closing parenthesis, to which the key
/// mask is appended when the kernel reads one.
std::string attention_head(const std::string& name, const char* params, bool key_mask) {
  return "extern \"C\" __global__ void __launch_bounds__(NT) " + name + params +
         (key_mask ? ", const unsigned char* __restrict__ kmask)" : ")");
}
/// The device functions' last argument: the key mask, or none.
std::string mask_arg(const AttentionShape& s) { return s.key_mask ? "kmask" : "nullptr"; }

Launch make_launch_raw(const std::string& name, std::string source, int64_t threads, int64_t blocks,
                       int64_t shared_floats) {
  if (blocks > 0x7fffffff) throw Error("[cuda] attention: too many blocks for one launch");
  const int64_t bytes = shared_floats * 4;
  Launch l;
  l.name = name;
  l.source = std::move(source);
  l.grid[0] = static_cast<unsigned>(blocks);
  l.block[0] = static_cast<unsigned>(threads);
  l.shared_bytes = static_cast<unsigned>(bytes);
  return l;
}

/// A launch of the fp32 tiled path: 32·warps threads a block.
Launch make_launch(const std::string& name, std::string source, const Geometry& g, int64_t blocks,
                   int64_t shared_floats) {
  return make_launch_raw(name, std::move(source), 32 * g.warps, blocks, shared_floats);
}

int64_t row_tiles(int64_t n, const Geometry& g) { return (n + g.br - 1) / g.br; }

/// The small-problem path (see kernels/attention_small.cuh): ng (kv groups per block) is 0 where it does not
/// apply.
struct SmallPlan {
  int64_t ng = 0, threads = 0, blocks = 0, shared_floats = 0, ds = 0;
};

SmallPlan small_plan(const AttentionShape& s, bool backward) {
  SmallPlan p;
  const int64_t qpg = s.t * (s.q_heads / s.kv_heads), groups = s.batch * s.kv_heads;
  // Backward: a key thread keeps its k, v rows and dk, dv accumulators in registers (4·D).
  if (s.key_mask || s.t > 64 || s.s > 64 || s.d > (backward ? 32 : 64) || qpg > 256) return p;
  p.ds = s.d + 1;
  auto floats = [&](int64_t ng) {
    return backward ? ng * (2 * qpg * p.ds + 2 * s.s * p.ds + 2 * qpg) : ng * 2 * s.s * p.ds;
  };
  if (floats(1) * 4 > 96 * 1024) return p;
  const int64_t rows = backward ? std::max(qpg, s.s) : qpg;
  // About 128 threads per block, but enough blocks to cover the GPU twice over.
  if (s.sm_count <= 0)
    throw Error("[cuda] attention: AttentionShape::sm_count (the device's SM count) is not set");
  int64_t ng = std::max<int64_t>(1, std::min(128 / rows, groups / (2 * s.sm_count)));
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

/// The TF32 tensor-core path (see kernels/attention_mma.cuh).
struct MmaGeometry {
  int64_t warps, br, bc, dp, rs;
};

/// bf16 and f16 q, k, v take the tensor-core path too, in its 16-bit form
/// (attention_mma_bf16.cuh).
bool use_mma(const AttentionShape& s, const Operand& q) { return (s.tf32 || is_half(q.dtype)) && s.d <= 128; }

/// bf16: tiles of bf16 (DP a multiple of 16, RS = DP + 8 elements; attention_mma_bf16.cuh).
MmaGeometry mma_geometry(const AttentionShape& s, Kind kind, bool bf16) {
  const int64_t d = s.d, t = s.t;
  MmaGeometry g{};
  // Forward: 32-key tiles (8 warps from T = 512 up, for more rows in flight); dkdv: 8 warps ×
  // 64 queries; dq: from T = 256 up 8 warps × 16 keys (16 warps × 32 would be 512 threads,
  // which cap registers at 128 a thread and spill), shorter sequences 4 warps × 32. The test's
  // TileSweep compares geometries through AttentionShape::tiles.
  const bool long_dq = kind == Kind::kDq && t >= 256 && d <= 64;
  g.warps = kind == Kind::kDkDv || (kind == Kind::kForward && t >= 512) || long_dq ? 8 : 4;
  g.bc = kind == Kind::kDkDv ? 64 : long_dq ? 16 : 32;
  if (d > 64) g.bc = 32;  // accumulators of larger heads leave fewer registers for the scores
  // Tuning override (AttentionShape::tiles): "<kind>:<warps>,<bc>;..." with kind f, k or q.
  const char want = kind == Kind::kForward ? 'f' : kind == Kind::kDkDv ? 'k' : 'q';
  for (const char* p = s.tiles.c_str(); *p; ++p) {
    int w = 0, c = 0;
    if (p[0] != want || p[1] != ':' || std::sscanf(p + 2, "%d,%d", &w, &c) != 2) continue;
    if (w < 1 || w > 16 || c < 8 || c > 128 || c % (bf16 ? 16 : 8) != 0)
      throw Error(std::string("[cuda] attention tiles: bad entry ") + p);
    g.warps = w, g.bc = c;
  }
  g.br = 16 * g.warps;
  g.dp = round_up(d, bf16 ? 16 : 8);
  g.rs = g.dp + (bf16 ? 8 : 4);
  return g;
}

/// The piece of a tensor-core path and the shared memory of `rows` staged rows plus `extra`
/// floats, in floats (bf16 tiles take half the bytes).
const char* mma_piece(bool bf16) { return bf16 ? "mma_bf16" : "mma"; }
int64_t mma_shared_floats(const MmaGeometry& g, int64_t rows, int64_t extra, bool bf16) {
  return (bf16 ? (rows * g.rs + 1) / 2 : rows * g.rs) + extra;
}

std::string mma_constants(const AttentionShape& s, const MmaGeometry& g, const Operand& q, const Operand& k,
                          const Operand& v, const Operand& o) {
  std::string c = "#define NT " + std::to_string(32 * g.warps) + "\n";
  auto i = [&](const char* n, int64_t x) {
    c += std::string("constexpr int ") + n + " = " + std::to_string(x) + ";\n";
  };
  i("BR", g.br), i("BC", g.bc), i("DP", g.dp), i("RS", g.rs);
  return c + shape_constants(s, q, k, v, o) + piece("attention_common.cuh", "common");
}

}  // namespace

bool attention_operand_ok(const Operand& op) {
  // Any batch / head / row strides; unit stride along D keeps the staging loads coalesced
  // (16-byte loads where rows_vec finds the rows aligned, element loads otherwise, so no
  // alignment is needed).
  return (op.dtype == DType::kF32 || is_half(op.dtype)) && op.shape.size() == 4 && op.strides.size() == 4 &&
         (op.strides[3] == 1 || op.shape[3] <= 1);
}

bool attention_keeps_stats(const AttentionShape& s) {
  return small_plan(s, false).ng == 0 && small_plan(s, true).ng == 0;
}

Launch attention_kernel(const std::string& name, const AttentionShape& s, const Operand& q, const Operand& k,
                        const Operand& v, const Operand& out, bool keep_stats) {
  check_shape(s, q, k, v, out, "out", DType::kF32);
  if (keep_stats && !attention_keeps_stats(s))
    throw Error("[cuda] attention: this shape's forward keeps no statistics");
  const std::string call =
      (keep_stats ? "<OUT_LSE>(q, k, v, out, nullptr, stats, " : "<OUT>(q, k, v, out, nullptr, nullptr, ") +
      mask_arg(s) + ");\n}\n";
  const char* params =
      keep_stats ? "(const IN_T* __restrict__ q, const IN_T* __restrict__ k, const IN_T* __restrict__ v, "
                   "float* __restrict__ out, float* __restrict__ stats"
                 : "(const IN_T* __restrict__ q, const IN_T* __restrict__ k, const IN_T* __restrict__ v, "
                   "float* __restrict__ out";
  if (const SmallPlan sp = small_plan(s, false); sp.ng > 0) {
    std::string src = small_constants(s, sp, q, k, v, out) + piece("attention_small.cuh", "small") +
                      attention_head(name, params, s.key_mask) + " {\n  small_forward(q, k, v, out);\n}\n";
    return make_launch_raw(name, std::move(src), sp.threads, sp.blocks, sp.shared_floats);
  }
  if (use_mma(s, q)) {
    const bool bf16 = is_half(q.dtype);  // bf16 or f16 tiles
    const MmaGeometry g = mma_geometry(s, Kind::kForward, bf16);
    std::string src = mma_constants(s, g, q, k, v, out) +
                      piece(bf16 ? "attention_mma_bf16.cuh" : "attention_mma.cuh", mma_piece(bf16)) +
                      attention_head(name, params, s.key_mask) + " {\n  mma_forward" + call;
    return make_launch_raw(name, std::move(src), 32 * g.warps, ceil_div(s.t, g.br) * s.batch * s.q_heads,
                           mma_shared_floats(g, g.br + 2 * g.bc, 0, bf16));
  }
  const Geometry g = geometry(s, Kind::kForward);
  std::string src = constants(s, g, q, k, v, out) + tiled("forward") +
                    attention_head(name, params, s.key_mask) + " {\n  forward_rows" + call;
  return make_launch(name, std::move(src), g, row_tiles(s.t, g) * s.batch * s.q_heads,
                     g.dw * g.ts + 2 * g.bc * g.rs + g.warps * g.bc * g.ps);
}

namespace {

/// delta = Σ_d dO·O per query row from the forward's stored output (strides P0..P3) into the
/// second half of the stats buffer: one warp per row.
Launch delta_kernel(const std::string& name, const AttentionShape& s, const Operand& q, const Operand& k,
                    const Operand& v, const Operand& dout, const Operand& out) {
  const std::string head = "constexpr long long P0 = " + ll(out.strides[0]) + ", P1 = " + ll(out.strides[1]) +
                           ", P2 = " + ll(out.strides[2]) + ", P3 = " + ll(out.strides[3]) + ";\n";
  std::string src =
      "#define NT 256\n" + shape_constants(s, q, k, v, dout) + head +
      attention_head(
          name, "(const float* __restrict__ out, const IN_T* __restrict__ dout, float* __restrict__ stats",
          false) +
      R"( {
  const long long row = (long long)blockIdx.x * (NT / 32) + (threadIdx.x >> 5);
  if (row >= NROWS) return;
  const int lane = threadIdx.x & 31;
  const long long bh = row / T, t = row % T, b = bh / HQ, h = bh % HQ;
  const float* o = out + b * P0 + h * P1 + t * P2;
  const IN_T* g = dout + b * O0 + h * O1 + t * O2;
  float dot = 0.f;
  for (int d = lane; d < D; d += 32) dot = fmaf(o[d * P3], in_ld(g + d * O3), dot);
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, m);
  if (lane == 0) stats[NROWS + row] = dot;
}
)";
  return make_launch_raw(name, std::move(src), 256, ceil_div(s.batch * s.q_heads * s.t, 8), 0);
}

}  // namespace

AttentionGradPlan attention_grad_kernels(const std::string& name, const AttentionShape& s, const Operand& q,
                                         const Operand& k, const Operand& v, const Operand& dout,
                                         const Operand* out) {
  check_shape(s, q, k, v, dout, "dout", q.dtype);
  AttentionGradPlan plan;
  if (const SmallPlan sp = small_plan(s, true); sp.ng > 0) {
    if (out) throw Error("[cuda] attention: the short-sequence backward reads no forward statistics");
    if (s.grads_bthd)
      throw Error(
          "[cuda] attention: the short-sequence backward writes [B, H, T, D] or packed gradients only");
    // One launch computes everything; the scratch is unused.
    plan.scratch_floats = 0;
    std::string src = small_constants(s, sp, q, k, v, dout) + piece("attention_small.cuh", "small") +
                      attention_head(name, kGradParams, s.key_mask) +
                      " {\n  (void)scratch;\n  small_backward(q, k, v, dout, grads);\n}\n";
    plan.launches.push_back(make_launch_raw(name, std::move(src), sp.threads, sp.blocks, sp.shared_floats));
    return plan;
  }
  plan.scratch_floats = 2 * s.batch * s.q_heads * s.t;
  const std::string stats = name + "_stats", dkdv = name + "_dkdv", dq = name + "_dq";
  if (out) {
    if (!attention_keeps_stats(s)) throw Error("[cuda] attention: this shape's forward keeps no statistics");
    check_operand(*out, dout.shape, "out", DType::kF32);
    plan.delta_from_out = true;
    plan.launches.push_back(delta_kernel(name + "_delta", s, q, k, v, dout, *out));
  }
  if (use_mma(s, q)) {
    const bool bf16 = is_half(q.dtype);  // bf16 or f16 tiles
    const MmaGeometry gf = mma_geometry(s, Kind::kForward, bf16), gk = mma_geometry(s, Kind::kDkDv, bf16),
                      gq = mma_geometry(s, Kind::kDq, bf16);
    const std::string body = piece(bf16 ? "attention_mma_bf16.cuh" : "attention_mma.cuh", mma_piece(bf16));
    if (!out)
      plan.launches.push_back(make_launch_raw(
          stats,
          mma_constants(s, gf, q, k, v, dout) + body + attention_head(stats, kGradParams, s.key_mask) +
              " {\n  (void)grads;\n  mma_forward<STATS>(q, k, v, nullptr, dout, scratch, " + mask_arg(s) +
              ");\n}\n",
          32 * gf.warps, ceil_div(s.t, gf.br) * s.batch * s.q_heads,
          mma_shared_floats(gf, gf.br + 2 * gf.bc, 0, bf16)));
    plan.launches.push_back(make_launch_raw(
        dkdv,
        mma_constants(s, gk, q, k, v, dout) + body + attention_head(dkdv, kGradParams, s.key_mask) +
            " {\n  mma_dkdv(q, k, v, dout, grads, scratch, " + mask_arg(s) + ");\n}\n",
        32 * gk.warps, ceil_div(s.s, gk.br) * s.batch * s.kv_heads,
        mma_shared_floats(gk, 2 * gk.br + 2 * gk.bc, 2 * gk.bc, bf16)));
    plan.launches.push_back(make_launch_raw(
        dq,
        mma_constants(s, gq, q, k, v, dout) + body + attention_head(dq, kGradParams, s.key_mask) +
            " {\n  mma_dq(q, k, v, dout, grads, scratch, " + mask_arg(s) + ");\n}\n",
        32 * gq.warps, ceil_div(s.t, gq.br) * s.batch * s.q_heads,
        mma_shared_floats(gq, 2 * gq.br + 2 * gq.bc, 0, bf16)));
    return plan;
  }
  const Geometry gf = geometry(s, Kind::kForward), gk = geometry(s, Kind::kDkDv), gq = geometry(s, Kind::kDq);
  if (!out)
    plan.launches.push_back(make_launch(
        stats,
        constants(s, gf, q, k, v, dout) + tiled("forward") + attention_head(stats, kGradParams, s.key_mask) +
            " {\n  (void)grads;\n  forward_rows<STATS>(q, k, v, nullptr, dout, scratch, " + mask_arg(s) +
            ");\n}\n",
        gf, row_tiles(s.t, gf) * s.batch * s.q_heads,
        gf.dw * gf.ts + 2 * gf.bc * gf.rs + gf.warps * gf.bc * gf.ps));
  plan.launches.push_back(make_launch(
      dkdv,
      constants(s, gk, q, k, v, dout) + tiled("dkdv") + attention_head(dkdv, kGradParams, s.key_mask) +
          " {\n  dkdv_rows(q, k, v, dout, grads, scratch, " + mask_arg(s) + ");\n}\n",
      gk, row_tiles(s.s, gk) * s.batch * s.kv_heads,
      2 * gk.dw * gk.ts + 2 * gk.bc * gk.rs + 2 * gk.bc + gk.warps * gk.bc * gk.ps));
  plan.launches.push_back(make_launch(
      dq,
      constants(s, gq, q, k, v, dout) + tiled("dq") + attention_head(dq, kGradParams, s.key_mask) +
          " {\n  dq_rows(q, k, v, dout, grads, scratch, " + mask_arg(s) + ");\n}\n",
      gq, row_tiles(s.t, gq) * s.batch * s.q_heads,
      2 * gq.dw * gq.ts + 2 * gq.bc * gq.rs + gq.warps * gq.bc * gq.ps));
  return plan;
}

}  // namespace tg::backend::cuda
