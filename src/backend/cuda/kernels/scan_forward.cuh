// selective_scan forward (selective_scan.cc): h_t = exp(Δ_t A) h_{t−1} + Δ_t B_t u_t,
// y_t = C_t · h_t + D u_t, with states in registers, rows staged K steps at a time into NBUF
// copies in shared memory, the warps of a block kept at most a round apart by an mbarrier.
// Writes y and the last state; with KEEP, the states entering each chunk into hs.
// Pieces: barrier (the mbarrier helpers and the sum and store of y, before the kernel); body (the kernel's body, after
// scan_common.cuh's start).
//
// Defined before: the prelude and stage of scan_common.cuh with DY = false, DY_ROWS = false,
// DELTA_EACH = true, KEEP, ROWS_U = 2; the kernel's signature (the op's operands, out, hs).
// @piece barrier
// A barrier of the block's warps in shared memory: each warp's lane 0 arrives once a round,
// after the warp's writes; a phase completes when all WARPS have arrived. (Before sm_80, which
// has no mbarrier, the wait is a __syncthreads, a stronger condition, and init and arrival are
// nothing; the wait's condition is the same for all threads.)
__device__ __forceinline__ void bar_init(unsigned long long* bar, unsigned count) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(bar)), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void bar_arrive(unsigned long long* bar) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
#endif
}
__device__ __forceinline__ void bar_wait(unsigned long long* bar, unsigned parity) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "{\n .reg .pred done;\n WAIT:\n mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n @!done bra WAIT;\n}" ::"r"(
          (unsigned)__cvta_generic_to_shared(bar)),
      "r"(parity)
      : "memory");
#else
  __syncthreads();
#endif
}
// y's sum over a channel's lanes (a reduce-scatter: each lane keeps KEPT steps of one channel).
// With PAIRED slots the level at lane bit 0 adds the partner's slot 1 (the same channel as this
// lane's slot 0) with no select; the rest is a reduce-scatter of the K steps.
__device__ __forceinline__ void sum_y(float (&yv)[CT * K]) {
  if constexpr (PAIRED) {
#pragma unroll
    for (int i = 0; i < K; ++i) yv[i] += __shfl_xor_sync(MASK, yv[i + (CT == 2 ? K : 0)], 1);
    reduce_scatter<K, 2, NSG / 2>(yv);
  } else {
    reduce_scatter<CT * K, 1, NSG / 2>(yv);
  }
}
// KEPT steps of y from step t (this lane's share, summed) with the D skip, from the registers:
// 16 bytes at a time where rows allow (a warp's stores cover whole 32-byte sectors).
template <int KEPT>
__device__ __forceinline__ void store_y(float* __restrict__ dst, int t, const float (&yv)[CT * K], const float (&yu)[KEPT], float dsk) {
  if constexpr (VEC && KEPT % 4 == 0) {
#pragma unroll
    for (int i = 0; i < KEPT; i += 4)
      if (FULL || t + i < L)  // L is a multiple of 4: a group is all in or all out
        *reinterpret_cast<float4*>(dst + i) =
            make_float4(fmaf(dsk, yu[i], yv[i]), fmaf(dsk, yu[i + 1], yv[i + 1]), fmaf(dsk, yu[i + 2], yv[i + 2]), fmaf(dsk, yu[i + 3], yv[i + 3]));
  } else {
#pragma unroll
    for (int i = 0; i < KEPT; ++i)
      if (FULL || t + i < L) dst[i] = fmaf(dsk, yu[i], yv[i]);
  }
}
// @piece body
  unsigned long long* sbar = reinterpret_cast<unsigned long long*>(sdsk + CB + ((NBUF * COPY + 2 * CB) & 1));  // the round barrier (8-byte aligned)
  // CT channels per thread (c, c + 1, …) share each load of B and C; with PAIRED slots (kStart)
  // the first level of y's sum over the channel's lanes needs no select (32 a round fewer).
  float h[CT][NS], a2c[CT][NS];
#pragma unroll
  for (int k = 0; k < CT; ++k)
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      h[k][s] = 0.0f;
      a2c[k][s] = j * NS + s < N ? A[(d + (k ^ SW)) * N + j * NS + s] * 1.4426950408889634f : 0.0f;  // A·log2 e (0 past N)
    }
  // Round r computes on copy r % NBUF of the staged rows while its end stores round r + 2's rows
  // into copy (r + 2) % NBUF; the rows of rounds 0 and 1 are stored before the first. Round r's
  // loads go into ld[r & 1], issued two rounds before its rows are stored (one round of compute
  // left the staging stores waiting on memory).
  Stage st(u, delta, Bm, Cm, nullptr, row0, bc0);
  Stage::Vals ld[2];
  st.fetch(ld[0], 0);
  if (NR > 1) st.fetch(ld[1], K);
  if (threadIdx.x == 0) bar_init(sbar, (NT + 31) / 32);
  __syncthreads();  // bias and D are in shared memory
  st.store(ld[0], copy_at(smem, 0), sbias, 0);
  if (NR > 2) st.fetch(ld[0], 2 * K);
  if (NR > 1) {
    st.store(ld[1], copy_at(smem, 1), sbias, K);
    if (NR > 3) st.fetch(ld[1], 3 * K);
  }
  __syncthreads();
  // y sums over the channel's lanes one round late: round r's reduce-scatter runs while round
  // r + 1 computes (independent work the compiler interleaves with it; at the round's end its
  // shuffles' latency was exposed). A lane keeps KEPT consecutive steps of one channel (KEPT
  // divides K, the first a multiple of it), from i_first; their u for the D skip is read in the
  // round itself (its copy of the rows is overwritten during the next).
  float* const hs_thread = KEEP ? hs + hs_at(b, 0, d, j) : nullptr;  // the states entering chunk kc at kc·NSG·HG
  constexpr int KEPT = kept_count(CT * K, NSG);
  const int i_first = PAIRED ? kept_index<K, 2, NSG / 2>() : kept_index<CT * K, 1, NSG / 2>();
  const int cc = c + (PAIRED ? SW : i_first / K), tf = i_first % K;
  const bool y_lane = j < CT * K;  // past CT·K lanes (more lanes than values) the upper lanes hold copies
  const float dsk = sdsk[cc];
  float yv[CT * K], yu[KEPT];  // the last round's partial sums (channel k's step t at k·K + t) and u
#pragma unroll
  for (int i = 0; i < CT * K; ++i) yv[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < KEPT; ++i) yu[i] = 0.0f;
  // Rounds in groups of NBUF, so that the copy a round works on is known when the kernel is
  // compiled: its addresses are then constant offsets from shared memory, as with one copy
  // (a copy chosen at run time would have its addresses computed again every round).
  for (int r0 = 0; r0 < NR; r0 += NBUF)
#pragma unroll
  for (int p = 0; p < NBUF; ++p) {
    const int r = r0 + p, t0 = r * K;
    if (r >= NR) break;
    float* const cp = copy_at(smem, p);
    float (*su)[RS] = rows_at(cp, 0);
    float (*sd)[RS] = rows_at(cp, 1);
    const float* sb = b_of(cp);
    const float* sc = c_of(cp);
    sum_y(yv);  // the last round's
    float yn[CT * K];  // this round's
#pragma unroll
    for (int t4 = 0; t4 < K; t4 += 4) {
      // The state entering each chunk of KC steps, for the backward.
      if (KEEP && t4 % KC == 0 && (FULL || t0 + t4 < L)) store_group(hs_thread + (long long)((t0 + t4) / KC) * NSG * HG, h);
      float dvs[CT][4], uvs[CT][4];
#pragma unroll
      for (int k = 0; k < CT; ++k) {
        const float4 dv = *reinterpret_cast<const float4*>(&sd[c + (k ^ SW)][t4]);
        const float4 uv = *reinterpret_cast<const float4*>(&su[c + (k ^ SW)][t4]);
        dvs[k][0] = dv.x; dvs[k][1] = dv.y; dvs[k][2] = dv.z; dvs[k][3] = dv.w;
        uvs[k][0] = uv.x; uvs[k][1] = uv.y; uvs[k][2] = uv.z; uvs[k][3] = uv.w;
      }
      // The four steps' factors and inputs first (independent of h), then the recurrence.
      float av[CT][4][NS], xv[CT][4][NS], cv[4][NS];
#pragma unroll
      for (int q = 0; q < 4; q += 2) {
        float bs[2][NS];
        load_two_steps(&sb[j * BS + (t4 + q) * NS], bs[0], bs[1]);
        load_two_steps(&sc[j * BS + (t4 + q) * NS], cv[q], cv[q + 1]);
#pragma unroll
        for (int k = 0; k < CT; ++k)
#pragma unroll
          for (int p = 0; p < 2; ++p) {
            const float du = dvs[k][q + p] * uvs[k][q + p];
#pragma unroll
            for (int s = 0; s < NS; ++s) {
              av[k][q + p][s] = exp2_approx(dvs[k][q + p] * a2c[k][s]);
              xv[k][q + p][s] = du * bs[p][s];
            }
          }
      }
#pragma unroll
      for (int k = 0; k < CT; ++k)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float y = 0.0f;
#pragma unroll
          for (int s = 0; s < NS; ++s) {
            h[k][s] = fmaf(av[k][q][s], h[k][s], xv[k][q][s]);
            y = fmaf(cv[q][s], h[k][s], y);
          }
          yn[k * K + t4 + q] = y;
        }
    }
    if (r > 0 && y_lane) store_y(out + row0 + (long long)cc * L + t0 - K + tf, t0 - K + tf, yv, yu, dsk);
#pragma unroll
    for (int i = 0; i < CT * K; ++i) yv[i] = yn[i];
#pragma unroll
    for (int i = 0; i < KEPT; ++i) yu[i] = su[cc][tf + i];
    // Round r + 2's rows into copy (r + 2) % NBUF once every warp is done with round r − 1
    // (the phase that also says that round r + 1's rows are in), then this warp's arrival.
    if (r > 0) bar_wait(sbar, (p + NBUF - 1) & 1);
    if (r + 2 < NR) {
      st.store(ld[p & 1], copy_at(smem, (p + 2) % NBUF), sbias, t0 + 2 * K);
      if (r + 4 < NR) st.fetch(ld[p & 1], t0 + 4 * K);
    }
    __syncwarp(MASK);
    if (threadIdx.x % 32 == 0) bar_arrive(sbar);
  }
  sum_y(yv);  // the last round's
  if (y_lane) store_y(out + row0 + (long long)cc * L + (NR - 1) * K + tf, (NR - 1) * K + tf, yv, yu, dsk);
#pragma unroll
  for (int k = 0; k < CT; ++k)
#pragma unroll
    for (int s = 0; s < NS; ++s)
      if (j * NS + s < N) out[NU + ((long long)b * D + d + (k ^ SW)) * N + j * NS + s] = h[k][s];
}
