// Device helpers both tiled attention paths share, fp32 (attention_tiled.cuh) and TF32
// (attention_mma.cuh): shuffle max / sum over a row's lanes, causal visibility and key ranges,
// the query block of a thread block, the staging of tiles through registers (Stage), the row
// statistics in scratch, the gradients' row addressing and dk/dv stores. See attention.cc's file comment for the scheme.
//
// Defined before (attention.cc: constants, mma_constants): NT (threads a block) and the path's
// tiles BR, BC, DP, RS (the fp32 path also RPT, CPT, DW, VW, TS, PS, OC); the problem
// (shape_constants): B, HQ, HKV, GRP = HQ/HKV, T, S, D, SHIFT = S − T; Q0..Q3, K0..K3, V0..V3 and
// O0..O3 (element strides of q, k, v and of out / dout over [B, H, T or S, D]); NQ, NK, NROWS
// (elements of dq, of dk and dv, query rows); SCALE, SCALE2 = SCALE·log2 e; CAUSAL, GRADS_BTHD,
// GRADS_PACKED (the gradients' layout, kernels.h: AttentionShape), GRS (a packed row) and
// MASKED (a key mask kmask, bool [B, S], is the kernels' last parameter).
// @piece common

#define NEG_INF (-__int_as_float(0x7f800000))
#define POS_INF (__int_as_float(0x7f800000))

// Reductions over LANES adjacent lanes (a power of two ≤ 32): 8 for a row group of the fp32
// path, 4 for a quad of the mma fragments.
template <int LANES>
__device__ __forceinline__ float lanes_max(float x) {
#pragma unroll
  for (int o = 1; o < LANES; o <<= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
template <int LANES>
__device__ __forceinline__ float lanes_sum(float x) {
#pragma unroll
  for (int o = 1; o < LANES; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <int M, int N>
__device__ __forceinline__ void zero(float (&c)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) c[i][j] = 0.f;
}

// Whether key c is visible to query r.
__device__ __forceinline__ bool visible(int r, int c) { return c < S && (!CAUSAL || c <= r + SHIFT); }

// Whether the key mask keeps key c (< S) of sequence b: always without one (MASKED false). A
// query whose every key is hidden gets 0 from the forward, which stores lse = +∞ for it, so
// that the backward finds no probability in its row.
__device__ __forceinline__ bool key_kept(const unsigned char* __restrict__ kmask, int b, int c) {
  return !MASKED || kmask[(long long)b * S + c] != 0;
}
// 1 / Σ of a query row's exponentials, and its lse = m + log2 Σ (0 and +∞ for a row that saw
// no key, which only a key mask makes).
__device__ __forceinline__ float row_inverse(float total) { return MASKED && total == 0.f ? 0.f : 1.f / total; }
__device__ __forceinline__ float row_lse(float m, float total) {
  return MASKED && total == 0.f ? POS_INF : m + log2f(total);
}

// Keys [0, key_end(q0)) are visible to some query of the row tile starting at q0.
__device__ __forceinline__ int key_end(int q0) {
  const int last = min(T, q0 + BR) - 1;
  return CAUSAL ? min(S, last + SHIFT + 1) : S;
}

// Block → query tile q0 of (b, h) (bh = b·HQ + h) for kernels whose rows are queries, with the
// keys and values of its kv head; the tiles with the most keys (the last ones when causal) are
// handed out first.
struct QueryBlock {
  int q0, bh, b, h;
  const IN_T* kh;
  const IN_T* vh;
};
__device__ __forceinline__ QueryBlock query_block(const IN_T* k, const IN_T* v) {
  constexpr int NTILES = (T + BR - 1) / BR;
  QueryBlock qb;
  qb.bh = (int)(blockIdx.x % (B * HQ));
  qb.q0 = (NTILES - 1 - (int)(blockIdx.x / (B * HQ))) * BR;
  qb.b = qb.bh / HQ, qb.h = qb.bh % HQ;
  const int kvh = qb.h / GRP;
  qb.kh = k + qb.b * K0 + kvh * K1;
  qb.vh = v + qb.b * V0 + kvh * V1;
  return qb;
}

// Conversion of staged values: kept (Exact) on the fp32 path, rounded to TF32 on the mma path.
struct Exact {
  __device__ __forceinline__ float operator()(float x) const { return x; }
};

// 2^x in one MUFU instruction; results below 2^-126 flush to 0 (a probability that small adds
// nothing to a row whose largest term is 1). exp2f also handles subnormal results, at a few
// more instructions per score.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A tile of ROWS rows × DP floats on its way from global to shared memory, held in registers
// in between, so that the next tile's loads are in flight while the current one is computed:
//   fetch(src, rstride, dstride, row0, limit, mul, vec) issues the loads of mul·src[(row0 + r)·
//   rstride + d·dstride] for r < ROWS, d < DP (0 where row0 + r ≥ limit or d ≥ D); put(dst)
//   stores cvt of them at dst[r·RS + d].
// Each thread moves float4 slots e = i·NT + threadIdx.x (row e / (DP/4), columns 4·(e % (DP/4))
// ..+3); `vec` (unit stride along D, D and the row stride multiples of 4, the row aligned to 4
// elements) reads them as one load (16 bytes of f32, 8 of bf16), otherwise element by element.
// Sources are IN_T (f32, or bf16 widened on load: in_ld, in_ld4).
template <int ROWS, class Cvt = Exact>
struct Stage {
  static constexpr int SLOTS = ROWS * (DP / 4), PER = (SLOTS + NT - 1) / NT;
  float4 v[PER];
  __device__ __forceinline__ void fetch(const IN_T* src, long long rstride, long long dstride, int row0, int limit,
                                        float mul, bool vec) {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = i * NT + threadIdx.x, r = e / (DP / 4), d = e % (DP / 4) * 4;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if ((SLOTS % NT == 0 || e < SLOTS) && row0 + r < limit) {
        const IN_T* p = src + (long long)(row0 + r) * rstride;
        if (vec) {
          if (d < D) x = in_ld4(p + d);
        } else {
          if (d < D) x.x = in_ld(p + (long long)d * dstride);
          if (d + 1 < D) x.y = in_ld(p + (long long)(d + 1) * dstride);
          if (d + 2 < D) x.z = in_ld(p + (long long)(d + 2) * dstride);
          if (d + 3 < D) x.w = in_ld(p + (long long)(d + 3) * dstride);
        }
      }
      v[i] = make_float4(x.x * mul, x.y * mul, x.z * mul, x.w * mul);
    }
  }
  __device__ __forceinline__ void put(float* dst) const {
    const Cvt cvt;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = i * NT + threadIdx.x, r = e / (DP / 4), d = e % (DP / 4) * 4;
      if (SLOTS % NT == 0 || e < SLOTS)
        *reinterpret_cast<float4*>(dst + r * RS + d) = make_float4(cvt(v[i].x), cvt(v[i].y), cvt(v[i].z), cvt(v[i].w));
    }
  }
};
// Whether a loop holds the next tile of ROWS rows in registers while computing the current one:
// when that takes at most 16 registers per operand (char and GPT-2 heads, D = 64); larger heads
// load each tile just before storing it, as the registers would otherwise spill.
template <int ROWS>
constexpr bool PREFETCH = Stage<ROWS>::PER <= 4;
// The key-tile loop of the forward kernels and of the TF32 dq kernel: K and V tiles of BC rows
// staged into Ks and Vs through kt and vt, with PREFETCH<BC> the next tile fetched while this
// one is computed (names as in those kernels: kh, vh, K2, K3, V2, V3, vk, vv, S, k0, kend).
// Macros, not a device function: these kernels are codegen-sensitive (a helper function moved
// address arithmetic in 34 of 72 kernels' PTX), and a macro expands to the very tokens each
// kernel had written out.
#define TG_FIRST_KEY_TILE()              \
  if (PREFETCH<BC>) {                    \
    kt.fetch(kh, K2, K3, 0, S, 1.f, vk); \
    vt.fetch(vh, V2, V3, 0, S, 1.f, vv); \
  }
#define TG_STAGE_KEY_TILE()                   \
  __syncthreads();                            \
  if (!PREFETCH<BC>) {                        \
    kt.fetch(kh, K2, K3, k0, S, 1.f, vk);     \
    vt.fetch(vh, V2, V3, k0, S, 1.f, vv);     \
  }                                           \
  kt.put(Ks);                                 \
  vt.put(Vs);                                 \
  __syncthreads();                            \
  if (PREFETCH<BC> && k0 + BC < kend) {       \
    kt.fetch(kh, K2, K3, k0 + BC, S, 1.f, vk); \
    vt.fetch(vh, V2, V3, k0 + BC, S, 1.f, vv); \
  }
// Whether an operand's rows can be read 4 elements at a time (in_ld4, see Stage): strides are
// compile-time constants, the base pointer is checked at run time (one uniform branch).
__device__ __forceinline__ bool rows_vec(const IN_T* base, long long rstride, long long dstride) {
  return D % 4 == 0 && dstride == 1 && rstride % 4 == 0 &&
         (reinterpret_cast<unsigned long long>(base) & (4 * sizeof(IN_T) - 1)) == 0;
}

// What a forward kernel stores (forward_rows / mma_forward<MODE>): the output; lse and delta
// (the backward's stats launch); the output and lse (a forward that keeps its statistics).
constexpr int OUT = 0, STATS = 1, OUT_LSE = 2;

// The stats pass's results (scratch [2, NROWS]: lse, then delta) for query r of bh.
__device__ __forceinline__ void store_stats(float* scratch, long long bh, int r, float lse, float delta) {
  scratch[bh * T + r] = lse;
  scratch[NROWS + bh * T + r] = delta;
}
__device__ __forceinline__ void load_stats(const float* scratch, long long bh, int r, float& lse, float& delta) {
  const bool in = r < T;
  lse = in ? scratch[bh * T + r] : POS_INF;  // no probability for missing queries
  delta = in ? scratch[NROWS + bh * T + r] : 0.f;
}
// lse and delta of the BC queries from q0 into shared memory.
__device__ __forceinline__ void stage_stats(float* Ls, float* Ds, const float* scratch, long long bh, int q0) {
  for (int e = threadIdx.x; e < BC; e += NT) load_stats(scratch, bh, q0 + e, Ls[e], Ds[e]);
}

// Where dq's row r of bh = b·HQ + h starts in grads: dense [B, HQ, T, D], or with GRADS_BTHD
// [B, T, HQ, D] (and dk, dv [B, S, HKV, D]), the layout the qkv projection's gradient wants,
// or with GRADS_PACKED (T = S) [B, T, GRS]: each token's [dq | dk | dv] side by side, the
// gradient of a packed qkv projection itself.
__device__ __forceinline__ long long dq_row(long long bh, int r) {
  if (GRADS_PACKED) return ((bh / HQ) * T + r) * GRS + (bh % HQ) * D;
  return GRADS_BTHD ? (((bh / HQ) * T + r) * HQ + bh % HQ) * D : (bh * T + r) * D;
}
// dK and dV of key row `key` (< S) of kv group bg = b·HKV + kv head: [B, HKV, S, D] each, or
// [B, S, HKV, D] with GRADS_BTHD, or inside the packed rows.
__device__ __forceinline__ void store_dkdv(float* grads, int bg, int key, int col, float dk, float dv) {
  if (GRADS_PACKED) {
    const long long at = ((long long)(bg / HKV) * S + key) * GRS + HQ * D + (bg % HKV) * D + col;
    grads[at] = dk;
    grads[at + HKV * D] = dv;
    return;
  }
  const long long at = (GRADS_BTHD ? ((long long)(bg / HKV) * S + key) * HKV + bg % HKV : (long long)bg * S + key) * D + col;
  grads[NQ + at] = dk;
  grads[NQ + NK + at] = dv;
}
