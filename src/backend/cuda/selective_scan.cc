// CUDA kernels for selective_scan and its gradient (ops.def): states in registers, time walked
// in chunks, only the states entering each chunk stored.
//
// Work split. A thread owns NS states of CT channels of one batch and walks all of L; a
// channel's states sit in NSG consecutive lanes (NSG = ⌈N/NS⌉ rounded up to a power of two); a
// block holds CB channels of one batch and one group of B/C. Both kernels take NS = 2 (N ≤ 64)
// and two channels per thread (CT = 2: each load of B and C serves both), in 128-thread blocks
// (at most 168 registers, three blocks per SM; at b 8, d 1536 that is every thread of the op
// resident at once). At Mamba's sizes
// that is plenty of parallelism without splitting time across threads (b 8, d 1536, n 16: 49k
// threads in either kernel), so every state-step costs one exp in the forward and one in the backward.
// (Issue 7 asked for a chunked parallel scan over time; the first kernels here were one: local
// chunk scans, an associative combine, an output pass. They computed exp(Δ·A) four times per
// state-step and ran at 16.8× the memory floor. Time-parallel chunks only pay where B·D·N is
// too small to fill the GPU.)
//
// Chunks of KC = 8 steps. A block stages K steps (16 in the forward, 8 in the backward) of u,
// delta (→ Δ: bias and softplus applied once per element here), B, C (and dy) in shared memory
// with coalesced 16-byte loads. In the backward, shared memory holds two copies of the staged
// rows: a chunk computes on one while its end stores the next chunk's rows into the other, so
// one barrier a chunk (chunks in pairs, so that each copy's addresses are compile-time
// offsets). The forward holds four and stores a round's rows two rounds ahead: instead of a
// barrier, each warp waits at a round's end for every warp to have ended the round before (an
// mbarrier's phase), so the block's warps run up to a round apart and a late warp holds the
// others up only when it falls a whole round behind (0.1241 → 0.1208–0.1220 ms at b 8, d 1536;
// with no barrier at all, results wrong, 0.1189). The loads go into registers two rounds before
// their rows are stored (one round of compute left the stores waiting on memory).
// Then each thread walks them:
//   forward:  a = 2^(Δ·A·log2 e) (one MUFU op), h = a·h + Δ·u·B, y += C·h; y sums over the
//             channel's lanes by a reduce-scatter (each lane ends with its share of the steps)
//             one round late, while the next round computes, plus D·u, and leaves from the
//             registers (a lane's consecutive steps: 16-byte stores; through shared memory as
//             rows it took a barrier more). Odd lanes hold their two channels in the other
//             order, so the reduce-scatter's first level needs no select (64.4 M → 61.2 M
//             instructions, 0.1194–0.1244 → 0.1177–0.1182 ms). At each chunk start the thread
//             stores the states entering it (B·D·⌈L/KC⌉·NSG·NS floats in thread groups, one
//             16-byte store a lane: see hs_at; kept for the backward when the program has one),
//             and after the last step the last state.
//   backward: chunks from the last: the entering state is loaded, the chunk recomputed forward
//             with every h and a kept in registers, then walked backwards with
//             g = dh + C·dy, dh ← g·a (a dy of one value, the gradient of a plain sum, held in
//             a register). du and dΔ sum over the channel's lanes (reduce-scatter),
//             get the D skip and the softplus slope, and leave as rows. dB and dC sum over
//             channels: the thread's CT channels first, then each step's terms over the warp's
//             channels by a reduce-scatter
//             (shuffles), into a small shared tile; after the chunk the block adds the warps'
//             sums in warp order, one partial per block (a tile of every channel's terms, summed
//             by the block, kept the SM's shared-memory path busier: 0.328 → 0.298 ms);
//             dA, dD and dbias are per-thread sums over time, one partial per sequence.
//   reduce:   the partials summed in a fixed order into dA, dB, dC, dD and dbias.
// No atomics: every sum has a fixed order, so results do not depend on scheduling.
//
// The shared pieces (the split, the prelude, the staging, the kernels' start, the scratch
// layout and the reduce kernel) are in selective_scan_common.cc.
#include <cstdlib>
#include <string>

#include "backend/cuda/selective_scan_common.h"

namespace tg::backend::cuda {

using namespace scan_detail;

Launch scan_forward_kernel(const std::string& name, const ScanShape& s, bool keep) {
  const Split sp = forward_split(s);
  Launch l = scan_launch(name, s, sp, false, kForwardBuffers);
  std::string src = "// selective_scan forward: y and the last state" + std::string(keep ? ", the states entering each chunk kept" : "") +
                    " (selective_scan.cc)\n" + prelude(s, sp, kForwardSteps, kForwardBuffers);
  src += "constexpr bool DY = false, DY_ROWS = false, DELTA_EACH = true, KEEP = " + std::string(keep ? "true" : "false") + ";\nconstexpr int ROWS_U = 2;\n";
  src += kStage;
  src += R"(// A barrier of the block's warps in shared memory: each warp's lane 0 arrives once a round,
// after the warp's writes; a phase completes when all WARPS have arrived. (Before sm_80, which
// has no mbarrier, the wait is a __syncthreads, a stronger condition, and init and arrival are
// nothing; the wait's condition is the same for all threads.)
__device__ __forceinline__ void bar_init(unsigned long long* bar, unsigned count) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(bar)), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void bar_arrive(unsigned long long* bar) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
#endif
}
__device__ __forceinline__ void bar_wait(unsigned long long* bar, unsigned parity) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "{\n .reg .pred done;\n WAIT:\n mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n @!done bra WAIT;\n}" ::"r"(
          (unsigned)__cvta_generic_to_shared(bar)),
      "r"(parity)
      : "memory");
#else
  __syncthreads();
#endif
}
// y's sum over a channel's lanes (a reduce-scatter: each lane keeps KEPT steps of one channel).
// With PAIRED slots the level at lane bit 0 adds the partner's slot 1 (the same channel as this
// lane's slot 0) with no select; the rest is a reduce-scatter of the K steps.
__device__ __forceinline__ void sum_y(float (&yv)[CT * K]) {
  if constexpr (PAIRED) {
#pragma unroll
    for (int i = 0; i < K; ++i) yv[i] += __shfl_xor_sync(MASK, yv[i + (CT == 2 ? K : 0)], 1);
    reduce_scatter<K, 2, NSG / 2>(yv);
  } else {
    reduce_scatter<CT * K, 1, NSG / 2>(yv);
  }
}
// KEPT steps of y from step t (this lane's share, summed) with the D skip, from the registers:
// 16 bytes at a time where rows allow (a warp's stores cover whole 32-byte sectors).
template <int KEPT>
__device__ __forceinline__ void store_y(float* __restrict__ dst, int t, const float (&yv)[CT * K], const float (&yu)[KEPT], float dsk) {
  if constexpr (VEC && KEPT % 4 == 0) {
#pragma unroll
    for (int i = 0; i < KEPT; i += 4)
      if (FULL || t + i < L)  // L is a multiple of 4: a group is all in or all out
        *reinterpret_cast<float4*>(dst + i) =
            make_float4(fmaf(dsk, yu[i], yv[i]), fmaf(dsk, yu[i + 1], yv[i + 1]), fmaf(dsk, yu[i + 2], yv[i + 2]), fmaf(dsk, yu[i + 3], yv[i + 3]));
  } else {
#pragma unroll
    for (int i = 0; i < KEPT; ++i)
      if (FULL || t + i < L) dst[i] = fmaf(dsk, yu[i], yv[i]);
  }
}
)";
  // kBlocksPerSm, as the backward (left to itself ptxas took 128 registers and spilled).
  src += "extern \"C\" __global__ void __launch_bounds__(NT, " + std::to_string(kBlocksPerSm) + ") " + name + "(" + kOperands +
         "float* __restrict__ out, float* __restrict__ hs) {\n";
  src += kStart;
  src += R"(  unsigned long long* sbar = reinterpret_cast<unsigned long long*>(sdsk + CB + ((NBUF * COPY + 2 * CB) & 1));  // the round barrier (8-byte aligned)
  // CT channels per thread (c, c + 1, …) share each load of B and C; with PAIRED slots (kStart)
  // the first level of y's sum over the channel's lanes needs no select (32 a round fewer).
  float h[CT][NS], a2c[CT][NS];
#pragma unroll
  for (int k = 0; k < CT; ++k)
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      h[k][s] = 0.0f;
      a2c[k][s] = j * NS + s < N ? A[(d + (k ^ SW)) * N + j * NS + s] * 1.4426950408889634f : 0.0f;  // A·log2 e (0 past N)
    }
  // Round r computes on copy r % NBUF of the staged rows while its end stores round r + 2's rows
  // into copy (r + 2) % NBUF; the rows of rounds 0 and 1 are stored before the first. Round r's
  // loads go into ld[r & 1], issued two rounds before its rows are stored (one round of compute
  // left the staging stores waiting on memory).
  Stage st(u, delta, Bm, Cm, nullptr, row0, bc0);
  Stage::Vals ld[2];
  st.fetch(ld[0], 0);
  if (NR > 1) st.fetch(ld[1], K);
  if (threadIdx.x == 0) bar_init(sbar, (NT + 31) / 32);
  __syncthreads();  // bias and D are in shared memory
  st.store(ld[0], copy_at(smem, 0), sbias, 0);
  if (NR > 2) st.fetch(ld[0], 2 * K);
  if (NR > 1) {
    st.store(ld[1], copy_at(smem, 1), sbias, K);
    if (NR > 3) st.fetch(ld[1], 3 * K);
  }
  __syncthreads();
  // y sums over the channel's lanes one round late: round r's reduce-scatter runs while round
  // r + 1 computes (independent work the compiler interleaves with it; at the round's end its
  // shuffles' latency was exposed). A lane keeps KEPT consecutive steps of one channel (KEPT
  // divides K, the first a multiple of it), from i_first; their u for the D skip is read in the
  // round itself (its copy of the rows is overwritten during the next).
  float* const hs_thread = KEEP ? hs + hs_at(b, 0, d, j) : nullptr;  // the states entering chunk kc at kc·NSG·HG
  constexpr int KEPT = kept_count(CT * K, NSG);
  const int i_first = PAIRED ? kept_index<K, 2, NSG / 2>() : kept_index<CT * K, 1, NSG / 2>();
  const int cc = c + (PAIRED ? SW : i_first / K), tf = i_first % K;
  const bool y_lane = j < CT * K;  // past CT·K lanes (more lanes than values) the upper lanes hold copies
  const float dsk = sdsk[cc];
  float yv[CT * K], yu[KEPT];  // the last round's partial sums (channel k's step t at k·K + t) and u
#pragma unroll
  for (int i = 0; i < CT * K; ++i) yv[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < KEPT; ++i) yu[i] = 0.0f;
  // Rounds in groups of NBUF, so that the copy a round works on is known when the kernel is
  // compiled: its addresses are then constant offsets from shared memory, as with one copy
  // (with the copy chosen at run time the addresses were found again every round: +9%
  // instructions).
  for (int r0 = 0; r0 < NR; r0 += NBUF)
#pragma unroll
  for (int p = 0; p < NBUF; ++p) {
    const int r = r0 + p, t0 = r * K;
    if (r >= NR) break;
    float* const cp = copy_at(smem, p);
    float (*su)[RS] = rows_at(cp, 0);
    float (*sd)[RS] = rows_at(cp, 1);
    const float* sb = b_of(cp);
    const float* sc = c_of(cp);
    sum_y(yv);  // the last round's
    float yn[CT * K];  // this round's
#pragma unroll
    for (int t4 = 0; t4 < K; t4 += 4) {
      // The state entering each chunk of KC steps, for the backward.
      if (KEEP && t4 % KC == 0 && (FULL || t0 + t4 < L)) store_group(hs_thread + (long long)((t0 + t4) / KC) * NSG * HG, h);
      float dvs[CT][4], uvs[CT][4];
#pragma unroll
      for (int k = 0; k < CT; ++k) {
        const float4 dv = *reinterpret_cast<const float4*>(&sd[c + (k ^ SW)][t4]);
        const float4 uv = *reinterpret_cast<const float4*>(&su[c + (k ^ SW)][t4]);
        dvs[k][0] = dv.x; dvs[k][1] = dv.y; dvs[k][2] = dv.z; dvs[k][3] = dv.w;
        uvs[k][0] = uv.x; uvs[k][1] = uv.y; uvs[k][2] = uv.z; uvs[k][3] = uv.w;
      }
      // The four steps' factors and inputs first (independent of h), then the recurrence.
      float av[CT][4][NS], xv[CT][4][NS], cv[4][NS];
#pragma unroll
      for (int q = 0; q < 4; q += 2) {
        float bs[2][NS];
        load_two_steps(&sb[j * BS + (t4 + q) * NS], bs[0], bs[1]);
        load_two_steps(&sc[j * BS + (t4 + q) * NS], cv[q], cv[q + 1]);
#pragma unroll
        for (int k = 0; k < CT; ++k)
#pragma unroll
          for (int p = 0; p < 2; ++p) {
            const float du = dvs[k][q + p] * uvs[k][q + p];
#pragma unroll
            for (int s = 0; s < NS; ++s) {
              av[k][q + p][s] = exp2_approx(dvs[k][q + p] * a2c[k][s]);
              xv[k][q + p][s] = du * bs[p][s];
            }
          }
      }
#pragma unroll
      for (int k = 0; k < CT; ++k)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float y = 0.0f;
#pragma unroll
          for (int s = 0; s < NS; ++s) {
            h[k][s] = fmaf(av[k][q][s], h[k][s], xv[k][q][s]);
            y = fmaf(cv[q][s], h[k][s], y);
          }
          yn[k * K + t4 + q] = y;
        }
    }
    if (r > 0 && y_lane) store_y(out + row0 + (long long)cc * L + t0 - K + tf, t0 - K + tf, yv, yu, dsk);
#pragma unroll
    for (int i = 0; i < CT * K; ++i) yv[i] = yn[i];
#pragma unroll
    for (int i = 0; i < KEPT; ++i) yu[i] = su[cc][tf + i];
    // Round r + 2's rows into copy (r + 2) % NBUF once every warp is done with round r − 1
    // (the phase that also says that round r + 1's rows are in), then this warp's arrival.
    if (r > 0) bar_wait(sbar, (p + NBUF - 1) & 1);
    if (r + 2 < NR) {
      st.store(ld[p & 1], copy_at(smem, (p + 2) % NBUF), sbias, t0 + 2 * K);
      if (r + 4 < NR) st.fetch(ld[p & 1], t0 + 4 * K);
    }
    __syncwarp(MASK);
    if (threadIdx.x % 32 == 0) bar_arrive(sbar);
  }
  sum_y(yv);  // the last round's
  if (y_lane) store_y(out + row0 + (long long)cc * L + (NR - 1) * K + tf, (NR - 1) * K + tf, yv, yu, dsk);
#pragma unroll
  for (int k = 0; k < CT; ++k)
#pragma unroll
    for (int s = 0; s < NS; ++s)
      if (j * NS + s < N) out[NU + ((long long)b * D + d + (k ^ SW)) * N + j * NS + s] = h[k][s];
}
)";
  l.source = std::move(src);
  return l;
}

Launch scan_backward_kernel(const std::string& name, const ScanShape& s) {
  const Split sp = backward_split(s);
  Launch l = scan_launch(name, s, sp, true);
  std::string src = "// selective_scan gradient: chunks from the last, recomputed forward, walked backwards (selective_scan.cc)\n" +
                    prelude(s, sp, kChunk);
  // dy staged as rows (DY_ROWS), or one value (DY_ONE: the gradient of a plain sum) or zero
  // held in a register; the last state's cotangent read (DLAST) or zero.
  const bool rows = s.dy == ScanShape::Dy::kRows;
  src += std::string("constexpr bool DY = true, DY_ROWS = ") + (rows ? "true" : "false") + ", DY_ONE = " +
         (s.dy == ScanShape::Dy::kOne ? "true" : "false") + ", DLAST = " + (s.dlast ? "true" : "false") +
         ", DELTA_EACH = false;\nconstexpr int ROWS_U = 6;\n";
  src += kStage;
  // The recomputed chunk's states and factors keep many registers live; capped at 168 (three
  // 128-thread blocks per SM, so b 8, d 1536 runs in one wave) it takes 163 at N = 16, no spill.
  // TG_CUDA_SCAN_BLOCKS overrides the blocks per SM (tuning).
  int min_blocks = kBlocksPerSm;
  if (const char* env = std::getenv("TG_CUDA_SCAN_BLOCKS"); env != nullptr && std::atoi(env) > 0) min_blocks = std::atoi(env);
  src += R"(// An L2 policy that evicts what is stored with it last, and such a store (sm_80 and later;
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
)";
  src += "extern \"C\" __global__ void __launch_bounds__(NT, " + std::to_string(min_blocks) + ") " + name + "(" + kOperands +
         "const float* __restrict__ dy, const float* __restrict__ dlast, const float* __restrict__ hs, float* __restrict__ out, "
         "float* __restrict__ dA_part, float* __restrict__ dBC_part, float* __restrict__ dDb_part) {\n";
  src += kStart;
  src += R"(  // Rows of each copy: u, Δ, its slope, dy (with DY_ROWS), du, d(delta); its terms [K][TSW]:
  // per step, each warp's dB (first NP) and dC sums over its channels.
  // Without dy rows (DY_ONE: the gradient of a plain sum, one value; else zero) dy is one value,
  // held in a register. (Rows set to it once and read as rows took two 16-byte shared loads a
  // lane every four steps: the backward of the sum-loss benchmark 0.2500-0.2524 ms against
  // 0.2428-0.2457 held; with dy as rows, as in a model, nothing changes.)
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
  // asked to stay in L2 (it holds about half of them at b 8, d 1536; the reduce 0.0188 → 0.0168 ms).
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
)";
  l.source = std::move(src);
  return l;
}
}  // namespace tg::backend::cuda
