// Geometry of the sliding-window ops (conv2d, max_pool2d, avg_pool2d and their gradients): one
// place that says which operand is x, which is y and how their extents relate, for shape
// inference and every backend.
#pragma once
#include <cstdint>

#include "ir/graph.h"

namespace tg::ir {

/// Whether `op` is one of the window ops (conv2d, the pools and their gradients).
inline bool is_window_op(Op op) {
  return op == Op::kConv2d || op == Op::kConv2dGradInput || op == Op::kConv2dGradWeight ||
         op == Op::kMaxPool2d || op == Op::kMaxPool2dGrad || op == Op::kAvgPool2d || op == Op::kAvgPool2dGrad;
}

/// Output extent of a window along one axis: ⌊(in + 2p − d·(k − 1) − 1) / s⌋ + 1 (≤ 0 when the
/// dilated kernel does not fit the padded input).
inline int64_t window_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  return span < 0 ? 0 : span / s + 1;
}

/// The forward problem a window op belongs to: x [n, c, h, w] → y [n, o, oh, ow] (o = c for
/// the pools), with the window's attributes.
struct WindowGeom {
  int64_t n, c, h, w;
  int64_t o, oh, ow;
  Window win;
  int64_t cg() const { return c / win.groups; }         // input channels per group
  int64_t og() const { return o / win.groups; }         // output channels per group
  int64_t k() const { return cg() * win.kh * win.kw; }  // a conv's reduction length per output
};

/// The geometry of a window node (any of the seven ops) from its operands' shapes (`in1`: the
/// second operand's, empty for the one-operand pools).
WindowGeom window_geom(const Node& node, const Shape& in0, const Shape& in1 = {});
/// The same, reading the operands' shapes from `g`.
WindowGeom window_geom(const Graph& g, const Node& node);

/// Shape and dtype rule of the window ops (called from ir::infer).
void infer_window(const Graph& g, Node& node);

}  // namespace tg::ir
