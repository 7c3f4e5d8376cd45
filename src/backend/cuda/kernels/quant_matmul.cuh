// quant_matmul (ops.def): out [ROWS, COLS] = x [ROWS, K] · (q · scale)ᵀ, q i8 [COLS, K] with one
// f32 scale per GROUP values of a row (GROUPS = K / GROUP a row), f32 accumulation
// (kernels_quant.cc); FOUR: x · (c · scale + offset)ᵀ with the 4-bit codes c packed two a byte in
// q [COLS, K / 2] (c[2j] the low nibble of byte j). One warp per CPW output columns: its lanes
// stream the columns' bytes of q, 16 values at a time (VEC: K and GROUP multiples of 16, rows
// aligned to their 16 values' bytes) or one at a time,
// against RB rows of x at a time (x read through L1: the few rows of a decode step are shared by
// every warp), then a warp sum per row and column.
//
// Defined before: XT (x's storage type: float, or unsigned short for bf16/f16 bits), X_BF, X_H
// (bf16 / f16 bits), ROWS, COLS, K, GROUP, GROUPS, RB (rows a pass, ≤ 8), WARPS (a block), CPW
// (columns a warp), UNROLL (of the 16-value loop), FOUR, VEC,
// XVEC (x's rows 16-byte aligned too: x read in 16-byte loads), and tg_bf2f / tg_h2f (prelude.cuh's
// widen piece). The pieces: `helpers`, then the body of
//   extern "C" __global__ void <name>(const XT* x, const signed char* q, const float* scale,
//                                     const float* offset (read when FOUR), float* out)
// @piece helpers
__device__ __forceinline__ float qm_widen(XT v) {
  return X_BF ? tg_bf2f((unsigned short)v) : X_H ? tg_h2f((unsigned short)v) : (float)v;
}
// Sixteen values of x from p, widened to f32 (16-byte loads when XVEC).
__device__ __forceinline__ void qm_load16(const XT* p, float* v) {
  if (XVEC && sizeof(XT) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 f = reinterpret_cast<const float4*>(p)[i];
      v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
  } else if (XVEC) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[i];
      const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) v[8 * i + j] = qm_widen((XT)(unsigned short)(w[j / 2] >> (16 * (j % 2))));
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = qm_widen(p[i]);
  }
}
// The code of value i (0 ≤ i < 16) of a 16-value chunk of 4-bit codes, words w (8 bytes).
__device__ __forceinline__ int qm_code(const unsigned* w, int i) { return (w[i / 8] >> (4 * (i % 8))) & 15; }
// @piece body
  const int lane = threadIdx.x & 31;
  const long long c0 = ((long long)blockIdx.x * WARPS + (threadIdx.x >> 5)) * CPW;
  if (c0 >= COLS) return;
  // A column past COLS (the last warp's) repeats c0: computed, never stored.
  long long cols[CPW];
#pragma unroll
  for (int j = 0; j < CPW; ++j) cols[j] = c0 + j < COLS ? c0 + j : c0;
  for (long long r0 = 0; r0 < ROWS; r0 += RB) {
    float acc[RB][CPW];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
      for (int j = 0; j < CPW; ++j) acc[r][j] = 0.f;
    if (VEC) {
      // Each lane's chunk of every column of the warp is loaded before any is used (CPW 16-byte
      // loads in flight, UNROLL times over): a column is a few kilobytes, so latency,
      // not bandwidth, bounds a loop that waits for each load in turn. x's chunk is read once for
      // the CPW columns; a chunk lies in one group, so its scale multiplies the chunk's sum.
#pragma unroll UNROLL
      for (long long k0 = (long long)lane * 16; k0 < K; k0 += 32 * 16) {
        int4 packed[CPW];
        float s[CPW], o[CPW];
#pragma unroll
        for (int j = 0; j < CPW; ++j) {
          if (FOUR) {
            const uint2 half = *reinterpret_cast<const uint2*>(q + cols[j] * (K / 2) + k0 / 2);
            packed[j] = make_int4((int)half.x, (int)half.y, 0, 0);
            o[j] = offset[cols[j] * GROUPS + k0 / GROUP];
          } else {
            packed[j] = *reinterpret_cast<const int4*>(q + cols[j] * K + k0);
            o[j] = 0.f;
          }
          s[j] = scale[cols[j] * GROUPS + k0 / GROUP];
        }
#pragma unroll
        for (int r = 0; r < RB; ++r) {
          if (r0 + r >= ROWS) break;
          float xv[16];
          qm_load16(x + (r0 + r) * K + k0, xv);
#pragma unroll
          for (int j = 0; j < CPW; ++j) {
            const int words[4] = {packed[j].x, packed[j].y, packed[j].z, packed[j].w};
            float sum = 0.f, xsum = 0.f;  // Σ x·q, and Σ x (which the offset multiplies)
            if (FOUR) {
              const unsigned w[2] = {(unsigned)words[0], (unsigned)words[1]};
#pragma unroll
              for (int i = 0; i < 16; ++i) sum += xv[i] * (float)qm_code(w, i), xsum += xv[i];
            } else {
#pragma unroll
              for (int i = 0; i < 16; ++i) sum += xv[i] * (float)(signed char)(words[i / 4] >> (8 * (i % 4)));
            }
            acc[r][j] += sum * s[j] + xsum * o[j];
          }
        }
      }
    } else {
      for (long long k = lane; k < K; k += 32) {
#pragma unroll
        for (int j = 0; j < CPW; ++j) {
          const long long g = cols[j] * GROUPS + k / GROUP;
          const float w = FOUR ? (float)((((unsigned char)q[cols[j] * (K / 2) + k / 2]) >> (4 * (k % 2))) & 15) * scale[g] +
                                     offset[g]
                               : (float)q[cols[j] * K + k] * scale[g];
#pragma unroll
          for (int r = 0; r < RB; ++r) {
            if (r0 + r >= ROWS) break;
            acc[r][j] += qm_widen(x[(r0 + r) * K + k]) * w;
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
      for (int j = 0; j < CPW; ++j) {
        float v = acc[r][j];
        for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
        if (lane == 0 && r0 + r < ROWS && c0 + j < COLS) out[(r0 + r) * COLS + c0 + j] = v;
      }
  }
