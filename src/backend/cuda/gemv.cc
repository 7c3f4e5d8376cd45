// Skinny products (see small_matmul.h): the decode step's x·Wᵀ with a handful of rows, where
// the whole cost is reading W once. cuBLASLt's kernels reach 0.3-1.2 TB/s on these shapes on an
// H200 (a 768×2304 weight in 8 µs); this kernel streams W with 16-byte loads, one warp (or KS
// warps splitting K) per output column, every row of x staged in shared memory, and applies
// the bias, the residual and GELU in the same pass. Sums run in a fixed order: deterministic.
#include <algorithm>
#include <string>

#include "backend/cuda/small_matmul.h"

namespace tg::backend::cuda {
namespace {

constexpr int kWarps = 8;                      // per block
constexpr int64_t kMaxRows = 8;                // rows of x (the batch of a decode step)
constexpr int64_t kMaxStagedBytes = 96 << 10;  // x in shared memory

std::string ll(int64_t v) { return std::to_string(v) + "LL"; }

}  // namespace

bool gemv_applies(int64_t batch, int64_t m, int64_t n, int64_t k, const MatOperand& a, const MatOperand& b) {
  (void)a;
  return batch == 1 && m >= 1 && m <= kMaxRows && n >= 1 && k >= 32 && b.row_stride == 1 && b.col_stride >= k &&
         m * k * 4 <= kMaxStagedBytes && n * k >= (int64_t{1} << 16);
}

Launch gemv_kernel(const std::string& name, int64_t m, int64_t n, int64_t k, const MatOperand& a, const MatOperand& b,
                   GemvEpilogue epi, int64_t out_ld) {
  if (out_ld <= 0) out_ld = n;
  // Warps per column: enough blocks to cover the GPU's SMs twice.
  int ks = 1;
  while (ks < kWarps && (n * ks + kWarps - 1) / kWarps < 264 && k / (ks * 2) >= 256) ks *= 2;
  const int cols_per_block = kWarps / ks;
  Launch l;
  l.name = name;
  l.block[0] = kWarps * 32;
  l.grid[0] = static_cast<unsigned>((n + cols_per_block - 1) / cols_per_block);
  l.shared_bytes = static_cast<unsigned>(m * k * 4);
  const bool vec = k % 4 == 0 && b.col_stride % 4 == 0;
  std::string s = "// gemv: out[" + std::to_string(m) + ", " + std::to_string(n) + "] = x·W over k = " + std::to_string(k) +
                  " (gemv.cc)\n";
  s += "constexpr int M = " + std::to_string(m) + ", N = " + std::to_string(n) + ", K = " + std::to_string(k) +
       ", KS = " + std::to_string(ks) + ", CPB = " + std::to_string(cols_per_block) + ";\n";
  s += "constexpr long long A_RS = " + ll(a.row_stride) + ", A_CS = " + ll(a.col_stride) + ", B_CS = " + ll(b.col_stride) +
       ", OUT_LD = " + ll(out_ld) + ";\n";
  std::string params = "const float* __restrict__ a, const float* __restrict__ b";
  if (epi.bias) params += ", const float* __restrict__ bias";
  if (epi.residual) params += ", const float* __restrict__ residual";
  params += ", float* __restrict__ out";
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kWarps * 32) + ") " + name + "(" + params + ") {\n";
  s += R"(  extern __shared__ float xs[];  // [M][K]
  __shared__ float part[KS][CPB][M];
  for (int e = threadIdx.x; e < M * K; e += blockDim.x) {
    const int i = e / K, kk = e - i * K;
    xs[e] = a[i * A_RS + kk * A_CS];
  }
  __syncthreads();
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
    s += R"(    const bool aligned = (((unsigned long long)w) & 15) == 0;
    if (aligned) {
#pragma unroll 4
      for (int kk = (slice * 32 + lane) * 4; kk < K; kk += KS * 128) {
        const float4 v = __ldg((const float4*)(w + kk));
#pragma unroll
        for (int i = 0; i < M; ++i) {
          const float4 x = *(const float4*)(xs + i * K + kk);
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
#pragma unroll 4
      for (int kk = slice * 32 + lane; kk < K; kk += KS * 32) {
        const float v = __ldg(w + kk);
#pragma unroll
        for (int i = 0; i < M; ++i) acc[i] = fmaf(v, xs[i * K + kk], acc[i]);
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
