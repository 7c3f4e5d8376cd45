// The fp32 tiled attention path (FlashAttention-2 style; see attention.cc's file comment for
// the tile layouts and the math). Pieces, each pasted after the path's constants and
// attention_common.cuh:
//   helpers  vector loads and stores, lane coordinates, transposed staging of the row operand,
//            score tiles, the per-warp P buffer and the P·X products;
//   forward  forward_rows<MODE>: one query tile with an online base-2 softmax. MODE (common):
//            OUT stores the output; STATS (the backward's first launch when the forward kept
//            nothing) lse and delta instead; OUT_LSE the output and lse (scratch's first half);
//   dkdv     dkdv_rows: dK and dV of one key tile of one (b, kv head), over every query of the
//            heads in its group;
//   dq       dq_rows: dQ of one query tile, over the visible keys.
//
// Defined before (attention.cc: constants): NT; RPT, CPT (score rows / columns a thread), BR,
// BC (rows a block, columns a staged tile), DW, VW, DP (D rounded up for float4 steps, the vector
// width of output columns, D rounded up to 8·VW), RS, TS, PS (row strides of the row-major,
// transposed and per-warp P tiles), OC (output columns a thread); the problem's constants (see
// attention_common.cuh). The generator appends the kernel that calls the piece's function.
// @piece helpers

template <int N> __device__ __forceinline__ void ldv(float* r, const float* p);
template <> __device__ __forceinline__ void ldv<1>(float* r, const float* p) { r[0] = p[0]; }
template <> __device__ __forceinline__ void ldv<2>(float* r, const float* p) {
  const float2 t = *reinterpret_cast<const float2*>(p);
  r[0] = t.x; r[1] = t.y;
}
template <> __device__ __forceinline__ void ldv<4>(float* r, const float* p) {
  const float4 t = *reinterpret_cast<const float4*>(p);
  r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
}
template <> __device__ __forceinline__ void ldv<8>(float* r, const float* p) {
  ldv<4>(r, p);
  ldv<4>(r + 4, p + 4);
}
template <int N> __device__ __forceinline__ void stv(float* p, const float* r);
template <> __device__ __forceinline__ void stv<1>(float* p, const float* r) { p[0] = r[0]; }
template <> __device__ __forceinline__ void stv<2>(float* p, const float* r) {
  *reinterpret_cast<float2*>(p) = make_float2(r[0], r[1]);
}
template <> __device__ __forceinline__ void stv<4>(float* p, const float* r) {
  *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
}
template <> __device__ __forceinline__ void stv<8>(float* p, const float* r) {
  stv<4>(p, r);
  stv<4>(p + 4, r + 4);
}

// Thread coordinates: tx = column lane (0..7), lg = row group in the warp (0..3), ty = row group in the block.
struct Lane {
  int warp, tx, lg, ty;
};
__device__ __forceinline__ Lane lane_coords() {
  Lane l;
  l.warp = threadIdx.x >> 5;
  l.tx = threadIdx.x & 7;
  l.lg = (threadIdx.x >> 3) & 3;
  l.ty = l.warp * 4 + l.lg;
  return l;
}

// Output column o of a thread (o < OC): VW-wide vectors, 8 lanes side by side.
__device__ __forceinline__ int out_col(int o, int tx) { return (o / VW) * (8 * VW) + tx * VW + o % VW; }

// Transposed tile: dst[d·TS + r] (d < DW, r < ROWS), same source and zeros as Stage. A warp
// step covers 8 d × 4 rows: 32-byte runs of global memory, conflict-free shared stores (TS ≡ 4 mod 8).
template <int ROWS>
__device__ __forceinline__ void load_cols(float* dst, const IN_T* src, long long rstride, long long dstride, int row0,
                                          int limit, float mul) {
  constexpr int DG = (DW + 7) / 8, TASKS = (ROWS / 4) * DG;
  for (int e = threadIdx.x; e < TASKS * 32; e += NT) {
    const int lane = e & 31, task = e >> 5;
    const int d = (task % DG) * 8 + (lane & 7), r = (task / DG) * 4 + (lane >> 3);
    if (d >= DW) continue;
    float x = 0.f;
    if (d < D && row0 + r < limit) x = mul * in_ld(src + (long long)(row0 + r) * rstride + (long long)d * dstride);
    dst[d * TS + r] = x;
  }
}

// s[i][j] = Σ_d At[d][ty·RPT + i] · Bs[tx + 8j][d].
__device__ __forceinline__ void score_tile(float (&s)[RPT][CPT], const float* At, const float* Bs, const Lane& L) {
#pragma unroll
  for (int i = 0; i < RPT; ++i)
#pragma unroll
    for (int j = 0; j < CPT; ++j) s[i][j] = 0.f;
#pragma unroll 2
  for (int d = 0; d < DW; d += 4) {
    float a[4][RPT];
#pragma unroll
    for (int u = 0; u < 4; ++u) ldv<RPT>(a[u], At + (d + u) * TS + L.ty * RPT);
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      float b[4];
      ldv<4>(b, Bs + (L.tx + 8 * j) * RS + d);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int i = 0; i < RPT; ++i) s[i][j] = fmaf(a[u][i], b[u], s[i][j]);
    }
  }
}

// The thread's scores into its warp's buffer: Pw[col][lg·RPT + i].
__device__ __forceinline__ void store_tile(float* Pw, const float (&s)[RPT][CPT], const Lane& L) {
#pragma unroll
  for (int j = 0; j < CPT; ++j) {
    float t[RPT];
#pragma unroll
    for (int i = 0; i < RPT; ++i) t[i] = s[i][j];
    stv<RPT>(Pw + (L.tx + 8 * j) * PS + L.lg * RPT, t);
  }
}

// acc[i][o] += Σ_c Pw[c][lg·RPT + i] · Xs[c][out_col(o)] over the BC columns of the tile.
__device__ __forceinline__ void accumulate(float (&acc)[RPT][OC], const float* Pw, const float* Xs, const Lane& L) {
#pragma unroll 4
  for (int c = 0; c < BC; ++c) {
    float p[RPT];
    ldv<RPT>(p, Pw + c * PS + L.lg * RPT);
#pragma unroll
    for (int g = 0; g < OC / VW; ++g) {
      float x[VW];
      ldv<VW>(x, Xs + c * RS + g * (8 * VW) + L.tx * VW);
#pragma unroll
      for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int w = 0; w < VW; ++w) acc[i][g * VW + w] = fmaf(p[i], x[w], acc[i][g * VW + w]);
    }
  }
}
// @piece forward

template <int MODE>
__device__ __forceinline__ void forward_rows(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                             const IN_T* __restrict__ v, float* __restrict__ out,
                                             const IN_T* __restrict__ dout, float* __restrict__ scratch,
                                             const unsigned char* __restrict__ kmask) {
  extern __shared__ float4 smem4[];
  float* Qt = reinterpret_cast<float*>(smem4);  // [DW][TS]  queries, transposed, pre-scaled
  float* Ks = Qt + DW * TS;                     // [BC][RS]  keys
  float* Vs = Ks + BC * RS;                     // [BC][RS]  values
  const Lane L = lane_coords();
  float* Pw = Vs + BC * RS + L.warp * (BC * PS);  // this warp's probabilities [BC][PS]
  const auto [q0, bh, b, h, kh, vh] = query_block(k, v);
  load_cols<BR>(Qt, q + b * Q0 + h * Q1, Q2, Q3, q0, T, SCALE2);

  float o[RPT][OC], m[RPT], l[RPT];
  zero(o);
#pragma unroll
  for (int i = 0; i < RPT; ++i) m[i] = NEG_INF, l[i] = 0.f;  // l: this lane's part of the row sum
  const int r0 = q0 + L.ty * RPT, kend = key_end(q0);
  const bool vk = rows_vec(kh, K2, K3), vv = rows_vec(vh, V2, V3);
  Stage<BC> kt, vt;  // with PREFETCH the next key tile, in flight while this one is computed
  TG_FIRST_KEY_TILE();
  for (int k0 = 0; k0 < kend; k0 += BC) {
    TG_STAGE_KEY_TILE();
    float s[RPT][CPT];
    score_tile(s, Qt, Ks, L);
    bool kept[CPT];  // by the key mask
#pragma unroll
    for (int j = 0; j < CPT; ++j) kept[j] = !MASKED || (k0 + L.tx + 8 * j < S && key_kept(kmask, b, k0 + L.tx + 8 * j));
#pragma unroll
    for (int i = 0; i < RPT; ++i) {  // online softmax, base 2
      float mx = NEG_INF;
#pragma unroll
      for (int j = 0; j < CPT; ++j) {
        if (!visible(r0 + i, k0 + L.tx + 8 * j) || !kept[j]) s[i][j] = NEG_INF;
        mx = fmaxf(mx, s[i][j]);
      }
      const float mnew = fmaxf(m[i], lanes_max<8>(mx));
      const float base = mnew == NEG_INF ? 0.f : mnew;
      const float alpha = fast_exp2(m[i] - base);
      m[i] = mnew;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < CPT; ++j) sum += (s[i][j] = fast_exp2(s[i][j] - base));
      l[i] = l[i] * alpha + sum;
#pragma unroll
      for (int c = 0; c < OC; ++c) o[i][c] *= alpha;
    }
    store_tile(Pw, s, L);
    __syncwarp();
    accumulate(o, Pw, Vs, L);
  }

#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = r0 + i;
    const float total = lanes_sum<8>(l[i]), inv = row_inverse(total);
    const long long row = b * O0 + h * O1 + (long long)r * O2;  // out / dout row (O3 = 1)
    if (MODE != STATS) {
      if (r < T)
#pragma unroll
        for (int c = 0; c < OC; ++c)
          if (out_col(c, L.tx) < D) out[row + out_col(c, L.tx) * O3] = o[i][c] * inv;
      if (MODE == OUT_LSE && r < T && L.tx == 0) scratch[bh * T + r] = row_lse(m[i], total);
    } else {
      float dot = 0.f;  // delta = Σ_d dO·O
      if (r < T)
#pragma unroll
        for (int c = 0; c < OC; ++c)
          if (out_col(c, L.tx) < D) dot = fmaf(o[i][c] * inv, in_ld(dout + row + out_col(c, L.tx) * O3), dot);
      dot = lanes_sum<8>(dot);
      if (r < T && L.tx == 0) store_stats(scratch, bh, r, row_lse(m[i], total), dot);
    }
  }
}
// @piece dkdv

__device__ __forceinline__ void dkdv_rows(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                          const IN_T* __restrict__ v, const IN_T* __restrict__ dout,
                                          float* __restrict__ grads, const float* __restrict__ scratch,
                                          const unsigned char* __restrict__ kmask) {
  extern __shared__ float4 smem4[];
  float* Kt = reinterpret_cast<float*>(smem4);  // [DW][TS]  keys, transposed
  float* Vt = Kt + DW * TS;                     // [DW][TS]  values, transposed
  float* Qs = Vt + DW * TS;                     // [BC][RS]  queries
  float* Os = Qs + BC * RS;                     // [BC][RS]  output gradients
  float* Ls = Os + BC * RS;                     // [BC]      lse of the tile's queries
  float* Ds = Ls + BC;                          // [BC]      delta of the tile's queries
  const Lane L = lane_coords();
  float* Pw = Ds + BC + L.warp * (BC * PS);     // this warp's Pᵀ, then dSᵀ [BC][PS]
  const int bg = (int)(blockIdx.x % (B * HKV)), k0 = (int)(blockIdx.x / (B * HKV)) * BR;
  const int b = bg / HKV, g = bg % HKV;
  load_cols<BR>(Kt, k + b * K0 + g * K1, K2, K3, k0, S, 1.f);
  load_cols<BR>(Vt, v + b * V0 + g * V1, V2, V3, k0, S, 1.f);

  float dk[RPT][OC], dv[RPT][OC];
  zero(dk);
  zero(dv);
  const int c0 = k0 + L.ty * RPT;  // this thread's first key
  bool kept[RPT];                   // its keys, by the key mask
#pragma unroll
  for (int i = 0; i < RPT; ++i) kept[i] = !MASKED || (c0 + i < S && key_kept(kmask, b, c0 + i));
  // Queries before q_begin see none of the tile's keys.
  const int q_begin = CAUSAL ? max(0, k0 - SHIFT) / BC * BC : 0;
  // Tiles staged without prefetching here: holding the next tile in registers would cost this
  // kernel occupancy.
  for (int h = g * GRP; h < (g + 1) * GRP; ++h) {
    const long long bh = (long long)b * HQ + h;
    const IN_T* qh = q + b * Q0 + h * Q1;
    const IN_T* oh = dout + b * O0 + h * O1;
    const bool vq = rows_vec(qh, Q2, Q3), vo = rows_vec(oh, O2, O3);
    for (int q0 = q_begin; q0 < T; q0 += BC) {
      __syncthreads();
      {
        Stage<BC> rows;
        rows.fetch(qh, Q2, Q3, q0, T, 1.f, vq);
        rows.put(Qs);
        rows.fetch(oh, O2, O3, q0, T, 1.f, vo);
        rows.put(Os);
      }
      stage_stats(Ls, Ds, scratch, bh, q0);
      __syncthreads();
      float s[RPT][CPT];
      score_tile(s, Kt, Qs, L);
#pragma unroll
      for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int j = 0; j < CPT; ++j) {
          const int r = q0 + L.tx + 8 * j;
          s[i][j] = (!CAUSAL || c0 + i <= r + SHIFT) && kept[i] ? fast_exp2(s[i][j] * SCALE2 - Ls[L.tx + 8 * j]) : 0.f;
        }
      store_tile(Pw, s, L);
      __syncwarp();
      accumulate(dv, Pw, Os, L);  // dV += Pᵀ dO
      score_tile(s, Vt, Os, L);   // dPᵀ = V dOᵀ
      __syncwarp();               // every lane is done reading Pᵀ
#pragma unroll
      for (int j = 0; j < CPT; ++j) {
        float* at = Pw + (L.tx + 8 * j) * PS + L.lg * RPT;
#pragma unroll
        for (int i = 0; i < RPT; ++i) at[i] = at[i] * (s[i][j] - Ds[L.tx + 8 * j]);  // dSᵀ = Pᵀ ∘ (dPᵀ − delta)
      }
      __syncwarp();
      accumulate(dk, Pw, Qs, L);  // dK += dSᵀ Q
    }
  }

#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    if (c0 + i >= S) continue;
#pragma unroll
    for (int c = 0; c < OC; ++c)
      if (out_col(c, L.tx) < D) store_dkdv(grads, bg, c0 + i, out_col(c, L.tx), dk[i][c] * SCALE, dv[i][c]);
  }
}
// @piece dq

__device__ __forceinline__ void dq_rows(const IN_T* __restrict__ q, const IN_T* __restrict__ k,
                                        const IN_T* __restrict__ v, const IN_T* __restrict__ dout,
                                        float* __restrict__ grads, const float* __restrict__ scratch,
                                        const unsigned char* __restrict__ kmask) {
  extern __shared__ float4 smem4[];
  float* Qt = reinterpret_cast<float*>(smem4);  // [DW][TS]  queries, transposed, pre-scaled
  float* Ot = Qt + DW * TS;                     // [DW][TS]  output gradients, transposed
  float* Ks = Ot + DW * TS;                     // [BC][RS]  keys
  float* Vs = Ks + BC * RS;                     // [BC][RS]  values
  const Lane L = lane_coords();
  float* Pw = Vs + BC * RS + L.warp * (BC * PS);  // this warp's dS [BC][PS]
  const auto [q0, bh, b, h, kh, vh] = query_block(k, v);
  load_cols<BR>(Qt, q + b * Q0 + h * Q1, Q2, Q3, q0, T, SCALE2);
  load_cols<BR>(Ot, dout + b * O0 + h * O1, O2, O3, q0, T, 1.f);
  const int r0 = q0 + L.ty * RPT;
  float lse[RPT], delta[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) load_stats(scratch, bh, r0 + i, lse[i], delta[i]);

  float dq[RPT][OC];
  zero(dq);
  const int kend = key_end(q0);
  const bool vk = rows_vec(kh, K2, K3), vv = rows_vec(vh, V2, V3);
  for (int k0 = 0; k0 < kend; k0 += BC) {
    __syncthreads();
    {  // staged without prefetching, as in dkdv (registers for the next tile cost occupancy)
      Stage<BC> rows;
      rows.fetch(kh, K2, K3, k0, S, 1.f, vk);
      rows.put(Ks);
      rows.fetch(vh, V2, V3, k0, S, 1.f, vv);
      rows.put(Vs);
    }
    __syncthreads();
    float p[RPT][CPT], dp[RPT][CPT];
    score_tile(p, Qt, Ks, L);
    score_tile(dp, Ot, Vs, L);
    bool kept[CPT];  // by the key mask
#pragma unroll
    for (int j = 0; j < CPT; ++j) kept[j] = !MASKED || (k0 + L.tx + 8 * j < S && key_kept(kmask, b, k0 + L.tx + 8 * j));
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
      for (int j = 0; j < CPT; ++j) {
        const float pij = visible(r0 + i, k0 + L.tx + 8 * j) && kept[j] ? fast_exp2(p[i][j] - lse[i]) : 0.f;
        dp[i][j] = pij * (dp[i][j] - delta[i]);  // dS
      }
    store_tile(Pw, dp, L);
    __syncwarp();
    accumulate(dq, Pw, Ks, L);
  }

#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    if (r0 + i >= T) continue;
    const long long row = dq_row(bh, r0 + i);
#pragma unroll
    for (int c = 0; c < OC; ++c)
      if (out_col(c, L.tx) < D) grads[row + out_col(c, L.tx)] = dq[i][c] * SCALE;
  }
}
