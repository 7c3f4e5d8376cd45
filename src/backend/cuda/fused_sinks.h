// One CUDA kernel for an elementwise group that ends in reduction sinks (passes/fusion.h):
// the group's values are computed once, its elementwise outputs stored, and each sink's sum
// accumulated on the way, so the summed value never touches memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/kernels.h"
#include "ir/graph.h"
#include "passes/fusion.h"

namespace tg::backend::cuda {

/// One kernel for an elementwise group whose Sum nodes are reduction sinks (fusion.h): the
/// group's elementwise outputs are stored as in fused_group_kernel, and each sink's output
/// (dense, numel(sink) elements) receives, deterministically, the sum over the group's
/// rows (flat index / numel(sink)) of the summed value. Params: one `const T*` per external
/// input (group_inputs order), one `T*` per non-sink output (group.outputs order, sinks
/// excluded), one `float*` per sink (in group.nodes order). No trailing n.
///
/// Sinks of one group may have different widths (a bias gradient [C] and a scalar sum of the
/// same [N, C] group): the widths of valid sinks are products of trailing extents, so each
/// divides the widest. Throws Error for a group that is not elementwise, a Sum that is not a
/// reduction sink of the group (passes::reduction_sink, input in the group), or stride lists
/// that do not match the inputs.
///
/// Like the chunked reductions of kernels_reduce.cc, the kernel keeps its partial sums and
/// arrival counters in __device__ arrays of its own module: two concurrent launches of one
/// loaded module would share them.
Launch fused_sinks_kernel(const ir::Graph& graph, const passes::KernelGroup& group,
                          const std::vector<std::vector<int64_t>>& input_strides, const std::string& name);

/// The launch geometry's knobs (defaults are what fused_sinks_kernel uses); for tests and
/// tuning (CudaSinks.DISABLED_TuningSweep sweeps them). About one wave of blocks is best: more
/// blocks only add partials to merge. Rows unroll by 2: unrolling by 4 costs a group with
/// several inputs and sinks more registers a thread than it gains in loads in flight.
struct SinkTuning {
  int rows_per_thread = 8;   // at least this many rows of the [rows, L] view per thread
  int target_blocks = 1024;  // and no more blocks than this unless rows_per_thread forces it
  int unroll = 2;            // rows whose loads a thread issues together
};
Launch fused_sinks_kernel(const ir::Graph& graph, const passes::KernelGroup& group,
                          const std::vector<std::vector<int64_t>>& input_strides, const std::string& name,
                          const SinkTuning& tuning);

}  // namespace tg::backend::cuda
