// Public ops of convolutional networks (functional.h): conv2d, conv_transpose2d (conv2d's input
// gradient as a forward op) and the pools canonicalise their options into an ir::Window;
// batch_norm and group_norm are composites (elementwise ops; the layer norm primitive).
// (Resizing and padding: api_resize.cc.)
#include <optional>
#include <utility>

#include "ir/api_util.h"
#include "tensorgrad/functional.h"

namespace tg {
using namespace ir;

namespace ir {
Tensor window_op(Graph& g, Op op, const std::vector<Tensor>& inputs, const Window& window, Shape shape,
                 const Loc& loc) {
  std::vector<int32_t> ids;
  for (const Tensor& t : inputs) ids.push_back(t.id());
  Node n = make_node(op, std::move(ids), loc);
  n.attrs.window = window;
  n.shape = std::move(shape);
  return emit(g, std::move(n));
}
}  // namespace ir

namespace {

void require_rank4(const char* op, const Tensor& x, const Loc& loc) {
  if (x.rank() != 4) api_fail(op, "input must be [N, C, H, W], got " + shape_str(x.shape()), loc);
}

Window pool_window(const Pool2dOptions& o) {
  const Size2 stride(o.stride.h == 0 ? o.kernel.h : o.stride.h, o.stride.w == 0 ? o.kernel.w : o.stride.w);
  return {.kh = o.kernel.h,
          .kw = o.kernel.w,
          .sh = stride.h,
          .sw = stride.w,
          .ph = o.padding.h,
          .pw = o.padding.w,
          .dh = o.dilation.h,
          .dw = o.dilation.w,
          .count_pad = o.count_include_pad};
}

/// A per-channel [C] vector as [1, C, 1, …] against x [N, C, …].
Tensor per_channel(const char* op, const char* what, const Tensor& x, const Tensor& v, const Loc& loc) {
  const int64_t c = x.shape()[1];
  if (v.shape() != Shape{c})
    api_fail(op,
             std::string(what) + " " + shape_str(v.shape()) + " must be [" + std::to_string(c) +
                 "] for an input " + shape_str(x.shape()) + " (channels on axis 1)",
             loc);
  Shape s(x.shape().size(), 1);
  s[1] = c;
  return reshape(v, s, loc);
}

/// If `z` adds a per-channel value (constant over H and W: a broadcast of a [.., C, 1, 1]
/// tensor, as conv2d's bias and batch_norm's shift are) to y: that value's source, and y.
std::optional<std::pair<Tensor, Tensor>> per_channel_shift(Graph& g, const Tensor& z) {
  const Node& n = g.node(z.id());
  if (n.op != Op::kAdd) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const Node& c = g.node(n.inputs[static_cast<size_t>(side)]);
    if (c.op != Op::kBroadcastTo) continue;
    const Shape& src = g.node(c.inputs[0]).shape;
    const size_t lead = c.shape.size() - src.size();
    const auto extent = [&](size_t axis) { return axis < lead ? 1 : src[axis - lead]; };
    if (c.shape.size() == 4 && extent(0) == 1 && extent(2) == 1 && extent(3) == 1)
      return std::pair{Tensor(&g, c.inputs[0]), Tensor(&g, n.inputs[static_cast<size_t>(1 - side)])};
  }
  return std::nullopt;
}

/// conv2d's or conv_transpose2d's window op of x and weight (both read as bf16 or f16 under
/// the mixed precision policy, as a product's operands), then the per-channel bias.
Tensor convolve(Graph& g, const char* name, Op op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Window& w, Shape shape, const Loc& loc) {
  const DType half = policy_operand_dtype(x);
  Tensor y = half != DType::kF32 && policy_operand_dtype(weight) == half
                 ? window_op(g, op, {cast(x, half, loc), cast(weight, half, loc)}, w, std::move(shape), loc)
                 : window_op(g, op, {x, weight}, w, std::move(shape), loc);
  if (bias.valid()) y = add(y, per_channel(name, "bias", y, bias, loc), loc);
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv2dOptions o, Loc loc) {
  Arg ax(x, loc), aw(weight, loc);
  Graph& g = graph_for("conv2d", {&ax, &aw}, loc);
  require_rank4("conv2d", x, loc);
  if (weight.rank() != 4)
    api_fail("conv2d", "weight must be [O, C/groups, KH, KW], got " + shape_str(weight.shape()), loc);
  const Window w{.kh = weight.shape()[2],
                 .kw = weight.shape()[3],
                 .sh = o.stride.h,
                 .sw = o.stride.w,
                 .ph = o.padding.h,
                 .pw = o.padding.w,
                 .dh = o.dilation.h,
                 .dw = o.dilation.w,
                 .groups = o.groups};
  return convolve(g, "conv2d", Op::kConv2d, x, weight, bias, w, {}, loc);
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv1dOptions o, Loc loc) {
  if (x.rank() != 3) api_fail("conv1d", "x must be [N, C, L], got " + shape_str(x.shape()), loc);
  if (weight.rank() != 3)
    api_fail("conv1d", "weight must be [O, C/groups, K], got " + shape_str(weight.shape()), loc);
  const Tensor y = conv2d(
      unsqueeze(x, 2, loc), unsqueeze(weight, 2, loc), bias,
      {.stride = {1, o.stride}, .padding = {0, o.padding}, .dilation = {1, o.dilation}, .groups = o.groups},
      loc);
  return squeeze(y, 2, loc);
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, ConvTranspose2dOptions o,
                        Loc loc) {
  Arg ax(x, loc), aw(weight, loc);
  Graph& g = graph_for("conv_transpose2d", {&ax, &aw}, loc);
  require_rank4("conv_transpose2d", x, loc);
  if (weight.rank() != 4)
    api_fail("conv_transpose2d",
             "weight must be [Cin, Cout/groups, KH, KW], got " + shape_str(weight.shape()), loc);
  const Shape &xs = x.shape(), &ws = weight.shape();
  if (o.groups < 1) api_fail("conv_transpose2d", "groups must be >= 1", loc);
  if (ws[0] != xs[1])
    api_fail("conv_transpose2d",
             "the weight " + shape_str(ws) + " is for " + std::to_string(ws[0]) + " input channels; x " +
                 shape_str(xs) + " has " + std::to_string(xs[1]),
             loc);
  if (xs[1] % o.groups != 0)
    api_fail(
        "conv_transpose2d",
        std::to_string(xs[1]) + " input channels do not divide into " + std::to_string(o.groups) + " groups",
        loc);
  const int64_t extent[2] = {xs[2], xs[3]}, k[2] = {ws[2], ws[3]}, s[2] = {o.stride.h, o.stride.w},
                p[2] = {o.padding.h, o.padding.w}, op[2] = {o.output_padding.h, o.output_padding.w},
                d[2] = {o.dilation.h, o.dilation.w};
  int64_t out[2];
  for (int a = 0; a < 2; ++a) {
    const std::string axis = a ? "width" : "height";
    if (s[a] < 1 || d[a] < 1 || p[a] < 0 || op[a] < 0 || k[a] < 1)
      api_fail("conv_transpose2d",
               "stride, dilation and the kernel must be >= 1, padding and output_padding >= 0 (" + axis + ")",
               loc);
    if (op[a] >= s[a])
      api_fail("conv_transpose2d",
               "output_padding " + std::to_string(op[a]) + " must be smaller than the stride " +
                   std::to_string(s[a]) + " (" + axis + ")",
               loc);
    out[a] = (extent[a] - 1) * s[a] - 2 * p[a] + d[a] * (k[a] - 1) + op[a] + 1;
    if (out[a] < 1)
      api_fail("conv_transpose2d",
               "the output " + axis + " would be " + std::to_string(out[a]) + " (padding " +
                   std::to_string(p[a]) + " removes more than the full output)",
               loc);
  }
  // The input's gradient of the conv2d that maps the result back to x's shape.
  const Window w{.kh = k[0],
                 .kw = k[1],
                 .sh = s[0],
                 .sw = s[1],
                 .ph = p[0],
                 .pw = p[1],
                 .dh = d[0],
                 .dw = d[1],
                 .groups = o.groups};
  const Shape ys{xs[0], ws[1] * o.groups, out[0], out[1]};
  return convolve(g, "conv_transpose2d", Op::kConv2dGradInput, x, weight, bias, w, ys, loc);
}

Tensor max_pool2d(const Tensor& x, Pool2dOptions options, Loc loc) {
  Arg ax(x, loc);
  Graph& g = graph_for("max_pool2d", {&ax}, loc);
  require_rank4("max_pool2d", x, loc);
  const Window w = pool_window(options);
  // Max commutes with relu (both monotone, NaN-propagating) and with adding a per-channel value
  // (rounding is monotone), exactly: max_pool2d(relu(y + b)) = relu(max_pool2d(y) + b). Pooling
  // first runs the relu, the add and their gradients (and the bias gradient's sum) on kh·kw
  // times fewer elements. The gradient is the same too: where the window's maximum is ≤ 0 both
  // forms pass none, elsewhere both route it to the first maximum of y. The original relu is
  // left to any other reader (dead code otherwise).
  const Node& xn = g.node(x.id());
  if (xn.op == Op::kRelu && xn.dtype == DType::kF32) {
    const Tensor z(&g, xn.inputs[0]);
    if (const auto shift = per_channel_shift(g, z)) {
      const Tensor pooled = window_op(g, Op::kMaxPool2d, {shift->second}, w, {}, loc);
      return relu(pooled + shift->first, loc);
    }
    return relu(window_op(g, Op::kMaxPool2d, {z}, w, {}, loc), loc);
  }
  return window_op(g, Op::kMaxPool2d, {x}, w, {}, loc);
}

Tensor avg_pool2d(const Tensor& x, Pool2dOptions options, Loc loc) {
  Arg ax(x, loc);
  Graph& g = graph_for("avg_pool2d", {&ax}, loc);
  require_rank4("avg_pool2d", x, loc);
  if (options.dilation.h != 1 || options.dilation.w != 1)
    api_fail("avg_pool2d", "has no dilation (PyTorch's neither)", loc);
  return window_op(g, Op::kAvgPool2d, {x}, pool_window(options), {}, loc);
}

Tensor global_avg_pool2d(const Tensor& x, Loc loc) {
  require_rank4("global_avg_pool2d", x, loc);
  return mean(x, {2, 3}, /*keepdim=*/false, loc);
}

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps,
                  Loc loc) {
  if (x.rank() < 2) api_fail("group_norm", "input must be [N, C, ...], got " + shape_str(x.shape()), loc);
  const int64_t c = x.shape()[1];
  if (groups < 1 || c % groups != 0)
    api_fail("group_norm",
             std::to_string(c) + " channels do not divide into " + std::to_string(groups) + " groups", loc);
  if (!(eps >= 0)) api_fail("group_norm", "eps must be >= 0", loc);
  const int64_t n = x.shape()[0];
  Tensor y = reshape(layer_norm(reshape(x, {n, groups, x.numel() / std::max<int64_t>(n * groups, 1)}, loc),
                                Tensor(), Tensor(), eps, loc),
                     x.shape(), loc);
  if (weight.valid()) y = y * per_channel("group_norm", "weight", x, weight, loc);
  if (bias.valid()) y = y + per_channel("group_norm", "bias", x, bias, loc);
  return y;
}

Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                  const Tensor& bias, double eps, Loc loc) {
  if (x.rank() < 2) api_fail("batch_norm", "input must be [N, C, ...], got " + shape_str(x.shape()), loc);
  if (!(eps >= 0)) api_fail("batch_norm", "eps must be >= 0", loc);
  Tensor scale = rsqrt(per_channel("batch_norm", "var", x, var, loc) + eps, loc);
  if (weight.valid()) scale = scale * per_channel("batch_norm", "weight", x, weight, loc);
  Tensor y = (x - per_channel("batch_norm", "mean", x, mean, loc)) * scale;
  if (bias.valid()) y = y + per_channel("batch_norm", "bias", x, bias, loc);
  return y;
}

}  // namespace tg
