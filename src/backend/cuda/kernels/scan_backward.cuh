// selective_scan gradient (selective_scan.cc): chunks from the last, each chunk's states
// recomputed from the state the forward kept at its start, then walked backwards:
// dh_{t−1} = exp(Δ_t A) dh_t (+ C_{t−1} dy_{t−1}), giving du, d(delta) per step and the
// partials of dA, dB, dC, dD and dbias (summed later by scan_reduce.cuh).
// Pieces: store (an evict-last L2 policy for the dB/dC partials, before the kernel); body (the
// kernel's body, after scan_common.cuh's start).
//
// Defined before: the prelude and stage of scan_common.cuh with DY = true, DY_ROWS, DY_ONE,
// DLAST (the cotangent's form, kernels.h: ScanShape), DELTA_EACH = false, ROWS_U = 6; the
// kernel's signature (the op's operands, dy, dlast, hs, out, dA_part, dBC_part, dDb_part).
// @piece store
// An L2 policy that evicts what is stored with it last, and such a store (sm_80 and later;
// plain stores before).
__device__ __forceinline__ unsigned long long evict_last_policy() {
  unsigned long long pol = 0;
#if __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}
__device__ __forceinline__ void store_evict_last(float* p, float v, unsigned long long pol) {
#if __CUDA_ARCH__ >= 800
  asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(p), "f"(v), "l"(pol) : "memory");
#else
  *p = v;
#endif
}
__device__ __forceinline__ void store2_evict_last(float* p, float v0, float v1, unsigned long long pol) {  // p 8-byte aligned
#if __CUDA_ARCH__ >= 800
  asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;" ::"l"(p), "f"(v0), "f"(v1), "l"(pol) : "memory");
#else
  *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
#endif
}
// @piece body
  // Rows of each copy: u, Δ, its slope, dy (with DY_ROWS), du, d(delta); its terms [K][TSW]:
  // per step, each warp's dB (first NP) and dC sums over its channels.
  // Without dy rows (DY_ONE: the gradient of a plain sum, one value; else zero) dy is one value,
  // held in a register rather than staged and read as rows (two 16-byte shared loads a lane
  // every four steps fewer).
  const float dy_one = DY_ROWS ? 0.0f : DY_ONE ? dy[0] : 0.0f;
  // CT channels per thread (c, c + 1, …): each load of B and C serves them all, and their dB/dC
  // terms are summed in the thread before the shuffles. With PAIRED slots (kStart) each lane's
  // slot 0 is the channel whose du and dΔ it keeps, and the first level of their sum over the
  // channel's lanes (the lane pair at bit 0) needs no select. Shared rows of a channel sit RS
  // floats apart, so each slot reads them from one base address.
  float dh[CT][NS], dA[CT][NS], a2c[CT][NS], anc[CT][NS];
#pragma unroll
  for (int k = 0; k < CT; ++k)
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int n = j * NS + s, dk = d + (k ^ SW);
      anc[k][s] = n < N ? A[dk * N + n] : 0.0f;
      a2c[k][s] = anc[k][s] * 1.4426950408889634f;
      dh[k][s] = DLAST && n < N ? dlast[((long long)b * D + dk) * N + n] : 0.0f;
      dA[k][s] = 0.0f;
    }
  // The dB/dC terms of a step: 2·NS per lane, summed over the warp's channels by a
  // reduce-scatter over the channel bits of the lane index. A lane then keeps TKEPT of them
  // (from index t_kept); past 2·NS channel groups a warp's lanes hold copies (only the first store).
  constexpr int TV = 2 * NS, TKEPT = kept_count(TV, CW);
  const int t_kept = kept_index<TV, NSG, WL / 2>(), warp = threadIdx.x / WL;
  const bool t_store = (threadIdx.x % WL) / NSG < TV;
  float* dbc = dBC_part + ((long long)blockIdx.x * B + b) * 2 * N * L;
  // The partials are read again as soon as the kernel ends (the reduce, which lets them go):
  // asked to stay in L2, so that the reduce finds as many of them there as it can hold.
  const unsigned long long keep_in_l2 = evict_last_policy();
  // du/dΔ sum over the channel's lanes by a reduce-scatter of CT·RG values ([slot][step] of RG
  // steps): RG as many steps as a channel has lanes, at least 4 (the steps read at once), at
  // most K. With two slots the first level keeps slot 0 (the lane's own channel) and adds the
  // partner's slot 1 (the same channel); the rest is a reduce-scatter of RG values over the
  // other lane bits. A lane keeps RKEPT consecutive steps, of the same channel in every group:
  // its dD and dbias sum that one (c + r_ch).
  constexpr int RG = NSG / CT < 4 ? 4 : NSG / CT < K ? NSG / CT : K, RV = CT * RG;
  constexpr int RKEPT = PAIRED ? kept_count(RG, NSG / 2) : kept_count(RV, NSG);
  const int r_kept = PAIRED ? kept_index<RG, 2, NSG / 2>() : kept_index<RV, 1, NSG / 2>(), r_ch = PAIRED ? SW : r_kept / RG;
  float dD = 0.0f, dbias = 0.0f;  // of channel c + r_ch
  // Chunk kc is walked on copy kc & 1 of the staged rows and writes copy kc & 1 of the du, dΔ
  // rows and terms; then the next chunk's rows go into the other copy, and after the one
  // barrier of the chunk its outputs leave. (Each copy is written again two chunks later, after
  // a barrier that every read of it precedes.) Chunk kc's loads go into ld[kc & 1], issued two
  // chunks ahead of it (as in the forward).
  Stage st(u, delta, Bm, Cm, dy, row0, bc0);
  Stage::Vals ld[2];
  st.fetch(ld[(NCH - 1) & 1], (NCH - 1) * K);
  if (NCH > 1) st.fetch(ld[NCH & 1], (NCH - 2) * K);
  __syncthreads();  // bias, D and the dy rows are in shared memory
  st.store(ld[(NCH - 1) & 1], copy_at(smem, (NCH - 1) & 1), sbias, (NCH - 1) * K);
  if (NCH > 2) st.fetch(ld[(NCH - 1) & 1], (NCH - 3) * K);
  __syncthreads();
  // The states entering each chunk, loaded a chunk ahead (a global load's latency would stall
  // the recomputation that starts from it).
  float h_next[CT][NS];
  const float* const hs_thread = hs + hs_at(b, 0, d, j);  // chunk kc's group at kc·NSG·HG
  load_group(hs_thread + (long long)(NCH - 1) * NSG * HG, h_next);
  for (int kc0 = NCH - 1; kc0 >= 0; kc0 -= 2)  // in pairs, as the forward's rounds
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int kc = kc0 - q, t0 = kc * K, p = ((NCH - 1) & 1) ^ q;
    if (kc < 0) break;
    float* const cp = copy_at(smem, p);
    float (*su)[RS] = rows_at(cp, 0);
    float (*sd)[RS] = rows_at(cp, 1);
    float (*sg)[RS] = rows_at(cp, 2);
    float (*sy)[RS] = rows_at(cp, 3);
    float (*sou)[RS] = rows_at(cp, 4);  // du
    float (*sod)[RS] = rows_at(cp, 5);  // d(delta)
    const float* sb = b_of(cp);
    const float* sc = c_of(cp);
    float* red = terms_of(cp);
    // The chunk forward from its entering state: hv[t + 1] = h after step t, av[t] = a of step t.
    float hv[K + 1][CT][NS], av[K][CT][NS];
#pragma unroll
    for (int k = 0; k < CT; ++k)
#pragma unroll
      for (int s = 0; s < NS; ++s) hv[0][k][s] = h_next[k][s];
    if (kc > 0) load_group(hs_thread + (long long)(kc - 1) * NSG * HG, h_next);
#pragma unroll
    for (int t4 = 0; t4 < K; t4 += 4) {
      float dels[CT][4], us[CT][4];
#pragma unroll
      for (int k = 0; k < CT; ++k) {
        const float4 dq = *reinterpret_cast<const float4*>(&sd[c + (k ^ SW)][t4]), uq = *reinterpret_cast<const float4*>(&su[c + (k ^ SW)][t4]);
        dels[k][0] = dq.x; dels[k][1] = dq.y; dels[k][2] = dq.z; dels[k][3] = dq.w;
        us[k][0] = uq.x; us[k][1] = uq.y; us[k][2] = uq.z; us[k][3] = uq.w;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int t = t4 + q;
        float bs[NS];
        load_states(&sb[j * BS + t * NS], bs);
#pragma unroll
        for (int k = 0; k < CT; ++k) {
          const float du = dels[k][q] * us[k][q];
#pragma unroll
          for (int s = 0; s < NS; ++s) {
            av[t][k][s] = exp2_approx(dels[k][q] * a2c[k][s]);
            hv[t + 1][k][s] = fmaf(av[t][k][s], hv[t][k][s], du * bs[s]);
          }
        }
      }
    }
#pragma unroll
    for (int grp = K / RG - 1; grp >= 0; --grp) {
      float vu[RV], vd[RV];  // this lane's shares of du (before the skip) and dΔ: channel k's step tt at k·RG + tt
#pragma unroll
      for (int t4 = RG - 4; t4 >= 0; t4 -= 4) {
        const int tb = grp * RG + t4;
        float dys[CT][4], dels[CT][4], us[CT][4];
#pragma unroll
        for (int k = 0; k < CT; ++k) {
          const int ck = c + (k ^ SW);
          const float4 yq = DY_ROWS ? *reinterpret_cast<const float4*>(&sy[ck][tb]) : make_float4(dy_one, dy_one, dy_one, dy_one);
          const float4 dq = *reinterpret_cast<const float4*>(&sd[ck][tb]);
          const float4 uq = *reinterpret_cast<const float4*>(&su[ck][tb]);
          dys[k][0] = yq.x; dys[k][1] = yq.y; dys[k][2] = yq.z; dys[k][3] = yq.w;
          dels[k][0] = dq.x; dels[k][1] = dq.y; dels[k][2] = dq.z; dels[k][3] = dq.w;
          us[k][0] = uq.x; us[k][1] = uq.y; us[k][2] = uq.z; us[k][3] = uq.w;
        }
        float bv[4][NS], cv[4][NS];  // loaded before the step's terms are stored (they could alias)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          load_states(&sb[j * BS + (tb + q) * NS], bv[q]);
          load_states(&sc[j * BS + (tb + q) * NS], cv[q]);
        }
#pragma unroll
        for (int q = 3; q >= 0; --q) {
          const int t = tb + q, tt = t4 + q;
          const float* bs = bv[q];
          const float* cs = cv[q];
          float tB[NS], tC[NS];
#pragma unroll
          for (int k = 0; k < CT; ++k) {
            const float dyv = dys[k][q], del = dels[k][q], uu = us[k][q], du = del * uu;
            float gB = 0.0f, pA = 0.0f;
#pragma unroll
            for (int s = 0; s < NS; ++s) {
              const float gg = fmaf(cs[s], dyv, dh[k][s]);
              tC[s] = k == 0 ? hv[t + 1][k][s] * dyv : fmaf(hv[t + 1][k][s], dyv, tC[s]);
              tB[s] = k == 0 ? gg * du : fmaf(gg, du, tB[s]);
              gB = fmaf(gg, bs[s], gB);
              dh[k][s] = gg * av[t][k][s];
              const float p = dh[k][s] * hv[t][k][s];
              pA = fmaf(p, anc[k][s], pA);
              dA[k][s] = fmaf(p, del, dA[k][s]);
            }
            vu[k * RG + tt] = del * gB;
            vd[k * RG + tt] = fmaf(uu, gB, pA);
          }
          // The step's dB/dC terms summed over the warp's channels; the block adds the warps' sums below.
          float tv[TV];
#pragma unroll
          for (int s = 0; s < NS; ++s) {
            tv[s] = tB[s];
            tv[NS + s] = tC[s];
          }
          reduce_scatter<TV, NSG, WL / 2>(tv);
          if (t_store) {
#pragma unroll
            for (int i = 0; i < TKEPT; ++i) {
              const int idx = t_kept + i;
              red[t * TSW + warp * 2 * NP + (idx / NS) * NP + j * NS + idx % NS] = tv[i];
            }
          }
        }
      }
      if constexpr (PAIRED) {
#pragma unroll
        for (int i = 0; i < RG; ++i) {
          vu[i] += __shfl_xor_sync(MASK, vu[i + (PAIRED ? RG : 0)], 1);
          vd[i] += __shfl_xor_sync(MASK, vd[i + (PAIRED ? RG : 0)], 1);
        }
        reduce_scatter<RG, 2, NSG / 2>(vu);
        reduce_scatter<RG, 2, NSG / 2>(vd);
      } else {
        reduce_scatter<RV, 1, NSG / 2>(vu);
        reduce_scatter<RV, 1, NSG / 2>(vd);
      }
      if (j < RV) {  // past RV lanes (more lanes than values) the upper lanes hold copies
        const int cc = c + r_ch;
#pragma unroll
        for (int i = 0; i < RKEPT; ++i) {
          const int t = grp * RG + (r_kept + i) % RG;
          const float dyv = DY_ROWS ? sy[cc][t] : dy_one, ddel = vd[i] * sg[cc][t];
          sou[cc][t] = fmaf(dyv, sdsk[cc], vu[i]);
          sod[cc][t] = ddel;
          dD = fmaf(dyv, su[cc][t], dD);
          dbias += ddel;
        }
      }
    }
    if (kc > 0) {  // the next chunk's rows into the other copy
      st.store(ld[p ^ 1], copy_at(smem, p ^ 1), sbias, t0 - K);
      if (kc > 2) st.fetch(ld[p ^ 1], t0 - 3 * K);
    }
    __syncthreads();
    store_two_rows(out, out + NU, sou, row0, t0);  // du, then d(delta) (rows 4 and 5: sod = sou + CB)
    // The block's dB/dC for this chunk: each (step, kind, state) the sum of the warps' sums in
    // warp order, one partial per block. A thread takes two steps of a term (consecutive threads:
    // consecutive steps, so the partials' rows are written in 32-byte runs), one 8-byte store
    // (with VEC: L is even; half the store instructions of one step a thread).
    constexpr int TS = VEC ? 2 : 1, TU = K * 2 * NP / TS;  // steps a thread, units
#pragma unroll
    for (int i = 0; i < (TU + NT - 1) / NT; ++i) {
      const int o = threadIdx.x + i * NT, t = o % (K / TS) * TS, o2 = o / (K / TS), kind = o2 / NP, n = o2 % NP;
      if ((TU % NT == 0 || o < TU) && (NP == N || n < N) && (L % K == 0 || t0 + t < L)) {
        float sum[TS];
#pragma unroll
        for (int q = 0; q < TS; ++q) {
          const float* x = &red[(t + q) * TSW + o2];
          sum[q] = x[0];
#pragma unroll
          for (int w = 1; w < WARPS; ++w) sum[q] += x[w * 2 * NP];
        }
        float* const at = dbc + (long long)(kind * N + n) * L + t0 + t;
        if constexpr (TS == 2) store2_evict_last(at, sum[0], sum[TS - 1], keep_in_l2);
        else store_evict_last(at, sum[0], keep_in_l2);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < CT; ++k)
#pragma unroll
    for (int s = 0; s < NS; ++s)
      if (j * NS + s < N) dA_part[((long long)b * D + d + (k ^ SW)) * N + j * NS + s] = dA[k][s];
  // dD and dbias of each channel over its lanes (a lane's sums are of channel c + r_ch).
#pragma unroll
  for (int k = 0; k < CT; ++k) {
    float xd = r_ch == k && j < RV ? dD : 0.0f, xb = r_ch == k && j < RV ? dbias : 0.0f;
#pragma unroll
    for (int o = 1; o < NSG; o *= 2) {
      xd += __shfl_xor_sync(MASK, xd, o);
      xb += __shfl_xor_sync(MASK, xb, o);
    }
    if (j == 0) {
      dDb_part[(long long)b * D + d + k] = xd;
      dDb_part[(long long)B * D + (long long)b * D + d + k] = xb;
    }
  }
}
