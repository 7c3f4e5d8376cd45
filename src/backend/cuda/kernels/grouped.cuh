// grouped_matmul and grouped_matmul_grad_weight (ops.def, mixtures of experts; generator:
// kernels_grouped.cc). x [R, K] has its rows sorted by expert: rows off[e] ≤ r < off[e + 1] use
// expert e. Every block first checks that off rises from 0 to R (else *err = 1 and nothing is
// read or written past the operands; the gemv kernels' blocks of experts without rows leave
// before it, but block (0, 0) always checks), then:
//   tile_fwd  y [R, N] = x · w[e]ᵀ (W_NK: w [E, N, K]) or x · w[e] (w [E, K, N]): 64 × 64 output
//             tiles; blockIdx.x is an (expert, 64-row tile) pair counted over the experts in order
//             (blocks past the last pair exit), blockIdx.y the column tile.
//   tile_gw   dw [E, P, Q] = Σ over expert e's rows (W_NK: dy[r]ᵀ x[r], P = N, Q = K; else
//             x[r]ᵀ dy[r], P = K, Q = N): blockIdx = (Q tile, P tile, e); each block sums its
//             expert's rows a slab at a time in order (deterministic, no atomics); no rows: zeros.
//   gemv_nk   y for W_NK with few rows: a warp per GC columns of w[e] (rows of K, read once a
//             chunk, coalesced along K), a chunk of at most MAXR rows of the expert's segment in
//             registers alongside; blockIdx.y = e (experts without rows exit).
//   gemv_kn   y for w [E, K, N] with few rows: TC threads along N (CW columns each) × KS slices of
//             K a block, the slices' partial sums added in slice order through shared memory;
//             the segment's rows likewise MAXR at a time.
// Products accumulate in f32 in a fixed order. The tile bodies only call tile_product and
// store_tile on a TileAcc: piece tiles (here: f32 FMAs of the widened values) or grouped_mma.cuh's
// piece mma_tiles (tensor cores, 16-bit operands) defines them.
//
// Defined before: the prelude (tg_bf2f, tg_h2f); IN_T (float or unsigned short: bf16 or f16
// bits) and `float in_f(IN_T)`; E, R, K, N (long long); W_NK (bool); NT (threads a block).
// Tiles: VEC_A, VEC_B, VEC_C (vector loads / stores of A, B and out: their leading dimension a
// multiple of the vector and the pointers aligned). gemv_nk: MAXR, GC, VW (elements a lane loads
// at once: 16 bytes' worth, or 1). gemv_kn: MAXR, TC, KS, CW (4, or 8 16-bit columns: one 16-byte
// load), VEC_B. Each body piece follows
//   extern "C" __global__ void <name>(const IN_T* x, const IN_T* b, const int* off, float* out, int* err)
// where b is w (tile_fwd, gemv_*) or dy (tile_gw); piece common precedes the kernel, then the
// tile pieces for the tile kernels.
// @piece common
__device__ __forceinline__ float ld1(const IN_T* p) { return in_f(__ldg(p)); }
// Four consecutive elements (p aligned to 4 of them).
__device__ __forceinline__ void ld4(const float* p, float* v) {
  const float4 q = __ldg(reinterpret_cast<const float4*>(p));
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
__device__ __forceinline__ void ld4(const unsigned short* p, float* v) {
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
  v[0] = in_f((unsigned short)(q.x & 0xffffu)), v[1] = in_f((unsigned short)(q.x >> 16));
  v[2] = in_f((unsigned short)(q.y & 0xffffu)), v[3] = in_f((unsigned short)(q.y >> 16));
}
// 16 bytes: four f32 or eight 16-bit elements (p 16-byte aligned).
__device__ __forceinline__ void ld16(const float* p, float* v) { ld4(p, v); }
__device__ __forceinline__ void ld16(const unsigned short* p, float* v) {
  const uint4 q = __ldg(reinterpret_cast<const uint4*>(p));
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    v[2 * t] = in_f((unsigned short)(w[t] & 0xffffu));
    v[2 * t + 1] = in_f((unsigned short)(w[t] >> 16));
  }
}
// Whether off [E + 1] rises from 0 to R (so every off[e] lies in [0, R]); the whole block
// calls it and gets the same answer.
__device__ __forceinline__ bool offsets_ok(const int* __restrict__ off) {
  int bad = 0;
  for (int e = threadIdx.x; e <= E; e += NT) {
    const int v = __ldg(off + e);
    if (e == 0 ? v != 0 : v < __ldg(off + e - 1)) bad = 1;
    if (e == E && v != R) bad = 1;
  }
  return !__syncthreads_or(bad);
}
// offsets_ok, with block (0, 0, 0) setting *err when they are bad; false: the block leaves.
__device__ __forceinline__ bool checked(const int* __restrict__ off, int* err) {
  if (offsets_ok(off)) return true;
  if (threadIdx.x == 0 && (blockIdx.x | blockIdx.y | blockIdx.z) == 0) *err = 1;
  return false;
}
// The gemv kernels' expert e = blockIdx.y and its rows [lo, lo + ne); false: the block leaves.
// Blocks of experts without rows leave at once (uniformly: before checked()'s barrier), block
// (0, 0) checks the offsets regardless.
__device__ __forceinline__ bool gemv_segment(const int* __restrict__ off, int* err, int& lo, int& ne) {
  const int e = (int)blockIdx.y;
  lo = __ldg(off + e);
  ne = __ldg(off + e + 1) - lo;  // ≤ R once checked
  if (ne == 0 && (blockIdx.x | blockIdx.y) != 0) return false;
  return checked(off, err) && ne > 0;
}
// The forward tile kernels' (expert, TM-row tile) pair of this block, blockIdx.x counting the
// pairs over the experts in order: warp 0 counts each expert's tiles ⌈rows / TM⌉, 32 experts
// at a time (a shuffle scan), until the block's index falls in one. e = −1 past the last pair.
// The whole block calls it (after offsets_ok).
template <int TM>
__device__ __forceinline__ void row_tile(const int* __restrict__ off, int& e, int& r0) {
  __shared__ int tile_e, tile_r0;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, want = (int)blockIdx.x;
    int before = 0, found = -1, r = 0;
    for (int e0 = 0; e0 < E && found < 0; e0 += 32) {
      const int ex = e0 + lane;
      const int lo = ex < E ? __ldg(off + ex) : 0, hi = ex < E ? __ldg(off + ex + 1) : 0;
      const int count = (hi - lo + TM - 1) / TM;
      int incl = count;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int o = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += o;
      }
      const int start = before + incl - count;
      const unsigned hit = __ballot_sync(0xffffffffu, want >= start && want < start + count);
      if (hit != 0) {
        const int src = __ffs(hit) - 1;
        const int s_lo = __shfl_sync(0xffffffffu, lo, src), s_start = __shfl_sync(0xffffffffu, start, src);
        found = e0 + src;
        r = s_lo + (want - s_start) * TM;
      }
      before += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) tile_e = found, tile_r0 = r;
  }
  __syncthreads();
  e = tile_e, r0 = tile_r0;
}
// @piece tiles
// 64 × 64 outputs a block of 256 threads; thread (ty, tx) = (tid / 16, tid % 16) accumulates
// rows ty·4 … +3 and columns tx·4 … +3. The reduction axis goes through shared memory 16 at a
// time, k-major (As[k][m], Bs[k][n]; rows padded to 68 floats, 16-byte aligned), with the next
// slab's global loads in flight while the current one is multiplied.
constexpr int BM = 64, BN = 64, BK = 16, SS = BM + 4;
static_assert(NT == 256, "the f32 tiles take 256 threads");
struct TileAcc {
  float c[4][4] = {};
};
// Four elements of one operand's 64 × 16 slab at reduction offset k0. KC: element (m, k) at
// p[m·ld + k] (k contiguous: 4 threads a row, 4 k each); else at p[k·ld + m] (m contiguous: 16
// threads a k, 4 m each). Elements at m ≥ mlim or k ≥ klim read as 0. VEC: one vector load
// (ld a multiple of 4, so a group of 4 lies wholly inside or outside the limit along its axis).
template <bool KC, bool VEC>
__device__ __forceinline__ void load_slab(const IN_T* __restrict__ p, long long ld, int mlim, int klim, int k0,
                                          float* v) {
  const int t = threadIdx.x;
  const int m = KC ? t >> 2 : (t & 15) * 4, k = KC ? k0 + (t & 3) * 4 : k0 + (t >> 4);
  const IN_T* q = KC ? p + (long long)m * ld + k : p + (long long)k * ld + m;
  if (VEC) {
    if (m < mlim && k < klim)
      ld4(q, v);
    else
      v[0] = v[1] = v[2] = v[3] = 0.f;
    return;
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const bool in = KC ? m < mlim && k + c < klim : m + c < mlim && k < klim;
    v[c] = in ? ld1(q + c) : 0.f;  // the 4 elements are consecutive either way
  }
}
template <bool KC>
__device__ __forceinline__ void store_slab(float (*s)[SS], const float* v) {
  const int t = threadIdx.x;
  if (KC) {
#pragma unroll
    for (int c = 0; c < 4; ++c) s[(t & 3) * 4 + c][t >> 2] = v[c];
  } else {
    *reinterpret_cast<float4*>(&s[t >> 4][(t & 15) * 4]) = make_float4(v[0], v[1], v[2], v[3]);
  }
}
// acc = this thread's 4 × 4 of C[m][n] = Σ_{k < klim} A(m, k)·B(k, n), A and B as load_slab reads
// them (A's m is C's row, B's m C's column).
template <bool A_KC, bool VA, bool B_KC, bool VB>
__device__ __forceinline__ void tile_product(const IN_T* __restrict__ a, long long lda, int mlim_a,
                                             const IN_T* __restrict__ b, long long ldb, int mlim_b, int klim,
                                             TileAcc& acc) {
  __shared__ __align__(16) float As[BK][SS];
  __shared__ __align__(16) float Bs[BK][SS];
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  float va[4], vb[4];
  load_slab<A_KC, VA>(a, lda, mlim_a, klim, 0, va);
  load_slab<B_KC, VB>(b, ldb, mlim_b, klim, 0, vb);
  for (int k0 = 0; k0 < klim; k0 += BK) {
    store_slab<A_KC>(As, va);
    store_slab<B_KC>(Bs, vb);
    __syncthreads();
    if (k0 + BK < klim) {
      load_slab<A_KC, VA>(a, lda, mlim_a, klim, k0 + BK, va);
      load_slab<B_KC, VB>(b, ldb, mlim_b, klim, k0 + BK, vb);
    }
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 x = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
      const float4 y = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
      const float xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc.c[i][j] = fmaf(xs[i], ys[j], acc.c[i][j]);
    }
    __syncthreads();  // every thread has read the slab before the next one is stored
  }
}
// This thread's 4 × 4 of the tile into c[m·ldc + n] for m < mlim, n < nlim (VC: float4 stores,
// ldc and nlim multiples of 4 and c 16-byte aligned).
template <bool VC>
__device__ __forceinline__ void store_tile(float* __restrict__ c, long long ldc, int mlim, int nlim,
                                           const TileAcc& acc) {
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4, n = tx * 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = ty * 4 + i;
    if (m >= mlim) continue;
    float* q = c + (long long)m * ldc + n;
    if (VC) {
      if (n < nlim) *reinterpret_cast<float4*>(q) = make_float4(acc.c[i][0], acc.c[i][1], acc.c[i][2], acc.c[i][3]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (n + j < nlim) q[j] = acc.c[i][j];
    }
  }
}
// @piece tile_fwd
  if (!checked(off, err)) return;
  int e, tile_r0;
  row_tile<BM>(off, e, tile_r0);
  if (e < 0) return;  // past the last (expert, row tile) pair
  const long long r0 = tile_r0, n0 = (long long)blockIdx.y * BN;
  const int rows = __ldg(off + e + 1) - (int)r0;  // this expert's rows from r0 on (> 0)
  TileAcc acc;
  // A = x rows r0… (k contiguous); B(k, n) = w[e][n][k] (W_NK: k contiguous) or w[e][k][n].
  const IN_T* a = x + r0 * K;
  const IN_T* w = b + (long long)e * N * K + (W_NK ? n0 * K : n0);
  tile_product<true, VEC_A, W_NK, VEC_B>(a, K, rows, w, W_NK ? K : N, (int)(N - n0), (int)K, acc);
  store_tile<VEC_C>(out + r0 * N + n0, N, rows, (int)(N - n0), acc);
// @piece tile_gw
  if (!checked(off, err)) return;
  // out[e] [P, Q]: W_NK Σ dy[r][p]·x[r][q] (P = N, Q = K), else Σ x[r][p]·dy[r][q] (P = K, Q = N);
  // both operands are read along the expert's rows (the reduction axis), m contiguous.
  constexpr long long P = W_NK ? N : K, Q = W_NK ? K : N;
  const int e = (int)blockIdx.z;
  const long long p0 = (long long)blockIdx.y * BM, q0 = (long long)blockIdx.x * BN;
  const int lo = __ldg(off + e), rows = __ldg(off + e + 1) - lo;
  const IN_T* pa = W_NK ? b : x;  // the operand along P
  const IN_T* pb = W_NK ? x : b;  // along Q
  TileAcc acc;
  tile_product<false, VEC_A, false, VEC_B>(pa + (long long)lo * P + p0, P, (int)(P - p0),
                                           pb + (long long)lo * Q + q0, Q, (int)(Q - q0), rows, acc);
  store_tile<VEC_C>(out + (long long)e * P * Q + p0 * Q + q0, Q, (int)(P - p0), (int)(Q - q0), acc);
// @piece gemv_nk
  const int e = (int)blockIdx.y;
  int lo, ne;
  if (!gemv_segment(off, err, lo, ne)) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long n0 = ((long long)blockIdx.x * (NT / 32) + warp) * GC;  // this warp's first column
  if (n0 >= N) return;
  const IN_T* we = b + ((long long)e * N + n0) * K;
  // The segment's rows MAXR at a time (nr of them in this chunk): the warp's columns are read
  // once a chunk (after the first, mostly from L2).
  for (int c0 = 0; c0 < ne; c0 += MAXR) {
    const int nr = min(ne - c0, MAXR);
    const IN_T* xe = x + (long long)(lo + c0) * K;
    float acc[GC][MAXR];
#pragma unroll
    for (int g = 0; g < GC; ++g)
#pragma unroll
      for (int r = 0; r < MAXR; ++r) acc[g][r] = 0.f;
    // Lane l takes elements l·VW … of every 32·VW along K, of each column and each row.
#pragma unroll 4
    for (long long k = (long long)lane * VW; k < K; k += 32 * VW) {
      float wv[GC][VW];
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        if (n0 + g < N) {
          if constexpr (VW > 1)
            ld16(we + g * K + k, wv[g]);
          else
            wv[g][0] = ld1(we + g * K + k);
        } else {
#pragma unroll
          for (int c = 0; c < VW; ++c) wv[g][c] = 0.f;
        }
      }
#pragma unroll
      for (int r = 0; r < MAXR; ++r) {
        if (r >= nr) break;
        float xv[VW];
        if constexpr (VW > 1)
          ld16(xe + r * K + k, xv);
        else
          xv[0] = ld1(xe + r * K + k);
#pragma unroll
        for (int g = 0; g < GC; ++g)
#pragma unroll
          for (int c = 0; c < VW; ++c) acc[g][r] = fmaf(xv[c], wv[g][c], acc[g][r]);
      }
    }
    // Each (column, row) sum across the warp (butterfly: every lane ends with it); lane 0 writes.
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      if (r >= nr) break;
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        float v = acc[g][r];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && n0 + g < N) out[(long long)(lo + c0 + r) * N + n0 + g] = v;
      }
    }
  }
// @piece gemv_kn
  const int e = (int)blockIdx.y;
  int lo, ne;
  if (!gemv_segment(off, err, lo, ne)) return;
  // Thread (ks, tc) = (tid / TC, tid % TC): columns n … n + CW − 1 at k ≡ ks (mod KS), so a
  // warp's load covers 32 / TC consecutive rows of w[e] × CW·TC columns.
  const int tc = threadIdx.x % TC, ks = threadIdx.x / TC;
  const long long c0 = (long long)blockIdx.x * (CW * TC), n = c0 + tc * CW;
  const IN_T* we = b + (long long)e * K * N + n;
  __shared__ __align__(16) float part[KS][CW * TC];
  // The segment's rows MAXR at a time (nr of them in this chunk; uniform across the block).
  for (int r0 = 0; r0 < ne; r0 += MAXR) {
    const int nr = min(ne - r0, MAXR);
    const IN_T* xe = x + (long long)(lo + r0) * K;
    float acc[MAXR][CW];
#pragma unroll
    for (int r = 0; r < MAXR; ++r)
#pragma unroll
      for (int c = 0; c < CW; ++c) acc[r][c] = 0.f;
#pragma unroll 4
    for (long long k = ks; k < K; k += KS) {
      float wv[CW];
      if (VEC_B) {  // N a multiple of CW: the group lies wholly inside or outside
        if (n < N) {
          if constexpr (CW == 8)
            ld16(we + k * N, wv);
          else
            ld4(we + k * N, wv);
        } else {
#pragma unroll
          for (int c = 0; c < CW; ++c) wv[c] = 0.f;
        }
      } else {
#pragma unroll
        for (int c = 0; c < CW; ++c) wv[c] = n + c < N ? ld1(we + k * N + c) : 0.f;
      }
#pragma unroll
      for (int r = 0; r < MAXR; ++r) {
        if (r >= nr) break;
        const float xv = ld1(xe + r * K + k);
#pragma unroll
        for (int c = 0; c < CW; ++c) acc[r][c] = fmaf(xv, wv[c], acc[r][c]);
      }
    }
    // The KS slices' partials of each row, added in slice order.
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      if (r >= nr) break;
#pragma unroll
      for (int c = 0; c < CW; c += 4)
        *reinterpret_cast<float4*>(&part[ks][tc * CW + c]) =
            make_float4(acc[r][c], acc[r][c + 1], acc[r][c + 2], acc[r][c + 3]);
      __syncthreads();
      // CW·TC columns (up to 2·NT): each thread sums every NT-th of them.
      for (int col = threadIdx.x; col < CW * TC && c0 + col < N; col += NT) {
        float s = 0.f;
        for (int j = 0; j < KS; ++j) s += part[j][col];
        out[(long long)(lo + r0 + r) * N + c0 + col] = s;
      }
      __syncthreads();  // read before the next row overwrites part
    }
  }
