// CUDA C++ generation from the op table: every elementwise row's expression column (valid
// C++ and CUDA by ops.def's rule) is pasted into device code, so no elementwise op is written
// twice. This is the seed of the CUDA backend's code generator (issue 5).
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/fusion.h"

namespace tg::backend::cuda {

/// The expression column of an elementwise row of ops.def, verbatim ("" for other ops).
const char* op_expression(ir::Op op);

/// A kernel `extern "C" __global__ void <name>(const float* a, const float* b, float* out, long long n)`
/// computing out[i] = <op>(a[i][, b[i]]) in f32 for a unary or binary float row.
std::string elementwise_kernel(ir::Op op, const std::string& name);

/// One kernel for an elementwise kernel group (passes/fusion.h; reduction sinks not yet):
/// one thread per element of the group's shape, every value kept in registers, only the
/// group's outputs stored. Parameters, in order: one `const <type>*` per external input (in
/// `inputs` order), then one `<type>*` per output (group.outputs order), then `long long n`.
/// `input_strides[k]` gives input k's element strides over the group's shape (0 = broadcast);
/// shapes and strides are baked in as constants. Types: f32 → float, i32 → int (wrapping
/// + − ·, as on the CPU), bool → unsigned char.
struct GroupKernel {
  std::string name, source;
  std::vector<int32_t> inputs;  // external input node ids, parameter order
};
GroupKernel fused_group_kernel(const ir::Graph& graph, const passes::KernelGroup& group,
                               const std::vector<std::vector<int64_t>>& input_strides, const std::string& name);
/// The external inputs of a group, in the order fused_group_kernel takes them.
std::vector<int32_t> group_inputs(const ir::Graph& graph, const passes::KernelGroup& group);

}  // namespace tg::backend::cuda
