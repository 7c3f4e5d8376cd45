// Shape rules and geometry of the sliding-window ops (see window.h and ops.def).
#include "ir/window.h"

#include <string>

namespace tg::ir {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

bool is_conv(Op op) { return op == Op::kConv2d || op == Op::kConv2dGradInput || op == Op::kConv2dGradWeight; }

}  // namespace

WindowGeom window_geom(const Node& node, const Shape& in0, const Shape& in1) {
  // x is the first operand, except for the two whose result is x-shaped (their node shape).
  const bool x_is_result = node.op == Op::kConv2dGradInput || node.op == Op::kAvgPool2dGrad;
  const Shape& x = x_is_result ? node.shape : in0;
  WindowGeom geo{x[0], x[1], x[2], x[3], x[1], 0, 0, node.attrs.window};
  if (node.op == Op::kConv2d || node.op == Op::kConv2dGradInput) geo.o = in1[0];  // w [O, ...]
  if (node.op == Op::kConv2dGradWeight) geo.o = in1[1];                           // dy [N, O, ...]
  const Window& w = geo.win;
  geo.oh = window_out(geo.h, w.kh, w.sh, w.ph, w.dh);
  geo.ow = window_out(geo.w, w.kw, w.sw, w.pw, w.dw);
  return geo;
}

WindowGeom window_geom(const Graph& g, const Node& node) {
  static const Shape kNone;
  return window_geom(node, g.node(node.inputs[0]).shape,
                     node.inputs.size() > 1 ? g.node(node.inputs[1]).shape : kNone);
}

void infer_window(const Graph& g, Node& n) {
  auto in = [&](size_t i) -> const Node& { return g.node(n.inputs[i]); };
  const Window& w = n.attrs.window;
  const bool conv = is_conv(n.op);
  // Operands: both f32, or (the conv ops, under mixed precision) both bf16 or both f16.
  const DType dt = in(0).dtype;
  if (dt != DType::kF32 && !(conv && is_half(dt)))
    shape_fail(g, n, conv ? "operands must be f32, bf16 or f16" : "input must be f32");
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (in(i).dtype != dt) shape_fail(g, n, "operands must have one dtype");
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (in(i).shape.size() != 4)
      shape_fail(g, n, "operands must be rank 4 (NCHW; weights [O, C/groups, KH, KW])");
  if ((n.op == Op::kConv2dGradInput || n.op == Op::kAvgPool2dGrad) && n.shape.size() != 4)
    shape_fail(g, n, "needs the input's rank-4 shape as its node shape");
  if (w.kh < 1 || w.kw < 1) shape_fail(g, n, "the kernel must be at least 1×1");
  if (w.sh < 1 || w.sw < 1) shape_fail(g, n, "stride must be >= 1");
  if (w.dh < 1 || w.dw < 1) shape_fail(g, n, "dilation must be >= 1");
  if (w.ph < 0 || w.pw < 0) shape_fail(g, n, "padding must be >= 0");
  if (w.groups < 1 || (!conv && w.groups != 1)) shape_fail(g, n, "groups must be >= 1 (1 for pooling)");
  if (!conv && (2 * w.ph > w.kh || 2 * w.pw > w.kw))
    shape_fail(g, n,
               "padding must be at most half the kernel (" + str(w.ph) + ", " + str(w.pw) + " for a " +
                   str(w.kh) + "×" + str(w.kw) + " window)");
  const WindowGeom geo = window_geom(g, n);
  if (geo.c % w.groups != 0)
    shape_fail(g, n, str(geo.c) + " input channels do not divide into " + str(w.groups) + " groups");
  if (conv && geo.o % w.groups != 0)
    shape_fail(g, n, str(geo.o) + " output channels do not divide into " + str(w.groups) + " groups");
  for (int axis = 0; axis < 2; ++axis) {
    const int64_t extent = axis ? geo.w : geo.h, k = axis ? w.kw : w.kh, p = axis ? w.pw : w.ph,
                  d = axis ? w.dw : w.dh;
    const char* name = axis ? "width" : "height";
    if (d * (k - 1) + 1 > extent + 2 * p)
      shape_fail(g, n,
                 std::string("the kernel's ") + name + " " + str(d * (k - 1) + 1) +
                     " (dilated) is larger than the padded input's " + str(extent + 2 * p));
  }
  if (geo.oh <= 0 || geo.ow <= 0) shape_fail(g, n, "the output would be empty");
  const Shape y{geo.n, geo.o, geo.oh, geo.ow};
  const Shape weight{geo.o, geo.cg(), w.kh, w.kw};
  switch (n.op) {
    case Op::kConv2d:
    case Op::kConv2dGradInput: {
      const Shape& ws = in(1).shape;
      if (ws[1] * w.groups != geo.c)
        shape_fail(g, n,
                   "the weight has " + str(ws[1]) + " input channels per group; the input's " + str(geo.c) +
                       " channels in " + str(w.groups) + " groups need " + str(geo.cg()));
      if (ws[2] != w.kh || ws[3] != w.kw) shape_fail(g, n, "the window's kernel differs from the weight's");
      if (n.op == Op::kConv2dGradInput && in(0).shape != y)
        shape_fail(g, n, "dy must be " + shape_str(y) + " for an input " + shape_str(n.shape));
      if (n.op == Op::kConv2d) n.shape = y;
      break;
    }
    case Op::kConv2dGradWeight:
      if (in(1).shape != y) shape_fail(g, n, "dy must be " + shape_str(y));
      n.shape = weight;
      break;
    case Op::kMaxPool2d:
    case Op::kAvgPool2d: n.shape = y; break;
    case Op::kMaxPool2dGrad:
    case Op::kAvgPool2dGrad:
      if (in(n.op == Op::kMaxPool2dGrad ? 1 : 0).shape != y) shape_fail(g, n, "dy must be " + shape_str(y));
      if (n.op == Op::kMaxPool2dGrad) n.shape = in(0).shape;
      break;
    default: shape_fail(g, n, "is not a window op");
  }
  n.dtype = DType::kF32;
}

}  // namespace tg::ir
