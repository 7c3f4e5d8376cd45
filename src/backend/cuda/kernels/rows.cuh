// Device helpers of the row kernels over dense f32 data (kernels_rows.cc: softmax, cross
// entropy, layer and RMS norms): where a thread's row starts, row-wide sums and maxima (a
// shuffle tree in each warp, then the warps' results through shared memory, re-reduced in the
// same order by every warp), 16-byte alignment checks, the cached row loads and stores, and
// the streamed online (max, Σexp) pass with peeled, aligned vector loads.
//
// Defined before (kernels_rows.cc: prelude): NEG_INF, NAN_F, LOWEST; ROWS, COLS; P (threads a
// row: 32 = a warp, else the whole block), RPB (rows a block), CACHE (cached floats a thread),
// VEC (COLS % 4 == 0).
// @piece helpers

__device__ __forceinline__ long long row_index() {
  return P == 32 ? (long long)blockIdx.x * RPB + (threadIdx.x >> 5) : (long long)blockIdx.x;
}
__device__ __forceinline__ int row_tid() { return P == 32 ? (int)(threadIdx.x & 31) : (int)threadIdx.x; }
__device__ __forceinline__ bool aligned16(const void* p) { return (((unsigned long long)p) & 15) == 0; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}
// Row-wide sum / max: every thread of the row gets the same value.
__device__ __forceinline__ float row_sum(float v) {
  v = warp_sum(v);
  if (P > 32) {
    __shared__ float part[32];
    __syncthreads();  // the previous use of part is over
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = warp_sum((threadIdx.x & 31) < P / 32 ? part[threadIdx.x & 31] : 0.0f);
  }
  return v;
}
__device__ __forceinline__ float row_max(float v) {
  v = warp_max(v);
  if (P > 32) {
    __shared__ float part[32];
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = warp_max((threadIdx.x & 31) < P / 32 ? part[threadIdx.x & 31] : NEG_INF);
  }
  return v;
}

// Online softmax statistics: m the running max (LOWEST, not -inf, so that a -inf input adds
// exp(-inf) = 0 instead of exp(-inf + inf) = NaN), s = Σ exp(x − m).
__device__ __forceinline__ void online(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else {
    s += expf(x - m);
  }
}
// Symmetric in its two operands (the + commutes), so both lanes of a shuffle pair agree.
__device__ __forceinline__ void pair_merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  s = s * expf(m - mm) + s2 * expf(m2 - mm);
  m = mm;
}
__device__ __forceinline__ void warp_pair(float& m, float& s) {
#pragma unroll
  for (int k = 16; k > 0; k >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, k), s2 = __shfl_xor_sync(0xffffffffu, s, k);
    pair_merge(m, s, m2, s2);
  }
}
__device__ __forceinline__ void row_pair(float& m, float& s) {
  warp_pair(m, s);
  if (P > 32) {
    __shared__ float pm[32], ps[32];
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
      pm[threadIdx.x >> 5] = m;
      ps[threadIdx.x >> 5] = s;
    }
    __syncthreads();
    const bool have = (threadIdx.x & 31) < P / 32;
    m = have ? pm[threadIdx.x & 31] : LOWEST;
    s = have ? ps[threadIdx.x & 31] : 0.0f;
    warp_pair(m, s);
  }
}

// ---- register-cached rows: slot k of thread tid holds column col_of<V>(tid, k) ----
template <int V> __device__ __forceinline__ int col_of(int tid, int k) {
  return V == 4 ? (tid + (k >> 2) * P) * 4 + (k & 3) : tid + k * P;
}
template <int V> __device__ __forceinline__ void load_row(const float* row, int tid, float (&v)[CACHE]) {
#pragma unroll
  for (int k = 0; k < CACHE; k += V) {
    const int c = col_of<V>(tid, k);
    if constexpr (V == 4) {
      float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (c < COLS) q = *(const float4*)(row + c);
      v[k] = q.x; v[k + 1] = q.y; v[k + 2] = q.z; v[k + 3] = q.w;
    } else {
      v[k] = c < COLS ? row[c] : 0.0f;
    }
  }
}
template <int V> __device__ __forceinline__ void store_row(float* row, int tid, const float (&v)[CACHE]) {
#pragma unroll
  for (int k = 0; k < CACHE; k += V) {
    const int c = col_of<V>(tid, k);
    if (c >= COLS) continue;
    if constexpr (V == 4) *(float4*)(row + c) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
    else row[c] = v[k];
  }
}

// ---- streamed rows: aligned 16-byte body, scalar head (to the first 16-byte boundary) and tail ----
__device__ __forceinline__ int head_of(const float* x) {
  const int h = (int)(((16u - (unsigned)(((unsigned long long)x) & 15u)) & 15u) >> 2);
  return h < COLS ? h : COLS;
}
template <class F> __device__ __forceinline__ void row_scan(const float* x, int tid, F f) {
  const int head = head_of(x);
  if (tid < head) f(tid, x[tid]);
  const int n4 = (COLS - head) >> 2;
  const float4* x4 = (const float4*)(x + head);
#pragma unroll 4
  for (int k = tid; k < n4; k += P) {
    const float4 q = x4[k];
    const int c = head + 4 * k;
    f(c, q.x); f(c + 1, q.y); f(c + 2, q.z); f(c + 3, q.w);
  }
  const int t = head + 4 * n4 + tid;
  if (t < COLS) f(t, x[t]);
}
// y[c] = f(c, x[c]); 16-byte stores too when x and y share their alignment.
template <class F> __device__ __forceinline__ void row_map(const float* x, float* y, int tid, F f) {
  if (((((unsigned long long)x) ^ ((unsigned long long)y)) & 15) != 0) {
    for (int c = tid; c < COLS; c += P) y[c] = f(c, x[c]);
    return;
  }
  const int head = head_of(x);
  if (tid < head) y[tid] = f(tid, x[tid]);
  const int n4 = (COLS - head) >> 2;
  const float4* x4 = (const float4*)(x + head);
  float4* y4 = (float4*)(y + head);
#pragma unroll 4
  for (int k = tid; k < n4; k += P) {
    const float4 q = x4[k];
    const int c = head + 4 * k;
    y4[k] = make_float4(f(c, q.x), f(c + 1, q.y), f(c + 2, q.z), f(c + 3, q.w));
  }
  const int t = head + 4 * n4 + tid;
  if (t < COLS) y[t] = f(t, x[t]);
}
__device__ __forceinline__ void row_fill(float* y, int tid, float v) {
  for (int c = tid; c < COLS; c += P) y[c] = v;
}
