// CUDA kernel template for attention_at (ops.def): a few new queries over KV caches, each
// sequence seeing only its valid prefix. A decode step has one query per (sequence, head) and
// a short cache, so one block of 128 threads owns one (query, head, sequence): thread j scores
// key j (a D-long dot product against q held in shared memory), the block takes the softmax
// over the visible keys, and threads split as (key slice, d) sum the values, the slices
// combined in a fixed order. Every operand is read through its strides (baked in); out is
// dense [B, Hq, T, D]. A position outside [0, S − T] sets *err and writes zeros.
#include <algorithm>
#include <string>

#include "backend/cuda/kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace {
std::string ll(int64_t v) { return std::to_string(v) + "LL"; }
}  // namespace

Launch attention_at_kernel(const std::string& name, const Operand& q, const Operand& k, const Operand& v, const Operand& pos,
                           double scale) {
  constexpr int kThreads = 128;
  const int64_t B = q.shape[0], Hq = q.shape[1], T = q.shape[2], D = q.shape[3], Hkv = k.shape[1], S = k.shape[2];
  if (S * 4 > (200 << 10))
    throw Error("[cuda] attention_at keeps a row of scores in shared memory: caches of up to 51200 positions, got " +
                std::to_string(S));
  Launch l;
  l.name = name;
  l.block[0] = kThreads;
  l.grid[0] = static_cast<unsigned>(std::max<int64_t>(T, 1));
  l.grid[1] = static_cast<unsigned>(std::max<int64_t>(Hq, 1));
  l.grid[2] = static_cast<unsigned>(std::max<int64_t>(B, 1));
  l.shared_bytes = static_cast<unsigned>(std::max<int64_t>(S, 1) * 4);
  const int64_t parts = D <= kThreads ? kThreads / std::max<int64_t>(D, 1) : 1;
  char sc[32];
  std::snprintf(sc, sizeof sc, "%.9ef", scale);
  std::string s = "// attention_at (attention_at.cc)\n";
  s += "constexpr int T = " + std::to_string(T) + ", S = " + std::to_string(S) + ", D = " + std::to_string(D) +
       ", GROUP = " + std::to_string(Hkv == 0 ? 1 : Hq / Hkv) + ", HQ = " + std::to_string(Hq) + ", NT = " +
       std::to_string(kThreads) + ", PARTS = " + std::to_string(parts) + ";\n";
  auto strides = [&](const char* p, const Operand& o) {
    std::string r;
    for (int d = 0; d < 4; ++d) r += std::string("constexpr long long ") + p + std::to_string(d) + " = " + ll(o.strides[static_cast<size_t>(d)]) + ";\n";
    return r;
  };
  s += strides("QS", q) + strides("KS", k) + strides("VS", v);
  s += "constexpr long long PS = " + ll(pos.strides.empty() ? 1 : pos.strides[0]) + ";\n";
  s += std::string("constexpr float SCALE = ") + sc + ";\n#define INFINITY __int_as_float(0x7f800000)\n";
  s += "extern \"C\" __global__ void __launch_bounds__(NT) " + name +
       "(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v, const int* __restrict__ pos, "
       "float* __restrict__ out, int* err) {\n";
  s += R"(  extern __shared__ float p[];  // [S]: scores, then weights
  __shared__ float qs[D];
  __shared__ float red[NT / 32];
  __shared__ float acc[PARTS][D];
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / GROUP, tid = threadIdx.x;
  float* o = out + (((long long)b * HQ + h) * T + i) * D;
  const int at = pos[b * PS];
  if (at < 0 || at > S - T) {
    if (tid == 0) *err = 1;
    for (int d = tid; d < D; d += NT) o[d] = 0.0f;
    return;
  }
  const int visible = at + i + 1;
  for (int d = tid; d < D; d += NT) qs[d] = q[b * QS0 + h * QS1 + i * QS2 + d * QS3] * SCALE;
  __syncthreads();
  float mx = -INFINITY;
  for (int j = tid; j < visible; j += NT) {
    const float* kr = k + b * KS0 + g * KS1 + j * KS2;
    float dot = 0.0f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) dot = fmaf(qs[d], kr[d * KS3], dot);
    p[j] = dot;
    mx = fmaxf(mx, dot);
  }
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if ((tid & 31) == 0) red[tid >> 5] = mx;
  __syncthreads();
  mx = red[0];
  for (int w = 1; w < NT / 32; ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  float sum = 0.0f;
  for (int j = tid; j < visible; j += NT) {
    const float e = expf(p[j] - mx);
    p[j] = e;
    sum += e;
  }
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if ((tid & 31) == 0) red[tid >> 5] = sum;
  __syncthreads();
  sum = red[0];
  for (int w = 1; w < NT / 32; ++w) sum += red[w];
  const float inv = 1.0f / sum;
  // Values: thread (part, d) sums keys j ≡ part (mod PARTS); the parts meet in order.
  for (int d0 = 0; d0 < D; d0 += NT) {
    const int part = PARTS > 1 ? tid / D : 0, d = PARTS > 1 ? tid % D : d0 + tid;
    float a = 0.0f;
    if (part < PARTS && d < D)
      for (int j = part; j < visible; j += PARTS) a = fmaf(p[j], v[b * VS0 + g * VS1 + j * VS2 + d * VS3], a);
    if (PARTS > 1) {
      if (part < PARTS) acc[part][d] = a;
      __syncthreads();
      if (tid < D) {
        float t = acc[0][tid];
        for (int r = 1; r < PARTS; ++r) t += acc[r][tid];
        o[tid] = t * inv;
      }
    } else if (d < D) {
      o[d] = a * inv;
    }
  }
}
)";
  l.source = std::move(s);
  return l;
}

}  // namespace tg::backend::cuda
