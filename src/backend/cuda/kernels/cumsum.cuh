// cumsum (ops.def): inclusive prefix sums along one axis, seen as [OUTER, LEN, INNER] with the
// output dense in that order (kernels_cumsum.cc). Sums accumulate in ACC (double for f32, so
// each output is the exact prefix rounded once; unsigned for i32, wrapping like the other
// backends) and are walked from the end of the axis when REVERSE.
//
// Defined before: T (element type), ACC, OUTER, LEN, INNER, REVERSE, NT (threads a block) and
// `long long in_offset(long long o, long long a, long long j)`, the input element at outer
// index o, axis position a and inner index j. Each piece is the body of
//   extern "C" __global__ void <name>(const T* in, T* out)
// @piece lines
  // One thread per (outer, inner) line, walking the axis; neighbouring threads take
  // neighbouring inner columns, so each step's loads and stores are coalesced.
  const long long lines = (long long)OUTER * INNER;
  for (long long line = (long long)blockIdx.x * blockDim.x + threadIdx.x; line < lines;
       line += (long long)gridDim.x * blockDim.x) {
    const long long o = line / INNER, j = line % INNER;
    ACC acc = 0;
    for (long long s = 0; s < LEN; ++s) {
      const long long a = REVERSE ? LEN - 1 - s : s;
      acc += (ACC)in[in_offset(o, a, j)];
      out[(o * LEN + a) * INNER + j] = (T)acc;
    }
  }
// @piece rows
  // INNER == 1: one block per row (rows beyond the grid in turn), NT elements at a time. Each round scans its elements within
  // each warp (shuffles), then the warps' totals (the first warp), adds the rounds before it
  // (carry) and writes; rounds follow each other, so the order of the sums is fixed.
  __shared__ ACC warp_total[NT / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (long long o = blockIdx.x; o < OUTER; o += gridDim.x) {
    ACC carry = 0;
    for (long long base = 0; base < LEN; base += NT) {
      const long long s = base + threadIdx.x;
      const long long a = REVERSE ? LEN - 1 - s : s;
      ACC v = s < LEN ? (ACC)in[in_offset(o, a, 0)] : (ACC)0;
      for (int d = 1; d < 32; d <<= 1) {
        const ACC n = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += n;
      }
      if (lane == 31) warp_total[warp] = v;
      __syncthreads();
      if (warp == 0) {
        ACC w = lane < NT / 32 ? warp_total[lane] : (ACC)0;
        for (int d = 1; d < 32; d <<= 1) {
          const ACC n = __shfl_up_sync(0xffffffffu, w, d);
          if (lane >= d) w += n;
        }
        if (lane < NT / 32) warp_total[lane] = w;
      }
      __syncthreads();
      if (s < LEN) out[o * LEN + a] = (T)(carry + (warp > 0 ? warp_total[warp - 1] : (ACC)0) + v);
      carry += warp_total[NT / 32 - 1];
      __syncthreads();  // every thread has read warp_total before the next round writes it
    }
  }
