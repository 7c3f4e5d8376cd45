// Helpers shared by the public op functions; see api_util.h.
#include "ir/api_util.h"

#include <algorithm>

namespace tg::ir {

void api_fail(const char* op, const std::string& what, const Loc& loc) {
  throw ShapeError(std::string("[") + op + "] " + what + " (at " + loc_str(loc) + ")");
}

Graph& graph_for(const char* op, std::initializer_list<const Arg*> args, const Loc& loc) {
  Graph* g = nullptr;
  const Trace* current = current_trace();
  for (const Arg* a : args) {
    if (!a->is_tensor()) continue;
    if (!a->tensor().valid()) api_fail(op, "operand is an empty tensor", loc);
    if (!Graph::is_live(a->tensor().graph(), a->tensor().graph_serial()))
      api_fail(op,
               "operand is a tensor whose trace has ended (tensors are only valid inside the function being "
               "traced)",
               loc);
    // Compares serial numbers, never dereferencing: a tensor kept from an earlier trace
    // points at a graph that no longer exists (possibly at the same address as this one).
    if (current != nullptr &&
        (a->tensor().graph() != &current->graph || a->tensor().graph_serial() != current->graph.serial()))
      api_fail(op,
               "operand belongs to another traced program (tensors are only valid inside the function being "
               "traced)",
               loc);
    if (g != nullptr && g != a->tensor().graph())
      api_fail(op, "operands come from different traced programs", loc);
    g = a->tensor().graph();
  }
  return g != nullptr ? *g : current_graph_for(op, loc);
}

Graph& current_graph_for(const char* op, const Loc& loc) {
  Trace* t = current_trace();
  if (t == nullptr)
    throw Error(std::string("[") + op + "] called outside of compile_train/compile_forward (at " +
                loc_str(loc) + ")");
  return t->graph;
}

Node make_node(Op op, std::vector<int32_t> inputs, const Loc& loc) {
  Node n{};
  n.op = op;
  n.inputs = std::move(inputs);
  n.loc = loc;
  return n;
}

Tensor result(Graph& g, int32_t node, int64_t index, const Loc& loc) {
  Node n = make_node(Op::kResult, {node}, loc);
  n.attrs.axes = {index};
  return emit(g, std::move(n));
}

Tensor scalar_constant(Graph& g, double value, DType dtype, const Loc& loc) {
  Node n = make_node(Op::kConstant, {}, loc);
  n.dtype = dtype;
  n.attrs.values = {value};
  return emit(g, std::move(n));
}

Tensor named_leaf(Graph& g, Op op, std::string name, Shape shape, DType dtype, const Loc& loc) {
  Node n = make_node(op, {}, loc);
  n.name = std::move(name);
  n.shape = std::move(shape);
  n.dtype = dtype;
  return emit(g, std::move(n));
}

Tensor constant_on(Graph& g, std::vector<double> values, Shape shape, DType dtype, const Loc& loc) {
  Node n = make_node(Op::kConstant, {}, loc);
  n.dtype = dtype;
  n.shape = std::move(shape);
  n.attrs.values = std::move(values);
  return emit(g, std::move(n));
}

Tensor as_tensor(Graph& g, const Arg& a, DType dtype, const Loc& loc) {
  if (!a.is_tensor()) return scalar_constant(g, a.scalar(), dtype, loc);
  if (a.tensor().dtype() == dtype) return a.tensor();
  return cast(a.tensor(), dtype, loc);
}

DType promote(DType a, DType b) {
  if (a == b) return a;  // two bf16 (f16) stay so (for concat); arithmetic on them is refused
  // bf16 or f16 with anything else computes in f32 (there is no half-precision arithmetic).
  // i8 (quantized weights) reads as a number of its category: f32 or i32 with the other side.
  const auto floating = [](DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; };
  if (floating(a) || floating(b)) return DType::kF32;
  if (a == DType::kI32 || b == DType::kI32 || a == DType::kI8 || b == DType::kI8) return DType::kI32;
  return DType::kBool;
}

DType common_dtype(const Arg& a, const Arg& b) {
  auto number_dtype = [](const Arg& s) { return s.scalar_is_integral() ? DType::kI32 : DType::kF32; };
  if (a.is_tensor() && b.is_tensor()) return promote(a.tensor().dtype(), b.tensor().dtype());
  const Arg& t = a.is_tensor() ? a : b;
  const Arg& s = a.is_tensor() ? b : a;
  DType td = t.tensor().dtype();
  // Like PyTorch: a number only widens the tensor's category (bool → int → float).
  if (td == DType::kF32) return td;
  if (is_half(td)) return DType::kF32;
  if (td == DType::kI8) td = DType::kI32;
  DType sd = number_dtype(s);
  return td == DType::kBool ? sd : promote(td, sd);
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b, const Loc& loc) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1)
      api_fail(op, "cannot broadcast shapes " + shape_str(a) + " and " + shape_str(b), loc);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor broadcast_if_needed(const Tensor& t, const Shape& shape, const Loc& loc) {
  if (t.shape() == shape) return t;
  return broadcast_to(t, shape, loc);
}

Axes normalize_axes(const char* op, const Axes& axes, int64_t rank, const Loc& loc) {
  Axes out;
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) out.push_back(normalize_axis(op, a, rank, loc));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    api_fail(op, "axes " + shape_str(axes) + " repeat an axis", loc);
  return out;
}

int64_t normalize_axis(const char* op, int64_t axis, int64_t rank, const Loc& loc) {
  if (axis < -rank || axis >= rank)
    api_fail(op, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank), loc);
  return axis < 0 ? axis + rank : axis;
}

}  // namespace tg::ir
