// Skinny products (see small_matmul.h): the decode step's x·Wᵀ with a handful of rows, where
// the whole cost is reading W once. cuBLASLt's kernels reach 0.3-1.2 TB/s on these shapes on an
// H200 (a 768×2304 weight in 8 µs); this kernel streams W with 16-byte loads, one warp (or KS
// warps splitting K) per output column, reads the rows of x alongside (they stay in L1: every
// warp of an SM reads the same few KB), and applies the bias, the residual and GELU in the same
// pass. Optionally the rows are a layer/RMS norm's input: each block first computes the rows'
// statistics (two passes, as the norm kernels) and normalises x as it reads it, so the norm
// needs no kernel of its own. Sums run in a fixed order: deterministic.
#include <algorithm>
#include <cstdio>
#include <string>

#include "backend/cuda/small_matmul.h"

namespace tg::backend::cuda {
namespace {

constexpr int kWarps = 8;        // per block
constexpr int64_t kMaxRows = 8;  // rows of x (the batch of a decode step)

std::string ll(int64_t v) { return std::to_string(v) + "LL"; }

}  // namespace

bool gemv_applies(int64_t batch, int64_t m, int64_t n, int64_t k, const MatOperand& a, const MatOperand& b) {
  (void)a;
  return batch == 1 && m >= 1 && m <= kMaxRows && n >= 1 && k >= 32 && b.row_stride == 1 && b.col_stride >= k &&
         n * k >= (int64_t{1} << 16);
}

Launch gemv_kernel(const std::string& name, int64_t m, int64_t n, int64_t k, const MatOperand& a, const MatOperand& b,
                   GemvEpilogue epi, int64_t out_ld, GemvNorm norm, int ks) {
  if (out_ld <= 0) out_ld = n;
  // Warps per column: enough blocks to cover the GPU's SMs twice.
  if (ks <= 0) {
    ks = 1;
    while (ks < kWarps && (n * ks + kWarps - 1) / kWarps < 264 && k / (ks * 2) >= 256) ks *= 2;
  }
  const int cols_per_block = kWarps / ks;
  Launch l;
  l.name = name;
  l.block[0] = kWarps * 32;
  l.grid[0] = static_cast<unsigned>((n + cols_per_block - 1) / cols_per_block);
  // 16-byte loads of W and x when K and the strides allow (alignment is checked at run time).
  const bool vec = k % 4 == 0 && b.col_stride % 4 == 0 && a.col_stride == 1 && a.row_stride % 4 == 0;
  const bool affine = norm.on && (norm.w || norm.b);
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.9e", norm.eps);
  std::string s = "// gemv: out[" + std::to_string(m) + ", " + std::to_string(n) + "] = x·W over k = " + std::to_string(k) +
                  (norm.on ? std::string(norm.layer ? ", x layer-normed" : ", x RMS-normed") : "") + " (gemv.cc)\n";
  s += "constexpr int M = " + std::to_string(m) + ", N = " + std::to_string(n) + ", K = " + std::to_string(k) +
       ", KS = " + std::to_string(ks) + ", CPB = " + std::to_string(cols_per_block) + ", NT = " + std::to_string(kWarps * 32) + ";\n";
  s += "constexpr long long A_RS = " + ll(a.row_stride) + ", A_CS = " + ll(a.col_stride) + ", B_CS = " + ll(b.col_stride) +
       ", OUT_LD = " + ll(out_ld) + ";\n";
  s += std::string("constexpr bool NORM = ") + (norm.on ? "true" : "false") + ", LAYER = " + (norm.layer ? "true" : "false") +
       ", NW = " + (norm.w ? "true" : "false") + ", NB = " + (norm.b ? "true" : "false") + ";\nconstexpr float EPS = " + eps + "f;\n";
  std::string params = "const float* __restrict__ a";
  if (affine) params += ", const float* __restrict__ nw, const float* __restrict__ nb";
  params += ", const float* __restrict__ b";
  if (epi.bias) params += ", const float* __restrict__ bias";
  if (epi.residual) params += ", const float* __restrict__ residual";
  params += ", float* __restrict__ out";
  if (!affine) s += "constexpr const float* nw = nullptr;\nconstexpr const float* nb = nullptr;\n";
  s += R"(
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Each warp computes the rows' statistics itself in one pass, no block barrier: sums of
// x − x₀ and of its square, shifted by the row's first element so that a mean far from zero
// does not cancel the variance away (the rows are L1 hits for all but the first warp).
__device__ __forceinline__ void row_stats(const float* a, float* mean, float* rstd) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < M; ++i) {
    const float* x = a + i * A_RS;
    const float x0 = LAYER ? x[0] : 0.0f;
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll 8
    for (int kk = lane; kk < K; kk += 32) {
      const float d = x[kk * A_CS] - x0;
      s1 += d;
      s2 = fmaf(d, d, s2);
    }
    s1 = warp_sum(s1) / K;
    s2 = warp_sum(s2) / K;
    mean[i] = LAYER ? x0 + s1 : 0.0f;
    rstd[i] = rsqrtf(fmaxf(LAYER ? s2 - s1 * s1 : s2, 0.0f) + EPS);
  }
}
// x[i][kk] as the product reads it: raw, or normalised with the row's statistics.
__device__ __forceinline__ float xin(float x, int kk, float mean, float rstd, const float* nw, const float* nb) {
  if (!NORM) return x;
  float y = (x - mean) * rstd;
  if (NW) y *= __ldg(nw + kk);
  if (NB) y += __ldg(nb + kk);
  return y;
}
__device__ __forceinline__ float4 xin4(float4 x, int kk, float mean, float rstd, const float* nw, const float* nb) {
  if (!NORM) return x;
  x = make_float4((x.x - mean) * rstd, (x.y - mean) * rstd, (x.z - mean) * rstd, (x.w - mean) * rstd);
  if (NW) {
    const float4 g = __ldg((const float4*)(nw + kk));
    x = make_float4(x.x * g.x, x.y * g.y, x.z * g.z, x.w * g.w);
  }
  if (NB) {
    const float4 c = __ldg((const float4*)(nb + kk));
    x = make_float4(x.x + c.x, x.y + c.y, x.z + c.z, x.w + c.w);
  }
  return x;
}
)";
  s += "extern \"C\" __global__ void __launch_bounds__(NT) " + name + "(" + params + ") {\n";
  s += R"(  __shared__ float part[KS][CPB][M];
  float mean[M], rstd[M];
#pragma unroll
  for (int i = 0; i < M; ++i) mean[i] = 0.0f, rstd[i] = 1.0f;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = warp / KS, slice = warp % KS;
  const long long j = (long long)blockIdx.x * CPB + col;
  float acc[M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  if (j < N) {
    const float* w = b + j * B_CS;
)";
  if (vec) {
    s += R"(    const bool aligned = ((((unsigned long long)w) | ((unsigned long long)a) | ((unsigned long long)nw) |
                           ((unsigned long long)nb)) & 15) == 0;
    constexpr int PRE = (K + KS * 128 - 1) / (KS * 128);  // float4 of W per lane
    if (aligned && NORM && PRE <= 8) {
      // W's loads go out first; the rows' statistics are computed while they are in flight.
      float4 wr[PRE];
#pragma unroll
      for (int u = 0; u < PRE; ++u) {
        const int kk = (slice * 32 + lane) * 4 + u * KS * 128;
        wr[u] = kk < K ? __ldg((const float4*)(w + kk)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      row_stats(a, mean, rstd);
#pragma unroll
      for (int u = 0; u < PRE; ++u) {
        const int kk = (slice * 32 + lane) * 4 + u * KS * 128;
        if (kk >= K) break;
#pragma unroll
        for (int i = 0; i < M; ++i) {
          const float4 x = xin4(__ldg((const float4*)(a + i * A_RS + kk)), kk, mean[i], rstd[i], nw, nb);
          acc[i] = fmaf(wr[u].x, x.x, acc[i]);
          acc[i] = fmaf(wr[u].y, x.y, acc[i]);
          acc[i] = fmaf(wr[u].z, x.z, acc[i]);
          acc[i] = fmaf(wr[u].w, x.w, acc[i]);
        }
      }
    } else if (aligned) {
      if (NORM) row_stats(a, mean, rstd);
#pragma unroll 4
      for (int kk = (slice * 32 + lane) * 4; kk < K; kk += KS * 128) {
        const float4 v = __ldg((const float4*)(w + kk));
#pragma unroll
        for (int i = 0; i < M; ++i) {
          const float4 x = xin4(__ldg((const float4*)(a + i * A_RS + kk)), kk, mean[i], rstd[i], nw, nb);
          acc[i] = fmaf(v.x, x.x, acc[i]);
          acc[i] = fmaf(v.y, x.y, acc[i]);
          acc[i] = fmaf(v.z, x.z, acc[i]);
          acc[i] = fmaf(v.w, x.w, acc[i]);
        }
      }
    } else
)";
  }
  s += R"(    {
      if (NORM) row_stats(a, mean, rstd);
#pragma unroll 4
      for (int kk = slice * 32 + lane; kk < K; kk += KS * 32) {
        const float v = __ldg(w + kk);
#pragma unroll
        for (int i = 0; i < M; ++i) acc[i] = fmaf(v, xin(__ldg(a + i * A_RS + kk * A_CS), kk, mean[i], rstd[i], nw, nb), acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i)
    for (int o = 16; o > 0; o >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
  if (KS > 1) {
    if (lane == 0)
      for (int i = 0; i < M; ++i) part[slice][col][i] = acc[i];
    __syncthreads();
    if (slice != 0) return;
    for (int i = 0; i < M; ++i) {
      float t = part[0][col][i];
      for (int q = 1; q < KS; ++q) t += part[q][col][i];
      acc[i] = t;
    }
  }
  if (lane != 0 || j >= N) return;
  for (int i = 0; i < M; ++i) {
    float y = acc[i];
)";
  if (epi.bias) s += "    y += bias[j];\n";
  if (epi.residual) s += "    y += residual[i * (long long)N + j];\n";
  if (epi.gelu) s += "    y = 0.5f * y * (1.0f + tanhf(0.7978845608028654f * (y + 0.044715f * y * y * y)));\n";
  s += "    out[i * OUT_LD + j] = y;\n  }\n}\n";
  l.source = std::move(s);
  return l;
}

}  // namespace tg::backend::cuda
