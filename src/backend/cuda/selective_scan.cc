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
// (A time-parallel scan — local chunk scans, an associative combine, an output pass — computes
// exp(Δ·A) several times per state-step; it only pays where B·D·N is too small to fill the GPU.)
//
// Chunks of KC = 8 steps. A block stages K steps (16 in the forward, 8 in the backward) of u,
// delta (→ Δ: bias and softplus applied once per element here), B, C (and dy) in shared memory
// with coalesced 16-byte loads. In the backward, shared memory holds two copies of the staged
// rows: a chunk computes on one while its end stores the next chunk's rows into the other, so
// one barrier a chunk (chunks in pairs, so that each copy's addresses are compile-time
// offsets). The forward holds four and stores a round's rows two rounds ahead: instead of a
// barrier, each warp waits at a round's end for every warp to have ended the round before (an
// mbarrier's phase), so the block's warps run up to a round apart and a late warp holds the
// others up only when it falls a whole round behind, where a block-wide barrier would stall
// every warp on the slowest each round. The loads go into registers two rounds before their
// rows are stored (one round of compute is too little to hide the loads' latency).
// Then each thread walks them:
//   forward:  a = 2^(Δ·A·log2 e) (one MUFU op), h = a·h + Δ·u·B, y += C·h; y sums over the
//             channel's lanes by a reduce-scatter (each lane ends with its share of the steps)
//             one round late, while the next round computes, plus D·u, and leaves from the
//             registers (a lane's consecutive steps: 16-byte stores; through shared memory as
//             rows would take a barrier more). Odd lanes hold their two channels in the other
//             order, so the reduce-scatter's first level needs no select. At each chunk start the thread
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
//             sums in warp order, one partial per block (fewer shared-memory accesses than a
//             tile of every channel's terms summed by the block);
//             dA, dD and dbias are per-thread sums over time, one partial per sequence.
//   reduce:   the partials summed in a fixed order into dA, dB, dC, dD and dbias.
// No atomics: every sum has a fixed order, so results do not depend on scheduling.
//
// The shared pieces (the split, the prelude, the staging, the kernels' start, the scratch
// layout and the reduce kernel) are in selective_scan_common.cc.
//
// The device code is in kernels/scan_common.cuh, scan_forward.cuh, scan_backward.cuh and
// scan_reduce.cuh.
#include <cstdlib>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "backend/cuda/selective_scan_common.h"

namespace tg::backend::cuda {

using namespace scan_detail;

Launch scan_forward_kernel(const std::string& name, const ScanShape& s, bool keep) {
  const Split sp = forward_split(s);
  Launch l = scan_launch(name, s, sp, false, kForwardBuffers);
  std::string src = "// selective_scan forward: y and the last state" +
                    std::string(keep ? ", the states entering each chunk kept" : "") +
                    " (selective_scan.cc)\n" + prelude(s, sp, kForwardSteps, kForwardBuffers);
  src += "constexpr bool DY = false, DY_ROWS = false, DELTA_EACH = true, KEEP = " +
         std::string(keep ? "true" : "false") + ";\nconstexpr int ROWS_U = 2;\n";
  src += kernel_source("scan_common.cuh", "stage");
  src += kernel_source("scan_forward.cuh", "barrier");
  // kBlocksPerSm, as the backward (left to itself ptxas caps registers too low and spills).
  src += "extern \"C\" __global__ void __launch_bounds__(NT, " + std::to_string(kBlocksPerSm) + ") " + name +
         "(" + kOperands + "float* __restrict__ out, float* __restrict__ hs) {\n";
  src += kernel_source("scan_common.cuh", "start");
  src += kernel_source("scan_forward.cuh", "body");
  l.source = std::move(src);
  return l;
}

Launch scan_backward_kernel(const std::string& name, const ScanShape& s) {
  const Split sp = backward_split(s);
  Launch l = scan_launch(name, s, sp, true);
  std::string src =
      "// selective_scan gradient: chunks from the last, recomputed forward, walked backwards "
      "(selective_scan.cc)\n" +
      prelude(s, sp, kChunk);
  // dy staged as rows (DY_ROWS), or one value (DY_ONE: the gradient of a plain sum) or zero
  // held in a register; the last state's cotangent read (DLAST) or zero.
  const bool rows = s.dy == ScanShape::Dy::kRows;
  src += std::string("constexpr bool DY = true, DY_ROWS = ") + (rows ? "true" : "false") +
         ", DY_ONE = " + (s.dy == ScanShape::Dy::kOne ? "true" : "false") +
         ", DLAST = " + (s.dlast ? "true" : "false") + ", DELTA_EACH = false;\nconstexpr int ROWS_U = 6;\n";
  src += kernel_source("scan_common.cuh", "stage");
  // The recomputed chunk's states and factors keep many registers live; the cap of 168 (three
  // 128-thread blocks per SM, so b 8, d 1536 runs in one wave) still fits N = 16 without spilling.
  // ScanShape::blocks_per_sm overrides the blocks per SM (tuning sweeps).
  const int min_blocks = s.blocks_per_sm > 0 ? s.blocks_per_sm : kBlocksPerSm;
  src += kernel_source("scan_backward.cuh", "store");
  src += "extern \"C\" __global__ void __launch_bounds__(NT, " + std::to_string(min_blocks) + ") " + name +
         "(" + kOperands +
         "const float* __restrict__ dy, const float* __restrict__ dlast, const float* __restrict__ hs, "
         "float* __restrict__ out, "
         "float* __restrict__ dA_part, float* __restrict__ dBC_part, float* __restrict__ dDb_part) {\n";
  src += kernel_source("scan_common.cuh", "start");
  src += kernel_source("scan_backward.cuh", "body");
  l.source = std::move(src);
  return l;
}
}  // namespace tg::backend::cuda
