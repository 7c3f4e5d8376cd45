// Attention for short sequences (T, S ≤ 64, D ≤ 64, backward D ≤ 32; attention.cc: small_plan):
// a block handles NG whole (batch, kv head) groups with their keys and values (and, backward,
// queries and output gradients) in shared memory, one thread per query row (then, backward, per
// key row). Row stride DS = D + 1 (odd) keeps the per-thread row reads free of bank conflicts;
// the other operand is a broadcast. Exact fp32. small_forward writes out; small_backward is the
// whole backward in one launch (lse, delta and dq per query thread, then dk and dv per key
// thread), with no scratch.
//
// Defined before (attention.cc: small_constants): NT (threads a block), NG (groups a block),
// DS (row stride), then the problem's constants as for attention_common.cuh (B, HQ, HKV, GRP,
// T, S, D, SHIFT, the Q/K/V/O strides, NQ, NK, NROWS, SCALE, SCALE2, CAUSAL, GRADS_BTHD,
// GRADS_PACKED, GRS). The generator appends the kernel that calls small_forward or small_backward.
// @piece small

#define NEG_INF (-__int_as_float(0x7f800000))
constexpr int QPG = GRP * T;       // query rows of one kv group
constexpr int NGROUPS = B * HKV;

// Stage rows [0, ROWS) of NG groups: dst[(gl·ROWS + r)·DS + d]; `addr(gid, r, d)` the source
// index. Loads go out in batches of 16 per thread (the problem is latency bound).
template <int ROWS, class F>
__device__ __forceinline__ void stage(float* __restrict__ dst, const IN_T* __restrict__ src, F addr) {
  constexpr int TOTAL = NG * ROWS * D, U = 16;
  for (int e0 = threadIdx.x; e0 < TOTAL; e0 += U * NT) {
    float x[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int e = e0 + u * NT, gl = e / (ROWS * D), rem = e - gl * (ROWS * D), r = rem / D, d = rem - r * D;
      const int gid = blockIdx.x * NG + gl;
      x[u] = e < TOTAL && gid < NGROUPS ? in_ld(src + addr(gid, r, d)) : 0.f;
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

__device__ __forceinline__ void small_forward(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                              const IN_T* __restrict__ v, float* __restrict__ out) {
  extern __shared__ float smem[];
  float* Ks = smem;              // [NG][S][DS]
  float* Vs = Ks + NG * S * DS;  // [NG][S][DS]
  const int r = threadIdx.x, gl = r / QPG, gid = blockIdx.x * NG + gl;
  const bool active = r < NG * QPG && gid < NGROUPS;
  const int qr = r % QPG, i = qr % T;
  float qv[D];  // loaded before the staging so that the two overlap
#pragma unroll
  for (int d = 0; d < D; ++d) qv[d] = active ? in_ld(q + q_addr(gid, qr, d)) * SCALE2 : 0.f;
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

__device__ __forceinline__ void small_backward(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                               const IN_T* __restrict__ v, const IN_T* __restrict__ dout,
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
