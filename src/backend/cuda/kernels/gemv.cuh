// Skinny products out [M, N] = norm?(a) [M, K] · b [K, N] with M ≤ 8 (gemv.cc): one warp, or KS
// warps splitting K, per output column, b streamed once down its columns, the rows of a read
// alongside; optionally a layer/RMS norm of a's rows applied as they are read, and the epilogue.
// Two kernels share the helpers. The staged one (its rows fit in shared memory, K a multiple of
// a 16-byte load of W) is one piece after the signature:
//   staged   the rows staged in shared memory once per block, then each warp loops over its
//            columns with the next column's W in flight (the decode step's products);
// the direct one (more or longer rows) reads the rows from L1 per column, in pieces pasted in
// this order:
//   helpers  device functions, before the kernel;
//   start    the kernel's first statements (after the signature the generator writes);
//   vec      with 16-byte aligned rows possible (K % 4 == 0 and aligned strides) and f32 W: the
//            float4 loop, ending in `else` so that the next piece is its fallback;
//   vec8     the same for bf16 W (K % 8 == 0): eight weights per 16-byte load;
//   vec16    the same for int8 W (K and GROUP multiples of 16): sixteen weights per load, the
//            load's scale read with it;
//   rows     the scalar loop, the cross-warp sum and the store, with EPI(y, i, j): the
//            epilogue the generator defines (bias, residual, GELU).
//
// Defined before (gemv.cc): M, N, K, KS (warps splitting K), CPB (columns a block), NT;
// AT, BT (the storage types of a and b: float, unsigned short for bf16 bits, or signed char for
// int8 weights), A_BF, B_BF (whether they are bf16), B_I8 (b is int8 with one f32 scale in bs
// per GROUP values of a column, GROUPS a column: quant_matmul's q and scale), B_I4 (with B_I8:
// b's bytes are 4-bit codes, two a byte, B_CS bytes a column, with an f32 offset in bo per
// group; the staged kernel only, VPL 32), A_RND (a is f32 that the graph rounds to bf16 before the product:
// each value is rounded as it is read, after the norm);
// TG_PDL_WAIT() (executable.cc's programmatic dependent launch; empty without it) precedes the
// first read of a row: the weights' loads may be in flight before it, when no kernel of the step
// writes them (TG_PDL_OWN_WAIT defined by the generator); else the kernel also waits first thing.
// A_RS, A_CS (a's strides), B_CS (b's column stride), OUT_LD; NORM, LAYER, NW, NB (the norm and
// its affine w, b), EPS; nw, nb as nullptr constants when the norm has no affine parameters.
// @piece helpers
__device__ __forceinline__ float gemv_widen(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
__device__ __forceinline__ float gemv_val(float v) { return v; }
__device__ __forceinline__ float gemv_val(unsigned short h) { return gemv_widen(h); }
__device__ __forceinline__ float gemv_val(signed char q) { return (float)q; }
// x rounded to bf16 and widened back (nearest even, NaN → 0x7FC0), as the graph's cast does.
__device__ __forceinline__ float gemv_rnd(float x) {
  if (!A_RND) return x;
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(0x7fc00000u);
  return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}
// Eight bf16 (one 16-byte load) widened.
__device__ __forceinline__ void gemv_widen8(uint4 q, float* v) {
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    v[2 * t] = __uint_as_float(w[t] << 16);
    v[2 * t + 1] = __uint_as_float(w[t] & 0xffff0000u);
  }
}

// Sixteen int8 weights (one 16-byte load) as exact floats: byte q + 128 (q ^ 0x80) placed in the
// mantissa of 2²³ gives 2²³ + 128 + q, and subtracting 2²³ + 128 is exact. A byte permute and an
// add instead of a conversion instruction (a quarter of the float rate).
__device__ __forceinline__ void gemv_q16(uint4 q, float* v) {
  const unsigned w[4] = {q.x ^ 0x80808080u, q.y ^ 0x80808080u, q.z ^ 0x80808080u, q.w ^ 0x80808080u};
#pragma unroll
  for (int t = 0; t < 16; ++t)
    v[t] = __uint_as_float(__byte_perm(w[t / 4], 0x4B000000u, 0x7440u | (t % 4))) - 8388736.0f;
}
// Thirty-two 4-bit codes (one 16-byte load; code t in nibble t % 8 of word t / 8) as exact floats:
// the nibble placed in the mantissa of 2²³, less 2²³.
__device__ __forceinline__ float gemv_code(uint4 q, int t) {
  const unsigned w = t < 8 ? q.x : t < 16 ? q.y : t < 24 ? q.z : q.w;
  return __uint_as_float(((w >> (4 * (t % 8))) & 0xFu) | 0x4B000000u) - 8388608.0f;
}
// The same scaled by their group's scale.
__device__ __forceinline__ void gemv_widen16(uint4 q, float scale, float* v) {
  gemv_q16(q, v);
#pragma unroll
  for (int t = 0; t < 16; ++t) v[t] *= scale;
}
// Weight kk of column j (w = its first): widened, and scaled when int8.
__device__ __forceinline__ float gemv_weight(const BT* w, const float* bs, long long j, int kk) {
  const float v = gemv_val(__ldg(w + kk));
  return B_I8 ? v * __ldg(bs + j * GROUPS + kk / GROUP) : v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Each warp computes the rows' statistics itself in one pass, no block barrier: sums of
// x − x₀ and of its square, shifted by the row's first element so that a mean far from zero
// does not cancel the variance away (the rows are L1 hits for all but the first warp).
__device__ __forceinline__ void row_stats(const AT* a, float* mean, float* rstd) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < M; ++i) {
    const AT* x = a + i * A_RS;
    const float x0 = LAYER ? gemv_val(x[0]) : 0.0f;
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll 8
    for (int kk = lane; kk < K; kk += 32) {
      const float d = gemv_val(x[kk * A_CS]) - x0;
      s1 += d;
      s2 = fmaf(d, d, s2);
    }
    s1 = warp_sum(s1) / K;
    s2 = warp_sum(s2) / K;
    mean[i] = LAYER ? x0 + s1 : 0.0f;
    rstd[i] = rsqrtf(fmaxf(LAYER ? s2 - s1 * s1 : s2, 0.0f) + EPS);
  }
}
// x[i][kk] as the product reads it: raw, or normalised with the row's statistics.
__device__ __forceinline__ float xin(float x, int kk, float mean, float rstd, const float* nw, const float* nb) {
  if (!NORM) return gemv_rnd(x);
  float y = (x - mean) * rstd;
  if (NW) y *= __ldg(nw + kk);
  if (NB) y += __ldg(nb + kk);
  return gemv_rnd(y);
}
__device__ __forceinline__ float4 xin4(float4 x, int kk, float mean, float rstd, const float* nw, const float* nb) {
  if (!NORM) return x;
  x = make_float4((x.x - mean) * rstd, (x.y - mean) * rstd, (x.z - mean) * rstd, (x.w - mean) * rstd);
  if (NW) {
    const float4 g = __ldg((const float4*)(nw + kk));
    x = make_float4(x.x * g.x, x.y * g.y, x.z * g.z, x.w * g.w);
  }
  if (NB) {
    const float4 c = __ldg((const float4*)(nb + kk));
    x = make_float4(x.x + c.x, x.y + c.y, x.z + c.z, x.w + c.w);
  }
  return make_float4(gemv_rnd(x.x), gemv_rnd(x.y), gemv_rnd(x.z), gemv_rnd(x.w));
}
// Eight values of row `x` from kk (16-byte aligned), as the product reads them.
__device__ __forceinline__ void xin8(const AT* x, int kk, float mean, float rstd, const float* nw, const float* nb,
                                     float* v) {
  if (A_BF) {
    gemv_widen8(__ldg((const uint4*)(x + kk)), v);
    return;
  }
  const float* xf = (const float*)x;
  const float4 lo = xin4(__ldg((const float4*)(xf + kk)), kk, mean, rstd, nw, nb);
  const float4 hi = xin4(__ldg((const float4*)(xf + kk + 4)), kk + 4, mean, rstd, nw, nb);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}
// acc[i] += Σ_t wv[t] · x[i][kk + t] over the eight weights wv, for every row i.
__device__ __forceinline__ void rows8(const float* wv, const AT* a, int kk, const float* mean, const float* rstd,
                                      const float* nw, const float* nb, float* acc) {
#pragma unroll
  for (int i = 0; i < M; ++i) {
    float x[8];
    xin8(a + i * A_RS, kk, mean[i], rstd[i], nw, nb, x);
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[i] = fmaf(wv[t], x[t], acc[i]);
  }
}
// @piece start
  __shared__ float part[KS][CPB][M];
  float mean[M], rstd[M];
#pragma unroll
  for (int i = 0; i < M; ++i) mean[i] = 0.0f, rstd[i] = 1.0f;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = warp / KS, slice = warp % KS;
  const long long j = (long long)blockIdx.x * CPB + col;
  float acc[M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  if (j < N) {
    const BT* w = b + j * B_CS;
// @piece vec
    const bool aligned = ((((unsigned long long)w) | ((unsigned long long)a) | ((unsigned long long)nw) |
                           ((unsigned long long)nb)) & 15) == 0;
    constexpr int PRE = (K + KS * 128 - 1) / (KS * 128);  // float4 of W per lane
    if (aligned && NORM && PRE <= 8) {
      // W's loads go out first; the rows' statistics are computed while they are in flight.
      float4 wr[PRE];
#pragma unroll
      for (int u = 0; u < PRE; ++u) {
        const int kk = (slice * 32 + lane) * 4 + u * KS * 128;
        wr[u] = kk < K ? __ldg((const float4*)(w + kk)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      TG_PDL_WAIT();  // the rows come from the kernel before
      row_stats(a, mean, rstd);
#pragma unroll
      for (int u = 0; u < PRE; ++u) {
        const int kk = (slice * 32 + lane) * 4 + u * KS * 128;
        if (kk >= K) break;
#pragma unroll
        for (int i = 0; i < M; ++i) {
          const float4 x = xin4(__ldg((const float4*)(a + i * A_RS + kk)), kk, mean[i], rstd[i], nw, nb);
          acc[i] = fmaf(wr[u].x, x.x, acc[i]);
          acc[i] = fmaf(wr[u].y, x.y, acc[i]);
          acc[i] = fmaf(wr[u].z, x.z, acc[i]);
          acc[i] = fmaf(wr[u].w, x.w, acc[i]);
        }
      }
    } else if (aligned) {
      TG_PDL_WAIT();
      if (NORM) row_stats(a, mean, rstd);
#pragma unroll 4
      for (int kk = (slice * 32 + lane) * 4; kk < K; kk += KS * 128) {
        const float4 v = __ldg((const float4*)(w + kk));
#pragma unroll
        for (int i = 0; i < M; ++i) {
          const float4 x = xin4(__ldg((const float4*)(a + i * A_RS + kk)), kk, mean[i], rstd[i], nw, nb);
          acc[i] = fmaf(v.x, x.x, acc[i]);
          acc[i] = fmaf(v.y, x.y, acc[i]);
          acc[i] = fmaf(v.z, x.z, acc[i]);
          acc[i] = fmaf(v.w, x.w, acc[i]);
        }
      }
    } else
// @piece vec8
    const bool aligned = ((((unsigned long long)w) | ((unsigned long long)a) | ((unsigned long long)nw) |
                           ((unsigned long long)nb)) & 15) == 0;
    constexpr int PRE = (K + KS * 256 - 1) / (KS * 256);  // 16-byte loads of W per lane
    if (aligned && PRE <= 8) {
      // W's loads go out first; the rows' statistics are computed while they are in flight.
      uint4 wr[PRE];
#pragma unroll
      for (int u = 0; u < PRE; ++u) {
        const int kk = (slice * 32 + lane) * 8 + u * KS * 256;
        wr[u] = kk < K ? __ldg((const uint4*)(w + kk)) : make_uint4(0u, 0u, 0u, 0u);
      }
      TG_PDL_WAIT();  // the rows come from the kernel before
      if (NORM) row_stats(a, mean, rstd);
#pragma unroll
      for (int u = 0; u < PRE; ++u) {
        const int kk = (slice * 32 + lane) * 8 + u * KS * 256;
        if (kk >= K) break;
        float wv[8];
        gemv_widen8(wr[u], wv);
        rows8(wv, a, kk, mean, rstd, nw, nb, acc);
      }
    } else if (aligned) {
      TG_PDL_WAIT();
      if (NORM) row_stats(a, mean, rstd);
#pragma unroll 2
      for (int kk = (slice * 32 + lane) * 8; kk < K; kk += KS * 256) {
        float wv[8];
        gemv_widen8(__ldg((const uint4*)(w + kk)), wv);
        rows8(wv, a, kk, mean, rstd, nw, nb, acc);
      }
    } else
// @piece vec16
    const bool aligned = ((((unsigned long long)w) | ((unsigned long long)a) | ((unsigned long long)nw) |
                           ((unsigned long long)nb)) & 15) == 0;
    constexpr int PRE = (K + KS * 512 - 1) / (KS * 512);  // 16-byte loads of W per lane
    const float* sj = bs + j * GROUPS;                     // the column's scales
    if (aligned && PRE <= 8) {
      // W's loads and their scales go out first; the rows' statistics are computed meanwhile.
      uint4 wr[PRE];
      float sr[PRE];
#pragma unroll
      for (int u = 0; u < PRE; ++u) {
        const int kk = (slice * 32 + lane) * 16 + u * KS * 512;
        wr[u] = kk < K ? __ldg((const uint4*)(w + kk)) : make_uint4(0u, 0u, 0u, 0u);
        sr[u] = kk < K ? __ldg(sj + kk / GROUP) : 0.0f;
      }
      TG_PDL_WAIT();  // the rows come from the kernel before
      if (NORM) row_stats(a, mean, rstd);
#pragma unroll
      for (int u = 0; u < PRE; ++u) {
        const int kk = (slice * 32 + lane) * 16 + u * KS * 512;
        if (kk >= K) break;
        float wv[16];
        gemv_widen16(wr[u], sr[u], wv);
        rows8(wv, a, kk, mean, rstd, nw, nb, acc);
        rows8(wv + 8, a, kk + 8, mean, rstd, nw, nb, acc);
      }
    } else if (aligned) {
      TG_PDL_WAIT();
      if (NORM) row_stats(a, mean, rstd);
#pragma unroll 2
      for (int kk = (slice * 32 + lane) * 16; kk < K; kk += KS * 512) {
        float wv[16];
        gemv_widen16(__ldg((const uint4*)(w + kk)), __ldg(sj + kk / GROUP), wv);
        rows8(wv, a, kk, mean, rstd, nw, nb, acc);
        rows8(wv + 8, a, kk + 8, mean, rstd, nw, nb, acc);
      }
    } else
// @piece rows
    {
      TG_PDL_WAIT();
      if (NORM) row_stats(a, mean, rstd);
#pragma unroll 4
      for (int kk = slice * 32 + lane; kk < K; kk += KS * 32) {
        const float v = gemv_weight(w, bs, j, kk);
#pragma unroll
        for (int i = 0; i < M; ++i)
          acc[i] = fmaf(v, xin(gemv_val(__ldg(a + i * A_RS + kk * A_CS)), kk, mean[i], rstd[i], nw, nb), acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i)
    for (int o = 16; o > 0; o >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
  if (KS > 1) {
    if (lane == 0)
      for (int i = 0; i < M; ++i) part[slice][col][i] = acc[i];
    __syncthreads();
    if (slice != 0) return;
    for (int i = 0; i < M; ++i) {
      float t = part[0][col][i];
      for (int q = 1; q < KS; ++q) t += part[q][col][i];
      acc[i] = t;
    }
  }
  if (lane != 0 || j >= N) return;
  for (int i = 0; i < M; ++i) {
    float y = acc[i];
    EPI(y, i, j);
    out[i * OUT_LD + j] = y;
  }
}
// @piece staged
  // The rows are read once per block into shared memory as the product reads them (normalised,
  // rounded), then every warp streams its columns of W against them, COLS columns a turn: W's
  // loads for a warp's next turn are in flight while it sums the current one. Defined before
  // (gemv.cc): VPL (values of W a 16-byte load: 4, 8 or 16), PRE (16-byte loads of W per lane and column
  // slice), COLS, EPI(y, i, j).
  // Row i's value kk at xs[i * K + xs_at(kk)]: in order, except for int8 and 4-bit W (VPL 16, 32),
  // where the VPL / 4 float4 of each VPL-value chunk lie K / VPL float4 apart, so that the lanes'
  // reads of consecutive chunks are consecutive float4 (no bank conflicts).
  __shared__ __align__(16) float xs[M * K];
  auto xs_at = [](int kk) {
    return VPL >= 16 ? ((kk >> 2) & (VPL / 4 - 1)) * (K / (VPL / 4)) + ((kk / VPL) << 2) + (kk & 3) : kk;
  };
  __shared__ float red[NT / 32][2 * M];
  __shared__ float part[2][KS][CPB * COLS][M];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = warp / KS, slice = warp % KS;
  const long long step = (long long)gridDim.x * CPB * COLS;
  // A load's bytes: VPL values, or (4 bits) 16 bytes of 32 codes.
  constexpr int BPL = B_I4 ? 16 : VPL, DIV = B_I4 ? 2 : 1;
  const bool aligned = (((unsigned long long)b) & 15) == 0 && (B_CS % BPL) == 0;
  uint4 wr[COLS][PRE], wn[COLS][PRE];
  float sr[COLS][PRE], sn[COLS][PRE];  // int8 W: each load's scale (a load lies in one group)
  float orr[COLS][PRE], onx[COLS][PRE];  // 4-bit W: each load's offset
  // The warp's column slices of a turn into `r`, their scales into `sc` and offsets into `of`
  // (zeros past K or past the last column).
  auto load = [&](uint4 (*r)[PRE], float (*sc)[PRE], float (*of)[PRE], long long j0) {
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      const long long j = j0 + c;
      const BT* w = b + j * B_CS;
#pragma unroll
      for (int u = 0; u < PRE; ++u) {
        const int kk = (slice * 32 + lane) * VPL + u * KS * 32 * VPL;
        if (B_I8) sc[c][u] = j >= N || kk >= K ? 0.0f : __ldg(bs + j * GROUPS + kk / GROUP);
        if (B_I4) of[c][u] = j >= N || kk >= K ? 0.0f : __ldg(bo + j * GROUPS + kk / GROUP);
        if (j >= N || kk >= K) {
          r[c][u] = make_uint4(0u, 0u, 0u, 0u);
        } else if (aligned) {
          r[c][u] = __ldcs((const uint4*)(w + kk / DIV));  // streamed: evict first
        } else {
          union {
            uint4 q;
            BT t[BPL];
          } v;
#pragma unroll
          for (int e = 0; e < BPL; ++e) v.t[e] = w[kk / DIV + e];
          r[c][u] = v.q;
        }
      }
    }
  };
  long long base = (long long)blockIdx.x * CPB * COLS;
  load(wr, sr, orr, base + col * COLS);
  TG_PDL_WAIT();  // the rows come from the kernel before
  // Stage the rows, with each row's sums of x − x₀ and (x − x₀)² for the norm.
  float s[2 * M];
#pragma unroll
  for (int i = 0; i < 2 * M; ++i) s[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < M; ++i) {
    const float x0 = NORM && LAYER ? gemv_val(a[i * A_RS]) : 0.0f;
    for (int kk = threadIdx.x; kk < K; kk += NT) {
      const float v = gemv_val(a[i * A_RS + kk * A_CS]);
      xs[i * K + xs_at(kk)] = v;
      const float d = v - x0;
      s[2 * i] += d;
      s[2 * i + 1] = fmaf(d, d, s[2 * i + 1]);
    }
  }
  if (NORM) {
#pragma unroll
    for (int i = 0; i < 2 * M; ++i) s[i] = warp_sum(s[i]);
    if (lane == 0)
      for (int i = 0; i < 2 * M; ++i) red[warp][i] = s[i];
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    float mean = 0.0f, rstd = 1.0f;
    if (NORM) {
      float s1 = 0.0f, s2 = 0.0f;
      for (int q = 0; q < NT / 32; ++q) s1 += red[q][2 * i], s2 += red[q][2 * i + 1];
      s1 /= K, s2 /= K;
      const float x0 = LAYER ? gemv_val(a[i * A_RS]) : 0.0f;
      mean = LAYER ? x0 + s1 : 0.0f;
      rstd = rsqrtf(fmaxf(LAYER ? s2 - s1 * s1 : s2, 0.0f) + EPS);
    }
    for (int kk = threadIdx.x; kk < K; kk += NT)
      xs[i * K + xs_at(kk)] = xin(xs[i * K + xs_at(kk)], kk, mean, rstd, nw, nb);
  }
  __syncthreads();
  // Every warp of the block takes the same number of turns (the barrier of the slices' sum).
  for (int turn = 0; base < N; base += step, ++turn) {
    const long long j0 = base + col * COLS;
    load(wn, sn, onx, j0 + step);
    float acc[COLS][M];
#pragma unroll
    for (int c = 0; c < COLS; ++c)
#pragma unroll
      for (int i = 0; i < M; ++i) acc[c][i] = 0.0f;
#pragma unroll
    for (int u = 0; u < PRE; ++u) {
      const int kk = (slice * 32 + lane) * VPL + u * KS * 32 * VPL;
      if (kk >= K) break;
#pragma unroll
      for (int i = 0; i < M; ++i) {
        const float4* x4 = (const float4*)(xs + i * K);
        float x[VPL];
#pragma unroll
        for (int h = 0; h < VPL / 4; ++h) {
          const float4 q = x4[xs_at(kk + 4 * h) / 4];
          x[4 * h] = q.x, x[4 * h + 1] = q.y, x[4 * h + 2] = q.z, x[4 * h + 3] = q.w;
        }
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
          float wv[VPL];
          if (B_I4) {  // the chunk's sums of c·x and of x, times its scale and its offset
            float d = 0.0f, xsum = 0.0f;
#pragma unroll
            for (int t = 0; t < VPL; ++t) d = fmaf(gemv_code(wr[c][u], t), x[t], d), xsum += x[t];
            acc[c][i] = fmaf(orr[c][u], xsum, fmaf(sr[c][u], d, acc[c][i]));
          } else if (B_I8) {  // the chunk's sum of q·x, times its scale
            gemv_q16(wr[c][u], wv);
            float d = 0.0f;
#pragma unroll
            for (int t = 0; t < VPL; ++t) d = fmaf(wv[t], x[t], d);
            acc[c][i] = fmaf(sr[c][u], d, acc[c][i]);
          } else {
            if (B_BF) {
              gemv_widen8(wr[c][u], wv);
            } else {
              wv[0] = __uint_as_float(wr[c][u].x), wv[1] = __uint_as_float(wr[c][u].y);
              wv[2] = __uint_as_float(wr[c][u].z), wv[3] = __uint_as_float(wr[c][u].w);
            }
#pragma unroll
            for (int t = 0; t < VPL; ++t) acc[c][i] = fmaf(wv[t], x[t], acc[c][i]);
          }
        }
      }
    }
#pragma unroll
    for (int c = 0; c < COLS; ++c)
#pragma unroll
      for (int i = 0; i < M; ++i) acc[c][i] = warp_sum(acc[c][i]);
    bool mine = lane == 0;
    if (KS > 1) {
      if (lane == 0)
        for (int c = 0; c < COLS; ++c)
          for (int i = 0; i < M; ++i) part[turn & 1][slice][col * COLS + c][i] = acc[c][i];
      __syncthreads();
      mine = mine && slice == 0;
      if (mine)
        for (int c = 0; c < COLS; ++c)
          for (int i = 0; i < M; ++i) {
            float t = part[turn & 1][0][col * COLS + c][i];
            for (int q = 1; q < KS; ++q) t += part[turn & 1][q][col * COLS + c][i];
            acc[c][i] = t;
          }
    }
    if (mine)
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        const long long j = j0 + c;
        if (j < N)
          for (int i = 0; i < M; ++i) {
            float y = acc[c][i];
            EPI(y, i, j);
            out[i * OUT_LD + j] = y;
          }
      }
#pragma unroll
    for (int c = 0; c < COLS; ++c)
#pragma unroll
      for (int u = 0; u < PRE; ++u) wr[c][u] = wn[c][u], sr[c][u] = sn[c][u], orr[c][u] = onx[c][u];
  }
}
