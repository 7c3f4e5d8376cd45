// Public reductions, shape ops, matmul and leaf constructors. Each normalises its
// arguments (negative axes, -1 extents, Python slice bounds) so the IR sees canonical attrs,
// and returns its input unchanged when the op would be the identity.
#include <algorithm>
#include <cmath>

#include "ir/api_util.h"

namespace tg {
using namespace ir;

namespace {

Tensor reduce(Op op, const Tensor& x, const Axes& axes, bool keepdim, const Loc& loc) {
  Arg ax(x, loc);
  Graph& g = graph_for(op_name(op), {&ax}, loc);
  if (x.rank() == 0) return x;
  Tensor in = x.dtype() == DType::kBool ? cast(x, DType::kI32, loc) : x;
  Node n = make_node(op, {in.id()}, loc);
  n.attrs.axes = normalize_axes(op_name(op), axes, x.rank(), loc);
  n.attrs.keepdim = keepdim;
  return emit(g, std::move(n));
}

}  // namespace

Tensor sum(const Tensor& x, Axes axes, bool keepdim, Loc loc) {
  return reduce(Op::kSum, x, axes, keepdim, loc);
}
Tensor max(const Tensor& x, Axes axes, bool keepdim, Loc loc) {
  return reduce(Op::kMax, x, axes, keepdim, loc);
}
Tensor min(const Tensor& x, Axes axes, bool keepdim, Loc loc) {
  return reduce(Op::kMin, x, axes, keepdim, loc);
}

Tensor mean(const Tensor& x, Axes axes, bool keepdim, Loc loc) {
  Axes norm = normalize_axes("mean", axes, x.rank(), loc);
  int64_t count = 1;
  for (int64_t a : norm) count *= x.shape()[static_cast<size_t>(a)];
  Tensor s = sum(cast(x, DType::kF32, loc), norm, keepdim, loc);
  return mul(s, 1.0 / static_cast<double>(count), loc);
}

Tensor argmax(const Tensor& x, std::optional<int64_t> axis, bool keepdim, Loc loc) {
  Arg ax(x, loc);
  Graph& g = graph_for("argmax", {&ax}, loc);
  Tensor in = x.dtype() == DType::kBool ? cast(x, DType::kI32, loc) : x;
  int64_t a = 0;
  if (axis) {
    if (x.rank() == 0) api_fail("argmax", "a scalar has no axis " + std::to_string(*axis), loc);
    a = normalize_axis("argmax", *axis, x.rank(), loc);
  } else {
    in = reshape(in, {-1}, loc);
  }
  Node n = make_node(Op::kArgmax, {in.id()}, loc);
  n.attrs.axes = {a};
  n.attrs.keepdim = keepdim && axis.has_value();
  Tensor out = emit(g, std::move(n));
  if (keepdim && !axis) out = reshape(out, Shape(x.shape().size(), 1), loc);
  return out;
}

Tensor cumsum(const Tensor& x, int64_t axis, bool reverse, Loc loc) {
  Arg ax(x, loc);
  Graph& g = graph_for("cumsum", {&ax}, loc);
  if (x.rank() == 0) api_fail("cumsum", "a scalar has no axis " + std::to_string(axis), loc);
  Node n = make_node(Op::kCumsum, {x.id()}, loc);
  n.attrs.axes = {normalize_axis("cumsum", axis, x.rank(), loc)};
  n.attrs.reverse = reverse;
  return emit(g, std::move(n));
}

Tensor reshape(const Tensor& x, Shape shape, Loc loc) {
  Arg ax(x, loc);
  Graph& g = graph_for("reshape", {&ax}, loc);
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer_at >= 0) api_fail("reshape", "only one extent may be -1 in " + shape_str(shape), loc);
      infer_at = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      api_fail("reshape", "negative extent in " + shape_str(shape), loc);
    } else {
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    if (known == 0 || x.numel() % known != 0)
      api_fail("reshape", "cannot reshape " + shape_str(x.shape()) + " to " + shape_str(shape), loc);
    shape[static_cast<size_t>(infer_at)] = x.numel() / known;
  }
  if (shape == x.shape()) return x;
  Node n = make_node(Op::kReshape, {x.id()}, loc);
  n.shape = shape;
  return emit(g, std::move(n));
}

Tensor permute(const Tensor& x, Axes order, Loc loc) {
  Arg ax(x, loc);
  Graph& g = graph_for("permute", {&ax}, loc);
  if (static_cast<int64_t>(order.size()) != x.rank())
    api_fail("permute", "order " + shape_str(order) + " does not match shape " + shape_str(x.shape()), loc);
  bool identity = true;
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = normalize_axis("permute", order[i], x.rank(), loc);
    identity = identity && order[i] == static_cast<int64_t>(i);
  }
  if (identity) return x;
  Node n = make_node(Op::kPermute, {x.id()}, loc);
  n.attrs.axes = order;
  return emit(g, std::move(n));
}

Tensor transpose(const Tensor& x, int64_t axis0, int64_t axis1, Loc loc) {
  if (x.rank() < 2) api_fail("transpose", "needs rank >= 2, got " + shape_str(x.shape()), loc);
  Axes order;
  for (int64_t i = 0; i < x.rank(); ++i) order.push_back(i);
  std::swap(order[static_cast<size_t>(normalize_axis("transpose", axis0, x.rank(), loc))],
            order[static_cast<size_t>(normalize_axis("transpose", axis1, x.rank(), loc))]);
  return permute(x, order, loc);
}

Tensor broadcast_to(const Tensor& x, Shape shape, Loc loc) {
  Arg ax(x, loc);
  Graph& g = graph_for("broadcast_to", {&ax}, loc);
  if (shape == x.shape()) return x;
  Node n = make_node(Op::kBroadcastTo, {x.id()}, loc);
  n.shape = std::move(shape);
  return emit(g, std::move(n));
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step, Loc loc) {
  Arg ax(x, loc);
  Graph& g = graph_for("slice", {&ax}, loc);
  if (x.rank() == 0) api_fail("slice", "cannot slice a scalar", loc);
  int64_t a = normalize_axis("slice", axis, x.rank(), loc);
  if (step <= 0) api_fail("slice", "step must be positive, got " + std::to_string(step), loc);
  const int64_t len = x.shape()[static_cast<size_t>(a)];
  auto clamp = [&](int64_t i) { return std::clamp(i < 0 ? i + len : i, int64_t{0}, len); };
  start = clamp(start);
  stop = std::max(clamp(stop), start);
  const int64_t count = stop > start ? (stop - start - 1) / step + 1 : 0;
  if (count == len) return x;
  Node n = make_node(Op::kSlice, {x.id()}, loc);
  n.shape = x.shape();
  n.shape[static_cast<size_t>(a)] = count;
  n.attrs.axes = {a};
  n.attrs.values = {static_cast<double>(start), static_cast<double>(step)};
  return emit(g, std::move(n));
}

Tensor concat(std::span<const Tensor> xs, int64_t axis, Loc loc) {
  if (xs.empty()) throw ShapeError("[concat] needs at least one tensor (at " + loc_str(loc) + ")");
  Arg a0(xs[0], loc);
  Graph& g = graph_for("concat", {&a0}, loc);
  if (xs.size() == 1) return xs[0];
  if (xs[0].rank() == 0) api_fail("concat", "cannot concatenate scalars", loc);
  DType t = xs[0].dtype();
  for (const Tensor& x : xs) {
    if (x.graph() != &g) api_fail("concat", "operands come from different traced programs", loc);
    t = promote(t, x.dtype());
  }
  Node n = make_node(Op::kConcat, {}, loc);
  for (const Tensor& x : xs) n.inputs.push_back(cast(x, t, loc).id());
  n.attrs.axes = {normalize_axis("concat", axis, xs[0].rank(), loc)};
  return emit(g, std::move(n));
}
Tensor concat(std::initializer_list<Tensor> xs, int64_t axis, Loc loc) {
  return concat(std::span<const Tensor>(xs.begin(), xs.size()), axis, loc);
}

Tensor unsqueeze(const Tensor& x, int64_t axis, Loc loc) {
  Shape s = x.shape();
  int64_t a = normalize_axis("unsqueeze", axis, x.rank() + 1, loc);
  s.insert(s.begin() + a, 1);
  return reshape(x, s, loc);
}

Tensor squeeze(const Tensor& x, int64_t axis, Loc loc) {
  Shape s = x.shape();
  int64_t a = normalize_axis("squeeze", axis, x.rank(), loc);
  if (s[static_cast<size_t>(a)] != 1)
    api_fail("squeeze", "axis " + std::to_string(axis) + " of " + shape_str(x.shape()) + " is not 1", loc);
  s.erase(s.begin() + a);
  return reshape(x, s, loc);
}

Tensor matmul(const Arg& a, const Arg& b, Loc loc) {
  if (!a.is_tensor() || !b.is_tensor()) api_fail("matmul", "operands must be tensors", loc);
  Graph& g = graph_for("matmul", {&a, &b}, loc);
  // Two bf16 (or two f16) operands multiply as such (accumulating in f32); anything else as
  // f32. Under mixed precision the trace's policy stores f32 operands as bf16 or f16 first.
  const DType da = a.tensor().dtype();
  const bool both_half = is_half(da) && b.tensor().dtype() == da;
  Tensor ta = both_half ? a.tensor() : cast(a.tensor(), DType::kF32, loc);
  Tensor tb = both_half ? b.tensor() : cast(b.tensor(), DType::kF32, loc);
  const DType half = ir::policy_operand_dtype(ta);
  if (half != DType::kF32 && ir::policy_operand_dtype(tb) == half) {
    ta = cast(ta, half, loc);
    tb = cast(tb, half, loc);
  }
  if (ta.rank() == 0 || tb.rank() == 0)
    api_fail("matmul",
             "operands must have rank >= 1, got " + shape_str(ta.shape()) + " @ " + shape_str(tb.shape()),
             loc);
  const bool vec_a = ta.rank() == 1, vec_b = tb.rank() == 1;
  if (vec_a) ta = reshape(ta, {1, ta.numel()}, loc);
  if (vec_b) tb = reshape(tb, {tb.numel(), 1}, loc);
  Tensor out = emit(g, make_node(Op::kMatmul, {ta.id(), tb.id()}, loc));
  if (vec_b) out = squeeze(out, -1, loc);
  if (vec_a) out = squeeze(out, vec_b ? -1 : -2, loc);
  return out;
}

Tensor full(Shape shape, double value, DType dtype, Loc loc) {
  Graph& g = current_graph_for("full", loc);
  Node n = make_node(Op::kConstant, {}, loc);
  n.dtype = dtype;
  n.shape = std::move(shape);
  n.attrs.values = {value};
  return emit(g, std::move(n));
}
Tensor zeros(Shape shape, DType dtype, Loc loc) { return full(std::move(shape), 0.0, dtype, loc); }
Tensor ones(Shape shape, DType dtype, Loc loc) { return full(std::move(shape), 1.0, dtype, loc); }

namespace {
template <class T>
Tensor constant_of(std::span<const T> values, Shape shape, DType dtype, const Loc& loc) {
  Graph& g = current_graph_for("constant", loc);
  if (static_cast<int64_t>(values.size()) != numel(shape))
    api_fail("constant", std::to_string(values.size()) + " values do not fill shape " + shape_str(shape),
             loc);
  Node n = make_node(Op::kConstant, {}, loc);
  n.dtype = dtype;
  n.shape = std::move(shape);
  n.attrs.values.assign(values.begin(), values.end());
  return emit(g, std::move(n));
}
}  // namespace

Tensor constant(std::span<const float> values, Shape shape, Loc loc) {
  return constant_of(values, std::move(shape), DType::kF32, loc);
}
Tensor constant(std::span<const int32_t> values, Shape shape, Loc loc) {
  return constant_of(values, std::move(shape), DType::kI32, loc);
}

Tensor arange(double start, double stop, double step, std::optional<DType> dtype, Loc loc) {
  Graph& g = current_graph_for("arange", loc);
  if (step == 0 || !std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
    api_fail("arange", "start, stop and step must be finite and step non-zero", loc);
  const double span = std::ceil((stop - start) / step);
  if (span > 1e15) api_fail("arange", "would have more than 1e15 elements", loc);
  const auto count = static_cast<int64_t>(std::max(0.0, span));
  // Like PyTorch: integers in, i32 out; any fractional argument makes it f32.
  const bool integral = start == std::trunc(start) && stop == std::trunc(stop) && step == std::trunc(step);
  Node n = make_node(Op::kArange, {}, loc);
  n.dtype = dtype.value_or(integral ? DType::kI32 : DType::kF32);
  n.shape = {count};
  n.attrs.values = {start, step};
  return emit(g, std::move(n));
}

}  // namespace tg
