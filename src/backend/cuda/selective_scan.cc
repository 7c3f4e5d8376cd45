// CUDA kernel templates for selective_scan and its gradient (ops.def). A first, correct
// version: one thread owns one (batch, channel) pair and runs the recurrence in order, its N
// states in registers, the block's 128 channels walking time in tiles of T = 16 steps that are
// loaded and stored through shared memory (coalesced along L). Deterministic throughout.
//
// Forward: y and the last state; the backward's run of it also records the state at the start
// of each tile ([B, D, tiles, N]).
// Backward: tiles in reverse; a tile's states are recomputed from its recorded start (kept in
// local memory, T·N floats), then walked backwards with dh_l = C_l·dy_l + a_{l+1}·dh_{l+1}. du
// and ddelta belong to the thread. dA, dB and dC sum over threads: each thread writes its
// terms to scratch (dA: [B, D, N]; dB, dC: [B, N, L, D], channel-minor so the writes coalesce)
// and a third kernel adds them in a fixed order (over the batch, over a group's channels).
// The scratch is B·N·L·D floats twice; the chunked parallel scan that replaces this version
// (issue 7) needs neither it nor the serial walk over L.
#include <algorithm>
#include <string>

#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 16;  // three [128][17] f32 tiles fit the 48 KiB of static shared memory

std::string prelude(const ScanShape& s) {
  std::string p = "constexpr int B = " + std::to_string(s.batch) + ", D = " + std::to_string(s.channels) + ", L = " +
                  std::to_string(s.length) + ", G = " + std::to_string(s.groups) + ", N = " + std::to_string(s.states) +
                  ", PER = " + std::to_string(s.channels / std::max<int64_t>(s.groups, 1)) + ", T = " + std::to_string(kTile) +
                  ", NT = " + std::to_string(kThreads) + ", TILES = " + std::to_string(scan_tile_count(s.length)) + ";\n";
  p += "constexpr long long NU = (long long)B * D * L;\n";
  // Tile loads: rows are the block's channels, columns kTile steps, consecutive threads along L.
  p += R"(
__device__ __forceinline__ void load_tile(const float* src, float (*tile)[T + 1], int b, int d0, int l0, int tl) {
  for (int e = threadIdx.x; e < NT * T; e += NT) {
    const int r = e / T, c = e % T, d = d0 + r;
    tile[r][c] = (d < D && c < tl) ? src[((long long)b * D + d) * L + l0 + c] : 0.0f;
  }
}
__device__ __forceinline__ void store_tile(float* dst, float (*tile)[T + 1], int b, int d0, int l0, int tl) {
  for (int e = threadIdx.x; e < NT * T; e += NT) {
    const int r = e / T, c = e % T, d = d0 + r;
    if (d < D && c < tl) dst[((long long)b * D + d) * L + l0 + c] = tile[r][c];
  }
}
)";
  return p;
}

}  // namespace

int64_t scan_tile_count(int64_t length) { return (length + kTile - 1) / kTile; }

Launch scan_forward_kernel(const std::string& name, const ScanShape& s, bool record_states) {
  if (s.states > 64) throw Error("[cuda] selective_scan keeps the states in registers: d_state up to 64, got " + std::to_string(s.states));
  Launch l;
  l.name = name;
  l.block[0] = kThreads;
  l.grid[0] = static_cast<unsigned>((s.channels + kThreads - 1) / kThreads);
  l.grid[1] = static_cast<unsigned>(std::max<int64_t>(s.batch, 1));
  std::string src = "// selective_scan forward" + std::string(record_states ? " (recording tile states)" : "") +
                    " (selective_scan.cc)\n" + prelude(s);
  src += "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
         "(const float* __restrict__ u, const float* __restrict__ delta, const float* __restrict__ A, const float* __restrict__ Bm, "
         "const float* __restrict__ Cm, float* __restrict__ out" +
         (record_states ? ", float* __restrict__ states" : "") + ") {\n";
  src += std::string("  constexpr bool RECORD = ") + (record_states ? "true" : "false") + ";\n";
  if (!record_states) src += "  float* const states = nullptr;\n";
  src += R"(  __shared__ float su[NT][T + 1], sd[NT][T + 1];  // y goes into su, each thread its own row
  const int b = blockIdx.y, d0 = blockIdx.x * NT, d = d0 + threadIdx.x;
  const bool live = d < D;
  const int g = live ? d / PER : 0;
  float h[N], a_row[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    h[k] = 0.0f;
    a_row[k] = live ? A[d * N + k] : 0.0f;
  }
  const float* bg = Bm + ((long long)b * G + g) * N * L;
  const float* cg = Cm + ((long long)b * G + g) * N * L;
  for (int c = 0; c < TILES; ++c) {
    const int l0 = c * T, tl = min(T, L - l0);
    if (RECORD && live)
#pragma unroll
      for (int k = 0; k < N; ++k) states[(((long long)b * D + d) * TILES + c) * N + k] = h[k];
    load_tile(u, su, b, d0, l0, tl);
    load_tile(delta, sd, b, d0, l0, tl);
    __syncthreads();
    if (live)
      for (int t = 0; t < tl; ++t) {
        const float del = sd[threadIdx.x][t], du = del * su[threadIdx.x][t];
        float y = 0.0f;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          h[k] = expf(del * a_row[k]) * h[k] + du * __ldg(bg + (long long)k * L + l0 + t);
          y = fmaf(__ldg(cg + (long long)k * L + l0 + t), h[k], y);
        }
        su[threadIdx.x][t] = y;
      }
    __syncthreads();
    if (!RECORD) store_tile(out, su, b, d0, l0, tl);
    __syncthreads();
  }
  if (!RECORD && live)
#pragma unroll
    for (int k = 0; k < N; ++k) out[NU + ((long long)b * D + d) * N + k] = h[k];
}
)";
  l.source = std::move(src);
  return l;
}

Launch scan_backward_kernel(const std::string& name, const ScanShape& s) {
  Launch l;
  l.name = name;
  l.block[0] = kThreads;
  l.grid[0] = static_cast<unsigned>((s.channels + kThreads - 1) / kThreads);
  l.grid[1] = static_cast<unsigned>(std::max<int64_t>(s.batch, 1));
  std::string src = "// selective_scan backward (selective_scan.cc)\n" + prelude(s);
  src += "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
         "(const float* __restrict__ u, const float* __restrict__ delta, const float* __restrict__ A, const float* __restrict__ Bm, "
         "const float* __restrict__ Cm, const float* __restrict__ dout, const float* __restrict__ states, float* __restrict__ out, "
         "float* __restrict__ dA_part, float* __restrict__ dB_part, float* __restrict__ dC_part) {\n";
  src += R"(  __shared__ float su[NT][T + 1], sd[NT][T + 1], sdy[NT][T + 1];
  const int b = blockIdx.y, d0 = blockIdx.x * NT, d = d0 + threadIdx.x;
  const bool live = d < D;
  const int g = live ? d / PER : 0;
  float dh[N], a_row[N], dA[N], hs[T][N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    a_row[k] = live ? A[d * N + k] : 0.0f;
    dh[k] = live ? dout[NU + ((long long)b * D + d) * N + k] : 0.0f;
    dA[k] = 0.0f;
  }
  const float* bg = Bm + ((long long)b * G + g) * N * L;
  const float* cg = Cm + ((long long)b * G + g) * N * L;
  for (int c = TILES - 1; c >= 0; --c) {
    const int l0 = c * T, tl = min(T, L - l0);
    load_tile(u, su, b, d0, l0, tl);
    load_tile(delta, sd, b, d0, l0, tl);
    load_tile(dout, sdy, b, d0, l0, tl);
    __syncthreads();
    if (live) {
      float h0[N];
#pragma unroll
      for (int k = 0; k < N; ++k) h0[k] = states[(((long long)b * D + d) * TILES + c) * N + k];
      for (int t = 0; t < tl; ++t) {
        const float del = sd[threadIdx.x][t], du = del * su[threadIdx.x][t];
#pragma unroll
        for (int k = 0; k < N; ++k) hs[t][k] = expf(del * a_row[k]) * (t > 0 ? hs[t - 1][k] : h0[k]) + du * __ldg(bg + (long long)k * L + l0 + t);
      }
      for (int t = tl - 1; t >= 0; --t) {
        const float del = sd[threadIdx.x][t], uu = su[threadIdx.x][t], dy = sdy[threadIdx.x][t];
        float du = 0.0f, ddl = 0.0f;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const float hp = t > 0 ? hs[t - 1][k] : h0[k], a = expf(del * a_row[k]);
          const float bv = __ldg(bg + (long long)k * L + l0 + t), cv = __ldg(cg + (long long)k * L + l0 + t);
          const float dk = dh[k] + cv * dy;
          const long long at = (((long long)b * N + k) * L + l0 + t) * D + d;
          dC_part[at] = dy * hs[t][k];
          dB_part[at] = dk * del * uu;
          du += dk * del * bv;
          ddl += dk * (hp * a * a_row[k] + bv * uu);
          dA[k] += dk * hp * a * del;
          dh[k] = dk * a;
        }
        su[threadIdx.x][t] = du;   // this thread's row only: no other thread reads it now
        sd[threadIdx.x][t] = ddl;
      }
    }
    __syncthreads();
    store_tile(out, su, b, d0, l0, tl);
    store_tile(out + NU, sd, b, d0, l0, tl);
    __syncthreads();
  }
  if (live)
#pragma unroll
    for (int k = 0; k < N; ++k) dA_part[((long long)b * D + d) * N + k] = dA[k];
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
  std::string src = "// selective_scan gradient: dA, dB, dC summed in order (selective_scan.cc)\n" + prelude(s);
  src += "extern \"C\" __global__ void " + name +
         "(const float* __restrict__ dA_part, const float* __restrict__ dB_part, const float* __restrict__ dC_part, "
         "float* __restrict__ out) {\n";
  src += R"(  const long long NA = (long long)D * N, NB = (long long)B * G * N * L;
  float* dA = out + 2 * NU;
  float* dB = dA + NA;
  float* dC = dB + NB;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < NB + NA; i += (long long)gridDim.x * blockDim.x) {
    if (i < NB) {  // [b, g, k, l]: the group's channels, in order
      const long long l = i % L, k = (i / L) % N, g = (i / ((long long)L * N)) % G, b = i / ((long long)L * N * G);
      const long long base = ((b * N + k) * L + l) * D + g * PER;
      float sb = 0.0f, sc = 0.0f;
      for (int j = 0; j < PER; ++j) {
        sb += dB_part[base + j];
        sc += dC_part[base + j];
      }
      dB[i] = sb;
      dC[i] = sc;
    } else {  // [d, k]: over the batch, in order
      const long long j = i - NB;
      float t = 0.0f;
      for (int b = 0; b < B; ++b) t += dA_part[(long long)b * NA + j];
      dA[j] = t;
    }
  }
}
)";
  l.source = std::move(src);
  return l;
}

}  // namespace tg::backend::cuda
