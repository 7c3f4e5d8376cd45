// Small f32 products out [batch, M, N] = a · b (small_matmul.h has the scheme): BM×BN tiles,
// K walked in stages of BK through a ring of shared-memory tiles (cp.async), TM×TN micro-tiles
// a thread with exact f32 FMAs; split K over KS thread groups of a block and CL blocks of a
// cluster, summed in a fixed order. Pieces, in the order the generator pastes them:
//   helpers  device functions, before the kernel;
//   cluster  with CL > 1: the cluster rank, barrier and distributed shared memory access;
//   body     the kernel's body up to the accumulated micro-tile;
//   store    without split K: the micro-tile's store and the kernel's end (with split K the
//            generator writes the partial tiles' sum instead).
//
// Defined before (small_matmul.cc), as macros: M, N, K; A_RS, A_CS, A_BS, B_RS, B_CS, B_BS,
// O_RS, O_BS (strides of a, b, out); BM, BN, BK, TM, TN, KS, CL, RX, TG, NT; PA, PB (padded
// tile rows), KB, STAGES, RING, LA, LB (loads a thread), KSL (K a group takes of a stage),
// A_KFAST, B_KFAST (load order); and the kernel's signature (a, b, out).
// @piece helpers

__device__ __forceinline__ void cp4(float* dst, const float* src, bool ok) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(d), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int n> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(n) : "memory"); }

template <int L> __device__ __forceinline__ void read_vec(const float* p, float* v) {
  if constexpr (L == 8) {
    const float4 x = *reinterpret_cast<const float4*>(p), y = *reinterpret_cast<const float4*>(p + 4);
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w; v[4] = y.x; v[5] = y.y; v[6] = y.z; v[7] = y.w;
  } else if constexpr (L == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
  } else if constexpr (L == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x; v[1] = x.y;
  } else {
    v[0] = p[0];
  }
}
// @piece cluster

__device__ __forceinline__ unsigned cluster_rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ unsigned map_rank(const float* p, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
  return r;
}
__device__ __forceinline__ float ld_cluster(unsigned addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
// @piece body
  extern __shared__ __align__(16) float smem[];
  float* const As = smem;                   // [RING][BK][PA]
  float* const Bs = smem + RING * BK * PA;  // [RING][BK][PB]
  const int tid = threadIdx.x;
  const int g = tid / TG, lt = tid % TG, ty = lt / RX, tx = lt % RX;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
  const int bat = blockIdx.z / CL, rank = blockIdx.z % CL;
  const long long kbeg = (long long)rank * KB;
  const float* const ab = a + (long long)bat * A_BS;
  const float* const bb = b + (long long)bat * B_BS;

  auto issue = [&](int st) {
    const int buf = st % RING;
    const long long k0 = kbeg + (long long)st * BK;
#pragma unroll
    for (int l = 0; l < LA; ++l) {
      const int t = tid + l * NT;
      if ((BM * BK) % NT == 0 || t < BM * BK) {
#if A_KFAST
        const int kk = (t / (8 * BM)) * 8 + (t & 7), i = (t >> 3) % BM;
#else
        const int i = t % BM, kk = t / BM;
#endif
        const long long gi = m0 + i, gk = k0 + kk;
        const bool ok = gi < M && gk < K;
        cp4(As + (buf * BK + kk) * PA + i, ok ? ab + gi * A_RS + gk * A_CS : ab, ok);
      }
    }
#pragma unroll
    for (int l = 0; l < LB; ++l) {
      const int t = tid + l * NT;
      if ((BN * BK) % NT == 0 || t < BN * BK) {
#if B_KFAST
        const int kk = (t / (8 * BN)) * 8 + (t & 7), j = (t >> 3) % BN;
#else
        const int j = t % BN, kk = t / BN;
#endif
        const long long gj = n0 + j, gk = k0 + kk;
        const bool ok = gj < N && gk < K;
        cp4(Bs + (buf * BK + kk) * PB + j, ok ? bb + gk * B_RS + gj * B_CS : bb, ok);
      }
    }
  };

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

#pragma unroll
  for (int st = 0; st < RING - 1; ++st) {
    if (st < STAGES) issue(st);
    cp_commit();
  }
#pragma unroll 1
  for (int st = 0; st < STAGES; ++st) {
    cp_wait<RING - 2>();
    __syncthreads();
    if (st + RING - 1 < STAGES) issue(st + RING - 1);
    cp_commit();
    const float* const at = As + (st % RING) * BK * PA + ty * TM;
    const float* const bt = Bs + (st % RING) * BK * PB + tx * TN;
#pragma unroll
    for (int q = 0; q < KSL; ++q) {
      const int kk = g * KSL + q;
      float av[TM], bv[TN];
      read_vec<TM>(at + kk * PA, av);
      read_vec<TN>(bt + kk * PB, bv);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
// @piece store
  float* const ob = out + (long long)bat * O_BS;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const long long r = m0 + ty * TM + i;
    if (r < M) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const long long col = n0 + tx * TN + j;
        if (col < N) ob[r * O_RS + col] = acc[i][j];
      }
    }
  }
}
