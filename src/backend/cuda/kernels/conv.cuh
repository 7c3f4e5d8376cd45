// The window ops (ops.def; generator: kernels_conv.cc). The conv ops are implicit GEMMs,
// C[m][n] = Σ_k A(m, k)·B(k, n), with A and B gathered straight from the operands (no im2col
// matrix in memory); each mode defines its operands by the formulas below (x zero in the
// padding). z = blockIdx.z picks the (image, group) of FWD and GI and the (group, split) of GW.
//   FWD: m = output channel o (of the group), n = output pixel p = (i, j), k = (c, a, b):
//        A = w[g·OG + o][c][a][b], B = x[img][g·CG + c][i·SH − PH + a·DH][j·SW − PW + b·DW].
//   GI:  m = input channel c, n = input pixel (ih, iw), k = (o, a, b): A = w[g·OG + o][c][a][b],
//        B = dy[img][g·OG + o][i][j] where ih = i·SH − PH + a·DH (likewise iw), else 0.
//   GW:  m = o, n = (c, a, b), k = (img, p): A = dy[img][g·OG + o][p], B as FWD's B.
// Tiles: BM × BN outputs a block, BK of k a step, staged in shared memory; each of the 256
// threads accumulates a TM × TN patch in f32 registers. GW splits k over SPLITS blocks whose
// partial sums a second kernel adds in a fixed order (deterministic, no atomics).
//
// Defined before: IN_T (float or unsigned short = bf16 bits) and in_ld; MODE (0 FWD, 1 GI,
// 2 GW); M, NN (GEMM extents), KK (the k of one block: all of it, or one split's for GW),
// KTOTAL (GW's whole k, N·OH·OW), SPLITS; the geometry N, C, H, W, O, OH, OW, KH, KW, SH, SW, PH,
// PW, DH, DW, G, CG, OG (constants, long long). Piece gemm_common precedes the kernel; piece
// gemm is the body of
//   extern "C" __global__ void <name>(const IN_T* p0, const IN_T* p1, float* out)
// and piece splits the body of <name>(const float* part, float* out) (TOTAL = O·CG·KH·KW).
// @piece gemm_common
constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4, NT = 256;
constexpr long long P = OH * OW, KHW = KH * KW;

// x[img][ch][i·SH − PH + a·DH][j·SW − PW + b·DW] for output pixel p, tap r = (a, b); 0 outside.
__device__ __forceinline__ float x_tap(const IN_T* x, long long img, long long ch, long long p, long long r) {
  const long long i = p / OW, j = p % OW, a = r / KW, b = r % KW;
  const long long ih = i * SH - PH + a * DH, iw = j * SW - PW + b * DW;
  if (ih < 0 || ih >= H || iw < 0 || iw >= W) return 0.f;
  return in_ld(x + ((img * C + ch) * H + ih) * W + iw);
}

__device__ __forceinline__ float a_at(const IN_T* p0, const IN_T* p1, long long z, long long m, long long k) {
  if (m >= M) return 0.f;
  if (MODE == 0) {  // w[g·OG + m][k]
    const long long g = z % G;
    return in_ld(p1 + (g * OG + m) * (CG * KHW) + k);
  }
  if (MODE == 1) {  // w[g·OG + o][m][a][b], k = (o, r)
    const long long g = z % G, o = k / KHW, r = k % KHW;
    return in_ld(p1 + ((g * OG + o) * CG + m) * KHW + r);
  }
  const long long g = z / SPLITS, img = k / P, p = k % P;  // dy[img][g·OG + m][p]
  return in_ld(p1 + (img * O + g * OG + m) * P + p);
}

__device__ __forceinline__ float b_at(const IN_T* p0, const IN_T* p1, long long z, long long k, long long n) {
  if (n >= NN) return 0.f;
  if (MODE == 0) {
    const long long img = z / G, g = z % G;
    return x_tap(p0, img, g * CG + k / KHW, n, k % KHW);
  }
  if (MODE == 1) {  // dy[img][g·OG + o][i][j] with (ih, iw) = n under tap (a, b) of k = (o, r)
    const long long img = z / G, g = z % G, o = k / KHW, r = k % KHW;
    const long long th = n / W + PH - (r / KW) * DH, tw = n % W + PW - (r % KW) * DW;
    if (th < 0 || tw < 0 || th % SH != 0 || tw % SW != 0) return 0.f;
    const long long i = th / SH, j = tw / SW;
    if (i >= OH || j >= OW) return 0.f;
    return in_ld(p0 + ((img * O + g * OG + o) * OH + i) * OW + j);
  }
  const long long g = z / SPLITS, img = k / P;  // x under tap n = (c, r) of pixel k % P
  return x_tap(p0, img, g * CG + n / KHW, k % P, n % KHW);
}

// @piece gemm
  // p0, p1: the operands (FWD: x, w; GI: dy, w; GW: x, dy). out: y, dx, or dw (SPLITS == 1) /
  // the split partials [SPLITS][O·CG·KH·KW].
  __shared__ float As[BK][BM + 4], Bs[BK][BN + 4];
  const long long z = blockIdx.z;
  const long long m0 = (long long)blockIdx.y * BM, n0 = (long long)blockIdx.x * BN;
  const long long k_begin = MODE == 2 ? (z % SPLITS) * KK : 0;
  const long long k_end = MODE == 2 ? min(k_begin + KK, KTOTAL) : KK;
  const int tid = threadIdx.x, tx = tid % (BN / TN), ty = tid / (BN / TN);
  float acc[TM][TN] = {};
  for (long long k0 = k_begin; k0 < k_end; k0 += BK) {
#pragma unroll
    for (int r = 0; r < BM * BK / NT; ++r) {  // A: consecutive threads along k
      const int e = r * NT + tid, kk = e % BK, mm = e / BK;
      As[kk][mm] = k0 + kk < k_end ? a_at(p0, p1, z, m0 + mm, k0 + kk) : 0.f;
    }
#pragma unroll
    for (int r = 0; r < BN * BK / NT; ++r) {  // B: consecutive threads along n (along k for GW)
      const int e = r * NT + tid;
      const int kk = MODE == 2 ? e % BK : e / BN, nn = MODE == 2 ? e / BK : e % BN;
      Bs[kk][nn] = k0 + kk < k_end ? b_at(p0, p1, z, k0 + kk, n0 + nn) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = As[kk][ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const long long m = m0 + ty * TM + i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const long long n = n0 + tx * TN + j;
      if (n >= NN) continue;
      if (MODE == 0) {
        const long long img = z / G, g = z % G;
        out[((img * O + g * OG + m) * P) + n] = acc[i][j];
      } else if (MODE == 1) {
        const long long img = z / G, g = z % G;
        out[((img * C + g * CG + m) * H * W) + n] = acc[i][j];
      } else {
        const long long g = z / SPLITS, split = z % SPLITS;
        out[split * (O * NN) + (g * OG + m) * NN + n] = acc[i][j];
      }
    }
  }
// @piece splits
  // out[i] = Σ_s part[s][i] over the SPLITS partials of GW, in order. Params (part, out).
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < TOTAL;
       i += (long long)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (long long sp = 0; sp < SPLITS; ++sp) s += part[sp * TOTAL + i];
    out[i] = s;
  }
// @piece pool_common
// Helpers of the pool kernels (defined before: N, C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH,
// DW, COUNT_PAD, MODE).
// The first maximum of output (i, j)'s window in plane x (a NaN wins), as an offset in x.
__device__ __forceinline__ long long argmax_of(const float* x, long long i, long long j) {
  long long best = -1;
  float bv = 0.f;
  for (long long a = 0; a < KH; ++a) {
    const long long ih = i * SH - PH + a * DH;
    if (ih < 0 || ih >= H) continue;
    for (long long b = 0; b < KW; ++b) {
      const long long iw = j * SW - PW + b * DW;
      if (iw < 0 || iw >= W) continue;
      const float v = x[ih * W + iw];
      if (best < 0 || (bv == bv && (v != v || v > bv))) best = ih * W + iw, bv = v;
    }
  }
  return best;
}
// avg_pool2d's divisor of output (i, j): KH·KW, or the window's positions inside the input.
__device__ __forceinline__ float divisor(long long i, long long j) {
  if (COUNT_PAD) return (float)(KH * KW);
  const long long h0 = i * SH - PH, w0 = j * SW - PW;
  const long long rows = min(h0 + KH, H) - max(h0, 0LL), cols = min(w0 + KW, W) - max(w0, 0LL);
  return (float)(rows * cols);
}
__device__ __forceinline__ float avg_of(const float* x, long long i, long long j) {
  float s = 0.f;
  for (long long a = 0; a < KH; ++a) {
    const long long ih = i * SH - PH + a;
    if (ih < 0 || ih >= H) continue;
    for (long long b = 0; b < KW; ++b) {
      const long long iw = j * SW - PW + b;
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
  const long long total = MODE <= 4 ? N * C * OH * OW : N * C * H * W;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    if (MODE <= 4) {
      const long long pl = e / (OH * OW), i = e / OW % OH, j = e % OW;
      const float* x = a + pl * H * W;
      out[e] = MODE == 3 ? x[argmax_of(x, i, j)] : avg_of(x, i, j);
      continue;
    }
    const long long pl = e / (H * W), ih = e / W % H, iw = e % W;
    float s = 0.f;
    for (long long ta = 0; ta < KH; ++ta) {
      const long long th = ih + PH - ta * DH;
      if (th < 0 || th % SH != 0 || th / SH >= OH) continue;
      for (long long tb = 0; tb < KW; ++tb) {
        const long long tw = iw + PW - tb * DW;
        if (tw < 0 || tw % SW != 0 || tw / SW >= OW) continue;
        const long long i = th / SH, j = tw / SW, y = (pl * OH + i) * OW + j;
        if (MODE == 5) {
          if (argmax_of(a + pl * H * W, i, j) == ih * W + iw) s += b[y];
        } else {
          s += a[y] / divisor(i, j);
        }
      }
    }
    out[e] = s;
  }
