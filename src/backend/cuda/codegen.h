// CUDA C++ generation from the op table: every elementwise row's expression column (valid
// C++ and CUDA by ops.def's rule) is pasted into device code, so no elementwise op is written
// twice.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/kernels.h"
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
/// entries after the inputs' , when present, are the stored outputs' strides (dense
/// otherwise). Shapes and strides are baked in as constants. Types: f32 → float, i32 → int
/// (wrapping + − ·, as on the CPU), bool → unsigned char, bf16 → unsigned short.
struct GroupKernel {
  std::string name, source;
  std::vector<int32_t> inputs;  // external input node ids, parameter order
};
constexpr int64_t kGroupPerThread = 4;  // elements each thread of fused_group_kernel computes
GroupKernel fused_group_kernel(const ir::Graph& graph, const passes::KernelGroup& group,
                               const std::vector<std::vector<int64_t>>& input_strides,
                               const std::string& name);
/// Several independent elementwise groups in one launch (horizontal fusion: e.g. the
/// optimizer's update of every parameter): block ranges are assigned to the groups in order,
/// each block running one group's elements. Params: each group's inputs then outputs, group
/// after group (no `n`).
Launch batched_groups_kernel(const ir::Graph& graph, const std::vector<const passes::KernelGroup*>& groups,
                             const std::vector<std::vector<std::vector<int64_t>>>& input_strides,
                             const std::string& name);
/// The external inputs of a group, in the order fused_group_kernel takes them.
std::vector<int32_t> group_inputs(const ir::Graph& graph, const passes::KernelGroup& group);

/// The element offset, as a C++ expression, of flat index `i` (a long long expression) over
/// `shape` read through `strides`: the index unravelled with constant divisors.
/// `suffix` is the integer literal suffix of the index type ("LL", or "u" for 32-bit unsigned).
std::string strided_offset(const Shape& shape, const std::vector<int64_t>& strides, const std::string& i,
                           const char* suffix = "LL");
/// Whether a kernel over `n` elements of `shape` may index in 32 bits: n and every offset
/// read through each of `strides` (non-negative) below 2^31. Unsigned 32-bit division by a
/// constant is a multiply-high and a shift; 64-bit takes a dozen instructions.
bool narrow_index(int64_t n, const Shape& shape, const std::vector<std::vector<int64_t>>& strides);
/// The CUDA type that stores `t` (float, int, unsigned char).
const char* cuda_type(DType t);
/// Device helpers every group kernel starts with: int32 arithmetic that wraps like the CPU's
/// (struct W32; signed overflow is undefined in CUDA C++ too) and saturating float → int casts.
std::string_view group_prelude();
/// A group's elementwise nodes as code: one device function per node (`f<id>`, its op's
/// expression with T bound to the compute type) and one line per node computing `v<id>`
/// (prefixed by `indent`). `value(id)` names an external input's register. Sums are skipped.
struct NodeCode {
  std::string functions, body;
};
NodeCode group_node_code(const ir::Graph& graph, const passes::KernelGroup& group,
                         const std::function<std::string(int32_t)>& value, const std::string& indent);

/// out (dense) = in (strided, any dtype). Params: (const T* in, T* out).
Launch copy_kernel(const std::string& name, const Operand& in);
/// A matrix operand [rows, cols] (element strides rs, cs) copied into a dense [rows_p, cols_p]
/// buffer, row-major or (col_major) column-major, with zeros in the padding: a product operand
/// padded to aligned extents.
Launch pad_copy_kernel(const std::string& name, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                       int64_t rows_p, int64_t cols_p, bool col_major, DType dtype = DType::kF32);
/// The operand of an fp32 product split for three TF32 products (emit_products.cc): each
/// element x of the [rows, cols] operand (strides rs, cs), zero-padded to [rows_p, cols_p], is
/// written as hi = x rounded to TF32 and lo = (x − hi) rounded to TF32 (x − hi is exact in
/// f32), the two halves stacked along `k_axis` (0: rows, 1: cols) into one dense buffer, row-
/// or (col_major) column-major; `lo_first` puts lo in the first half. Params: (in, out).
Launch split_copy_kernel(const std::string& name, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                         int64_t rows_p, int64_t cols_p, bool col_major, int k_axis, bool lo_first);
/// out (dense over shape, f32) = a · b elementwise, both `operands` (f32, or bf16 widened to
/// f32) read through strides over `shape` (0 = broadcast): a product over k = 1.
/// Params: (const T* a, const T* b, float* out).
Launch product_kernel(const std::string& name, const Shape& shape, const std::vector<int64_t>& a_strides,
                      const std::vector<int64_t>& b_strides, DType operands = DType::kF32);
/// out (dense, out_shape) = the inputs joined along `axis`. Params: (in0, …, in(k−1), out).
Launch concat_kernel(const std::string& name, const std::vector<Operand>& ins, const Shape& out_shape,
                     int axis);
/// out (dense f32) = x·cos + rotate_half(x)·sin over rows of the last axis, the three read
/// through their strides (the tables broadcast). Params: (const float* x, cos, sin, float* out).
Launch rotary_kernel(const std::string& name, const Operand& x, const Operand& cos, const Operand& sin);
/// Slice's adjoint: zeros of out_shape with `in` at positions start, start+step, … along axis.
/// Params: (const T* in, T* out).
Launch unslice_kernel(const std::string& name, const Operand& in, const Shape& out_shape, int axis,
                      int64_t start, int64_t step);
/// One thread per element for `n` elements: the 1-D launch every elementwise kernel uses.
void elementwise_launch(Launch& l, int64_t n);
/// The launch of a fused_group_kernel over `n` elements (kGroupPerThread per thread).
void fused_group_launch(Launch& l, int64_t n);

}  // namespace tg::backend::cuda
