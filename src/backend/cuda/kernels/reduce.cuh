// The end of a chunked reduction (kernels_reduce.cc), run by every thread of every block
// after it stored its partials: the last block to arrive merges all outputs' partials in chunk
// order (a block-wide fixed tree for a single output), then resets the arrival counter.
//
// Defined before (kernels_reduce.cc: reduce_kernel): OUTS, CHUNKS; the accumulator type A and
// result type R with init(), merge(), shfl(), finish(); the partials' load_part() and the
// __device__ arrival counter g_done.
// @piece finish_chunks

__device__ __forceinline__ void finish_chunks(R* out) {
  __shared__ bool last;
  __threadfence();  // this thread's partials are visible device-wide before the block counts in
  __syncthreads();
  const int tid = threadIdx.x + threadIdx.y * blockDim.x, nt = blockDim.x * blockDim.y;
  if (tid == 0) last = atomicAdd(&g_done, 1u) == gridDim.x * gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (OUTS == 1 && CHUNKS >= 64) {
    // One output (a loss, a norm): the block merges the partials. Thread t takes chunks t,
    // t + nt, …; the warps' results then merge by a fixed shuffle tree and in warp order, so
    // the result does not depend on scheduling. (Every merge is commutative: argmax breaks
    // ties by index.)
    A a = load_part(tid < CHUNKS ? tid : 0);
    if (tid >= CHUNKS) a = init();
    for (int c = tid + nt; c < CHUNKS; c += nt) a = merge(a, load_part(c));
    for (int m = 16; m > 0; m >>= 1) a = merge(a, shfl(a, m));
    __shared__ A warps[32];
    if ((tid & 31) == 0) warps[tid >> 5] = a;
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < nt / 32; ++w) a = merge(a, warps[w]);
      out[0] = finish(a);
      g_done = 0;  // ready for the next launch
    }
    return;
  }
  for (long long o = tid; o < OUTS; o += nt) {
    A a = load_part(o);
    for (int c = 1; c < CHUNKS; ++c) a = merge(a, load_part((long long)c * OUTS + o));
    out[o] = finish(a);
  }
  if (tid == 0) g_done = 0;  // ready for the next launch
}
