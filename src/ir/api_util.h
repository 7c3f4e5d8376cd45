// Helpers shared by the public op functions (api_*.cc): finding the graph, turning numbers
// into constants, dtype promotion, NumPy broadcasting, axis normalisation.
#pragma once
#include <string>

#include "ir/trace.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/tensor.h"

namespace tg::ir {

[[noreturn]] void api_fail(const char* op, const std::string& what, const Loc& loc);

/// The graph the operands live on (all must share one), else the current trace's.
Graph& graph_for(const char* op, std::initializer_list<const Arg*> args, const Loc& loc);
Graph& current_graph_for(const char* op, const Loc& loc);

Node make_node(Op op, std::vector<int32_t> inputs, const Loc& loc);
/// Result `index` of multi-output node `node` (a kResult node).
Tensor result(Graph& g, int32_t node, int64_t index, const Loc& loc);
Tensor scalar_constant(Graph& g, double value, DType dtype, const Loc& loc);
/// A named binding leaf (kInput, kParam or kState) on `g`.
Tensor named_leaf(Graph& g, Op op, std::string name, Shape shape, DType dtype, const Loc& loc);
/// A constant tensor on `g` (one value = a fill).
Tensor constant_on(Graph& g, std::vector<double> values, Shape shape, DType dtype, const Loc& loc);
/// Converts an operand to a tensor of `dtype` (casting a tensor, materialising a number).
Tensor as_tensor(Graph& g, const Arg& a, DType dtype, const Loc& loc);

DType promote(DType a, DType b);
/// The dtype a binary op computes in, from its operands (numbers adapt to tensors).
DType common_dtype(const Arg& a, const Arg& b);

/// The 4-bit codes of `packed` (i8 bytes [..., K/2], Param::quantize_int4's layout) as f32 of
/// shape `out` (K values a row, in any grouping of the last axes): byte b = s + 256·[s < 0] of its
/// signed value s, high code trunc(b/16), low code b − 16·high; codes 2j (low) and 2j + 1 (high)
/// side by side. passes/weights.cc recognises this form under a quantized product.
Tensor unpack_int4(const Tensor& packed, const Shape& out, const Loc& loc);
/// A quantized weight's integers as f32 of shape `out` [..., K/G, G]: its i8 values reshaped and
/// cast (8 bits), or unpack_int4 of its packed codes (4 bits). Param::tensor and quant_matmul's
/// VJP read the weight so.
Tensor quantized_values(const Tensor& q, const Shape& out, int bits, const Loc& loc);

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b, const Loc& loc);
/// Inserts a broadcast_to unless `t` already has `shape`.
Tensor broadcast_if_needed(const Tensor& t, const Shape& shape, const Loc& loc);

/// Normalises axes (negative → positive), sorts and checks them; empty → all axes.
Axes normalize_axes(const char* op, const Axes& axes, int64_t rank, const Loc& loc);
int64_t normalize_axis(const char* op, int64_t axis, int64_t rank, const Loc& loc);

/// A window op (conv2d, the pools, their gradients; ir/window.h) on `g` with `window`;
/// `shape` is the node shape of the two whose result is x-shaped, else empty.
Tensor window_op(Graph& g, Op op, const std::vector<Tensor>& inputs, const Window& window, Shape shape,
                 const Loc& loc);

/// An elementwise row of ops.def applied with the public API's promotion and broadcasting
/// (api_elementwise.cc), for ops without a public function of their own.
Tensor unary(Op op, const Tensor& x, const Loc& loc);
Tensor binary(Op op, const Arg& a, const Arg& b, const Loc& loc);

}  // namespace tg::ir
