// sample (ops.def; kernels_sample.cc): decoding's sampling step, one block of NT threads per
// row of logits. Every row-wide quantity is a block reduction in a fixed order. top-k: the
// k-th largest logit by radix select over order-preserving 32-bit keys (four 8-bit passes);
// top-p: the smallest key whose strictly larger candidates hold less than top_p of the mass, by
// bisection over the key range; min_p: a floor on the logits; then Gumbel-max in double over
// the shared Philox stream.
// Pieces: helpers (before the kernel); body (the kernel's body).
//
// Defined before (kernels_sample.cc): philox.cuh's functions; V (vocabulary), ROWS, NT; the
// kernel's signature (const float* logits, const float* params, const int* key, int* out).
// @piece helpers

#define INFINITY __int_as_float(0x7f800000)
// NaN counts as -inf; + 0.0f turns -0 into +0 so that equal floats have equal keys.
__device__ __forceinline__ float clean(float v) { return v != v ? -INFINITY : v + 0.0f; }
// Order-preserving map of floats to unsigned keys: a < b  <=>  okey(a) < okey(b).
__device__ __forceinline__ unsigned int okey(float f) {
  const unsigned int u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ double block_sum(double v, double* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();  // every thread has read the previous result out of sh
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = sh[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}
// The largest v with the smallest index on ties, over the block; every thread gets the index.
__device__ int block_argmax(double v, int i, double* shv, int* shi) {
  for (int o = 16; o > 0; o >>= 1) {
    const double ov = __shfl_down_sync(0xffffffffu, v, o);
    const int oi = __shfl_down_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) { shv[threadIdx.x >> 5] = v; shi[threadIdx.x >> 5] = i; }
  __syncthreads();
  if (threadIdx.x < 32) {
    v = shv[threadIdx.x];
    i = shi[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) {
      const double ov = __shfl_down_sync(0xffffffffu, v, o);
      const int oi = __shfl_down_sync(0xffffffffu, i, o);
      if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
    }
    if (threadIdx.x == 0) { shv[0] = v; shi[0] = i; }
  }
  __syncthreads();
  return shi[0];
}
// @piece body
  __shared__ double shv[32];
  __shared__ int shi[32];
  __shared__ unsigned int hist[256];
  __shared__ unsigned int chosen[2];
  if (blockIdx.x >= ROWS) return;
  const float* x = logits + (long long)blockIdx.x * V;
  const float temperature = params[0], top_k = params[1], top_p = params[2], min_p = params[3];
  // Greedy (and the softmax's max): the first index of the largest logit.
  double best = -INFINITY;
  int at = V;
  for (int i = threadIdx.x; i < V; i += NT) {
    const double v = clean(x[i]);
    if (v > best || (v == best && i < at)) { best = v; at = i; }
  }
  const int top = block_argmax(best, at, shv, shi);
  const float m = clean(x[top]);
  if (!(temperature > 0.0f) || m == -INFINITY) {
    if (threadIdx.x == 0) out[blockIdx.x] = top;
    return;
  }
  // top-k: the key of the k-th largest logit, 8 bits at a time from the top.
  unsigned int cut = 0;
  if (top_k >= 1.0f && top_k < (float)V) {
    unsigned int prefix = 0, mask = 0;
    unsigned int want = (unsigned int)top_k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = threadIdx.x; b < 256; b += NT) hist[b] = 0;
      __syncthreads();
      for (int i = threadIdx.x; i < V; i += NT) {
        const unsigned int u = okey(clean(x[i]));
        if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        unsigned int above = 0;
        int b = 255;
        for (; b > 0 && above + hist[b] < want; --b) above += hist[b];
        chosen[0] = (unsigned int)b;
        chosen[1] = want - above;
      }
      __syncthreads();
      prefix |= chosen[0] << shift;
      mask |= 255u << shift;
      want = chosen[1];
    }
    cut = prefix;
  }
  const double md = m, td = temperature;
  // top-p: the smallest key v with mass(candidates > v) < top_p * mass(candidates).
  if (top_p < 1.0f) {
    double z = 0;
    for (int i = threadIdx.x; i < V; i += NT) {
      const float v = clean(x[i]);
      if (okey(v) >= cut) z += exp(((double)v - md) / td);
    }
    const double target = (double)top_p * block_sum(z, shv);
    unsigned int lo = cut, hi = okey(m);
    while (lo < hi) {
      const unsigned int mid = lo + (hi - lo) / 2;
      double above = 0;
      for (int i = threadIdx.x; i < V; i += NT) {
        const float v = clean(x[i]);
        const unsigned int u = okey(v);
        if (u >= cut && u > mid) above += exp(((double)v - md) / td);
      }
      if (block_sum(above, shv) < target) hi = mid; else lo = mid + 1;
    }
    cut = lo;
  }
  // min_p: probability >= min_p times the largest's, (x - m)/T >= ln min_p.
  // The largest logits always stay (min_p > 1 keeps them alone).
  const double at_least = min_p > 0.0f ? fmin(md, md + td * log((double)min_p)) : -INFINITY;
  // Gumbel-max over the candidates (keys >= cut, logits >= at_least).
  const unsigned int seed = (unsigned int)key[0], counter = (unsigned int)key[1];
  best = -INFINITY;
  at = V;
  for (int i = threadIdx.x; i < V; i += NT) {
    const float v = clean(x[i]);
    if (okey(v) < cut || v == -INFINITY || (double)v < at_least) continue;  // −inf logits have no mass
    const unsigned long long e = (unsigned long long)blockIdx.x * V + i;
    const uint4 w = philox_block_seeded(e >> 2, counter, seed, 0u);
    const unsigned int word = (e & 3) == 0 ? w.x : (e & 3) == 1 ? w.y : (e & 3) == 2 ? w.z : w.w;
    double score = (double)v / td - log(-log((double)to_uniform(word)));
    if (score != score) score = -INFINITY;  // inf/inf at an infinite temperature
    if (score > best || (score == best && i < at)) { best = score; at = i; }
  }
  const int pick = block_argmax(best, at, shv, shi);
  if (threadIdx.x == 0) out[blockIdx.x] = pick;
}
