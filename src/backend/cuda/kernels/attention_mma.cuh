// The TF32 tensor-core attention path (AttentionShape::tf32, D ≤ 128): mma.sync m16n8k8
// through inline PTX. A block is NT/32 warps of 16 rows each (BR = 16 · warps); tiles of BC
// columns are staged in shared memory, row-major with stride RS = DP + 4 (DP = D rounded up to
// 8, zero padded) and rounded to TF32 once when staged. With g = lane / 4, t = lane % 4, a score
// tile Σ_d A[row][d]·B[col][d] reads A fragments A[g (+8)][8kk + t (+4)] and B fragments
// B[8n + g][8kk + t (+4)]: RS ≡ 4 mod 8 spreads both over the 32 banks. The product P·X of an
// accumulator-layout P (thread holds columns 2t, 2t+1 of rows g, g+8 of each 8-column tile) uses
// it directly as the A fragment by permuting the reduction index (A column t ↔ key 2t, t+4 ↔
// 2t+1), so X is read as X[8n + 2t (+1)][8dn + g], again conflict-free. mma_forward<MODE>,
// mma_dkdv and mma_dq mirror the fp32 path's kernels (attention_tiled.cuh). Tiles move through
// registers (Stage): the next tile's loads are in flight while the current one is computed.
// Only the tiles that cross the causal diagonal or the sequence end are masked element-wise
// (every tile, with a key mask).
//
// Defined before (attention.cc: mma_constants): NT, BR, BC, DP, RS; the problem's constants and
// the shared helpers (attention_common.cuh). The generator appends the kernel that calls one of
// mma_forward, mma_dkdv, mma_dq.
// @piece mma

constexpr int NN = BC / 8, ND = DP / 8;

__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void mma8(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Staged tiles are rounded to TF32 once, when Stage::put stores them.
struct Tf32 {
  __device__ __forceinline__ float operator()(float x) const { return __uint_as_float(to_tf32(x)); }
};


// c[n] += A[16 rows]·B[8n .. 8n + 7]ᵀ over DP, A and B staged tiles (A at the warp's first row).
template <int M>
__device__ __forceinline__ void mma_abt(float (&c)[M][4], const float* A, const float* Bm, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < ND; ++kk) {
    unsigned a[4];
    a[0] = __float_as_uint(A[g * RS + 8 * kk + t]);
    a[1] = __float_as_uint(A[(g + 8) * RS + 8 * kk + t]);
    a[2] = __float_as_uint(A[g * RS + 8 * kk + t + 4]);
    a[3] = __float_as_uint(A[(g + 8) * RS + 8 * kk + t + 4]);
#pragma unroll
    for (int n = 0; n < M; ++n) {
      unsigned b[2];
      b[0] = __float_as_uint(Bm[(8 * n + g) * RS + 8 * kk + t]);
      b[1] = __float_as_uint(Bm[(8 * n + g) * RS + 8 * kk + t + 4]);
      mma8(c[n], a, b);
    }
  }
}

// acc += P·X: P [16 × 8M] in accumulator layout, X a staged tile whose rows are P's columns.
template <int M>
__device__ __forceinline__ void mma_px(float (&acc)[ND][4], const float (&p)[M][4], const float* X, int g, int t) {
#pragma unroll
  for (int n = 0; n < M; ++n) {
    unsigned a[4];
    a[0] = to_tf32(p[n][0]);
    a[1] = to_tf32(p[n][2]);
    a[2] = to_tf32(p[n][1]);
    a[3] = to_tf32(p[n][3]);
#pragma unroll
    for (int dn = 0; dn < ND; ++dn) {
      unsigned b[2];
      b[0] = __float_as_uint(X[(8 * n + 2 * t) * RS + 8 * dn + g]);
      b[1] = __float_as_uint(X[(8 * n + 2 * t + 1) * RS + 8 * dn + g]);
      mma8(acc[dn], a, b);
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

template <int MODE>
__device__ __forceinline__ void mma_forward(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                            const IN_T* __restrict__ v, float* __restrict__ out,
                                            const IN_T* __restrict__ dout, float* __restrict__ scratch,
                                            const unsigned char* __restrict__ kmask) {
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);  // [BR][RS] queries · scale·log2 e
  float* Ks = Qs + BR * RS;                     // [BC][RS]
  float* Vs = Ks + BC * RS;                     // [BC][RS]
  const int warp = threadIdx.x >> 5, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
  const auto [q0, bh, b, h, kh, vh] = query_block(k, v);
  const IN_T* qh = q + b * Q0 + h * Q1;
  {
    Stage<BR, Tf32> qt;
    qt.fetch(qh, Q2, Q3, q0, T, SCALE2, rows_vec(qh, Q2, Q3));
    qt.put(Qs);
  }
  const float* Qw = Qs + warp * 16 * RS;
  const int w0 = q0 + warp * 16, ra = w0 + g;  // rows ra and ra + 8
  float o[ND][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
  zero(o);
  const int kend = key_end(q0);
  const bool vk = rows_vec(kh, K2, K3), vv = rows_vec(vh, V2, V3);
  Stage<BC, Tf32> kt, vt;  // with PREFETCH the next key tile, in flight while this one is computed
  TG_FIRST_KEY_TILE();
  for (int k0 = 0; k0 < kend; k0 += BC) {
    TG_STAGE_KEY_TILE();
    if (CAUSAL && k0 > w0 + 15 + SHIFT) continue;  // hidden from every row of this warp
    float s[NN][4];
    zero(s);
    mma_abt(s, Qw, Ks, g, t);
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
    mma_px(o, s, Vs, g, t);
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

// dK, dV of BR keys of one (b, kv head) over every query of its group. Queries are staged
// pre-scaled by scale·log2 e like the stats pass (so the scores match its lse); dK is
// rescaled by 1 / log2 e at the end.
__device__ __forceinline__ void mma_dkdv(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                         const IN_T* __restrict__ v, const IN_T* __restrict__ dout,
                                         float* __restrict__ grads, const float* __restrict__ scratch,
                                         const unsigned char* __restrict__ kmask) {
  extern __shared__ float4 smem4[];
  float* Ks = reinterpret_cast<float*>(smem4);  // [BR][RS]
  float* Vs = Ks + BR * RS;                     // [BR][RS]
  float* Qs = Vs + BR * RS;                     // [BC][RS]
  float* Os = Qs + BC * RS;                     // [BC][RS]
  float* Ls = Os + BC * RS;                     // [BC]
  float* Ds = Ls + BC;                          // [BC]
  const int warp = threadIdx.x >> 5, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
  const int bg = (int)(blockIdx.x % (B * HKV)), k0 = (int)(blockIdx.x / (B * HKV)) * BR;
  const int b = bg / HKV, kvh = bg % HKV;
  {
    const IN_T* kh = k + b * K0 + kvh * K1;
    const IN_T* vh = v + b * V0 + kvh * V1;
    Stage<BR, Tf32> rows;
    rows.fetch(kh, K2, K3, k0, S, 1.f, rows_vec(kh, K2, K3));
    rows.put(Ks);
    rows.fetch(vh, V2, V3, k0, S, 1.f, rows_vec(vh, V2, V3));
    rows.put(Vs);
  }
  const float* Kw = Ks + warp * 16 * RS;
  const float* Vw = Vs + warp * 16 * RS;
  const int w0 = k0 + warp * 16, ka = w0 + g;  // keys ka and ka + 8
  const bool kept[2] = {!MASKED || (ka < S && key_kept(kmask, b, ka)),  // by the key mask
                        !MASKED || (ka + 8 < S && key_kept(kmask, b, ka + 8))};
  float dk[ND][4], dv[ND][4];
  zero(dk);
  zero(dv);
  const int q_begin = CAUSAL ? max(0, k0 - SHIFT) / BC * BC : 0;
  // The (head, query tile) pairs in order; with PREFETCH the next one's tiles are in flight
  // while one is computed.
  Stage<BC, Tf32> qt, ot;
  auto fetch = [&](int h, int q0) {
    const IN_T* qh = q + b * Q0 + h * Q1;
    const IN_T* oh = dout + b * O0 + h * O1;
    qt.fetch(qh, Q2, Q3, q0, T, SCALE2, rows_vec(qh, Q2, Q3));
    ot.fetch(oh, O2, O3, q0, T, 1.f, rows_vec(oh, O2, O3));
  };
  if (PREFETCH<BC>) fetch(kvh * GRP, q_begin);
  for (int h = kvh * GRP; h < (kvh + 1) * GRP; ++h) {
    const long long bh = (long long)b * HQ + h;
    for (int q0 = q_begin; q0 < T; q0 += BC) {
      __syncthreads();
      if (!PREFETCH<BC>) fetch(h, q0);
      qt.put(Qs);
      ot.put(Os);
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
      mma_abt(s, Kw, Qs, g, t);   // Sᵀ (base-2 units)
      mma_abt(dp, Vw, Os, g, t);  // dPᵀ = V dOᵀ
      const bool full = !CAUSAL || w0 + 15 <= q0 + SHIFT;  // every query of the tile sees every key of the warp
#pragma unroll
      for (int n = 0; n < NN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = 8 * n + 2 * t + (e & 1);
          const float p =
              (full || ka + 8 * (e >> 1) <= q0 + c + SHIFT) && kept[e >> 1] ? fast_exp2(s[n][e] - Ls[c]) : 0.f;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - Ds[c]);
        }
      mma_px(dv, s, Os, g, t);   // dV += Pᵀ dO
      mma_px(dk, dp, Qs, g, t);  // dK += dSᵀ Q (Q scaled)
    }
  }
  constexpr float DKMUL = SCALE / SCALE2;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int key = ka + 8 * rr;
    if (key >= S) continue;
    for_cols(t, rr, [&](int col, int dn, int e) { store_dkdv(grads, bg, key, col, dk[dn][e] * DKMUL, dv[dn][e]); });
  }
}

__device__ __forceinline__ void mma_dq(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                       const IN_T* __restrict__ v, const IN_T* __restrict__ dout,
                                       float* __restrict__ grads, const float* __restrict__ scratch,
                                       const unsigned char* __restrict__ kmask) {
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);  // [BR][RS] queries · scale·log2 e
  float* Os = Qs + BR * RS;                     // [BR][RS] output gradients
  float* Ks = Os + BR * RS;                     // [BC][RS]
  float* Vs = Ks + BC * RS;                     // [BC][RS]
  const int warp = threadIdx.x >> 5, g = (threadIdx.x >> 2) & 7, t = threadIdx.x & 3;
  const auto [q0, bh, b, h, kh, vh] = query_block(k, v);
  {
    const IN_T* qh = q + b * Q0 + h * Q1;
    const IN_T* oh = dout + b * O0 + h * O1;
    Stage<BR, Tf32> rows;
    rows.fetch(qh, Q2, Q3, q0, T, SCALE2, rows_vec(qh, Q2, Q3));
    rows.put(Qs);
    rows.fetch(oh, O2, O3, q0, T, 1.f, rows_vec(oh, O2, O3));
    rows.put(Os);
  }
  const float* Qw = Qs + warp * 16 * RS;
  const float* Ow = Os + warp * 16 * RS;
  const int w0 = q0 + warp * 16, ra = w0 + g;
  float lse[2], delta[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) load_stats(scratch, bh, ra + 8 * rr, lse[rr], delta[rr]);
  float dq[ND][4];
  zero(dq);
  const int kend = key_end(q0);
  const bool vk = rows_vec(kh, K2, K3), vv = rows_vec(vh, V2, V3);
  Stage<BC, Tf32> kt, vt;  // with PREFETCH the next key tile, in flight while this one is computed
  TG_FIRST_KEY_TILE();
  for (int k0 = 0; k0 < kend; k0 += BC) {
    TG_STAGE_KEY_TILE();
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
        const float p = (full || (visible(ra + 8 * rr, c) && key_kept(kmask, b, c))) ? fast_exp2(s[n][e] - lse[rr]) : 0.f;
        dp[n][e] = p * (dp[n][e] - delta[rr]);
      }
    mma_px(dq, dp, Ks, g, t);
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = ra + 8 * rr;
    if (r >= T) continue;
    const long long row = dq_row(bh, r);
    for_cols(t, rr, [&](int col, int dn, int e) { grads[row + col] = dq[dn][e] * SCALE; });
  }
}
