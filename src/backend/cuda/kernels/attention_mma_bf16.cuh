// The bf16 tensor-core attention path (bf16 q, k, v and dout, D ≤ 128): mma.sync m16n8k16 bf16
// with f32 accumulators (and the same path for f16 operands when HALF_F16 is 1: f16 tiles,
// f16 rounding of P and dS, mma.sync m16n8k16 f16; "bf16" below then reads "f16", 2^-8 2^-11), the same three kernels and block scheme as attention_mma.cuh (16 rows
// a warp, BR = 16 · warps, tiles of BC columns; BC a multiple of 16). Tiles are staged in shared
// memory as bf16 (exact: the operands are bf16), row-major with stride RS = DP + 8 elements
// (DP = D rounded up to 16, zero padded), so RS / 2 ≡ 4 mod 8 words: the 32-bit fragment reads
// A[g (+8)][16kk + 2t (+8)] and B[8n + g][16kk + 2t (+8)] (g = lane / 4, t = lane % 4) fall in
// 32 distinct banks, and the 8 rows of an ldmatrix (16 bytes each, 2·RS bytes apart) too.
//  - Scores Σ_d A[row][d]·B[col][d] read both operands as 32-bit pairs along d.
//  - P·X (P in the accumulator layout, rounded to bf16 once, as FlashAttention-2 does) uses P's
//    registers directly as the A fragment (columns 2t, 2t+1 of 8-column tiles 2j and 2j+1 form
//    the k16 chunk j), and reads X [rows = P's columns][DP] with ldmatrix .trans, two 8-column
//    output tiles at a time. Rounding P (the probabilities, dS) costs each term P·x a relative
//    error of at most 2^-8, so an element of P·X errs by at most 2^-8 · Σ_j |P_j·x_j| beyond the
//    f32 accumulation: 2^-8 · max|v| for a forward row (Σ_j P_j = 1); tests/ops/half_op_test.cc
//    checks the outputs and gradients against this bound.
// Queries are staged unscaled; scores are multiplied by SCALE2 = scale·log2 e in f32, so the
// softmax statistics are in base 2 as on the other paths, and dK = SCALE · dSᵀ Q.
//
// Defined before (attention.cc: mma_constants): NT, BR, BC, DP, RS (bf16 elements); the
// problem's constants and the shared helpers (attention_common.cuh). The generator appends the
// kernel that calls one of mma_forward, mma_dkdv, mma_dq.
// @piece mma_bf16

constexpr int NN = BC / 8, ND = DP / 8;
static_assert(NN % 2 == 0 && ND % 2 == 0, "bf16 tiles are multiples of 16 columns");
typedef unsigned short bf16_t;

// Two f32 as bf16 (round to nearest even) in one register: lo in the low half.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  unsigned r;
#if HALF_F16
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
  return r;
}
__device__ __forceinline__ unsigned ld_pair(const bf16_t* p) { return *reinterpret_cast<const unsigned*>(p); }
__device__ __forceinline__ void mma16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if HALF_F16
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
// Four 8×8 bf16 matrices, transposed: lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldsm4t(unsigned (&r)[4], const bf16_t* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}

// Stores a Stage's tile as bf16 at dst[r·RS + d] (8 bytes a slot).
template <int ROWS>
__device__ __forceinline__ void put_bf16(const Stage<ROWS>& st, bf16_t* dst) {
#pragma unroll
  for (int i = 0; i < Stage<ROWS>::PER; ++i) {
    const int e = i * NT + threadIdx.x, r = e / (DP / 4), d = e % (DP / 4) * 4;
    if (Stage<ROWS>::SLOTS % NT == 0 || e < Stage<ROWS>::SLOTS)
      *reinterpret_cast<uint2*>(dst + r * RS + d) =
          make_uint2(pack_bf16(st.v[i].x, st.v[i].y), pack_bf16(st.v[i].z, st.v[i].w));
  }
}

// c[n] += A[16 rows]·B[8n .. 8n + 7]ᵀ over DP, A and B staged bf16 tiles (A at the warp's first row).
template <int M>
__device__ __forceinline__ void mma_abt(float (&c)[M][4], const bf16_t* A, const bf16_t* Bm, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < DP / 16; ++kk) {
    unsigned a[4];
    a[0] = ld_pair(A + g * RS + 16 * kk + 2 * t);
    a[1] = ld_pair(A + (g + 8) * RS + 16 * kk + 2 * t);
    a[2] = ld_pair(A + g * RS + 16 * kk + 2 * t + 8);
    a[3] = ld_pair(A + (g + 8) * RS + 16 * kk + 2 * t + 8);
#pragma unroll
    for (int n = 0; n < M; ++n)
      mma16(c[n], a, ld_pair(Bm + (8 * n + g) * RS + 16 * kk + 2 * t),
            ld_pair(Bm + (8 * n + g) * RS + 16 * kk + 2 * t + 8));
  }
}

// acc += P·X: P [16 × 8M] in accumulator layout, X a staged tile whose rows are P's columns.
// P (probabilities, dS) is f32 and goes in rounded to bf16 (relative error ≤ 2^-8 a term).
template <int M>
__device__ __forceinline__ void mma_px(float (&acc)[ND][4], const float (&p)[M][4], const bf16_t* X) {
  const int lane = threadIdx.x & 31;
  // This lane's ldmatrix row: matrices (rows +0 / +8) × (columns +0 / +8).
  const bf16_t* xl = X + (((lane >> 3) & 1) * 8 + (lane & 7)) * RS + (lane >> 4) * 8;
#pragma unroll
  for (int j = 0; j < M / 2; ++j) {
    unsigned a[4];
    a[0] = pack_bf16(p[2 * j][0], p[2 * j][1]);
    a[1] = pack_bf16(p[2 * j][2], p[2 * j][3]);
    a[2] = pack_bf16(p[2 * j + 1][0], p[2 * j + 1][1]);
    a[3] = pack_bf16(p[2 * j + 1][2], p[2 * j + 1][3]);
#pragma unroll
    for (int dn = 0; dn < ND; dn += 2) {
      unsigned b[4];
      ldsm4t(b, xl + 16 * j * RS + 8 * dn);
      mma16(acc[dn], a, b[0], b[1]);
      mma16(acc[dn + 1], a, b[2], b[3]);
    }
  }
}

// f(col, dn, e) for each output column col < D that this thread holds in row g + 8·rr of an
// accumulator acc[ND][4] (accumulator layout): the value there is acc[dn][e].
template <class F>
__device__ __forceinline__ void for_cols(int t, int rr, F f) {
#pragma unroll
  for (int dn = 0; dn < ND; ++dn)
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int col = 8 * dn + 2 * t + u;
      if (col < D) f(col, dn, 2 * rr + u);
    }
}

template <int M>
__device__ __forceinline__ void scale_scores(float (&s)[M][4]) {
#pragma unroll
  for (int n = 0; n < M; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] *= SCALE2;
}

template <int MODE>
__device__ __forceinline__ void mma_forward(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                            const IN_T* __restrict__ v, float* __restrict__ out,
                                            const IN_T* __restrict__ dout, float* __restrict__ scratch,
                                            const unsigned char* __restrict__ kmask) {
  extern __shared__ float4 smem4[];
  bf16_t* Qs = reinterpret_cast<bf16_t*>(smem4);  // [BR][RS] queries
  bf16_t* Ks = Qs + BR * RS;                      // [BC][RS]
  bf16_t* Vs = Ks + BC * RS;                      // [BC][RS]
  const int warp = threadIdx.x >> 5, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
  const auto [q0, bh, b, h, kh, vh] = query_block(k, v);
  const IN_T* qh = q + b * Q0 + h * Q1;
  {
    Stage<BR> qt;
    qt.fetch(qh, Q2, Q3, q0, T, 1.f, rows_vec(qh, Q2, Q3));
    put_bf16(qt, Qs);
  }
  const bf16_t* Qw = Qs + warp * 16 * RS;
  const int w0 = q0 + warp * 16, ra = w0 + g;  // rows ra and ra + 8
  float o[ND][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
  zero(o);
  const int kend = key_end(q0);
  const bool vk = rows_vec(kh, K2, K3), vv = rows_vec(vh, V2, V3);
  Stage<BC> kt, vt;  // with PREFETCH the next key tile, in flight while this one is computed
  TG_FIRST_KEY_TILE();
  for (int k0 = 0; k0 < kend; k0 += BC) {
    __syncthreads();
    if (!PREFETCH<BC>) {
      kt.fetch(kh, K2, K3, k0, S, 1.f, vk);
      vt.fetch(vh, V2, V3, k0, S, 1.f, vv);
    }
    put_bf16(kt, Ks);
    put_bf16(vt, Vs);
    __syncthreads();
    if (PREFETCH<BC> && k0 + BC < kend) {
      kt.fetch(kh, K2, K3, k0 + BC, S, 1.f, vk);
      vt.fetch(vh, V2, V3, k0 + BC, S, 1.f, vv);
    }
    if (CAUSAL && k0 > w0 + 15 + SHIFT) continue;  // hidden from every row of this warp
    float s[NN][4];
    zero(s);
    mma_abt(s, Qw, Ks, g, t);
    scale_scores(s);
    if (MASKED || k0 + BC > S || (CAUSAL && k0 + BC - 1 > w0 + SHIFT)) {  // some key hidden from some row
#pragma unroll
      for (int n = 0; n < NN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = k0 + 8 * n + 2 * t + (e & 1);
          if (!visible(ra + 8 * (e >> 1), c) || !key_kept(kmask, b, c)) s[n][e] = NEG_INF;
        }
    }
    float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int n = 0; n < NN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
    float base[2], alpha[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const float mnew = fmaxf(m[rr], lanes_max<4>(mx[rr]));
      base[rr] = mnew == NEG_INF ? 0.f : mnew;
      alpha[rr] = fast_exp2(m[rr] - base[rr]);
      m[rr] = mnew;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[e >> 1] += (s[n][e] = fast_exp2(s[n][e] - base[e >> 1]));
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) l[rr] = l[rr] * alpha[rr] + sum[rr];
#pragma unroll
    for (int dn = 0; dn < ND; ++dn) {
      o[dn][0] *= alpha[0], o[dn][1] *= alpha[0];
      o[dn][2] *= alpha[1], o[dn][3] *= alpha[1];
    }
    mma_px(o, s, Vs);
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = ra + 8 * rr;
    const float total = lanes_sum<4>(l[rr]), inv = row_inverse(total);
    const long long row = b * O0 + h * O1 + (long long)r * O2;  // out / dout row
    if (MODE != STATS) {
      if (r < T) for_cols(t, rr, [&](int col, int dn, int e) { out[row + col * O3] = o[dn][e] * inv; });
      if (MODE == OUT_LSE && r < T && t == 0) scratch[bh * T + r] = row_lse(m[rr], total);
    } else {
      float dot = 0.f;
      if (r < T)
        for_cols(t, rr, [&](int col, int dn, int e) { dot = fmaf(o[dn][e] * inv, in_ld(dout + row + col * O3), dot); });
      dot = lanes_sum<4>(dot);
      if (r < T && t == 0) store_stats(scratch, bh, r, row_lse(m[rr], total), dot);
    }
  }
}

// dK, dV of BR keys of one (b, kv head) over every query of its group.
__device__ __forceinline__ void mma_dkdv(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                         const IN_T* __restrict__ v, const IN_T* __restrict__ dout,
                                         float* __restrict__ grads, const float* __restrict__ scratch,
                                         const unsigned char* __restrict__ kmask) {
  extern __shared__ float4 smem4[];
  bf16_t* Ks = reinterpret_cast<bf16_t*>(smem4);  // [BR][RS]
  bf16_t* Vs = Ks + BR * RS;                      // [BR][RS]
  bf16_t* Qs = Vs + BR * RS;                      // [BC][RS]
  bf16_t* Os = Qs + BC * RS;                      // [BC][RS]
  float* Ls = reinterpret_cast<float*>(Os + BC * RS);  // [BC]
  float* Ds = Ls + BC;                                 // [BC]
  const int warp = threadIdx.x >> 5, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
  const int bg = (int)(blockIdx.x % (B * HKV)), k0 = (int)(blockIdx.x / (B * HKV)) * BR;
  const int b = bg / HKV, kvh = bg % HKV;
  {
    const IN_T* kh = k + b * K0 + kvh * K1;
    const IN_T* vh = v + b * V0 + kvh * V1;
    Stage<BR> rows;
    rows.fetch(kh, K2, K3, k0, S, 1.f, rows_vec(kh, K2, K3));
    put_bf16(rows, Ks);
    rows.fetch(vh, V2, V3, k0, S, 1.f, rows_vec(vh, V2, V3));
    put_bf16(rows, Vs);
  }
  const bf16_t* Kw = Ks + warp * 16 * RS;
  const bf16_t* Vw = Vs + warp * 16 * RS;
  const int w0 = k0 + warp * 16, ka = w0 + g;  // keys ka and ka + 8
  const bool kept[2] = {!MASKED || (ka < S && key_kept(kmask, b, ka)),  // by the key mask
                        !MASKED || (ka + 8 < S && key_kept(kmask, b, ka + 8))};
  float dk[ND][4], dv[ND][4];
  zero(dk);
  zero(dv);
  const int q_begin = CAUSAL ? max(0, k0 - SHIFT) / BC * BC : 0;
  // The (head, query tile) pairs in order; with PREFETCH the next one's tiles are in flight
  // while one is computed.
  Stage<BC> qt, ot;
  auto fetch = [&](int h, int q0) {
    const IN_T* qh = q + b * Q0 + h * Q1;
    const IN_T* oh = dout + b * O0 + h * O1;
    qt.fetch(qh, Q2, Q3, q0, T, 1.f, rows_vec(qh, Q2, Q3));
    ot.fetch(oh, O2, O3, q0, T, 1.f, rows_vec(oh, O2, O3));
  };
  if (PREFETCH<BC>) fetch(kvh * GRP, q_begin);
  for (int h = kvh * GRP; h < (kvh + 1) * GRP; ++h) {
    const long long bh = (long long)b * HQ + h;
    for (int q0 = q_begin; q0 < T; q0 += BC) {
      __syncthreads();
      if (!PREFETCH<BC>) fetch(h, q0);
      put_bf16(qt, Qs);
      put_bf16(ot, Os);
      stage_stats(Ls, Ds, scratch, bh, q0);
      __syncthreads();
      if (PREFETCH<BC>) {
        if (q0 + BC < T) fetch(h, q0 + BC);
        else if (h + 1 < (kvh + 1) * GRP) fetch(h + 1, q_begin);
      }
      if (CAUSAL && w0 > q0 + BC - 1 + SHIFT) continue;  // every key of this warp hidden
      float s[NN][4], dp[NN][4];
      zero(s);
      zero(dp);
      mma_abt(s, Kw, Qs, g, t);   // Sᵀ
      mma_abt(dp, Vw, Os, g, t);  // dPᵀ = V dOᵀ
      const bool full = !CAUSAL || w0 + 15 <= q0 + SHIFT;  // every query of the tile sees every key of the warp
#pragma unroll
      for (int n = 0; n < NN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = 8 * n + 2 * t + (e & 1);
          const float p = (full || ka + 8 * (e >> 1) <= q0 + c + SHIFT) && kept[e >> 1]
                              ? fast_exp2(s[n][e] * SCALE2 - Ls[c])
                              : 0.f;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - Ds[c]);
        }
      mma_px(dv, s, Os);   // dV += Pᵀ dO
      mma_px(dk, dp, Qs);  // dK += dSᵀ Q
    }
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int key = ka + 8 * rr;
    if (key >= S) continue;
    for_cols(t, rr, [&](int col, int dn, int e) { store_dkdv(grads, bg, key, col, dk[dn][e] * SCALE, dv[dn][e]); });
  }
}

__device__ __forceinline__ void mma_dq(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                       const IN_T* __restrict__ v, const IN_T* __restrict__ dout,
                                       float* __restrict__ grads, const float* __restrict__ scratch,
                                       const unsigned char* __restrict__ kmask) {
  extern __shared__ float4 smem4[];
  bf16_t* Qs = reinterpret_cast<bf16_t*>(smem4);  // [BR][RS] queries
  bf16_t* Os = Qs + BR * RS;                      // [BR][RS] output gradients
  bf16_t* Ks = Os + BR * RS;                      // [BC][RS]
  bf16_t* Vs = Ks + BC * RS;                      // [BC][RS]
  const int warp = threadIdx.x >> 5, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
  const auto [q0, bh, b, h, kh, vh] = query_block(k, v);
  {
    const IN_T* qh = q + b * Q0 + h * Q1;
    const IN_T* oh = dout + b * O0 + h * O1;
    Stage<BR> rows;
    rows.fetch(qh, Q2, Q3, q0, T, 1.f, rows_vec(qh, Q2, Q3));
    put_bf16(rows, Qs);
    rows.fetch(oh, O2, O3, q0, T, 1.f, rows_vec(oh, O2, O3));
    put_bf16(rows, Os);
  }
  const bf16_t* Qw = Qs + warp * 16 * RS;
  const bf16_t* Ow = Os + warp * 16 * RS;
  const int w0 = q0 + warp * 16, ra = w0 + g;
  float lse[2], delta[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) load_stats(scratch, bh, ra + 8 * rr, lse[rr], delta[rr]);
  float dq[ND][4];
  zero(dq);
  const int kend = key_end(q0);
  const bool vk = rows_vec(kh, K2, K3), vv = rows_vec(vh, V2, V3);
  Stage<BC> kt, vt;  // with PREFETCH the next key tile, in flight while this one is computed
  TG_FIRST_KEY_TILE();
  for (int k0 = 0; k0 < kend; k0 += BC) {
    __syncthreads();
    if (!PREFETCH<BC>) {
      kt.fetch(kh, K2, K3, k0, S, 1.f, vk);
      vt.fetch(vh, V2, V3, k0, S, 1.f, vv);
    }
    put_bf16(kt, Ks);
    put_bf16(vt, Vs);
    __syncthreads();
    if (PREFETCH<BC> && k0 + BC < kend) {
      kt.fetch(kh, K2, K3, k0 + BC, S, 1.f, vk);
      vt.fetch(vh, V2, V3, k0 + BC, S, 1.f, vv);
    }
    if (CAUSAL && k0 > w0 + 15 + SHIFT) continue;
    float s[NN][4], dp[NN][4];
    zero(s);
    zero(dp);
    mma_abt(s, Qw, Ks, g, t);
    mma_abt(dp, Ow, Vs, g, t);
    const bool full = !MASKED && k0 + BC <= S && (!CAUSAL || k0 + BC - 1 <= w0 + SHIFT);  // every key visible to every row
#pragma unroll
    for (int n = 0; n < NN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int rr = e >> 1;
        const int c = k0 + 8 * n + 2 * t + (e & 1);
        const float p = (full || (visible(ra + 8 * rr, c) && key_kept(kmask, b, c)))
                            ? fast_exp2(s[n][e] * SCALE2 - lse[rr])
                            : 0.f;
        dp[n][e] = p * (dp[n][e] - delta[rr]);
      }
    mma_px(dq, dp, Ks);
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = ra + 8 * rr;
    if (r >= T) continue;
    const long long row = dq_row(bh, r);
    for_cols(t, rr, [&](int col, int dn, int e) { grads[row + col] = dq[dn][e] * SCALE; });
  }
}
