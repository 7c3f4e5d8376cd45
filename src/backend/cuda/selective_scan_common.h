// What the two selective_scan kernels of selective_scan.cc share (selective_scan_common.cc):
// the work split, the generated prelude, the staging of a chunk's rows and the kernels' start.
// Internal to the cuda backend.
#pragma once
#include <cstdint>
#include <string>

#include "backend/cuda/kernels.h"

namespace tg::backend::cuda::scan_detail {

constexpr int kChunk = 8;  // KC: steps per chunk (the backward keeps KC·NS states and factors in registers)
constexpr int kForwardSteps = 16;  // steps the forward stages at once (two chunks: half the barriers)
constexpr int kPerLane = 4;        // the most states a thread holds (one float4 of B or C per step)
constexpr int kBuffers =
    2;  // the backward's copies of the staged rows in shared memory (one barrier a chunk)
constexpr int kForwardBuffers =
    4;  // the forward's: rows stored two rounds ahead, its warps up to a round apart
// The forward's rounds go in groups of kForwardBuffers, so a round's parity (its loads' register
// set, its barrier phase) is that of its place in the group only when the count is even.
static_assert(kForwardBuffers % 2 == 0 && kForwardBuffers >= 4,
              "the forward stores rows two rounds ahead into copies of an even count");
constexpr int kBlocksPerSm =
    3;  // both kernels' launch bounds: three 128-thread blocks an SM (168 registers; b 8, d 1536 in one wave)

/// A kernel's thread split: ns states per thread, lanes per channel, channels per block.
struct Split {
  int64_t ns = 1, lanes = 1, cb = 1, blocks = 1, ct = 1;  // ct: channels per thread
  int64_t threads() const { return cb * lanes / ct; }
};
Split forward_split(const ScanShape& s);
Split backward_split(const ScanShape& s);

/// Device code shared by both kernels is in kernels/scan_common.cuh: the pieces "stage" (the
/// Stage of a chunk's rows; needs DY, DY_ROWS, DELTA_EACH defined first) and "start" (the
/// kernels' first statements: where a thread stands, the shared-memory layout, the block's bias
/// and D; each kernel reads its channels' A itself).
/// Constants and device helpers of every kernel; k_stage: the steps a block stages at once,
/// nbuf: the copies of the staged rows in shared memory.
std::string prelude(const ScanShape& s, const Split& sp, int k_stage, int nbuf = kBuffers);
/// The op's operands, first in both kernels' parameters.
extern const char* const kOperands;
/// Grid, block and dynamic shared memory of a kernel of this split (nbuf copies of the staged
/// rows, then bias, D and, in the forward, an 8-byte mbarrier).
Launch scan_launch(const std::string& name, const ScanShape& s, const Split& sp, bool grad,
                   int nbuf = kBuffers);

}  // namespace tg::backend::cuda::scan_detail
