// attention_at (ops.def): a few new queries over KV caches, each sequence seeing only its
// valid prefix (attention_at.cc). One block of NW warps owns one (query, head, sequence): warp
// w scores keys w, w + NW, … (lanes across D), the block takes the softmax over the visible
// keys, then each warp sums its keys' values and the partial rows meet in shared memory in warp
// order. A position outside [0, S − T] sets *err and writes zeros.
//
// Defined before (attention_at.cc): INFINITY; T (queries), S (cache length), D (head size),
// DC = ⌈D/32⌉, GROUP = Hq/Hkv, HQ, NW (warps a block); QS0..QS3, KS0..KS3, VS0..VS3 (element
// strides of q, k, v over [B, H, T or S, D]), PS (pos stride), SCALE. The piece is the body of
//   extern "C" __global__ void <name>(const float* q, const float* k, const float* v,
//                                     const int* pos, float* out, int* err)
// whose dynamic shared memory is S floats.
// @piece body
  extern __shared__ float p[];  // [S]: scores, then weights
  __shared__ float qs[D];
  __shared__ float red[NW];
  __shared__ float part[NW][D];
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / GROUP;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  float* o = out + (((long long)b * HQ + h) * T + i) * D;
  const int at = pos[b * PS];
  if (at < 0 || at > S - T) {
    if (tid == 0) *err = 1;
    for (int d = tid; d < D; d += NW * 32) o[d] = 0.0f;
    return;
  }
  const int visible = at + i + 1;
  for (int d = tid; d < D; d += NW * 32) qs[d] = q[b * QS0 + h * QS1 + i * QS2 + d * QS3] * SCALE;
  __syncthreads();
  float qr[DC];
#pragma unroll
  for (int c = 0; c < DC; ++c) qr[c] = lane + 32 * c < D ? qs[lane + 32 * c] : 0.0f;
  const float* kb = k + b * KS0 + g * KS1;
  const float* vb = v + b * VS0 + g * VS1;
  // Scores, four keys per warp at a time.
  float mx = -INFINITY;
  for (int j0 = warp; j0 < visible; j0 += 4 * NW) {
    float dot[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = j0 + u * NW;
      dot[u] = 0.0f;
      if (j < visible)
#pragma unroll
        for (int c = 0; c < DC; ++c)
          if (lane + 32 * c < D) dot[u] = fmaf(qr[c], kb[j * KS2 + (lane + 32 * c) * KS3], dot[u]);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
      for (int off = 16; off > 0; off >>= 1) dot[u] += __shfl_xor_sync(0xffffffffu, dot[u], off);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = j0 + u * NW;
      if (j < visible) {
        if (lane == 0) p[j] = dot[u];
        mx = fmaxf(mx, dot[u]);
      }
    }
  }
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = red[0];
  for (int w = 1; w < NW; ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  float sum = 0.0f;
  for (int j = tid; j < visible; j += NW * 32) {
    const float e = expf(p[j] - mx);
    p[j] = e;
    sum += e;
  }
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) red[warp] = sum;
  __syncthreads();
  sum = red[0];
  for (int w = 1; w < NW; ++w) sum += red[w];
  // Values: warp w sums keys w, w + NW, … (four at a time), lanes across D.
  float acc[DC];
#pragma unroll
  for (int c = 0; c < DC; ++c) acc[c] = 0.0f;
  for (int j0 = warp; j0 < visible; j0 += 4 * NW) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = j0 + u * NW;
      if (j < visible) {
        const float w = p[j];
#pragma unroll
        for (int c = 0; c < DC; ++c)
          if (lane + 32 * c < D) acc[c] = fmaf(w, vb[j * VS2 + (lane + 32 * c) * VS3], acc[c]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < DC; ++c)
    if (lane + 32 * c < D) part[warp][lane + 32 * c] = acc[c];
  __syncthreads();
  const float inv = 1.0f / sum;
  for (int d = tid; d < D; d += NW * 32) {
    float t = part[0][d];
    for (int w = 1; w < NW; ++w) t += part[w][d];
    o[d] = t * inv;
  }
}
