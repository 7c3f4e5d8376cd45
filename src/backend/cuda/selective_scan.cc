// CUDA kernels for selective_scan and its gradient (ops.def): a chunked parallel scan over time.
//
// The recurrence h_l = a_l·h_{l−1} + b_l (a_l = exp(δ_l·A_n), b_l = δ_l·u_l·B_{n,l}) is split
// into chunks of LC = 32 steps. One thread owns one (batch, channel, state, chunk): the states of
// a channel sit in W consecutive lanes (W = N rounded up to a power of two), so a thread walks
// its chunk with one exp per step and keeps the chunk's a_l and h_l in registers.
//
//   1. chunk:   each chunk from a zero state → its local end state and Σδ (the chunk's decay is
//               exp(A·Σδ)); for the gradient also the local adjoint leaving its left edge.
//   2. combine: per (batch, channel, state), chunks in order with the associative combine
//               (a1, b1)∘(a2, b2) = (a1·a2, a2·b1 + b2) → the state entering each chunk (kept:
//               the only per-chunk states stored) and the last state; for the gradient the same
//               from the right for the adjoint entering each chunk.
//   3. output:  y: each chunk re-walked from its entering state; y_l = Σ_n C·h is a reduction
//               over the W lanes, done as a reduce-scatter over W steps at a time (W − 1
//               shuffles per W outputs). gradient: the chunk's states recomputed forward, then
//               walked backwards with g_l = C_l·dy_l + a_{l+1}·g_{l+1}: du and dδ reduce over
//               the lanes as y does; dB and dC sum over channels: within the warp by shuffles,
//               then over the block's warps in a fixed order through shared memory, into one
//               partial per block of DT channels. dA's terms are per thread, one partial per
//               chunk.
//   4. reduce (gradient): dA over batch and chunks, dB and dC over a group's channel tiles, in
//               a fixed order.
//
// No atomics anywhere: every sum has a fixed order, so the result does not depend on timing.
// What moves beyond the floor: u and δ read twice (steps 1 and 3), the per-chunk states
// (B·D·N·L/32 floats, 1/32 of one input each) and the dB/dC partials (B·N·L per tile of DT).
#include <algorithm>
#include <cstdlib>
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
                  std::to_string(lay.chunks) + ", DT = " + std::to_string(lay.tile) + ", TILES = " +
                  std::to_string(lay.tiles) + ";\n";
  p += "constexpr long long NU = (long long)B * D * L;\n";
  // exp(δ·A) as 2^(δ·A·log2 e): one MUFU instruction (relative error ~2^-22; results below
  // 2^-126 flush to 0, where they add nothing to a state anyway).
  // reduce_scatter: the sums over the W lanes of W values v[j] (step j of a group): lane n ends
  // with the sum for step n. Each level swaps the half this lane does not keep with its partner;
  // the values are swapped, never the indices, and the levels are a counted loop, so
  // everything unrolls and v stays in registers. reduce_scatter2 does two groups at once.
  p += R"(
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float reduce_scatter(float (&v)[W], unsigned mask) {
  const int lane = threadIdx.x % W;
#pragma unroll
  for (int level = 1; level < W; level *= 2) {
    const int s = W / 2 / level;
    const bool upper = (lane & s) != 0;
#pragma unroll
    for (int i = 0; i < s; ++i) {
      const float v0 = v[i], v1 = v[i + s];
      v[i] = (upper ? v1 : v0) + __shfl_xor_sync(mask, upper ? v0 : v1, s);
    }
  }
  return v[0];
}
__device__ __forceinline__ void reduce_scatter2(float (&v)[W], float (&w)[W], unsigned mask) {
  const int lane = threadIdx.x % W;
#pragma unroll
  for (int level = 1; level < W; level *= 2) {
    const int s = W / 2 / level;
    const bool upper = (lane & s) != 0;
#pragma unroll
    for (int i = 0; i < s; ++i) {
      const float v0 = v[i], v1 = v[i + s], w0 = w[i], w1 = w[i + s];
      v[i] = (upper ? v1 : v0) + __shfl_xor_sync(mask, upper ? v0 : v1, s);
      w[i] = (upper ? w1 : w0) + __shfl_xor_sync(mask, upper ? w0 : w1, s);
    }
  }
}
)";
  return p;
}

// The block of the chunk, output and backward kernels: DT channels (of one group) × W lanes,
// one chunk, one sequence; grid (tiles, chunks, batch). The block's inputs for its chunk are
// staged in shared memory by coalesced loads, rows of LS = LC + 4 floats: a lane reads four
// steps at once (16-byte aligned), and the lanes reading rows n of B and C fall in distinct
// banks. Read straight from global memory, a lane's steps miss L1 (its rows lie L floats apart).
std::string block_prelude(const ScanShape& s, int rows) {
  const ScanLayout lay = scan_layout(s);
  const int64_t threads = lay.tile * lay.lanes;
  std::string p = prelude(s);
  p += "constexpr int NT = " + std::to_string(threads) + ", ROWS = " + std::to_string(rows) + ", LANES = " +
       std::to_string(std::min<int64_t>(threads, 32)) + ", WARPS = " + std::to_string((threads + 31) / 32) +
       ";\nconstexpr unsigned MASK = " + std::to_string(mask_for(threads)) + "u;\n";
  p += R"(// Rows of src (L apart) from `first`, `valid` of them, tl steps; zeros elsewhere. With x,
// the product src·x (δ·u).
__device__ __forceinline__ void load_rows(float (*dst)[LS], const float* __restrict__ src, const float* __restrict__ x,
                                          long long first, int rows, int valid, int tl) {
  for (int e = threadIdx.x; e < rows * LC; e += NT) {
    const int r = e / LC, col = e % LC;
    const long long at = first + (long long)r * L + col;
    const bool in = r < valid && col < tl;
    dst[r][col] = in ? (x ? src[at] * x[at] : src[at]) : 0.0f;
  }
}
__device__ __forceinline__ void store_rows(float* __restrict__ dst, const float (*src)[LS], long long first, int tl) {
  for (int e = threadIdx.x; e < DT * LC; e += NT) {
    const int r = e / LC, col = e % LC;
    if (col < tl) dst[first + (long long)r * L + col] = src[r][col];
  }
}
__device__ __forceinline__ void row4(const float (*tile)[LS], int r, int t, float (&v)[4]) {
  const float4 q = *reinterpret_cast<const float4*>(&tile[r][t]);
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
}
)";
  return p;
}

// Coordinates and the staged tiles: s0, s1, s2 [DT][LS] (the kernel names them), sb, sc [W][LS].
// A lane's a_l is 2^(δ_l·a2).
const char* kBlockStart = R"(  extern __shared__ float4 smem4[];
  float (*s0)[LS] = reinterpret_cast<float (*)[LS]>(smem4);
  float (*s1)[LS] = s0 + DT;
  float (*s2)[LS] = s1 + DT;  // only when ROWS == 3
  float (*sb)[LS] = s0 + ROWS * DT;
  float (*sc)[LS] = sb + W;
  const int n = threadIdx.x % W, dl = threadIdx.x / W, tile = blockIdx.x, d0 = tile * DT, d = d0 + dl, c = blockIdx.y, b = blockIdx.z;
  const bool live = n < N;
  const int l0 = c * LC, tl = min(LC, L - l0);
  const long long rows0 = ((long long)b * D + d0) * L + l0, bc0 = (((long long)b * G + d0 / PER) * N) * L + l0;
  const long long cs = ((long long)b * D + d) * NCH + c;  // this channel's chunk slot
  const float a2 = live ? A[d * N + n] * 1.4426950408889634f : 0.0f;
  load_rows(sb, Bm, nullptr, bc0, W, N, tl);
  load_rows(sc, Cm, nullptr, bc0, W, N, tl);
)";

Launch block_launch(const std::string& name, const ScanShape& s, int rows, bool terms) {
  const ScanLayout lay = scan_layout(s);
  Launch l;
  l.name = name;
  l.block[0] = static_cast<unsigned>(lay.tile * lay.lanes);
  l.grid[0] = static_cast<unsigned>(lay.tiles);
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
  // The tile of channels of a block: a power of two that divides a group's channels (a block
  // stages one group's B and C, and its dB/dC partials must not straddle groups), at most 512
  // threads and 96 KiB of shared memory.
  const int64_t per = s.channels / std::max<int64_t>(s.groups, 1);
  int64_t dt = 1;
  const char* cap_env = std::getenv("TG_SCAN_TILE");
  const int64_t cap = cap_env ? std::atoll(cap_env) : 64;
  while (dt < cap && per % (dt * 2) == 0 && dt * 2 * lay.lanes <= 512) dt *= 2;
  while (dt > 1 && scan_shared_bytes(lay.lanes, dt, 3, true) > 96 * 1024) dt /= 2;
  lay.tile = dt;
  lay.tiles = s.channels / dt;
  lay.state_floats = s.batch * s.channels * lay.chunks * s.states;
  lay.sum_floats = s.batch * s.channels * lay.chunks;
  lay.da_floats = s.batch * lay.chunks * s.channels * s.states;
  lay.dbc_floats = s.batch * lay.tiles * s.states * s.length;
  return lay;
}

Launch scan_chunk_kernel(const std::string& name, const ScanShape& s, bool grad) {
  const int rows = grad ? 3 : 2;
  Launch l = block_launch(name, s, rows, false);
  std::string src = "// selective_scan, step 1: each chunk from a zero state" +
                    std::string(grad ? " (and its adjoint from the right)" : "") + " (selective_scan.cc)\n" + block_prelude(s, rows);
  src += "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
         "(const float* __restrict__ u, const float* __restrict__ delta, const float* __restrict__ A, "
         "const float* __restrict__ Bm, const float* __restrict__ Cm, " +
         (grad ? "const float* __restrict__ dout, " : "") + "float* __restrict__ hs, float* __restrict__ sdel" +
         (grad ? ", float* __restrict__ es" : "") + ") {\n";
  if (!grad) src += "  const float* const dout = nullptr;\n  float* const es = nullptr;\n";
  src += kBlockStart;
  src += R"(  float (*sd)[LS] = s0, (*sx)[LS] = s1, (*sy)[LS] = s2;  // δ, δ·u, dy
  load_rows(sd, delta, nullptr, rows0, DT, DT, tl);
  load_rows(sx, delta, u, rows0, DT, DT, tl);
  if (ROWS == 3) load_rows(sy, dout, nullptr, rows0, DT, DT, tl);
  __syncthreads();
  if (threadIdx.x < DT) {  // Σδ of a channel: the chunk's decay is 2^(a2·Σδ)
    float sum = 0.0f;
    for (int t = 0; t < LC; ++t) sum += sd[threadIdx.x][t];
    sdel[cs - (long long)dl * NCH + (long long)threadIdx.x * NCH] = sum;
  }
  if (!live) return;  // past the only barrier; no shuffles here
  // No step needs a guard: past tl the staged δ, δ·u, B and C are 0, so a = 1 and nothing is added.
  float h = 0.0f, as[LC];
#pragma unroll
  for (int t4 = 0; t4 < LC; t4 += 4) {
    float dv[4], xv[4], bv[4];
    row4(sd, dl, t4, dv);
    row4(sx, dl, t4, xv);
    row4(sb, n, t4, bv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      as[t4 + j] = exp2_approx(dv[j] * a2);
      h = fmaf(as[t4 + j], h, xv[j] * bv[j]);
    }
  }
  hs[cs * N + n] = h;
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
  const int64_t threads = s.batch * s.channels * s.states;
  Launch l;
  l.name = name;
  l.block[0] = 256;
  l.grid[0] = static_cast<unsigned>(std::max<int64_t>((threads + 255) / 256, 1));
  std::string src = "// selective_scan, step 2: the states entering each chunk" +
                    std::string(grad ? " and the adjoints entering from the right" : " and the last state") +
                    " (selective_scan.cc)\n" + prelude(s);
  src += "extern \"C\" __global__ void " + name + "(const float* __restrict__ A, const float* __restrict__ sdel, float* __restrict__ hs, " +
         (grad ? "float* __restrict__ es, const float* __restrict__ dout" : "float* __restrict__ out") + ") {\n";
  src += R"(  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)B * D * N) return;
  const int n = (int)(i % N);
  const long long bd = i / N;
  const float a_n = A[(bd % D) * N + n];
  float h = 0.0f;
#pragma unroll 8
  for (int c = 0; c < NCH; ++c) {  // hs: the chunk's local end state in, its entering state out
    const long long at = (bd * NCH + c) * N + n;
    const float local = hs[at];
    hs[at] = h;
    h = fmaf(expf(a_n * sdel[bd * NCH + c]), h, local);
  }
)";
  if (grad)
    src += R"(  float gr = dout[NU + i];  // the last state's gradient enters the last chunk
#pragma unroll 8
  for (int c = NCH - 1; c >= 0; --c) {
    const long long at = (bd * NCH + c) * N + n;
    const float leaving = es[at];
    es[at] = gr;
    gr = fmaf(expf(a_n * sdel[bd * NCH + c]), gr, leaving);
  }
}
)";
  else
    src += "  out[NU + i] = h;\n}\n";
  l.source = std::move(src);
  return l;
}

Launch scan_output_kernel(const std::string& name, const ScanShape& s) {
  Launch l = block_launch(name, s, 2, false);
  std::string src = "// selective_scan, step 3: y, each chunk from its entering state (selective_scan.cc)\n" + block_prelude(s, 2);
  src += "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
         "(const float* __restrict__ u, const float* __restrict__ delta, const float* __restrict__ A, "
         "const float* __restrict__ Bm, const float* __restrict__ Cm, const float* __restrict__ hs, float* __restrict__ out) {\n";
  src += kBlockStart;
  src += R"(  float (*sd)[LS] = s0, (*sx)[LS] = s1;  // δ, δ·u; y takes δ·u's place
  load_rows(sd, delta, nullptr, rows0, DT, DT, tl);
  load_rows(sx, delta, u, rows0, DT, DT, tl);
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
      // A group of W steps is done: lane n holds step n's y, whatever N. The group's δ·u has
      // been read into registers by every lane of this channel, so y can take its place.
      if (t % W == W - 1) sx[dl][t + 1 - W + n] = reduce_scatter(v, MASK);
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
                    block_prelude(s, 3);
  src += "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
         "(const float* __restrict__ u, const float* __restrict__ delta, const float* __restrict__ A, "
         "const float* __restrict__ Bm, const float* __restrict__ Cm, const float* __restrict__ dout, "
         "const float* __restrict__ hs, const float* __restrict__ es, float* __restrict__ out, float* __restrict__ dA_part, "
         "float* __restrict__ dB_part, float* __restrict__ dC_part) {\n";
  src += kBlockStart;
  src += R"(  float (*sd)[LS] = s0, (*su)[LS] = s1, (*sy)[LS] = s2;  // δ, u, dy; dδ and du take δ's and u's place
  float (*red_b)[LC][W] = reinterpret_cast<float (*)[LC][W]>(sc + W);  // [warp][step][state]
  float (*red_c)[LC][W] = red_b + WARPS;
  load_rows(sd, delta, nullptr, rows0, DT, DT, tl);
  load_rows(su, u, nullptr, rows0, DT, DT, tl);
  load_rows(sy, dout, nullptr, rows0, DT, DT, tl);
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // Guards as in the forward: past tl, and for lanes n ≥ N, the staged inputs are 0, so every
  // term below is 0 but dδ's h·a·A, which is cut explicitly.
  const float h0 = live ? hs[cs * N + n] : 0.0f, a_n = live ? A[d * N + n] : 0.0f;
  float as[LC], hv[LC], h = h0;
#pragma unroll
  for (int t4 = 0; t4 < LC; t4 += 4) {
    float dv[4], uv[4], bv[4];
    row4(sd, dl, t4, dv);
    row4(su, dl, t4, uv);
    row4(sb, n, t4, bv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      as[t4 + j] = exp2_approx(dv[j] * a2);
      h = fmaf(as[t4 + j], h, dv[j] * uv[j] * bv[j]);
      hv[t4 + j] = h;
    }
  }
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
      const float del = dv[j], uu = uv[j], dy = yv[j];
      const float ha = (t > 0 ? hv[t > 0 ? t - 1 : 0] : h0) * as[t];  // h_{l-1}·a_l
      const float gg = fmaf(cv[j], dy, gn);
      vu[t % W] = gg * del * bv[j];
      vd[t % W] = t < tl ? gg * fmaf(ha, a_n, bv[j] * uu) : 0.0f;
      dA = fmaf(gg * ha, del, dA);
      float tb = gg * del * uu, tc = dy * hv[t];
      gn = as[t] * gg;
#pragma unroll
      for (int o = W; o < LANES; o *= 2) {  // over this warp's channels
        tb += __shfl_xor_sync(MASK, tb, o);
        tc += __shfl_xor_sync(MASK, tc, o);
      }
      if (lane < W) {
        red_b[warp][t][n] = tb;
        red_c[warp][t][n] = tc;
      }
      if (t % W == 0) {  // a group of W steps is done: lane n holds step n's du and dδ
        reduce_scatter2(vu, vd, MASK);
        su[dl][t + n] = vu[0];
        sd[dl][t + n] = vd[0];
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < LC * W; e += NT) {  // dB, dC: over the block's warps, in order
    const int t = e % LC, k = e / LC;
    float sbs = 0.0f, scs = 0.0f;
    for (int w = 0; w < WARPS; ++w) {
      sbs += red_b[w][t][k];
      scs += red_c[w][t][k];
    }
    if (k < N && t < tl) {
      const long long at = (((long long)b * TILES + tile) * N + k) * L + l0 + t;
      dB_part[at] = sbs;
      dC_part[at] = scs;
    }
  }
  store_rows(out, su, rows0, tl);
  store_rows(out + NU, sd, rows0, tl);
  if (live) dA_part[(((long long)b * NCH + c) * D + d) * N + n] = dA;
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
  constexpr int TPG = PER / DT;  // channel tiles per group
  float* dA = out + 2 * NU;
  float* dB = dA + NA;
  float* dC = dB + NB;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < NB + NA; i += (long long)gridDim.x * blockDim.x) {
    if (i < NB) {  // [b, g, k, l]: the group's tiles, in order
      const long long l = i % L, k = (i / L) % N, g = (i / ((long long)L * N)) % G, b = i / ((long long)L * N * G);
      float sb = 0.0f, sc = 0.0f;
      for (int t = 0; t < TPG; ++t) {
        const long long at = ((b * TILES + g * TPG + t) * N + k) * L + l;
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
