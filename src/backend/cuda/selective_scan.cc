// CUDA kernels for selective_scan and its gradient (ops.def): a chunked parallel scan over time.
//
// The recurrence h_l = a_l·h_{l−1} + b_l (a_l = exp(δ_l·A_n), b_l = δ_l·u_l·B_{n,l}) is split
// into chunks of LC = 32 steps. One thread owns one (batch, channel, state, chunk): the states of
// a channel sit in W consecutive lanes (W = N rounded up to a power of two), so a thread walks
// its chunk with one exp per step and keeps the chunk's a_l and h_l in registers. A block takes
// one chunk of DT channels (≤ 128 threads) and stages their inputs in shared memory first.
//
//   1. chunk:   each chunk from a zero state → its local end state and Σδ (the chunk's decay is
//               exp(A·Σδ)); for the gradient also the local adjoint leaving its left edge.
//   2. combine: per (batch, channel, state), chunks in order with the associative combine
//               (a1, b1)∘(a2, b2) = (a1·a2, a2·b1 + b2) → the state entering each chunk (kept:
//               the only per-chunk states stored) and the last state; for the gradient, the
//               same from the right for the adjoint entering each chunk (its own threads).
//   3. output:  y: each chunk re-walked from its entering state; y_l = Σ_n C·h is a reduction
//               over the W lanes, done as a reduce-scatter over W steps at a time (W − 1
//               shuffles per W outputs). gradient: the chunk's states recomputed forward, then
//               walked backwards with g_l = C_l·dy_l + a_{l+1}·g_{l+1}: du and dδ reduce over
//               the lanes as y does; dB and dC sum over channels: within the warp by shuffles,
//               over the block's warps in a fixed order through shared memory, and over the
//               block's passes (TD channels, DT at a time) in registers, into one partial per
//               TD channels. dA's terms are per thread, one partial per chunk.
//   4. reduce (gradient): dA over batch and chunks, dB and dC over a group's partials, in a
//               fixed order.
//
// No atomics anywhere: every sum has a fixed order, so the result does not depend on timing.
// What moves beyond the floor: u and δ read twice (steps 1 and 3), the per-chunk states
// (B·D·N·L/32 floats, 1/32 of one input each) and the dB/dC partials (B·N·L per TD channels).
// What bounds it now is issue and shared-memory bandwidth, not DRAM: a lane reads its
// channel's δ, u and dy once per state (16×), and the cross-lane sums cost shuffles per step.
#include <algorithm>
#include <string>

#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

constexpr int kChunk = 32;  // LC: steps per chunk (registers hold a and h for each)

// Shared memory of a block: its staged rows ([rows·DT + 2·W][LC + 4]) and, in the backward,
// every step's dB/dC terms per warp ([2][WARPS][LC][W]).
int64_t scan_shared_bytes(int64_t lanes, int64_t tile, int rows, bool terms) {
  const int64_t staged = (rows * tile + 2 * lanes) * (kChunk + 4) * 4;
  return staged + (terms ? 2 * std::max<int64_t>(tile * lanes / 32, 1) * kChunk * lanes * 4 : 0);
}

int lanes_of(int64_t states) {
  int w = 1;
  while (w < states) w *= 2;
  return w;
}

unsigned mask_for(int64_t threads) { return threads >= 32 ? 0xffffffffu : (1u << threads) - 1u; }

// Constants and helpers of every kernel.
std::string prelude(const ScanShape& s) {
  const ScanLayout lay = scan_layout(s);
  std::string p = "constexpr int B = " + std::to_string(s.batch) + ", D = " + std::to_string(s.channels) +
                  ", L = " + std::to_string(s.length) + ", G = " + std::to_string(s.groups) + ", N = " +
                  std::to_string(s.states) + ", PER = " + std::to_string(s.channels / std::max<int64_t>(s.groups, 1)) +
                  ", W = " + std::to_string(lay.lanes) + ", LC = " + std::to_string(kChunk) + ", LS = LC + 4, NCH = " +
                  std::to_string(lay.chunks) + ", DT = " + std::to_string(lay.tile) + ", TD = " +
                  std::to_string(lay.span) + ", SPANS = " + std::to_string(lay.spans) + ";\n";
  p += "constexpr long long NU = (long long)B * D * L;\n";
  // exp(δ·A) as 2^(δ·A·log2 e): one MUFU instruction (relative error ~2^-22; results below
  // 2^-126 flush to 0, where they add nothing to a state anyway).
  // reduce_scatter: the sums over the W lanes of W values v[j] (step j of a group): lane n ends
  // with the sum for step n. Each level swaps the half this lane does not keep with its partner;
  // the values are swapped, never the indices, and the levels are a template recursion, so
  // everything unrolls and v stays in registers. reduce_scatter2 does two groups at once.
  p += R"(
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
template <int S>  // one level per call: keep the half of v at bit S of the lane, add the partner's copy
__device__ __forceinline__ void reduce_level(float (&v)[W], unsigned mask) {
  if constexpr (S > 0) {
    const bool upper = (threadIdx.x % W & S) != 0;
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const float v0 = v[i], v1 = v[i + S];
      v[i] = (upper ? v1 : v0) + __shfl_xor_sync(mask, upper ? v0 : v1, S);
    }
    reduce_level<S / 2>(v, mask);
  }
}
__device__ __forceinline__ float reduce_scatter(float (&v)[W], unsigned mask) {
  reduce_level<W / 2>(v, mask);
  return v[0];
}
__device__ __forceinline__ void reduce_scatter2(float (&v)[W], float (&w)[W], unsigned mask) {
  reduce_level<W / 2>(v, mask);
  reduce_level<W / 2>(w, mask);
}
)";
  return p;
}

// The block of the chunk, output and backward kernels: DT channels (of one group) × W lanes,
// one chunk, one sequence; grid (tiles, chunks, batch). The block's inputs for its chunk are
// staged in shared memory by coalesced loads, rows of LS = LC + 4 floats: a lane reads four
// steps at once (16-byte aligned), and the lanes reading rows n of B and C fall in distinct
// banks. Read straight from global memory, a lane's steps miss L1 (its rows lie L floats apart).
std::string block_prelude(const ScanShape& s, int rows, bool span) {
  const ScanLayout lay = scan_layout(s);
  const int64_t threads = lay.tile * lay.lanes;
  std::string p = prelude(s);
  p += "constexpr int CPB = " + std::string(span ? "TD" : "DT") + ";  // channels per block\n";
  p += "constexpr int NT = " + std::to_string(threads) + ", ROWS = " + std::to_string(rows) + ", LANES = " +
       std::to_string(std::min<int64_t>(threads, 32)) + ", WARPS = " + std::to_string((threads + 31) / 32) +
       ";\nconstexpr unsigned MASK = " + std::to_string(mask_for(threads)) + "u;\n";
  // Staging: each row is LC steps of one channel (or state) from `first`, rows L apart; rows
  // from `valid` on and steps from tl on are 0. Full chunks of 16-byte aligned rows move four
  // steps per thread at a time; offsets within the block are 32-bit (scan_layout checks).
  p += R"(template <int R, bool PROD>  // R rows; PROD: the product src·x (δ·u)
__device__ __forceinline__ void load_rows(float (*dst)[LS], const float* __restrict__ src, const float* __restrict__ x,
                                          long long first, int valid, int tl) {
  const float* s = src + first;
  const float* xs = PROD ? x + first : s;
  if (L % 4 == 0 && tl == LC && ((reinterpret_cast<unsigned long long>(s) | reinterpret_cast<unsigned long long>(xs)) & 15) == 0) {
#pragma unroll
    for (int e0 = 0; e0 < R * (LC / 4); e0 += NT) {
      const int e = e0 + threadIdx.x, r = e / (LC / 4), c = e % (LC / 4) * 4;
      if (e0 + NT <= R * (LC / 4) || e < R * (LC / 4)) {
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < valid) {
          v = *reinterpret_cast<const float4*>(s + r * L + c);
          if (PROD) {
            const float4 w = *reinterpret_cast<const float4*>(xs + r * L + c);
            v = make_float4(v.x * w.x, v.y * w.y, v.z * w.z, v.w * w.w);
          }
        }
        *reinterpret_cast<float4*>(&dst[r][c]) = v;
      }
    }
  } else {
    for (int e = threadIdx.x; e < R * LC; e += NT) {
      const int r = e / LC, c = e % LC;
      dst[r][c] = (r < valid && c < tl) ? (PROD ? s[r * L + c] * xs[r * L + c] : s[r * L + c]) : 0.0f;
    }
  }
}
__device__ __forceinline__ void store_rows(float* __restrict__ dst, const float (*src)[LS], long long first, int tl) {
  float* o = dst + first;
  if (L % 4 == 0 && tl == LC && (reinterpret_cast<unsigned long long>(o) & 15) == 0) {
#pragma unroll
    for (int e0 = 0; e0 < DT * (LC / 4); e0 += NT) {
      const int e = e0 + threadIdx.x, r = e / (LC / 4), c = e % (LC / 4) * 4;
      if (e0 + NT <= DT * (LC / 4) || e < DT * (LC / 4))
        *reinterpret_cast<float4*>(o + r * L + c) = *reinterpret_cast<const float4*>(&src[r][c]);
    }
  } else {
    for (int e = threadIdx.x; e < DT * LC; e += NT) {
      const int r = e / LC, c = e % LC;
      if (c < tl) o[r * L + c] = src[r][c];
    }
  }
}
__device__ __forceinline__ void row4(const float (*tile)[LS], int r, int t, float (&v)[4]) {
  const float4 q = *reinterpret_cast<const float4*>(&tile[r][t]);
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
}
// A lane's walk over its chunk from state h: every a_t and h_t into as and hv (the caller
// keeps what it needs), the end state returned. x is δ·u staged, or u (TIMES_DELTA: ·δ here).
template <bool TIMES_DELTA>
__device__ __forceinline__ float walk_forward(const float (*sd)[LS], const float (*sx)[LS], const float (*sb)[LS], int dl, int n,
                                              float a2, float h, float (&as)[LC], float (&hv)[LC]) {
#pragma unroll
  for (int t4 = 0; t4 < LC; t4 += 4) {
    float dv[4], xv[4], bv[4];
    row4(sd, dl, t4, dv);
    row4(sx, dl, t4, xv);
    row4(sb, n, t4, bv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      as[t4 + j] = exp2_approx(dv[j] * a2);
      h = fmaf(as[t4 + j], h, (TIMES_DELTA ? dv[j] * xv[j] : xv[j]) * bv[j]);
      hv[t4 + j] = h;
    }
  }
  return h;
}
)";
  return p;
}

// Coordinates and the staged tiles: s0, s1, s2 [DT][LS] (the kernel names them), sb, sc [W][LS]
// (the block's group's B and C). kChannel: this thread's channel d, in a pass starting at
// channel dp; a lane's a_l is 2^(δ_l·a2).
const char* kBlockStart = R"(  extern __shared__ float4 smem4[];
  float (*s0)[LS] = reinterpret_cast<float (*)[LS]>(smem4);
  float (*s1)[LS] = s0 + DT;
  float (*s2)[LS] = s1 + DT;  // only when ROWS == 3
  float (*sb)[LS] = s0 + ROWS * DT;
  float (*sc)[LS] = sb + W;
  const int n = threadIdx.x % W, dl = threadIdx.x / W, d0 = blockIdx.x * CPB, c = blockIdx.y, b = blockIdx.z;
  const bool live = n < N;
  const int l0 = c * LC, tl = min(LC, L - l0);
  const long long bc0 = (((long long)b * G + d0 / PER) * N) * L + l0;
  load_rows<W, false>(sb, Bm, nullptr, bc0, N, tl);
  load_rows<W, false>(sc, Cm, nullptr, bc0, N, tl);
)";
const char* kChannel = R"(    const int d = dp + dl;
    const long long rows0 = ((long long)b * D + dp) * L + l0;  // the pass's first row
    const long long cs = ((long long)b * D + d) * NCH + c;     // this channel's chunk slot
    const float a_n = live ? A[d * N + n] : 0.0f, a2 = a_n * 1.4426950408889634f;
)";

Launch block_launch(const std::string& name, const ScanShape& s, int rows, bool terms) {
  const ScanLayout lay = scan_layout(s);
  Launch l;
  l.name = name;
  l.block[0] = static_cast<unsigned>(lay.tile * lay.lanes);
  l.grid[0] = static_cast<unsigned>(terms ? lay.spans : lay.tiles);
  l.grid[1] = static_cast<unsigned>(lay.chunks);
  l.grid[2] = static_cast<unsigned>(std::max<int64_t>(s.batch, 1));
  l.shared_bytes = static_cast<unsigned>(scan_shared_bytes(lay.lanes, lay.tile, rows, terms));
  return l;
}

}  // namespace

ScanLayout scan_layout(const ScanShape& s) {
  if (s.states > 32)
    throw Error("[cuda] selective_scan keeps a channel's states in the lanes of one warp: d_state up to 32, got " +
                std::to_string(s.states));
  ScanLayout lay;
  lay.lanes = lanes_of(s.states);
  lay.chunks = std::max<int64_t>((s.length + kChunk - 1) / kChunk, 1);
  if (lay.chunks > 65535 || s.batch > 65535)
    throw Error("[cuda] selective_scan: length " + std::to_string(s.length) + " and batch " + std::to_string(s.batch) +
                " must stay below 65535·32 steps and 65535 sequences");
  // Channels per block pass (DT): a power of two that divides a group's channels (a block
  // stages one group's B and C), 128 threads at most: small blocks keep several per SM, so one
  // block's staging overlaps another's walk. The backward's block spans TD channels (DT at a
  // time, up to 32) and writes one dB/dC partial for them: fewer partials to write and add.
  const int64_t per = s.channels / std::max<int64_t>(s.groups, 1);
  int64_t dt = 1;
  while (per % (dt * 2) == 0 && dt * 2 * lay.lanes <= 128) dt *= 2;
  int64_t td = dt;
  while (per % (td * 2) == 0 && td * 2 <= 32) td *= 2;
  lay.tile = dt;
  lay.tiles = s.channels / dt;
  lay.span = td;
  lay.spans = s.channels / td;
  if (std::max<int64_t>(td, lay.lanes) * s.length >= (int64_t{1} << 31))
    throw Error("[cuda] selective_scan: length " + std::to_string(s.length) + " is too long for 32-bit offsets within a block");
  lay.state_floats = s.batch * s.channels * lay.chunks * s.states;
  lay.sum_floats = s.batch * s.channels * lay.chunks;
  lay.da_floats = s.batch * lay.chunks * s.channels * s.states;
  lay.dbc_floats = s.batch * lay.spans * s.states * s.length;
  return lay;
}

Launch scan_chunk_kernel(const std::string& name, const ScanShape& s, bool grad) {
  const int rows = grad ? 3 : 2;
  Launch l = block_launch(name, s, rows, false);
  std::string src = "// selective_scan, step 1: each chunk from a zero state" +
                    std::string(grad ? " (and its adjoint from the right)" : "") + " (selective_scan.cc)\n" + block_prelude(s, rows, false);
  src += "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
         "(const float* __restrict__ u, const float* __restrict__ delta, const float* __restrict__ A, "
         "const float* __restrict__ Bm, const float* __restrict__ Cm, " +
         (grad ? "const float* __restrict__ dout, " : "") + "float* __restrict__ hs, float* __restrict__ sdel" +
         (grad ? ", float* __restrict__ es" : "") + ") {\n";
  if (!grad) src += "  const float* const dout = nullptr;\n  float* const es = nullptr;\n";
  src += kBlockStart;
  src += "    const int dp = d0;\n";
  src += kChannel;
  src += R"(  float (*sd)[LS] = s0, (*sx)[LS] = s1, (*sy)[LS] = s2;  // δ, δ·u, dy
  load_rows<DT, false>(sd, delta, nullptr, rows0, DT, tl);
  load_rows<DT, true>(sx, delta, u, rows0, DT, tl);
  if (ROWS == 3) load_rows<DT, false>(sy, dout, nullptr, rows0, DT, tl);
  __syncthreads();
  if (threadIdx.x < DT) {  // Σδ of a channel: the chunk's decay is 2^(a2·Σδ)
    float sum = 0.0f;
    for (int t = 0; t < LC; ++t) sum += sd[threadIdx.x][t];
    sdel[((long long)b * D + dp + threadIdx.x) * NCH + c] = sum;
  }
  if (!live) return;  // past the only barrier; no shuffles here
  // No step needs a guard: past tl the staged δ, δ·u, B and C are 0, so a = 1 and nothing is added.
  float as[LC], hv[LC];
  hs[cs * N + n] = walk_forward<false>(sd, sx, sb, dl, n, a2, 0.0f, as, hv);
  if (ROWS == 3) {  // g_l = C_l·dy_l + a_{l+1}·g_{l+1} from zero at the right edge; a_{l0}·g_{l0} leaves
    float gn = 0.0f;
#pragma unroll
    for (int t4 = LC - 4; t4 >= 0; t4 -= 4) {
      float cv[4], yv[4];
      row4(sc, n, t4, cv);
      row4(sy, dl, t4, yv);
#pragma unroll
      for (int j = 3; j >= 0; --j) gn = as[t4 + j] * fmaf(cv[j], yv[j], gn);
    }
    es[cs * N + n] = gn;
  }
}
)";
  l.source = std::move(src);
  return l;
}

Launch scan_combine_kernel(const std::string& name, const ScanShape& s, bool grad) {
  const int64_t threads = (grad ? 2 : 1) * s.batch * s.channels * s.states;  // the gradient's two directions apart
  Launch l;
  l.name = name;
  l.block[0] = 256;
  l.grid[0] = static_cast<unsigned>(std::max<int64_t>((threads + 255) / 256, 1));
  std::string src = "// selective_scan, step 2: the states entering each chunk" +
                    std::string(grad ? " and the adjoints entering from the right" : " and the last state") +
                    " (selective_scan.cc)\n" + prelude(s);
  src += "extern \"C\" __global__ void " + name + "(const float* __restrict__ A, const float* __restrict__ sdel, float* __restrict__ hs, " +
         (grad ? "float* __restrict__ es, const float* __restrict__ dout" : "float* __restrict__ out") + ") {\n";
  src += std::string("  constexpr bool GRAD = ") + (grad ? "true" : "false") + ";\n";
  src += grad ? "  float* const out = nullptr;\n" : "  float* const es = nullptr;\n  const float* const dout = nullptr;\n";
  src += R"(  constexpr long long S = (long long)B * D * N;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (GRAD ? 2 : 1) * S) return;
  const bool backward = i >= S;  // the gradient's adjoints, from the right
  if (backward) i -= S;
  const int n = (int)(i % N);
  const long long bd = i / N;
  const float a_n = A[(bd % D) * N + n];
  // Eight chunks at a time: their loads are issued together, then the chain of combines runs.
  if (!backward) {  // hs: the chunk's local end state in, the state entering it out
    float h = 0.0f;
    for (int c0 = 0; c0 < NCH; c0 += 8) {
      float local[8], decay[8];
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (c0 + k < NCH) {
          local[k] = hs[(bd * NCH + c0 + k) * N + n];
          decay[k] = expf(a_n * sdel[bd * NCH + c0 + k]);
        }
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (c0 + k < NCH) {
          hs[(bd * NCH + c0 + k) * N + n] = h;
          h = fmaf(decay[k], h, local[k]);
        }
    }
    if (!GRAD) out[NU + i] = h;
    return;
  }
  float gr = dout[NU + i];  // es: the adjoint leaving the chunk's left edge in, the one entering from the right out
  for (int c1 = NCH - 1; c1 >= 0; c1 -= 8) {
    float leaving[8], decay[8];
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (c1 - k >= 0) {
        leaving[k] = es[(bd * NCH + c1 - k) * N + n];
        decay[k] = expf(a_n * sdel[bd * NCH + c1 - k]);
      }
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (c1 - k >= 0) {
        es[(bd * NCH + c1 - k) * N + n] = gr;
        gr = fmaf(decay[k], gr, leaving[k]);
      }
  }
}
)";
  l.source = std::move(src);
  return l;
}

Launch scan_output_kernel(const std::string& name, const ScanShape& s) {
  Launch l = block_launch(name, s, 2, false);
  std::string src = "// selective_scan, step 3: y, each chunk from its entering state (selective_scan.cc)\n" + block_prelude(s, 2, false);
  src += "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
         "(const float* __restrict__ u, const float* __restrict__ delta, const float* __restrict__ A, "
         "const float* __restrict__ Bm, const float* __restrict__ Cm, const float* __restrict__ hs, float* __restrict__ out) {\n";
  src += kBlockStart;
  src += "    const int dp = d0;\n";
  src += kChannel;
  src += R"(  float (*sd)[LS] = s0, (*sx)[LS] = s1;  // δ, δ·u; y takes δ·u's place
  load_rows<DT, false>(sd, delta, nullptr, rows0, DT, tl);
  load_rows<DT, true>(sx, delta, u, rows0, DT, tl);
  __syncthreads();
  // No step needs a guard: past tl, and in the rows of lanes n ≥ N, the staged inputs are 0.
  float h = live ? hs[cs * N + n] : 0.0f, v[W];
#pragma unroll
  for (int t4 = 0; t4 < LC; t4 += 4) {
    float dv[4], xv[4], bv[4], cv[4];
    row4(sd, dl, t4, dv);
    row4(sx, dl, t4, xv);
    row4(sb, n, t4, bv);
    row4(sc, n, t4, cv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int t = t4 + j;
      h = fmaf(exp2_approx(dv[j] * a2), h, xv[j] * bv[j]);
      v[t % W] = cv[j] * h;
      // A group of W steps is done: lane n holds step n's y, whatever N. Every lane of this
      // channel has read the group's δ·u, so y can take its place.
      if (t % W == W - 1) {
        const float y = reduce_scatter(v, MASK);
        __syncwarp(MASK);  // the channel's lanes are past their reads of these steps
        sx[dl][t + 1 - W + n] = y;
      }
    }
  }
  __syncthreads();
  store_rows(out, sx, rows0, tl);
}
)";
  l.source = std::move(src);
  return l;
}

Launch scan_backward_kernel(const std::string& name, const ScanShape& s) {
  Launch l = block_launch(name, s, 3, true);
  std::string src = "// selective_scan, gradient step 3: each chunk's states recomputed, then walked backwards (selective_scan.cc)\n" +
                    block_prelude(s, 3, true);
  src += "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
         "(const float* __restrict__ u, const float* __restrict__ delta, const float* __restrict__ A, "
         "const float* __restrict__ Bm, const float* __restrict__ Cm, const float* __restrict__ dout, "
         "const float* __restrict__ hs, const float* __restrict__ es, float* __restrict__ out, float* __restrict__ dA_part, "
         "float* __restrict__ dB_part, float* __restrict__ dC_part) {\n";
  src += kBlockStart;
  src += R"(  float (*sd)[LS] = s0, (*su)[LS] = s1, (*sy)[LS] = s2;  // δ, u, dy; dδ and du take δ's and u's place
  float (*red_b)[LC][W] = reinterpret_cast<float (*)[LC][W]>(sc + W);  // a pass's dB/dC terms: [warp][step][state]
  float (*red_c)[LC][W] = red_b + WARPS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  constexpr int PAIRS = (LC * W + NT - 1) / NT;  // (step, state) pairs of the block's dB/dC this thread sums
  float acc_b[PAIRS], acc_c[PAIRS];
#pragma unroll
  for (int k = 0; k < PAIRS; ++k) acc_b[k] = acc_c[k] = 0.0f;
  for (int dp = d0; dp < d0 + TD; dp += DT) {  // passes of DT channels
)";
  src += kChannel;
  src += R"(    if (dp > d0) __syncthreads();  // the last pass's rows are stored and its terms summed
    load_rows<DT, false>(sd, delta, nullptr, rows0, DT, tl);
    load_rows<DT, false>(su, u, nullptr, rows0, DT, tl);
    load_rows<DT, false>(sy, dout, nullptr, rows0, DT, tl);
    __syncthreads();
    // Guards as in the forward: past tl, and for lanes n ≥ N, the staged inputs are 0, so every
    // term below is 0 but dδ's h·a·A, which is cut explicitly.
    const float h0 = live ? hs[cs * N + n] : 0.0f;
    float as[LC], hv[LC];
    walk_forward<true>(sd, su, sb, dl, n, a2, h0, as, hv);
    float gn = live ? es[cs * N + n] : 0.0f, dA = 0.0f, vu[W], vd[W];
#pragma unroll
    for (int t4 = LC - 4; t4 >= 0; t4 -= 4) {
      float dv[4], uv[4], yv[4], bv[4], cv[4];
      row4(sd, dl, t4, dv);
      row4(su, dl, t4, uv);
      row4(sy, dl, t4, yv);
      row4(sb, n, t4, bv);
      row4(sc, n, t4, cv);
#pragma unroll
      for (int j = 3; j >= 0; --j) {
        const int t = t4 + j;
        const float ha = (t > 0 ? hv[t > 0 ? t - 1 : 0] : h0) * as[t];  // h_{l-1}·a_l
        const float gg = fmaf(cv[j], yv[j], gn), gd = gg * dv[j];
        vu[t % W] = gd * bv[j];
        vd[t % W] = t < tl ? gg * fmaf(ha, a_n, bv[j] * uv[j]) : 0.0f;
        dA = fmaf(gd, ha, dA);
        const float tb = gd * uv[j], tc = yv[j] * hv[t];
        gn = as[t] * gg;
        if (LANES >= 2 * W) {  // over this warp's channels: the first level splits dB (low) from dC (high)
          const bool hi = (lane & W) != 0;
          float keep = (hi ? tc : tb) + __shfl_xor_sync(MASK, hi ? tb : tc, W);
#pragma unroll
          for (int o = 2 * W; o < LANES; o *= 2) keep += __shfl_xor_sync(MASK, keep, o);
          if (lane < 2 * W) (hi ? red_c : red_b)[warp][t][n] = keep;
        } else {  // one channel per warp
          red_b[warp][t][n] = tb;
          red_c[warp][t][n] = tc;
        }
        if (t % W == 0) {  // a group of W steps is done: lane n holds step n's du and dδ
          reduce_scatter2(vu, vd, MASK);
          __syncwarp(MASK);  // the channel's lanes are past their reads of these steps
          su[dl][t + n] = vu[0];
          sd[dl][t + n] = vd[0];
        }
      }
    }
    if (live) dA_part[(((long long)b * NCH + c) * D + d) * N + n] = dA;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < PAIRS; ++k) {  // dB, dC: over the pass's warps, in order, then over passes
      const int e = threadIdx.x + k * NT, t = e % LC, st = e / LC;
      if (e < LC * W)
        for (int w = 0; w < WARPS; ++w) {
          acc_b[k] += red_b[w][t][st];
          acc_c[k] += red_c[w][t][st];
        }
    }
    store_rows(out, su, rows0, tl);
    store_rows(out + NU, sd, rows0, tl);
  }
#pragma unroll
  for (int k = 0; k < PAIRS; ++k) {
    const int e = threadIdx.x + k * NT, t = e % LC, st = e / LC;
    if (e < LC * W && st < N && t < tl) {
      const long long at = (((long long)b * SPANS + blockIdx.x) * N + st) * L + l0 + t;
      dB_part[at] = acc_b[k];
      dC_part[at] = acc_c[k];
    }
  }
}
)";
  l.source = std::move(src);
  return l;
}

Launch scan_reduce_kernel(const std::string& name, const ScanShape& s) {
  const int64_t nb = s.batch * s.groups * s.states * s.length, na = s.channels * s.states;
  Launch l;
  l.name = name;
  l.block[0] = 256;
  l.grid[0] = static_cast<unsigned>(std::max<int64_t>((nb + na + 255) / 256, 1));
  std::string src = "// selective_scan gradient, step 4: dA, dB, dC summed in a fixed order (selective_scan.cc)\n" + prelude(s);
  src += "extern \"C\" __global__ void " + name +
         "(const float* __restrict__ dA_part, const float* __restrict__ dB_part, const float* __restrict__ dC_part, "
         "float* __restrict__ out) {\n";
  src += R"(  const long long NA = (long long)D * N, NB = (long long)B * G * N * L;
  constexpr int TPG = PER / TD;  // channel spans per group
  float* dA = out + 2 * NU;
  float* dB = dA + NA;
  float* dC = dB + NB;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < NB + NA; i += (long long)gridDim.x * blockDim.x) {
    if (i < NB) {  // [b, g, k, l]: the group's tiles, in order
      const long long l = i % L, k = (i / L) % N, g = (i / ((long long)L * N)) % G, b = i / ((long long)L * N * G);
      float sb = 0.0f, sc = 0.0f;
      for (int t = 0; t < TPG; ++t) {
        const long long at = ((b * SPANS + g * TPG + t) * N + k) * L + l;
        sb += dB_part[at];
        sc += dC_part[at];
      }
      dB[i] = sb;
      dC[i] = sc;
    } else {  // [d, k]: over the batch and the chunks, in order
      const long long j = i - NB;
      float t = 0.0f;
      for (long long bc = 0; bc < (long long)B * NCH; ++bc) t += dA_part[bc * NA + j];
      dA[j] = t;
    }
  }
}
)";
  l.source = std::move(src);
  return l;
}

}  // namespace tg::backend::cuda
