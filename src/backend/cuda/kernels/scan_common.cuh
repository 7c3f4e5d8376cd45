// What both selective_scan kernels share (selective_scan_common.cc; design in
// selective_scan.cc). Pieces:
//   helpers  device helpers of every kernel, pasted at the end of the prelude: fast exp2 and
//            reciprocal, Δ (with the softplus), the lanes' reduce-scatter, the kept states'
//            addressing (hs_at) and the loads of B, C and states;
//   stage    Stage: a block's staging of one chunk's rows (u, delta and, with DY_ROWS, dy per
//            channel; B and C of its group), K steps from t0, steps past L staged as 0, through
//            registers (fetch) into shared memory (store); 4 steps a load with VEC;
//   start    the kernels' first statements: where a thread stands (channel c of the block,
//            lane j, states j·NS + s), the shared-memory layout, the block's bias and D.
//
// Defined before (selective_scan_common.cc: prelude): B, D, L, G, N, PER, NS, NSG, NP, CB, CT,
// NT, K, KC, NCH, NR, SOFTPLUS; D_STRIDE, BIAS_STRIDE, VEC, MASK, NU, NBUF; RS, BS, WL, CW,
// WARPS, TSW; PAIRED. Before stage: DY, DY_ROWS, DELTA_EACH, ROWS_U (the kernel's own flags).
// @piece helpers

__device__ __forceinline__ float exp2_approx(float x) {  // one MUFU op; rel. error ~2^-22, tiny results flush to 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// Reduce-scatter of V values over the lanes at bits S, 2S, … LAST of the lane index (each a
// power of two): each level keeps half of the values (the upper half where the lane's bit is
// set) and adds the partner's copy of that half; once one value is left, levels just add. Lane
// bit S·2^i decides index bit (V >> (i + 1)) of what is kept: see kept_index.
template <int V, int S, int LAST>
__device__ __forceinline__ void reduce_scatter(float* v) {
  if constexpr (S <= LAST) {
    const bool up = (threadIdx.x & S) != 0;
    if constexpr (V >= 2) {
#pragma unroll
      for (int i = 0; i < V / 2; ++i) {
        const float lo = v[i], hi = v[i + V / 2];
        v[i] = (up ? hi : lo) + __shfl_xor_sync(MASK, up ? lo : hi, S);
      }
      reduce_scatter<V / 2, S * 2, LAST>(v);
    } else {
      v[0] += __shfl_xor_sync(MASK, v[0], S);
      reduce_scatter<1, S * 2, LAST>(v);
    }
  }
}
// Which of the V values v[0] stands for after reduce_scatter<V, S, LAST> (v[i] is that + i).
template <int V, int S, int LAST>
__device__ __forceinline__ int kept_index() {
  int idx = 0;
#pragma unroll
  for (int b = S, w = V / 2; b <= LAST && w >= 1; b *= 2, w /= 2)
    if (threadIdx.x & b) idx += w;
  return idx;
}
__host__ __device__ constexpr int kept_count(int v, int lanes) { return v / lanes > 1 ? v / lanes : 1; }
// The states entering each chunk (hs: the forward stores them, the backward starts each chunk
// from them) in thread groups: each thread's CT·NS states are HG consecutive floats (its slots,
// slot k of channel c + (k ^ SW), its states j·NS …, past N as 0: both kernels pair their lanes'
// channels alike), ordered by (sequence, channel group d / CT, chunk, j). A chunk's load is then
// one 16-byte access a lane, a warp's in CW runs of NSG·HG·4 bytes, and a channel group's chunks
// lie next to each other ([b, d, chunk, N] rows took two 8-byte loads a lane, in runs of 64 bytes).
// Both kernels split the states and channels alike (scan_layout checks).
constexpr int HG = CT * NS;
__device__ __forceinline__ long long hs_at(int b, int kc, int d, int j) {
  return ((((long long)b * (D / CT) + d / CT) * NCH + kc) * NSG + j) * HG;
}
__device__ __forceinline__ void store_group(float* __restrict__ p, const float (&h)[CT][NS]) {
  if constexpr (HG % 4 == 0) {
#pragma unroll
    for (int i = 0; i < HG; i += 4)
      *reinterpret_cast<float4*>(p + i) = make_float4(h[i / NS][i % NS], h[(i + 1) / NS][(i + 1) % NS], h[(i + 2) / NS][(i + 2) % NS], h[(i + 3) / NS][(i + 3) % NS]);
  } else {
#pragma unroll
    for (int i = 0; i < HG; i += 2) *reinterpret_cast<float2*>(p + i) = make_float2(h[i / NS][i % NS], h[(i + 1) / NS][(i + 1) % NS]);
  }
}
__device__ __forceinline__ void load_group(const float* __restrict__ p, float (&h)[CT][NS]) {
  if constexpr (HG % 4 == 0) {
#pragma unroll
    for (int i = 0; i < HG; i += 4) {
      const float4 x = *reinterpret_cast<const float4*>(p + i);
      h[i / NS][i % NS] = x.x; h[(i + 1) / NS][(i + 1) % NS] = x.y; h[(i + 2) / NS][(i + 2) % NS] = x.z; h[(i + 3) / NS][(i + 3) % NS] = x.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < HG; i += 2) {
      const float2 x = *reinterpret_cast<const float2*>(p + i);
      h[i / NS][i % NS] = x.x; h[(i + 1) / NS][(i + 1) % NS] = x.y;
    }
  }
}
// This lane's NS states of B or C at one step (16- or 8-byte aligned).
__device__ __forceinline__ void load_states(const float* p, float (&v)[NS]) {
  if constexpr (NS == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
  } else if constexpr (NS == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x; v[1] = x.y;
  } else {
#pragma unroll
    for (int s = 0; s < NS; ++s) v[s] = p[s];
  }
}
// Two consecutive steps' states of B or C (one 16-byte load when NS = 2: [t][s] rows at a
// 16-byte boundary, t even).
__device__ __forceinline__ void load_two_steps(const float* p, float (&v0)[NS], float (&v1)[NS]) {
  if constexpr (NS == 2) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v0[0] = x.x; v0[1] = x.y; v1[0] = x.z; v1[1] = x.w;
  } else {
    load_states(p, v0);
    load_states(p + NS, v1);
  }
}
__device__ __forceinline__ float rcp_approx(float x) {  // one MUFU op, ~1 ulp
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// Δ of a raw delta (+ bias): the softplus max(x, 0) + log1p(e) with e = e^−|x| ≤ 1 when SOFTPLUS;
// its slope (sigmoid: 1/(1+e) or e/(1+e)) is what dΔ becomes d(delta). log1p(e) = 2·atanh(z)
// with z = e/(2+e) ≤ 1/3, by its odd series to z^13 (the next term is below 2e-8 of the sum):
// within 3e-7 relative everywhere, small e included (host replica over x in [−30, 30], plus
// ex2/rcp.approx's ~2^-22), in ~25 instructions where libdevice's expf, log1pf and IEEE
// divisions take ~50 (this runs once per element of delta, ~10% of a pass).
__device__ __forceinline__ float delta_of(float x, float* slope) {
  if (!SOFTPLUS) {
    *slope = 1.0f;
    return x;
  }
  // e = 2^(−|x|·log2 e): the product's rounding error (fma) and log2 e's own tail go into a
  // first-order factor, or e would be off by up to |x|·2^−24 relative.
  const float ax = fabsf(x), t = -ax * 1.4426950408889634f;
  const float tail = fmaf(-ax, 1.4426950408889634f, -t) - ax * 1.925963e-8f;
  const float e = exp2_approx(t) * fmaf(tail, 0.6931471805599453f, 1.0f);
  const float r = rcp_approx(1.0f + e);
  *slope = x >= 0.0f ? r : e * r;
  const float z = e * rcp_approx(2.0f + e), z2 = z * z;
  float p = 1.0f / 13.0f;
  p = fmaf(p, z2, 1.0f / 11.0f);
  p = fmaf(p, z2, 1.0f / 9.0f);
  p = fmaf(p, z2, 1.0f / 7.0f);
  p = fmaf(p, z2, 1.0f / 5.0f);
  p = fmaf(p, z2, 1.0f / 3.0f);
  p = fmaf(p, z2, 1.0f);
  return fmaxf(x, 0.0f) + 2.0f * z * p;
}
// @piece stage

// Shared memory: NBUF copies of COPY floats, then bias, D (and the forward's mbarrier). A copy holds ROWS_U per-channel
// rows [CB][RS] (u, Δ; the backward's slope, dy, du and dΔ), B and C [NSG][BS] and the
// backward's dB/dC terms [K][TSW]: all at constant offsets from the copy's start, so that a
// kernel's accesses to the copy it works on share one base address.
constexpr int COPY = ROWS_U * CB * RS + 2 * NSG * BS + (DY ? K * TSW : 0);
__device__ __forceinline__ float* copy_at(float* smem, int p) { return smem + p * COPY; }
__device__ __forceinline__ float (*rows_at(float* cp, int i))[RS] { return reinterpret_cast<float (*)[RS]>(cp + i * CB * RS); }
__device__ __forceinline__ float* b_of(float* cp) { return cp + ROWS_U * CB * RS; }
__device__ __forceinline__ float* c_of(float* cp) { return b_of(cp) + NSG * BS; }
__device__ __forceinline__ float* terms_of(float* cp) { return c_of(cp) + NSG * BS; }
// Rows u, B, C and dy move in units of UNIT steps; delta moves in units of DU steps, spread so
// that every thread applies the softplus to as many elements as every other (an uneven share
// held the other warps up at the next barrier: the forward's DELTA_EACH takes four steps a
// thread where that splits them evenly (one 16-byte load where there would be four 4-byte
// ones), else one; the backward pairs of steps, one pair a thread).
constexpr int UNIT = VEC ? 4 : 1, ROWS = (DY_ROWS ? 2 : 1) * CB + 2 * N;
constexpr int UNITS = ROWS * K / UNIT, PF = (UNITS + NT - 1) / NT;
constexpr int DU = !VEC ? 1 : !DELTA_EACH ? 2 : (CB * K / 4) % NT == 0 ? 4 : 1, DUNITS = CB * K / DU, PD = (DUNITS + NT - 1) / NT;
// Known when the kernel is generated, so that their checks compile away: every unit a thread
// takes is a real one (the units a multiple of the threads), every staged step lies within L.
constexpr bool ALL_UNITS = UNITS % NT == 0, ALL_DUNITS = DUNITS % NT == 0, FULL = L % K == 0;
struct Stage {
  struct Vals {  // one round's loads in registers (the kernels keep two: loaded two rounds ahead)
    float v[PF][UNIT], dv[PD][DU];
  };
  const float* row[PF];  // each unit's row at its first step (nullptr past the rows), found once
  const float* drow;     // delta's rows of the block
  int doff[PD];          // each delta unit's offset in them (-1 past the units)
  __device__ __forceinline__ Stage(const float* __restrict__ u, const float* __restrict__ delta, const float* __restrict__ Bm,
                                   const float* __restrict__ Cm, const float* __restrict__ dy, long long row0, long long bc0) {
#pragma unroll
    for (int i = 0; i < PF; ++i) {
      const int e = threadIdx.x + i * NT, r = e / (K / UNIT), t = e % (K / UNIT) * UNIT;
      const float* src = nullptr;
      if (ALL_UNITS || e < UNITS) {
        if (r < CB) src = u + row0 + (long long)r * L;
        else if (r < CB + N) src = Bm + bc0 + (long long)(r - CB) * L;
        else if (r < CB + 2 * N) src = Cm + bc0 + (long long)(r - CB - N) * L;
        else src = dy + row0 + (long long)(r - CB - 2 * N) * L;
        src += t;
      }
      row[i] = src;
    }
    drow = delta + row0;
#pragma unroll
    for (int i = 0; i < PD; ++i) {
      const int e = threadIdx.x + i * NT;
      doff[i] = ALL_DUNITS || e < DUNITS ? e / (K / DU) * L + e % (K / DU) * DU : -1;
    }
  }
  __device__ __forceinline__ void fetch(Vals& vals, int t0) const {
#pragma unroll
    for (int i = 0; i < PF; ++i) {
      const int t = (threadIdx.x + i * NT) % (K / UNIT) * UNIT;
      const bool in = (ALL_UNITS || row[i] != nullptr) && (FULL || t0 + t < L);
      const float* src = row[i] + t0;
      if constexpr (VEC) {
        const float4 x = in ? __ldg(reinterpret_cast<const float4*>(src)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        vals.v[i][0] = x.x;
        vals.v[i][UNIT > 1 ? 1 : 0] = x.y;
        vals.v[i][UNIT > 2 ? 2 : 0] = x.z;
        vals.v[i][UNIT > 3 ? 3 : 0] = x.w;
      } else {
        vals.v[i][0] = in ? __ldg(src) : 0.0f;
      }
    }
    // Delta (with DU > 1, L is a multiple of 4: a unit's steps are all within L or all past it).
#pragma unroll
    for (int i = 0; i < PD; ++i) {
      const int t = (threadIdx.x + i * NT) % (K / DU) * DU;
      const bool in = (ALL_DUNITS || doff[i] >= 0) && (FULL || t0 + t < L);
      const float* src = drow + doff[i] + t0;
      if constexpr (DU == 4) {
        const float4 x = in ? __ldg(reinterpret_cast<const float4*>(src)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        vals.dv[i][0] = x.x;
        vals.dv[i][DU > 1 ? 1 : 0] = x.y;
        vals.dv[i][DU > 2 ? 2 : 0] = x.z;
        vals.dv[i][DU > 3 ? 3 : 0] = x.w;
      } else if constexpr (DU == 2) {
        const float2 x = in ? __ldg(reinterpret_cast<const float2*>(src)) : make_float2(0.0f, 0.0f);
        vals.dv[i][0] = x.x;
        vals.dv[i][DU > 1 ? 1 : 0] = x.y;
      } else {
        vals.dv[i][0] = in ? __ldg(src) : 0.0f;
      }
    }
  }
  __device__ __forceinline__ void store(const Vals& vals, float* cp, const float* bias, int t0) const {
    float (*su)[RS] = rows_at(cp, 0);
    float (*sd)[RS] = rows_at(cp, 1);
    float (*sg)[RS] = rows_at(cp, DY ? 2 : 0);
    float (*sy)[RS] = rows_at(cp, DY ? 3 : 0);
    float* sb = b_of(cp);
    float* sc = c_of(cp);
#pragma unroll
    for (int i = 0; i < PF; ++i) {
      const int e = threadIdx.x + i * NT, r = e / (K / UNIT), t1 = e % (K / UNIT) * UNIT;
      if (!ALL_UNITS && e >= UNITS) continue;
      // Which rows unit i can be: decided here (after unrolling) when the range its threads
      // cover holds one kind only.
      constexpr int PER_ROW = K / UNIT;
      const int rlo = i * NT / PER_ROW, rhi = ((i + 1) * NT - 1) / PER_ROW;
      const bool chan = rhi < CB ? true : rlo >= CB && rhi < CB + 2 * N ? false : (r < CB || r >= CB + 2 * N);
      if (chan) {  // per-channel rows: a unit at once (RS and t1 are multiples of UNIT)
        float* row = r < CB ? su[r] : sy[r - CB - 2 * N];
        if constexpr (UNIT == 4) *reinterpret_cast<float4*>(row + t1) = make_float4(vals.v[i][0], vals.v[i][UNIT > 1 ? 1 : 0], vals.v[i][UNIT > 2 ? 2 : 0], vals.v[i][UNIT > 3 ? 3 : 0]);
        else row[t1] = vals.v[i][0];
      } else {
        const int n = (r - CB) % N;
        float* dst = (r < CB + N) ? sb : sc;
#pragma unroll
        for (int q = 0; q < UNIT; ++q) dst[(n / NS) * BS + (t1 + q) * NS + n % NS] = vals.v[i][q];
      }
    }
    // Δ and (in the backward) its slope; steps past L as 0.
#pragma unroll
    for (int i = 0; i < PD; ++i) {
      const int e = threadIdx.x + i * NT, r = e / (K / DU), t = e % (K / DU) * DU;
      if (!ALL_DUNITS && e >= DUNITS) continue;
      float x[DU], sl[DU];
#pragma unroll
      for (int q = 0; q < DU; ++q) {
        const bool in = FULL || t0 + t + q < L;
        const float del = delta_of(vals.dv[i][q] + bias[r], &sl[q]);
        x[q] = in ? del : 0.0f;
        sl[q] = in ? sl[q] : 0.0f;
      }
      if constexpr (DU == 4) {
        *reinterpret_cast<float4*>(&sd[r][t]) = make_float4(x[0], x[DU > 1 ? 1 : 0], x[DU > 2 ? 2 : 0], x[DU > 3 ? 3 : 0]);
        if (DY) *reinterpret_cast<float4*>(&sg[r][t]) = make_float4(sl[0], sl[DU > 1 ? 1 : 0], sl[DU > 2 ? 2 : 0], sl[DU > 3 ? 3 : 0]);
      } else if constexpr (DU == 2) {
        *reinterpret_cast<float2*>(&sd[r][t]) = make_float2(x[0], x[DU > 1 ? 1 : 0]);
        if (DY) *reinterpret_cast<float2*>(&sg[r][t]) = make_float2(sl[0], sl[DU > 1 ? 1 : 0]);
      } else {
        sd[r][t] = x[0];
        if (DY) sg[r][t] = sl[0];
      }
    }
  }
};
// Rows [CB][RS] of the block leave as coalesced stores (steps past L are not written). When K
// divides NT a thread keeps one step t of rows r0, r0 + NT/K, …: its stores unroll with
// constant offsets from one address.
__device__ __forceinline__ void store_rows(float* __restrict__ dst, const float (*src)[RS], long long row0, int t0) {
  if constexpr (NT % K == 0) {
    const int r0 = threadIdx.x / K, t = threadIdx.x % K;
    if (L % K != 0 && t0 + t >= L) return;
    float* p = dst + row0 + (long long)r0 * L + t0 + t;
#pragma unroll
    for (int i = 0; i < (CB * K + NT - 1) / NT; ++i)
      if ((CB * K) % NT == 0 || r0 + i * (NT / K) < CB) p[(long long)i * (NT / K) * L] = src[r0 + i * (NT / K)][t];
  } else {
    for (int e = threadIdx.x; e < CB * K; e += NT) {
      const int r = e / K, t = e % K;
      if (t0 + t < L) dst[row0 + (long long)r * L + t0 + t] = src[r][t];
    }
  }
}
// Two sets of rows [2·CB][RS] (the first CB rows to dst0, the next to dst1, each from step t0)
// leave four steps a thread where rows allow (one 16-byte store; L is a multiple of 4, so a unit
// lies within L or past it): a quarter of the store instructions of store_rows twice, the same
// runs of memory.
__device__ __forceinline__ void store_two_rows(float* __restrict__ dst0, float* __restrict__ dst1, const float (*src)[RS], long long row0, int t0) {
  if constexpr (VEC && K % 4 == 0) {
#pragma unroll
    for (int i = 0; i < (2 * CB * K / 4 + NT - 1) / NT; ++i) {
      const int e = threadIdx.x + i * NT, r = e / (K / 4), t = e % (K / 4) * 4;
      if (((2 * CB * K / 4) % NT != 0 && e >= 2 * CB * K / 4) || (L % K != 0 && t0 + t >= L)) continue;
      float* const dst = r < CB ? dst0 + row0 + (long long)r * L : dst1 + row0 + (long long)(r - CB) * L;
      *reinterpret_cast<float4*>(dst + t0 + t) = *reinterpret_cast<const float4*>(&src[r][t]);
    }
  } else {
    store_rows(dst0, src, row0, t0);
    store_rows(dst1, src + CB, row0, t0);
  }
}
// @piece start
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int b = blockIdx.y, d0 = blockIdx.x * CB, g = d0 / PER;
  const int c = threadIdx.x / NSG * CT, j = threadIdx.x % NSG, d = d0 + c;  // (the first of CT channels)
  // With PAIRED, slot k of a thread's channels is channel c + (k ^ SW): odd lanes hold the two in
  // the other order, so that a sum over a channel's lanes can start by adding the partner's slot 1
  // to the lane's slot 0 (the same channel) with no select. Both kernels pair alike, and the
  // states the forward keeps for the backward are in slot order.
  const int SW = PAIRED ? j & 1 : 0;
  const long long row0 = ((long long)b * D + d0) * L, bc0 = ((long long)b * G + g) * N * L;
  float* sbias = copy_at(smem, NBUF);
  float* sdsk = sbias + CB;
  for (int e = threadIdx.x; e < NBUF * 2 * NSG * BS; e += NT) b_of(copy_at(smem, e / (2 * NSG * BS)))[e % (2 * NSG * BS)] = 0.0f;  // padded states stay 0
  for (int e = threadIdx.x; e < CB; e += NT) {
    sbias[e] = bias[(d0 + e) * BIAS_STRIDE];
    sdsk[e] = Dskip[(d0 + e) * D_STRIDE];
  }
