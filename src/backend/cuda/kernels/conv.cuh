// The window ops (ops.def; generator: kernels_conv.cc). The conv ops are implicit GEMMs,
// C[m][n] = Σ_k A(m, k)·B(k, n), with A and B gathered straight from the operands (no im2col
// matrix in memory); each mode defines its operands by the formulas below (x zero in the
// padding). z = blockIdx.z picks the (image, group) of FWD and GI and the (group, split) of GW.
//   FWD: m = output channel o (of the group), n = output pixel p = (i, j), k = (c, a, b):
//        A = w[g·OG + o][c][a][b], B = x[img][g·CG + c][i·SH − PH + a·DH][j·SW − PW + b·DW].
//   GI:  m = input channel c, n = input pixel (ih, iw), k = (o, a, b): A = w[g·OG + o][c][a][b],
//        B = dy[img][g·OG + o][i][j] where ih = i·SH − PH + a·DH (likewise iw), else 0.
//   GW:  m = o, n = (c, a, b), k = (img, p): A = dy[img][g·OG + o][p], B as FWD's B.
// Tiles: BM × BN outputs a block, BK of k a step, staged in shared memory (see gemm_common). GW
// splits k over SPLITS blocks whose partial sums a second kernel adds in a fixed order
// (deterministic, no atomics).
//
// Defined before: IN_T (float, or unsigned short = bf16 or f16 bits) and in_ld; MODE (0 FWD, 1 GI,
// 2 GW); M, NN (GEMM extents), KK (the k of one block: all of it, or one split's for GW),
// KTOTAL (GW's whole k, N·OH·OW), SPLITS (long long); BM, BN, TC; the geometry N, C, H, W, O, OH,
// OW, KH, KW, SH, SW, PH, PW, DH, DW, G, CG, OG (long long here; int for the tile pieces below). Piece gemm_common precedes the kernel;
// piece gemm (or gemm_tc, with TC) is the body of
//   extern "C" __global__ void <name>(const IN_T* p0, const IN_T* p1, float* out)
// and piece splits the body of <name>(const float* part, float* out) (TOTAL = O·CG·KH·KW).
// @piece gemm_common
// BM × BN outputs a block (chosen per problem by the generator: BM 32 or 64, BN 16, 32 or 64);
// 256 threads. SIMT (TC false): thread (tx, ty) of a 16 × 16 grid accumulates TM × TN outputs.
// Tensor cores (TC, tf32 mma.sync m16n8k8): 8 warps, WM along m and WN along n, each 16 rows ×
// NW8 column tiles of 8. Operands are staged k-major, As[k][m] and Bs[k][n]; the row stride pads
// by 8 for the mma fragments (lanes g = lane / 4 on rows, t = lane % 4 on k: banks t·8 + g
// distinct), by 4 otherwise.
constexpr int NT = 256, TM = BM / 16, TN = BN / 16;
constexpr int SA = BM + (TC ? 8 : 4), SB = BN + (TC ? 8 : 4);
constexpr int WM = BM / 16, WN = 8 / WM, NW8 = BN / (8 * WN);
constexpr int P = OH * OW, KHW = KH * KW;

// Rounds to tf32 (round to nearest, ties away, as cuBLAS's TF32 inputs) for the tensor cores;
// bf16 operands are exact in tf32.
__device__ __forceinline__ float to_tc(float v) {
  if (!TC) return v;
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return __uint_as_float(r);
}

// The operand loads of one thread. Slots: A's rows mm(r) = r·(NT/BK) + tid/BK at column
// kk = tid % BK of every stage; B's (FWD, GI) column nn = tid % BN at rows kk(r) = r·(NT/BN) +
// tid/BN, (GW) row kk = tid % BK at columns nn(r) = r·(NT/BK) + tid/BK. What depends only on a
// slot's fixed m or n is worked out once, before the k loop; each stage then decomposes its k.
constexpr int RA = BM * BK / NT, RB = BN * BK / NT;
struct Loader {
  const IN_T* a;  // the A operand's start for this block (its group's weights, or dy)
  const IN_T* b;  // the B operand's start (this image's group of x, or of dy; GW: x's group)
  int fm[RA];     // A: the fixed row's offset, or -1 past M
  int fn[RB];     // B: FWD/GI the fixed column's data (see the constructor), GW each column's offset in a plane
  int fh[RB], fw[RB];  // B: the fixed column's input row/column origin (FWD: i·SH − PH; GI: ih + PH; GW: a·DH, b·DW)
  __device__ Loader(const IN_T* p0, const IN_T* p1, int z, int m0, int n0) {
    const int tid = threadIdx.x;
    if (MODE == 0) {  // A = w[g·OG + m][k]; B = x[img][g·CG + c][i·SH − PH + a·DH][j·SW − PW + b·DW]
      const int img = z / G, g = z % G;
      a = p1 + (long long)g * OG * (CG * KHW);
      b = p0 + ((long long)img * C + g * CG) * (H * W);
#pragma unroll
      for (int r = 0; r < RA; ++r) {
        const int m = m0 + r * (NT / BK) + tid / BK;
        fm[r] = m < M ? m * (CG * KHW) : -1;
      }
      const int n = n0 + tid % BN;
      fn[0] = n < NN ? 0 : -1;
      fh[0] = n / OW * SH - PH, fw[0] = n % OW * SW - PW;
    } else if (MODE == 1) {  // A = w[g·OG + o][m][a][b]; B = dy[img][g·OG + o][(ih + PH − a·DH)/SH][…]
      const int img = z / G, g = z % G;
      a = p1 + (long long)g * OG * (CG * KHW);
      b = p0 + ((long long)img * O + g * OG) * (OH * OW);
#pragma unroll
      for (int r = 0; r < RA; ++r) {
        const int m = m0 + r * (NT / BK) + tid / BK;
        fm[r] = m < M ? m * KHW : -1;
      }
      const int n = n0 + tid % BN;
      fn[0] = n < NN ? 0 : -1;
      fh[0] = n / W + PH, fw[0] = n % W + PW;
    } else {  // A = dy[img][g·OG + m][p]; B = x[img][g·CG + c][i·SH − PH + a·DH][j·SW − PW + b·DW]
      const int g = z / SPLITS;
      a = p1 + (long long)g * OG * P;
      b = p0 + (long long)g * CG * (H * W);
#pragma unroll
      for (int r = 0; r < RA; ++r) {
        const int m = m0 + r * (NT / BK) + tid / BK;
        fm[r] = m < M ? m * P : -1;
      }
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        const int n = n0 + r * (NT / BK) + tid / BK, c = n / KHW, t = n % KHW;
        fn[r] = n < NN ? c * (H * W) : -1;
        fh[r] = t / KW * DH, fw[r] = t % KW * DW;
      }
    }
  }
  // Stages k0 … k0 + BK of A into As[k][m] and of B into Bs[k][n]; zeros past k_end.
  __device__ __forceinline__ void stage(float* As, float* Bs, long long k0, long long k_end) const {
    const int tid = threadIdx.x;
    {  // A: one k per stage
      const long long k = k0 + tid % BK;
      const bool kin = k < k_end;
      long long ka = 0;  // k's part of the offset
      if (MODE == 0) ka = k;
      if (MODE == 1) ka = k / KHW * (CG * KHW) + k % KHW;
      if (MODE == 2) ka = k / P * ((long long)O * P) + k % P;
#pragma unroll
      for (int r = 0; r < RA; ++r)
        As[(tid % BK) * SA + r * (NT / BK) + tid / BK] = kin && fm[r] >= 0 ? to_tc(in_ld(a + fm[r] + ka)) : 0.f;
    }
    if (MODE == 2) {  // B: one k = (img, p) per stage, a fixed tap per slot
      const long long k = k0 + tid % BK;
      const bool kin = k < k_end;
      const long long img = k / P;
      const int p = (int)(k - img * P), ih0 = p / OW * SH - PH, iw0 = p % OW * SW - PW;
      const IN_T* bi = b + img * ((long long)C * H * W);
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        const int ih = ih0 + fh[r], iw = iw0 + fw[r];
        const bool ok = kin && fn[r] >= 0 && ih >= 0 && ih < H && iw >= 0 && iw < W;
        Bs[(tid % BK) * SB + r * (NT / BK) + tid / BK] = ok ? to_tc(in_ld(bi + fn[r] + ih * W + iw)) : 0.f;
      }
      return;
    }
#pragma unroll
    for (int r = 0; r < RB; ++r) {  // B: a fixed column, one k per slot
      const int kk = r * (NT / BN) + tid / BN;
      const long long k = k0 + kk;
      const int kc = (int)k / KHW, t = (int)k % KHW, ta = t / KW, tb = t % KW;
      float v = 0.f;
      if (k < k_end && fn[0] >= 0) {
        if (MODE == 0) {
          const int ih = fh[0] + ta * DH, iw = fw[0] + tb * DW;
          if (ih >= 0 && ih < H && iw >= 0 && iw < W) v = in_ld(b + kc * (H * W) + ih * W + iw);
        } else {
          const int th = fh[0] - ta * DH, tw = fw[0] - tb * DW;
          if (th >= 0 && tw >= 0 && th % SH == 0 && tw % SW == 0 && th / SH < OH && tw / SW < OW)
            v = in_ld(b + kc * (OH * OW) + th / SH * OW + tw / SW);
        }
      }
      Bs[kk * SB + tid % BN] = to_tc(v);
    }
  }
};

// Output (m, n) of block z.
__device__ __forceinline__ void put(float* out, int z, int m, int n, float v) {
  if (m >= M || n >= NN) return;
  if (MODE == 0) {
    const int img = z / G, g = z % G;
    out[((long long)img * O + g * OG + m) * P + n] = v;
  } else if (MODE == 1) {
    const int img = z / G, g = z % G;
    out[((long long)img * C + g * CG + m) * (H * W) + n] = v;
  } else {
    const int g = z / SPLITS, split = z % SPLITS;
    out[(long long)split * (O * NN) + (long long)(g * OG + m) * NN + n] = v;
  }
}

// @piece gemm
  // p0, p1: the operands (FWD: x, w; GI: dy, w; GW: x, dy). out: y, dx, or dw (SPLITS == 1) /
  // the split partials [SPLITS][O·CG·KH·KW].
  __shared__ float As[BK * SA], Bs[BK * SB];
  const int z = blockIdx.z, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const long long k_begin = MODE == 2 ? (long long)(z % SPLITS) * KK : 0;
  const long long k_end = MODE == 2 ? min(k_begin + KK, KTOTAL) : KK;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  float acc[TM][TN] = {};
  const Loader ld(p0, p1, z, m0, n0);
  for (long long k0 = k_begin; k0 < k_end; k0 += BK) {
    ld.stage(As, Bs, k0, k_end);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = As[kk * SA + ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = Bs[kk * SB + tx * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) put(out, z, m0 + ty * TM + i, n0 + tx * TN + j, acc[i][j]);
// @piece gemm_tc
  // As the gemm piece, with the products on the tensor cores (tf32 m16n8k8, f32 accumulators).
  __shared__ float As[BK * SA], Bs[BK * SB];
  const int z = blockIdx.z, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const long long k_begin = MODE == 2 ? (long long)(z % SPLITS) * KK : 0;
  const long long k_end = MODE == 2 ? min(k_begin + KK, KTOTAL) : KK;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int wm = (warp % WM) * 16, wn = (warp / WM) * (NW8 * 8);  // the warp's tile in the block
  float acc[NW8][4] = {};
  const Loader ld(p0, p1, z, m0, n0);
  for (long long k0 = k_begin; k0 < k_end; k0 += BK) {
    ld.stage(As, Bs, k0, k_end);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      const float* a = As + (kk + t) * SA + wm + g;
      const unsigned a0 = __float_as_uint(a[0]), a1 = __float_as_uint(a[8]), a2 = __float_as_uint(a[4 * SA]),
                     a3 = __float_as_uint(a[4 * SA + 8]);
#pragma unroll
      for (int j = 0; j < NW8; ++j) {
        const float* b = Bs + (kk + t) * SB + wn + 8 * j + g;
        asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[4 * SB])));
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < NW8; ++j) {
    const int m = m0 + wm + g, n = n0 + wn + 8 * j + 2 * t;
    put(out, z, m, n, acc[j][0]);
    put(out, z, m, n + 1, acc[j][1]);
    put(out, z, m + 8, n, acc[j][2]);
    put(out, z, m + 8, n + 1, acc[j][3]);
  }
// @piece splits
  // out[i] = Σ_s part[s][i] over the SPLITS partials of GW, in order. Params (part, out).
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < TOTAL;
       i += (long long)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (long long sp = 0; sp < SPLITS; ++sp) s += part[sp * TOTAL + i];
    out[i] = s;
  }
// @piece tile_common
// The conv ops as GEMMs whose gathered operand lives in shared memory (the "tile" kernels; the
// generator picks them where their tiles fit, else the gemm pieces above). A block stages, per
// chunk of k, a dense A tile As[BM][SA] (rows m, k contiguous, zeros past M and the chunk's k)
// and a zero-padded window of planes Ss[SCH][CS] (RH rows of WP columns each); every gathered
// operand is then B(k, n) = Ss[Ks[k] + noff(n)], an offset of k (the table Ks) plus one of n
// (each thread's columns, in registers): no bounds checks and no index arithmetic in the k loop.
//   FWD: block (band of RB output rows, BM output channels, group, IPB images); k = (c, a, b) in
//        chunks of SCH input channels; the window holds the band's input rows, padding included:
//        Ks = c·CS + a·DH·WP + b·DW, noff(i, j) = i·SH·WP + j·SW.
//   GI (stride 1): block (band of RB input rows, BM input channels, group, IPB images); k =
//        (o, a, b) in chunks of SCH output channels; the window holds dy's rows ih + PH − a·DH
//        of the band: Ks = o·CS + (KH−1−a)·DH·WP + (KW−1−b)·DW, noff(ih, iw) = ih·WP + iw.
//   GW:  block (BN columns (c, a, b), BM output channels, (group, split)); k = (image, pixel) in
//        chunks of one band of RB output rows of one image; A = dy's band, the window x's rows of
//        the band for the channels the block's columns touch (from c_lo, the first column's):
//        Ks = i·SH·WP + j·SW, noff(c, a, b) = (c − c_lo)·CS + a·DH·WP + b·DW.
// FWD and GI with one chunk (NCH = 1) stage A once for all of the block's images. f32 operands
// are copied with cp.async (zero-filled where out of range: many loads in flight without
// registers), then rounded to tf32 in place; bf16 ones are widened through registers (exact in
// tf32).
// Warps: WR along m (MT row tiles of 16 each), WC along n (NT8 column tiles of 8 each), WR·WC = 8;
// tf32 mma.sync m16n8k8 with f32 accumulators.
// Defined before (besides the geometry and IN_T/in_ld): MODE, M, NN, BM, BN (= WC·NT8·8), WR, WC,
// MT, NT8, RB, BANDS, RH, WP, CS, SCH, KS (the k of a chunk, rounded up to 8), SA (KS + 4), NCH
// and IPB (FWD, GI: chunks of channels, images a block; 1 for GW), SPLITS and CPS (GW: chunks a
// split), TOTAL_CHUNKS (GW: N·BANDS).
constexpr int KHW = KH * KW, P = OH * OW;
constexpr bool ROUND = sizeof(IN_T) == 4;  // f32 operands: round to tf32 once staged
__device__ __forceinline__ float to_tc(float v) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return __uint_as_float(r);
}
// Rounds n staged f32 values to tf32 in place (cooperatively, between two barriers).
__device__ __forceinline__ void round_staged(float* p, int n) {
  for (int i = threadIdx.x; i < n; i += 256) p[i] = to_tc(p[i]);
}
// *dst = ok ? *src : 0, asynchronously for f32 (complete after cp.async.wait_all).
__device__ __forceinline__ void stage1(float* dst, const float* src, bool ok) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ void stage1(float* dst, const unsigned short* src, bool ok) {
  *dst = ok ? in_ld(src) : 0.f;
}
__device__ __forceinline__ void mma_tf32(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// @piece tile
  // p0, p1, out as the gemm piece's. Dynamic shared memory: As, Ss, then Ks.
  extern __shared__ float smem[];
  float* As = smem;
  float* Ss = As + BM * SA;
  int* Ks = reinterpret_cast<int*>(Ss + SCH * CS);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int wm = (warp % WR) * (MT * 16), wn = (warp / WR) * (NT8 * 8);
  const int m0 = blockIdx.y * BM;
  // The block's place: FWD and GI a band, a group and IPB images; GW columns, a group, a split.
  const int z = blockIdx.z;
  const int grp = MODE == 2 ? z / SPLITS : z % G;
  const int band = MODE == 2 ? 0 : blockIdx.x, n0 = MODE == 2 ? blockIdx.x * BN : 0;
  const int c_lo = n0 / KHW;
  // Columns of this band (FWD, GI) or of the block (GW) that exist.
  const int rows_here = MODE == 1 ? min(RB, H - band * RB) : min(RB, OH - band * RB);
  const int ncols = MODE == 0 ? rows_here * OW : MODE == 1 ? rows_here * W : min(BN, NN - n0);
  int noff[NT8];
#pragma unroll
  for (int j = 0; j < NT8; ++j) {
    const int n = wn + 8 * j + g;
    int o = 0;
    if (n < ncols) {
      if (MODE == 0) o = n / OW * SH * WP + n % OW * SW;
      if (MODE == 1) o = n / W * WP + n % W;
      if (MODE == 2) {
        const int col = n0 + n, tap = col % KHW;
        o = (col / KHW - c_lo) * CS + tap / KW * DH * WP + tap % KW * DW;
      }
    }
    noff[j] = o;
  }
  // The block's units of work: FWD, GI (image, chunk) pairs; GW chunks (one unit an image).
  const int img0 = MODE == 2 ? 0 : z / G * IPB;
  const int units = MODE == 2 ? min(CPS, TOTAL_CHUNKS - (z % SPLITS) * CPS) : min(IPB, N - img0) * NCH;
  float acc[MT][NT8][4] = {};
  for (int u = 0; u < units; ++u) {
    // ---- stage the unit: As, Ss and Ks (kc: the chunk's k) ----
    int kc;
    if (MODE == 2) {
      const int chunk = (z % SPLITS) * CPS + u, im = chunk / BANDS, r0 = chunk % BANDS * RB;
      kc = min(RB, OH - r0) * OW;
      const IN_T* dy = p1 + ((long long)im * O + grp * OG + m0) * P + r0 * OW;
#pragma unroll 4
      for (int e = tid; e < BM * KS; e += 256) {
        const int m = e / KS, k = e % KS;
        const bool ok = m0 + m < M && k < kc;
        stage1(As + m * SA + k, ok ? dy + (long long)m * P + k : dy, ok);
      }
      const IN_T* x = p0 + ((long long)im * C + grp * CG + c_lo) * (H * W);
#pragma unroll 4
      for (int e = tid; e < SCH * RH * WP; e += 256) {
        const int c = e / (RH * WP), r = e % (RH * WP) / WP, col = e % WP;
        const int ih = r0 * SH - PH + r, iw = col - PW;
        const bool ok = c_lo + c < CG && ih >= 0 && ih < H && iw >= 0 && iw < W;
        stage1(Ss + c * CS + r * WP + col, ok ? x + (long long)c * (H * W) + ih * W + iw : x, ok);
      }
      for (int k = tid; k < KS; k += 256) Ks[k] = k < kc ? k / OW * SH * WP + k % OW * SW : 0;
    } else {
      const int img = img0 + u / NCH, chunk = u % NCH;
      const int c0 = chunk * SCH, cc = min(SCH, (MODE == 0 ? CG : OG) - c0);
      kc = cc * KHW;
      if (NCH > 1 || u == 0) {  // A: the weights (FWD w[o][c][a][b], GI w[o][c][a][b] as [c][(o, a, b)])
        const IN_T* w = p1 + (long long)grp * OG * (CG * KHW);
#pragma unroll 4
        for (int e = tid; e < BM * KS; e += 256) {
          const int m = e / KS, k = e % KS;
          const bool ok = m0 + m < M && k < kc;
          const long long at = !ok          ? 0
                               : MODE == 0 ? (long long)(m0 + m) * (CG * KHW) + c0 * KHW + k
                                           : (long long)(c0 + k / KHW) * (CG * KHW) + (m0 + m) * KHW + k % KHW;
          stage1(As + m * SA + k, w + at, ok);
        }
        for (int k = tid; k < KS; k += 256) {
          const int c = k / KHW, a = k % KHW / KW, b = k % KW;
          Ks[k] = k >= kc ? 0 : MODE == 0 ? c * CS + a * DH * WP + b * DW
                                          : c * CS + (KH - 1 - a) * DH * WP + (KW - 1 - b) * DW;
        }
      }
      // FWD: x's rows band·RB·SH − PH + r, columns col − PW. GI: dy's rows band·RB + PH − (KH−1)·DH
      // + r, columns col + PW − (KW−1)·DW.
      const int r0 = MODE == 0 ? band * RB * SH - PH : band * RB + PH - (KH - 1) * DH;
      const int q0 = MODE == 0 ? -PW : PW - (KW - 1) * DW;
      const int SH_ = MODE == 0 ? H : OH, SW_ = MODE == 0 ? W : OW;
      const IN_T* src = MODE == 0 ? p0 + ((long long)img * C + grp * CG + c0) * (H * W)
                                  : p0 + ((long long)img * O + grp * OG + c0) * P;
#pragma unroll 4
      for (int e = tid; e < SCH * RH * WP; e += 256) {
        const int c = e / (RH * WP), r = e % (RH * WP) / WP, col = e % WP;
        const int sr = r0 + r, sc = q0 + col;
        const bool ok = c < cc && sr >= 0 && sr < SH_ && sc >= 0 && sc < SW_;
        stage1(Ss + c * CS + r * WP + col, ok ? src + (long long)c * (SH_ * SW_) + sr * SW_ + sc : src, ok);
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
    if (ROUND) {
      round_staged(MODE == 2 || NCH > 1 || u == 0 ? As : Ss, MODE == 2 || NCH > 1 || u == 0 ? BM * SA + SCH * CS : SCH * CS);
      __syncthreads();
    }
    // ---- the chunk's products, all operands from shared memory: whole steps of 8, then the
    // last, partial one with the k past kc masked (As is zero there; the mask keeps a NaN of Ss out) ----
    const auto step = [&](int kk, bool masked) {
      const int k0 = kk + t, k1 = k0 + 4;
      const bool v0 = !masked || k0 < kc, v1 = !masked || k1 < kc;
      const float* s0 = Ss + Ks[k0];
      const float* s1 = Ss + Ks[k1];
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const float* ap = As + (wm + mt * 16 + g) * SA + k0;
        a[mt][0] = __float_as_uint(ap[0]), a[mt][1] = __float_as_uint(ap[8 * SA]);
        a[mt][2] = __float_as_uint(ap[4]), a[mt][3] = __float_as_uint(ap[8 * SA + 4]);
      }
#pragma unroll
      for (int j = 0; j < NT8; ++j) {
        const unsigned b0 = __float_as_uint(v0 ? s0[noff[j]] : 0.f), b1 = __float_as_uint(v1 ? s1[noff[j]] : 0.f);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_tf32(acc[mt][j], a[mt], b0, b1);
      }
    };
    const int kfull = kc & ~7;
#pragma unroll 2
    for (int kk = 0; kk < kfull; kk += 8) step(kk, false);
    if (kfull < kc) step(kfull, true);
    __syncthreads();
    if (MODE == 2 ? u + 1 < units : (u + 1) % NCH != 0) continue;
    // ---- results: (m, n) of the block (FWD, GI: of this unit's image) ----
    const int img = MODE == 2 ? 0 : img0 + u / NCH;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NT8; ++j)
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const int m = m0 + wm + mt * 16 + g + (h >= 2 ? 8 : 0), n = wn + 8 * j + 2 * t + (h & 1);
          const float v = acc[mt][j][h];
          acc[mt][j][h] = 0.f;
          if (m >= M || n >= ncols) continue;
          if (MODE == 0) {
            out[((long long)img * O + grp * OG + m) * P + band * RB * OW + n] = v;
          } else if (MODE == 1) {
            out[((long long)img * C + grp * CG + m) * (H * W) + band * RB * W + n] = v;
          } else {
            out[(long long)(z % SPLITS) * (O * NN) + (long long)(grp * OG + m) * NN + n0 + n] = v;
          }
        }
  }
// @piece pool_common
// Helpers of the pool kernels (defined before: N, C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH,
// DW (int), COUNT_PAD, MODE). TILING: the windows tile the input (stride = kernel, no padding
// or dilation), so each x element lies in at most one window.
constexpr bool TILING = SH == KH && SW == KW && PH == 0 && PW == 0 && DH == 1 && DW == 1;
// EXACT: tiling windows that cover every x element; a gradient's thread then writes its window.
constexpr bool EXACT = TILING && H % KH == 0 && W % KW == 0;
// The first maximum of output (i, j)'s window in plane x (a NaN wins), as an offset in x.
__device__ __forceinline__ int argmax_of(const float* x, int i, int j) {
  int best = -1;
  float bv = 0.f;
#pragma unroll
  for (int a = 0; a < KH; ++a) {
    const int ih = i * SH - PH + a * DH;
    if (ih < 0 || ih >= H) continue;
#pragma unroll
    for (int b = 0; b < KW; ++b) {
      const int iw = j * SW - PW + b * DW;
      if (iw < 0 || iw >= W) continue;
      const float v = x[ih * W + iw];
      if (best < 0 || (bv == bv && !(v <= bv))) best = ih * W + iw, bv = v;
    }
  }
  return best;
}
// avg_pool2d's divisor of output (i, j): KH·KW, or the window's positions inside the input.
__device__ __forceinline__ float divisor(int i, int j) {
  if (COUNT_PAD) return (float)(KH * KW);
  const int h0 = i * SH - PH, w0 = j * SW - PW;
  return (float)((min(h0 + KH, H) - max(h0, 0)) * (min(w0 + KW, W) - max(w0, 0)));
}
__device__ __forceinline__ float avg_of(const float* x, int i, int j) {
  float s = 0.f;
#pragma unroll
  for (int a = 0; a < KH; ++a) {
    const int ih = i * SH - PH + a;
    if (ih < 0 || ih >= H) continue;
#pragma unroll
    for (int b = 0; b < KW; ++b) {
      const int iw = j * SW - PW + b;
      if (iw >= 0 && iw < W) s += x[ih * W + iw];
    }
  }
  return s / divisor(i, j);
}
// @piece pool
  // One thread per element of the result. Forward (MODE 3 max, 4 avg): y over its window.
  // Gradients (MODE 5 max, 6 avg), gathered per x element without atomics: the sum of dy over
  // the outputs whose window holds it (max: whose first arg-max it is). The body of
  //   extern "C" __global__ void <name>(const float* a, const float* b, float* out)
  // with (a, b) = (x, -) forward, (x, dy) max's gradient, (dy, -) avg's.
  const long long total = MODE <= 4 || EXACT ? (long long)N * C * OH * OW : (long long)N * C * H * W;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    if (MODE >= 5 && EXACT) {  // one window: dy to its first maximum (max) or spread (avg)
      const long long pl = e / (OH * OW);
      const int o = (int)(e - pl * (OH * OW)), i = o / OW, j = o % OW;
      const float v = (MODE == 5 ? b : a)[e];
      const int best = MODE == 5 ? argmax_of(a + pl * (H * W), i, j) : -1;
      float* dx = out + pl * (H * W);
#pragma unroll
      for (int ta = 0; ta < KH; ++ta)
#pragma unroll
        for (int tb = 0; tb < KW; ++tb) {
          const int at = (i * KH + ta) * W + j * KW + tb;
          dx[at] = MODE == 5 ? (at == best ? v : 0.f) : v / (float)(KH * KW);
        }
      continue;
    }
    if (MODE <= 4) {
      const long long pl = e / (OH * OW);
      const int o = (int)(e - pl * (OH * OW)), i = o / OW, j = o % OW;
      const float* x = a + pl * (H * W);
      out[e] = MODE == 3 ? x[argmax_of(x, i, j)] : avg_of(x, i, j);
      continue;
    }
    const long long pl = e / (H * W);
    const int at = (int)(e - pl * (H * W)), ih = at / W, iw = at % W;
    const float* x = MODE == 5 ? a + pl * (H * W) : nullptr;
    const float* dy = (MODE == 5 ? b : a) + pl * (OH * OW);
    float s = 0.f;
    if (TILING) {  // the one window (ih / KH, iw / KW), if any
      const int i = ih / KH, j = iw / KW;
      if (i < OH && j < OW) s = MODE == 6 ? dy[i * OW + j] / divisor(i, j) : argmax_of(x, i, j) == at ? dy[i * OW + j] : 0.f;
      out[e] = s;
      continue;
    }
    for (int ta = 0; ta < KH; ++ta) {
      const int th = ih + PH - ta * DH;
      if (th < 0 || th % SH != 0 || th / SH >= OH) continue;
      for (int tb = 0; tb < KW; ++tb) {
        const int tw = iw + PW - tb * DW;
        if (tw < 0 || tw % SW != 0 || tw / SW >= OW) continue;
        const int i = th / SH, j = tw / SW;
        if (MODE == 5) {
          if (argmax_of(x, i, j) == at) s += dy[i * OW + j];
        } else {
          s += dy[i * OW + j] / divisor(i, j);
        }
      }
    }
    out[e] = s;
  }
