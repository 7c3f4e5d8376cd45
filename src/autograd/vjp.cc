// One VJP per primitive (compiled with -Werror=switch: a new op does not build without its
// rule). Each rule is written with other ops, never with kernels, so every backend gets the
// backward pass for free. Notation: y = op(x…), g = dL/dy; each case returns dL/dx….
#include <cmath>
#include <numbers>

#include "autograd/grad.h"
#include "ir/api_util.h"

namespace tg::autograd {
namespace {

using ir::Op;

/// Sums `g` down to `shape` over the axes a broadcast added or stretched. `shape` is taken by
/// value: callers pass shapes owned by graph nodes, which appending the sum may reallocate.
Tensor sum_to(const Tensor& g, Shape shape, const Loc& loc) {
  if (g.shape() == shape) return g;
  const size_t lead = g.shape().size() - shape.size();
  Axes axes;
  for (size_t i = 0; i < g.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) axes.push_back(static_cast<int64_t>(i));
  Tensor s = axes.empty() ? g : sum(g, axes, /*keepdim=*/true, loc);
  return reshape(s, shape, loc);
}

/// Re-inserts the reduced axes of a keepdim=false reduction so `t` broadcasts against x.
Tensor keepdim_shape(const Tensor& t, const ir::Node& n, const Shape& x_shape, const Loc& loc) {
  Shape kept = x_shape;
  for (int64_t a : n.attrs.axes) kept[static_cast<size_t>(a)] = 1;
  return reshape(t, kept, loc);
}

}  // namespace

std::vector<Tensor> vjp(ir::Graph& graph, int32_t id, std::span<const Tensor> douts) {
  const ir::Node n = graph.node(id);  // a copy: the rules below append nodes
  const Loc& loc = n.loc;
  // Input shapes by value: every op below appends nodes, which may move graph storage.
  std::vector<Shape> in_shape;
  for (int32_t in : n.inputs) in_shape.push_back(graph.node(in).shape);
  auto x = [&](size_t i) { return Tensor(&graph, n.inputs[i]); };
  const Tensor y(&graph, id);
  const Tensor g = douts.empty() ? Tensor() : douts[0];  // dL/dy of a single-output node
  auto constant = [&](double v) { return ir::scalar_constant(graph, v, DType::kF32, loc); };

  // clang-format off
  switch (n.op) {
    case Op::kParam: case Op::kInput: case Op::kState: case Op::kConstant: case Op::kArange:
      return {};
    case Op::kResult:
      throw Error("[grad] a result's gradient goes to its node's (append_gradients), not through vjp");
    // Piecewise-constant or non-real outputs: no gradient.
    case Op::kSign: case Op::kLogicalNot: case Op::kStopGradient:
    case Op::kLogicalAnd: case Op::kLogicalOr:
    case Op::kEq: case Op::kNe: case Op::kLt: case Op::kLe: case Op::kGt: case Op::kGe:
    case Op::kArgmax: case Op::kSample:
      return std::vector<Tensor>(n.inputs.size());
    case Op::kUpdateSlice:
      ir::api_fail("update_slice",
                   "has no gradient: it writes the caches of inference programs; keep it out of a loss", loc);
    case Op::kAttentionAt:
      ir::api_fail("attention_at",
                   "has no gradient: it reads the caches of inference programs; train with attention()", loc);

    case Op::kNeg: return {-g};
    case Op::kAbs: return {g * sign(x(0), loc)};    // d|x| = sign(x)
    case Op::kExp: return {g * y};                  // d e^x = e^x
    case Op::kLog: return {g / x(0)};               // d ln x = 1/x
    case Op::kSqrt: return {g * 0.5 / y};           // d √x = 1/(2√x)
    case Op::kRsqrt: return {g * -0.5 * y / x(0)};  // d x^-½ = -½ x^-3/2
    case Op::kSin: return {g * cos(x(0), loc)};
    case Op::kCos: return {-(g * sin(x(0), loc))};
    case Op::kTanh: return {g * (1.0 - y * y)};                        // 1 - tanh²
    case Op::kSigmoid: return {g * y * (1.0 - y)};                     // σ(1-σ)
    case Op::kRelu: return {ir::binary(Op::kReluGrad, x(0), g, loc)};  // 0 at the kink, as PyTorch
    case Op::kErf:                                                     // 2/√π e^{-x²}
      return {g * (2.0 / std::sqrt(std::numbers::pi)) * exp(-(x(0) * x(0)), loc)};
    case Op::kLog1p: return {g / (x(0) + 1.0)};
    case Op::kReciprocal: return {-(g * y * y)};  // d 1/x = -1/x²
    case Op::kGeluTanh: return {ir::binary(Op::kGeluTanhGrad, x(0), g, loc)};
    case Op::kCast:
    {
      // Only a float→float cast carries a gradient. Gradients are f32 whatever the value's
      // dtype (a bf16 or f16 product operand's gradient is its product's f32 result), so the
      // gradient passes through unrounded.
      const DType from = graph.node(n.inputs[0]).dtype;
      const bool floats =
          (from == DType::kF32 || is_half(from)) && (n.dtype == DType::kF32 || is_half(n.dtype));
      return {floats ? g : Tensor()};
    }

    case Op::kAdd: return {g, g};
    case Op::kSub: return {g, -g};
    case Op::kMul: return {g * x(1), g * x(0)};
    case Op::kDiv: return {g / x(1), -(g * y / x(1))};  // d(a/b)/db = -a/b² = -y/b
    case Op::kPow: {  // b a^(b-1) and ln(a) a^b, with PyTorch's zeros where those are 0·∞:
      // d/da is 0 for b = 0, d/db is 0 for a = 0 with b ≥ 0.
      Tensor da = where(eq(x(1), 0.0, loc), 0.0, g * x(1) * pow(x(0), x(1) - 1.0, loc), loc);
      Tensor db = where(logical_and(eq(x(0), 0.0, loc), x(1) >= 0.0, loc), 0.0, g * log(x(0), loc) * y, loc);
      return {da, db};
    }
    case Op::kMaximum:
    case Op::kMinimum: {
      // The winner takes the gradient; a tie splits it evenly (PyTorch's convention).
      Tensor a_wins = n.op == Op::kMaximum ? x(0) > x(1) : x(0) < x(1);
      Tensor tie = eq(x(0), x(1), loc);
      Tensor half = g * 0.5;
      Tensor zero = constant(0.0);
      return {where(a_wins, g, where(tie, half, zero, loc), loc),
              where(a_wins, zero, where(tie, half, g, loc), loc)};
    }
    case Op::kWhere: return {Tensor(), where(x(0), g, 0.0, loc), where(x(0), 0.0, g, loc)};

    case Op::kSum:
      return {broadcast_to(n.attrs.keepdim ? g : keepdim_shape(g, n, in_shape[0], loc), in_shape[0], loc)};
    // y_i = Σ_{j ≤ i} x_j  ⇒  ∂L/∂x_j = Σ_{i ≥ j} g_i: the prefix sum in the other direction.
    case Op::kCumsum: return {cumsum(g, n.attrs.axes[0], !n.attrs.reverse, loc)};
    case Op::kRotary: {
      // y = x∘c + R(x)∘s with R(x) = [−x₂, x₁]; R's transpose is Rᵀ(z) = [z₂, −z₁], so
      // ∂L/∂x = g∘c + Rᵀ(g∘s), ∂L/∂c = g∘x, ∂L/∂s = g∘R(x).
      const int64_t d = in_shape[0].back(), h = d / 2;
      auto halves = [&](const Tensor& z, bool negate_first) {
        Tensor z1 = slice(z, -1, 0, h, 1, loc), z2 = slice(z, -1, h, d, 1, loc);
        return negate_first ? concat({neg(z2, loc), z1}, -1, loc) : concat({z2, neg(z1, loc)}, -1, loc);
      };
      return {g * x(1) + halves(g * x(2), false), g * x(0), g * halves(x(0), true)};
    }
    case Op::kMax:
    case Op::kMin: {
      // Gradient goes to the elements equal to the extremum, split evenly among ties.
      const Shape xs = in_shape[0];  // a copy: the reshapes below append nodes
      Tensor yk = n.attrs.keepdim ? y : keepdim_shape(y, n, xs, loc);
      Tensor gk = n.attrs.keepdim ? g : keepdim_shape(g, n, xs, loc);
      Tensor mask = cast(eq(x(0), yk, loc), DType::kF32, loc);
      Tensor count = sum(mask, n.attrs.axes, /*keepdim=*/true, loc);
      return {mask * (gk / count)};
    }

    case Op::kReshape: return {reshape(g, in_shape[0], loc)};
    case Op::kPermute: {
      Axes inverse(n.attrs.axes.size());
      for (size_t i = 0; i < inverse.size(); ++i)
        inverse[static_cast<size_t>(n.attrs.axes[i])] = static_cast<int64_t>(i);
      return {permute(g, inverse, loc)};
    }
    case Op::kBroadcastTo: return {sum_to(g, in_shape[0], loc)};
    case Op::kSlice: {
      // The adjoint of selecting elements is scattering them back into zeros.
      ir::Node un = ir::make_node(Op::kUnslice, {g.id()}, loc);
      un.shape = in_shape[0];
      un.attrs = n.attrs;
      return {ir::emit(graph, std::move(un))};
    }
    case Op::kUnslice: {
      ir::Node sl = ir::make_node(Op::kSlice, {g.id()}, loc);
      sl.shape = in_shape[0];
      sl.attrs = n.attrs;
      return {ir::emit(graph, std::move(sl))};
    }
    case Op::kConcat: {
      std::vector<Tensor> out;
      const int64_t axis = n.attrs.axes[0];
      int64_t start = 0;
      for (const Shape& shape : in_shape) {
        const int64_t len = shape[static_cast<size_t>(axis)];
        out.push_back(slice(g, axis, start, start + len, 1, loc));
        start += len;
      }
      return out;
    }
    case Op::kMatmul: {
      // Y = A B:  dA = G Bᵀ,  dB = Aᵀ G, each summed over the batch axes it was broadcast on.
      // A matrix shared by every batch (a weight: B of rank 2 against a batched A) gets its
      // gradient from one product with the batch folded into the contraction,
      // dB = A₂ᵀ G₂ with A₂ = A as [Σbatch·m, k], G₂ = G as [Σbatch·m, n], instead of a
      // batch of products summed afterwards (which would materialise [batch, k, n]).
      // bf16 or f16 operands (mixed precision): the incoming gradient is rounded to their type
      // for both products, which accumulate in f32; dA and dB are f32.
      const DType half = graph.node(n.inputs[0]).dtype;
      const Tensor gm = is_half(half) ? cast(g, half, loc) : g;
      Tensor da = sum_to(matmul(gm, transpose(x(1), -2, -1, loc), loc), in_shape[0], loc);
      if (in_shape[1].size() == 2 && in_shape[0].size() > 2) {
        const int64_t k = in_shape[0].back(), n_out = in_shape[1].back();
        Tensor a2 = reshape(x(0), {-1, k}, loc), g2 = reshape(gm, {-1, n_out}, loc);
        return {da, matmul(transpose(a2, -2, -1, loc), g2, loc)};
      }
      return {da, sum_to(matmul(transpose(x(0), -2, -1, loc), gm, loc), in_shape[1], loc)};
    }

    case Op::kQuantMatmul: {
      // Y = X Wᵀ with W = q · scale (+ offset, 4 bits) per group of G values of a row: dX = G W
      // (W dequantized, f32), d scale[n, j] = Σ over group j of q[n, k] · (Gᵀ X)[n, k], d offset
      // the same sum without q; q (integers) gets none.
      const bool four = n.inputs.size() == 4;
      const int64_t rows_n = in_shape[1][0], k = in_shape[0].back(), groups = in_shape[2][1];
      const Shape grouped{rows_n, groups, k / groups};
      const Tensor q = ir::quantized_values(x(1), grouped, four ? 4 : 8, loc);
      Tensor w = mul(q, reshape(x(2), {rows_n, groups, 1}, loc), loc);
      if (four) w = add(w, reshape(x(3), {rows_n, groups, 1}, loc), loc);
      w = reshape(w, {rows_n, k}, loc);
      const Tensor xf = graph.node(n.inputs[0]).dtype == DType::kF32 ? x(0) : cast(x(0), DType::kF32, loc);
      const Tensor dw = reshape(matmul(transpose(reshape(g, {-1, rows_n}, loc), -2, -1, loc), reshape(xf, {-1, k}, loc), loc), grouped, loc);
      const Tensor dscale = sum(mul(dw, q, loc), {2}, false, loc);
      if (four) return {matmul(g, w, loc), Tensor(), dscale, sum(dw, {2}, false, loc)};
      return {matmul(g, w, loc), Tensor(), dscale};
    }

    case Op::kGather: {
      // Each output element read one input element: send its gradient back there, adding
      // where several outputs read the same element (an embedding row used twice).
      ir::Node sc = ir::make_node(Op::kScatterAdd, {g.id(), n.inputs[1]}, loc);
      sc.shape = in_shape[0];
      sc.attrs = n.attrs;
      return {ir::emit(graph, std::move(sc)), Tensor()};
    }
    case Op::kScatterAdd: {
      ir::Node ga = ir::make_node(Op::kGather, {g.id(), n.inputs[1]}, loc);
      ga.attrs = n.attrs;
      return {ir::emit(graph, std::move(ga)), Tensor()};
    }
    case Op::kSoftmax: {
      // dx = y ⊙ (g − Σ_axis g⊙y); masked entries have y = 0 and get 0.
      const Axes axis = n.attrs.axes;
      return {y * (g - sum(g * y, axis, /*keepdim=*/true, loc))};
    }
    case Op::kLogSoftmax: {
      // dx = g − softmax(x) Σ_axis g, with softmax = exp(y); masked entries (y = −∞) get 0.
      // Masked entries carry no probability: their incoming gradient is dropped before the
      // sum, so it cannot leak into the visible entries.
      if (!n.attrs.causal) return {g - exp(y, loc) * sum(g, n.attrs.axes, /*keepdim=*/true, loc)};
      Tensor visible = y > -INFINITY;
      Tensor gv = where(visible, g, 0.0, loc);
      return {where(visible, gv - exp(y, loc) * sum(gv, n.attrs.axes, /*keepdim=*/true, loc), 0.0, loc)};
    }
    case Op::kCrossEntropy: {
      // d loss_n / d logits[n, c] = softmax(logits)[n, c] − [c = t_n], zero for ignored rows.
      ir::Node gr = ir::make_node(Op::kCrossEntropyGrad, {n.inputs[0], n.inputs[1], g.id()}, loc);
      gr.attrs = n.attrs;
      return {ir::emit(graph, std::move(gr)), Tensor()};
    }
    case Op::kLayerNorm:
    case Op::kRmsNorm: {
      ir::Node gr = ir::make_node(n.op == Op::kLayerNorm ? Op::kLayerNormGrad : Op::kRmsNormGrad,
                                  {n.inputs[0], g.id()}, loc);
      gr.attrs = n.attrs;
      return {ir::emit(graph, std::move(gr))};
    }
    case Op::kDropout: {
      // The same (seed, key) stream regenerates the mask: dx = g·[u ≥ p]/(1-p).
      ir::Node dr = ir::make_node(Op::kDropout, {g.id(), n.inputs[1]}, loc);
      dr.attrs = n.attrs;
      return {ir::emit(graph, std::move(dr)), Tensor()};
    }
    case Op::kSelectiveScan: {
      // One primitive gives every input's gradient (its seven results) from the cotangents of y
      // and of the last state (a zero constant where a result has none), reading what the
      // forward kernel saved.
      const Shape y_shape = n.results[0].shape, last_shape = n.results[1].shape;
      const Tensor dy =
          douts[0].valid() ? douts[0] : ir::constant_on(graph, {0.0}, y_shape, DType::kF32, loc);
      const Tensor dlast = douts.size() > 1 && douts[1].valid()
                               ? douts[1]
                               : ir::constant_on(graph, {0.0}, last_shape, DType::kF32, loc);
      std::vector<int32_t> ins(n.inputs.begin(), n.inputs.end());
      ins.push_back(dy.id());
      ins.push_back(dlast.id());
      ins.push_back(ir::result(graph, id, 2, loc).id());
      ir::Node gr = ir::make_node(Op::kSelectiveScanGrad, ins, loc);
      gr.attrs = n.attrs;
      const int32_t grads = ir::emit(graph, std::move(gr)).id();
      std::vector<Tensor> out;
      for (int64_t i = 0; i < 7; ++i) out.push_back(ir::result(graph, grads, i, loc));
      return out;
    }
    case Op::kAllReduce: {
      // y_i = Σ_ranks x_i on every rank: dL/dx_i on one rank = Σ_ranks dL/dy_i.
      std::vector<int32_t> ins;
      for (const Tensor& d : douts)
        if (d.valid()) ins.push_back(d.id());
      std::vector<Tensor> out(n.inputs.size());
      if (ins.empty()) return out;
      const int32_t sums = ir::emit(graph, ir::make_node(Op::kAllReduce, ins, loc)).id();
      for (size_t i = 0, k = 0; i < douts.size(); ++i)
        if (douts[i].valid()) out[i] = ir::result(graph, sums, static_cast<int64_t>(k++), loc);
      return out;
    }
    case Op::kReduceScatter: case Op::kAllGather: {
      // Each is the other's adjoint: rank s's x reaches every rank's y (reduce_scatter: summed
      // into the owner's part; all_gather: copied to part s everywhere), so dL/dx on rank s
      // gathers (reduce_scatter) or sums over the ranks (all_gather) the cotangents of those parts.
      const Op other = n.op == Op::kReduceScatter ? Op::kAllGather : Op::kReduceScatter;
      ir::Node adj = ir::make_node(other, {g.id()}, loc);
      adj.attrs.values = n.attrs.values;
      return {ir::emit(graph, std::move(adj))};
    }
    case Op::kRankShard:
      throw Error("[grad] rank_shard %" + std::to_string(id) + " has no gradient: it only cuts "
                  "parameters for a sharded optimizer update, after the backward");
    case Op::kAttention: {
      // One primitive gives dq, dk and dv, reading the forward's output and what it saved.
      const int32_t out = ir::result(graph, id, 0, loc).id(), saved = ir::result(graph, id, 1, loc).id();
      // bf16 or f16 q, k, v (mixed precision): dout is rounded to their type too; dq, dk, dv
      // are f32.
      const DType half = graph.node(n.inputs[0]).dtype;
      const Tensor dout = is_half(half) ? cast(g, half, loc) : g;
      ir::Node gr =
          ir::make_node(Op::kAttentionGrad, {n.inputs[0], n.inputs[1], n.inputs[2], dout.id(), out, saved}, loc);
      if (ir::attention_masked(n)) gr.inputs.push_back(n.inputs[3]);  // the key mask: no gradient of its own
      gr.attrs = n.attrs;
      const int32_t grads = ir::emit(graph, std::move(gr)).id();
      std::vector<Tensor> d{ir::result(graph, grads, 0, loc), ir::result(graph, grads, 1, loc),
                            ir::result(graph, grads, 2, loc)};
      d.resize(n.inputs.size());
      return d;
    }
    case Op::kConv2d: case Op::kConv2dGradInput: case Op::kConv2dGradWeight: {
      // The three are the adjoints of one bilinear form B(x, w, dy) = Σ dy·conv2d(x, w):
      //   conv2d(x, w):           dx = grad_input(g, w),   dw = grad_weight(x, g);
      //   grad_input(dy, w) = ∂B/∂x:   d dy = conv2d(g, w),  dw = grad_weight(g, dy);
      //   grad_weight(x, dy) = ∂B/∂w:  dx = grad_input(dy, g), d dy = conv2d(x, g).
      // bf16 or f16 operands (mixed precision): g is rounded to their type as a product's
      // gradient is.
      const DType half = graph.node(n.inputs[0]).dtype;
      const Tensor gm = is_half(half) ? cast(g, half, loc) : g;
      const ir::Window& w = n.attrs.window;
      auto conv = [&](const Tensor& a, const Tensor& b) {
        return ir::window_op(graph, Op::kConv2d, {a, b}, w, {}, loc);
      };
      auto grad_input = [&](const Tensor& dy, const Tensor& wt, const Shape& xs) {
        return ir::window_op(graph, Op::kConv2dGradInput, {dy, wt}, w, xs, loc);
      };
      auto grad_weight = [&](const Tensor& xx, const Tensor& dy) {
        return ir::window_op(graph, Op::kConv2dGradWeight, {xx, dy}, w, {}, loc);
      };
      if (n.op == Op::kConv2d) return {grad_input(gm, x(1), in_shape[0]), grad_weight(x(0), gm)};
      if (n.op == Op::kConv2dGradInput) return {conv(gm, x(1)), grad_weight(gm, x(0))};
      return {grad_input(x(1), gm, in_shape[0]), conv(x(0), gm)};
    }
    case Op::kGroupedMatmul: case Op::kGroupedMatmulGradWeight: {
      // Both are adjoints of one bilinear form B(x, w, dy) = Σ_r dy[r]·(x[r] w[e(r)]) (w's rows
      // and columns as attrs.axes says; "other" below is the form with the other axis):
      //   grouped_matmul(x, w):   dx = grouped_matmul(g, w) in the other form,
      //                           dw = grad_weight(x, g);
      //   grad_weight(x, dy):     dx = grouped_matmul(dy, g) in the other form,
      //                           d dy = grouped_matmul(x, g).
      // Half operands: g is rounded to their type, as a product's gradient is. No gradient
      // reaches the offsets.
      const DType half = graph.node(n.inputs[0]).dtype;
      const Tensor gm = is_half(half) ? cast(g, half, loc) : g;
      const int64_t axis = n.attrs.axes[0], other = 3 - axis;
      auto product = [&](Op op, const Tensor& a, const Tensor& b, int64_t form) {
        ir::Node p = ir::make_node(op, {a.id(), b.id(), n.inputs[2]}, loc);
        p.attrs.axes = {form};
        return ir::emit(graph, std::move(p));
      };
      if (n.op == Op::kGroupedMatmul)
        return {product(Op::kGroupedMatmul, gm, x(1), other), product(Op::kGroupedMatmulGradWeight, x(0), gm, axis),
                Tensor()};
      return {product(Op::kGroupedMatmul, x(1), gm, other), product(Op::kGroupedMatmul, x(0), gm, axis), Tensor()};
    }
    // max_pool2d routes g to each window's first arg-max (recomputed from x); avg_pool2d and
    // its adjoint are linear maps, each the other's transpose.
    case Op::kMaxPool2d: return {ir::window_op(graph, Op::kMaxPool2dGrad, {x(0), g}, n.attrs.window, {}, loc)};
    case Op::kAvgPool2d:
      return {ir::window_op(graph, Op::kAvgPool2dGrad, {g}, n.attrs.window, in_shape[0], loc)};
    case Op::kAvgPool2dGrad: return {ir::window_op(graph, Op::kAvgPool2d, {g}, n.attrs.window, {}, loc)};
    // Backward-only primitives and randomness: no gradient (no second derivatives yet).
    case Op::kRandom: case Op::kCrossEntropyGrad: case Op::kLayerNormGrad: case Op::kRmsNormGrad:
    case Op::kAttentionGrad: case Op::kGeluTanhGrad: case Op::kReluGrad: case Op::kSelectiveScanGrad:
    case Op::kMaxPool2dGrad:
      return std::vector<Tensor>(n.inputs.size());
  }
  // clang-format on
  return std::vector<Tensor>(n.inputs.size());
}

}  // namespace tg::autograd
