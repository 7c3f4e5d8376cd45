// A norm's backward fused with its neighbours (norm_fusion.cc): one warp per row (C ≤ 1024),
// blocks of 8 warps walking the rows: dx = norm_grad(x, dz · w) (layer: centred; else RMS)
// and, as asked, each block's column partials of dz · x̂ (k = 0) and dz (k = 1) into
// part[k][block][c], added across the block's warps in warp order.
//   layer: dx = rstd (g − mean(g) − x̂ mean(g x̂));  rms: dx = rstd (g − x̂ mean(g x̂)),  g = dz · w.
// Pieces: helpers (before the kernel); rows (the kernel's body up to the per-column partials;
// the generator then adds `g[j] *= __ldg(w + c);` when there is a w); tail (the rest).
//
// Defined before (norm_fusion.cc): ROWS, C (columns), J = ⌈C/32⌉ (columns a lane), G (blocks),
// EPS, LAYER, DW, DB; the kernel's signature (x, dz, [w,] dx, part).
// @piece helpers

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
// @piece rows
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float adw[J], adb[J];
#pragma unroll
  for (int j = 0; j < J; ++j) adw[j] = adb[j] = 0.0f;
  for (long long row = (long long)blockIdx.x * 8 + warp; row < ROWS; row += (long long)G * 8) {
    const float* xr = x + row * C;
    const float* gr = dz + row * C;
    float v[J], g[J];
    float t = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int c = lane + 32 * j;
      v[j] = c < C ? xr[c] : 0.0f;
      g[j] = c < C ? gr[c] : 0.0f;
      t += v[j];
    }
    const float mean = LAYER ? warp_sum(t) / C : 0.0f;
    float q = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j)
      if (lane + 32 * j < C) q += (v[j] - mean) * (v[j] - mean);
    const float rstd = rsqrtf(warp_sum(q) / C + EPS);
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int c = lane + 32 * j;
      if (c >= C) continue;
      const float xh = (v[j] - mean) * rstd;
      if (DW) adw[j] += g[j] * xh;
      if (DB) adb[j] += g[j];
// @piece tail
      v[j] = xh;
      sg += g[j];
      sgx += g[j] * xh;
    }
    const float mg = LAYER ? warp_sum(sg) / C : 0.0f, mgx = warp_sum(sgx) / C;
    float* out = dx + row * C;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int c = lane + 32 * j;
      if (c < C) out[c] = rstd * (g[j] - mg - v[j] * mgx);
    }
  }
  if (!DW && !DB) return;
  // This block's partials: the 8 warps' columns added in warp order through shared memory.
  __shared__ float sh[8][J * 32];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    if ((k == 0 && !DW) || (k == 1 && !DB)) continue;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < J; ++j) sh[warp][lane + 32 * j] = k == 0 ? adw[j] : adb[j];
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float a = sh[0][c];
      for (int r = 1; r < 8; ++r) a += sh[r][c];
      part[((long long)k * G + blockIdx.x) * C + c] = a;
    }
  }
}
