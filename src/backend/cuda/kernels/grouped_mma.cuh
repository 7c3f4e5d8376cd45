// The tile kernels of grouped_matmul and its weight gradient (grouped.cuh: tile_fwd, tile_gw) on
// tensor cores, for bf16 or f16 operands (sm_80+): this piece stands in for grouped.cuh's piece
// tiles, with the same tile_product / store_tile / TileAcc interface and the same 64 × 64 output
// tiles. mma.sync m16n8k16 (.bf16, or .f16 when IS_F16) with f32 accumulators: the products of
// 16-bit values are exact in f32, so results differ from the f32 FMA tiles only in the order
// (fixed here too) of the f32 sums.
//
// A block of NT = 128 threads (4 warps, 2 × 2, each 32 × 32 outputs: 2 × 4 accumulators of
// 16 × 8). The reduction axis goes through shared memory BK = 32 at a time, each operand staged as
// its 16-bit bits in its global layout, zero bits where masked (rows of another expert, K tails,
// columns past the end; +0 in both formats):
//   k contiguous (KC)  [64 m][SK]  (SK = 40: rows 80 bytes apart, so the 8 rows an ldmatrix
//                                   phase reads fall in 8 distinct 16-byte bank groups)
//   m contiguous       [BK][SMS]   (SMS = 72: 144 bytes apart, likewise)
// Fragments come from ldmatrix .x4: plain for KC (the row-major A / column-major B fragment
// along k), .trans for m contiguous. Two stages: the next slab's global loads (into registers)
// are in flight while the current stage is multiplied, then stored into the other stage; one
// barrier a slab.
//
// Defined before: NT, IN_T (unsigned short), IS_F16 (bool), and the generator's VEC_A, VEC_B
// (16-byte loads: leading dimension a multiple of 8, pointer aligned), VEC_C (float2 stores).
// @piece mma_tiles
constexpr int BM = 64, BN = 64, BK = 32, SK = BK + 8, SMS = BM + 8;
constexpr int STAGE = BM * SK > BK * SMS ? BM * SK : BK * SMS;  // elements of one operand's stage
constexpr int CHUNKS = BM * BK / 8 / NT;                         // 8-element pieces a thread loads
static_assert(NT == 128 && BM == BN && CHUNKS * NT * 8 == BM * BK, "4 warps of 32 × 32");
typedef unsigned short h16;
struct TileAcc {
  float c[2][4][4] = {};  // [16-row block][8-column block][fragment element]
};

__device__ __forceinline__ void mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (IS_F16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Four 8 × 8 matrices of 16-bit elements from shared memory: lane l gives the address of row
// l % 8 of matrix l / 8; TRANS delivers each transposed.
template <bool TRANS>
__device__ __forceinline__ void ldsm4(unsigned (&r)[4], const h16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  if constexpr (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
// This thread's CHUNKS pieces of 8 consecutive elements of one operand's 64 × BK slab at
// reduction offset k0. KC: element (m, k) at p[m·ld + k] (4 threads a row, 8 k each); else at
// p[k·ld + m] (8 threads a k, 8 m each). Elements at m ≥ mlim or k ≥ klim read as 0. VEC: one
// 16-byte load (ld a multiple of 8, so a piece lies wholly inside or outside the limits).
template <bool KC, bool VEC>
__device__ __forceinline__ void load_slab(const h16* __restrict__ p, long long ld, int mlim, int klim, int k0,
                                          uint4 (&v)[CHUNKS]) {
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
    const int c = threadIdx.x + i * NT;
    const int m = KC ? c >> 2 : (c & 7) * 8, k = KC ? k0 + (c & 3) * 8 : k0 + (c >> 3);
    const h16* q = KC ? p + (long long)m * ld + k : p + (long long)k * ld + m;
    if (VEC) {
      v[i] = m < mlim && k < klim ? __ldg(reinterpret_cast<const uint4*>(q)) : make_uint4(0u, 0u, 0u, 0u);
      continue;
    }
    unsigned w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      unsigned h[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int d = 2 * j + u;  // the 8 elements are consecutive either way
        const bool in = KC ? m < mlim && k + d < klim : m + d < mlim && k < klim;
        h[u] = in ? __ldg(q + d) : 0u;
      }
      w[j] = h[0] | h[1] << 16;
    }
    v[i] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}
template <bool KC>
__device__ __forceinline__ void store_slab(h16* s, const uint4 (&v)[CHUNKS]) {
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
    const int c = threadIdx.x + i * NT;
    h16* q = KC ? s + (c >> 2) * SK + (c & 3) * 8 : s + (c >> 3) * SMS + (c & 7) * 8;
    *reinterpret_cast<uint4*>(q) = v[i];
  }
}
// acc += this warp's 32 × 32 of A·B over one staged slab: two k16 steps, each 2 A fragments
// (16 rows) and 2 B fragment pairs (16 columns: two 8-column blocks) by ldmatrix, 8 products.
template <bool A_KC, bool B_KC>
__device__ __forceinline__ void mma_slab(const h16* As, const h16* Bs, TileAcc& acc) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, i = lane >> 3, r = lane & 7;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
#pragma unroll
  for (int kk = 0; kk < BK; kk += 16) {
    unsigned a[2][4], b[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      // Matrices: rows +0 / +8 (i & 1) × k +0 / +8 (i >> 1): a0 … a3 of m16n8k16's A.
      const int m = wm + 16 * mi + (i & 1) * 8, k = kk + (i >> 1) * 8;
      ldsm4<!A_KC>(a[mi], A_KC ? As + (m + r) * SK + k : As + (k + r) * SMS + m);
    }
#pragma unroll
    for (int nj = 0; nj < 2; ++nj) {
      // Matrices: k +0 / +8 (i & 1) × columns +0 / +8 (i >> 1): b0, b1 of two 8-column blocks.
      const int n = wn + 16 * nj + (i >> 1) * 8, k = kk + (i & 1) * 8;
      ldsm4<!B_KC>(b[nj], B_KC ? Bs + (n + r) * SK + k : Bs + (k + r) * SMS + n);
    }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        mma_16816(acc.c[mi][2 * nj], a[mi], b[nj][0], b[nj][1]);
        mma_16816(acc.c[mi][2 * nj + 1], a[mi], b[nj][2], b[nj][3]);
      }
  }
}
// acc = this warp's share of C[m][n] = Σ_{k < klim} A(m, k)·B(k, n), A and B as load_slab reads
// them (A's m is C's row, B's m C's column), slabs in order of k.
template <bool A_KC, bool VA, bool B_KC, bool VB>
__device__ __forceinline__ void tile_product(const IN_T* __restrict__ a, long long lda, int mlim_a,
                                             const IN_T* __restrict__ b, long long ldb, int mlim_b, int klim,
                                             TileAcc& acc) {
  __shared__ __align__(16) h16 As[2][STAGE];
  __shared__ __align__(16) h16 Bs[2][STAGE];
  uint4 va[CHUNKS], vb[CHUNKS];
  load_slab<A_KC, VA>(a, lda, mlim_a, klim, 0, va);
  load_slab<B_KC, VB>(b, ldb, mlim_b, klim, 0, vb);
  store_slab<A_KC>(As[0], va);
  store_slab<B_KC>(Bs[0], vb);
  __syncthreads();
  int s = 0;
  for (int k0 = 0; k0 < klim; k0 += BK, s ^= 1) {
    const bool more = k0 + BK < klim;
    if (more) {
      load_slab<A_KC, VA>(a, lda, mlim_a, klim, k0 + BK, va);
      load_slab<B_KC, VB>(b, ldb, mlim_b, klim, k0 + BK, vb);
    }
    mma_slab<A_KC, B_KC>(As[s], Bs[s], acc);
    // The other stage was last read before the previous barrier.
    if (more) {
      store_slab<A_KC>(As[s ^ 1], va);
      store_slab<B_KC>(Bs[s ^ 1], vb);
    }
    __syncthreads();
  }
}
// This warp's 32 × 32 of the tile into c[m·ldc + n] for m < mlim, n < nlim. Accumulator
// element e of block (mi, j) is row 16·mi + g + 8·(e / 2), column 8·j + 2·t + e % 2 (g = lane / 4,
// t = lane % 4). VC: float2 stores (ldc and nlim even, c 8-byte aligned).
template <bool VC>
__device__ __forceinline__ void store_tile(float* __restrict__ c, long long ldc, int mlim, int nlim,
                                           const TileAcc& acc) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = wm + 16 * mi + g + 8 * h;
      if (m >= mlim) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = wn + 8 * j + 2 * t;
        float* q = c + (long long)m * ldc + n;
        const float v0 = acc.c[mi][j][2 * h], v1 = acc.c[mi][j][2 * h + 1];
        if (VC) {
          if (n < nlim) *reinterpret_cast<float2*>(q) = make_float2(v0, v1);
        } else {
          if (n < nlim) q[0] = v0;
          if (n + 1 < nlim) q[1] = v1;
        }
      }
    }
}
