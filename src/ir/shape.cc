// Shape and dtype inference: one case per op (compiled with -Werror=switch, so a new row in
// ops.def does not build until it has its rule here). Runs at trace time for every node;
// errors name the op, the input shapes and the user's file:line.
#include <algorithm>
#include <string>

#include "ir/graph.h"
#include "ir/window.h"
#include "tensorgrad/errors.h"

namespace tg::ir {

[[noreturn]] void shape_fail(const Graph& g, const Node& n, const std::string& what) {
  std::string msg = "[";
  msg.append(op_name(n.op)).append("] ").append(what);
  if (!n.inputs.empty()) {
    msg += "; input shapes:";
    for (int32_t in : n.inputs)
      msg.append(" ").append(dtype_name(g.node(in).dtype)).append(shape_str(g.node(in).shape));
  }
  throw ShapeError(msg + " (at " + loc_str(n.loc) + ")");
}

namespace {

[[noreturn]] void fail(const Graph& g, const Node& n, const std::string& what) { shape_fail(g, n, what); }

void check_axes_valid(const Graph& g, const Node& n, const Shape& in, bool unique_sorted) {
  const auto rank = static_cast<int64_t>(in.size());
  for (size_t i = 0; i < n.attrs.axes.size(); ++i) {
    int64_t a = n.attrs.axes[i];
    if (a < 0 || a >= rank)
      fail(g, n, "axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank));
    if (unique_sorted && i > 0 && a <= n.attrs.axes[i - 1]) fail(g, n, "axes must be sorted and unique");
  }
}

void infer_reduce(const Graph& g, Node& n, const Node& x) {
  if (n.attrs.axes.empty()) fail(g, n, "needs at least one axis");
  check_axes_valid(g, n, x.shape, true);
  n.shape.clear();
  for (int64_t i = 0; i < static_cast<int64_t>(x.shape.size()); ++i) {
    bool reduced = std::find(n.attrs.axes.begin(), n.attrs.axes.end(), i) != n.attrs.axes.end();
    if (!reduced)
      n.shape.push_back(x.shape[static_cast<size_t>(i)]);
    else if (n.attrs.keepdim)
      n.shape.push_back(1);
    if (reduced && x.shape[static_cast<size_t>(i)] == 0) fail(g, n, "cannot reduce an empty axis");
  }
}

/// A multi-output node's own type (see Node::results): f32 [Σ numel(result)], the one
/// allocation its results share. Results are 4-byte types so that an element offset is theirs.
void set_multi_output(Node& n) {
  int64_t total = 0;
  for (const ValueType& r : n.results) {
    if (dtype_size(r.dtype) != 4)
      throw Error(std::string("[") + op_name(n.op) + "] results must be 4-byte types");
    total += numel(r.shape);
  }
  n.dtype = DType::kF32;
  n.shape = {total};
}

}  // namespace

void infer(const Graph& g, Node& n) {
  auto in = [&](size_t i) -> const Node& { return g.node(n.inputs[i]); };
  const OpInfo& info = op_info(n.op);
  if (info.kind == OpKind::kUnary || info.kind == OpKind::kBinary || info.kind == OpKind::kCompare) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!dtype_allowed(info.dtypes, in(i).dtype))
        fail(g, n,
             std::string("does not accept dtype ") + dtype_name(in(i).dtype) +
                 (is_half(in(i).dtype) ? " (only casts, shape ops, matmul, attention and conv2d read bf16 "
                                         "and f16: cast to f32 first)"
                                       : ""));
      if (in(i).shape != in(0).shape || in(i).dtype != in(0).dtype)
        fail(g, n, "inputs must have identical shapes and dtypes (the API broadcasts them)");
    }
  }
  for (int64_t d : n.shape)
    if (d < 0) fail(g, n, "negative extent in shape " + shape_str(n.shape));
  if (n.op != Op::kResult)
    for (int32_t i : n.inputs)
      if (!g.node(i).results.empty())
        fail(g, n, "reads a multi-output node directly; read one of its results");

  // clang-format off
  switch (n.op) {
    // Leaves carry their shape and dtype from the tracer.
    case Op::kParam:
    case Op::kInput:
    case Op::kState: return;
    case Op::kConstant:
      if (n.attrs.values.size() != 1 && static_cast<int64_t>(n.attrs.values.size()) != n.numel())
        fail(g, n,
             "has " + std::to_string(n.attrs.values.size()) + " values for shape " + shape_str(n.shape));
      return;
    case Op::kArange:
      if (n.shape.size() != 1 || n.attrs.values.size() != 2) fail(g, n, "must be 1-D with {start, step}");
      return;

    case Op::kNeg: case Op::kAbs: case Op::kSign: case Op::kExp: case Op::kLog: case Op::kSqrt:
    case Op::kRsqrt: case Op::kSin: case Op::kCos: case Op::kTanh: case Op::kSigmoid:
    case Op::kRelu: case Op::kErf: case Op::kLog1p: case Op::kReciprocal: case Op::kLogicalNot: case Op::kGeluTanh:
    case Op::kStopGradient:
    case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kDiv: case Op::kPow:
    case Op::kMaximum: case Op::kMinimum: case Op::kLogicalAnd: case Op::kLogicalOr: case Op::kGeluTanhGrad: case Op::kReluGrad:
      n.shape = in(0).shape;
      n.dtype = in(0).dtype;
      return;
    case Op::kEq: case Op::kNe: case Op::kLt: case Op::kLe: case Op::kGt: case Op::kGe:
      n.shape = in(0).shape;
      n.dtype = DType::kBool;
      return;

    case Op::kCast:
      n.shape = in(0).shape;
      n.dtype = n.attrs.dtype;
      return;
    case Op::kWhere:
      if (in(0).dtype != DType::kBool) fail(g, n, "condition must be bool");
      if (in(1).dtype != in(2).dtype) fail(g, n, "both branches must have the same dtype");
      if (in(0).shape != in(1).shape || in(1).shape != in(2).shape)
        fail(g, n, "inputs must have identical shapes (the API broadcasts them)");
      n.shape = in(1).shape;
      n.dtype = in(1).dtype;
      return;

    case Op::kRotary:
      if (in(0).dtype != DType::kF32 || in(1).dtype != DType::kF32 || in(2).dtype != DType::kF32)
        fail(g, n, "x, cos and sin must be f32");
      if (in(0).shape != in(1).shape || in(0).shape != in(2).shape)
        fail(g, n, "x, cos and sin must have identical shapes (the API broadcasts the tables)");
      if (in(0).shape.empty() || in(0).shape.back() % 2 != 0) fail(g, n, "the last axis must have an even length");
      n.shape = in(0).shape;
      n.dtype = DType::kF32;
      return;

    case Op::kSum:
    case Op::kMax:
    case Op::kMin:
      if (in(0).dtype == DType::kBool) fail(g, n, "does not accept bool (cast first)");
      infer_reduce(g, n, in(0));
      n.dtype = in(0).dtype;
      return;
    case Op::kCumsum:
      if (n.attrs.axes.size() != 1) fail(g, n, "takes exactly one axis");
      if (in(0).dtype == DType::kBool) fail(g, n, "does not accept bool (cast first)");
      check_axes_valid(g, n, in(0).shape, false);
      n.shape = in(0).shape;
      n.dtype = in(0).dtype;
      return;
    case Op::kResult: {
      const ir::Node& of = in(0);
      if (n.attrs.axes.size() != 1 || of.results.empty() || n.attrs.axes[0] < 0 ||
          n.attrs.axes[0] >= static_cast<int64_t>(of.results.size()))
        fail(g, n, "must name one result of a multi-output node");
      const ValueType& r = of.results[static_cast<size_t>(n.attrs.axes[0])];
      n.shape = r.shape;
      n.dtype = r.dtype;
      return;
    }
    case Op::kArgmax:
      if (n.attrs.axes.size() != 1) fail(g, n, "takes exactly one axis");
      if (in(0).dtype == DType::kBool) fail(g, n, "does not accept bool (cast first)");
      infer_reduce(g, n, in(0));
      n.dtype = DType::kI32;
      return;

    case Op::kReshape:
      if (n.numel() != in(0).numel())
        fail(g, n, "cannot reshape " + std::to_string(in(0).numel()) + " elements to " + shape_str(n.shape));
      n.dtype = in(0).dtype;
      return;
    case Op::kPermute: {
      const Shape& xs = in(0).shape;
      if (n.attrs.axes.size() != xs.size())
        fail(g, n, "order " + shape_str(n.attrs.axes) + " does not match the rank");
      check_axes_valid(g, n, xs, false);
      std::vector<bool> seen(xs.size(), false);
      n.shape.clear();
      for (int64_t a : n.attrs.axes) {
        if (seen[static_cast<size_t>(a)]) fail(g, n, "order " + shape_str(n.attrs.axes) + " repeats an axis");
        seen[static_cast<size_t>(a)] = true;
        n.shape.push_back(xs[static_cast<size_t>(a)]);
      }
      n.dtype = in(0).dtype;
      return;
    }
    case Op::kBroadcastTo: {
      const Shape& xs = in(0).shape;
      if (xs.size() > n.shape.size()) fail(g, n, "cannot broadcast to the lower rank " + shape_str(n.shape));
      size_t lead = n.shape.size() - xs.size();
      for (size_t i = 0; i < xs.size(); ++i)
        if (xs[i] != 1 && xs[i] != n.shape[lead + i]) fail(g, n, "cannot broadcast to " + shape_str(n.shape));
      n.dtype = in(0).dtype;
      return;
    }
    case Op::kSlice:
    case Op::kUnslice: {
      if (n.attrs.axes.size() != 1 || n.attrs.values.size() != 2)
        fail(g, n, "needs {axis} and {start, step}");
      const Shape& xs = in(0).shape;
      check_axes_valid(g, n, xs, false);
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const auto start = static_cast<int64_t>(n.attrs.values[0]);
      const auto step = static_cast<int64_t>(n.attrs.values[1]);
      if (step <= 0) fail(g, n, "step must be positive");
      // The big side (slice input, unslice output) must contain every selected element.
      const Shape& big = n.op == Op::kSlice ? xs : n.shape;
      const Shape& small = n.op == Op::kSlice ? n.shape : xs;
      if (big.size() != small.size()) fail(g, n, "rank mismatch");
      for (size_t i = 0; i < big.size(); ++i)
        if (i != axis && big[i] != small[i]) fail(g, n, "extents differ off the sliced axis");
      if (start < 0 || (small[axis] > 0 && start + (small[axis] - 1) * step >= big[axis]))
        fail(g, n, "selection out of range");
      n.dtype = in(0).dtype;
      return;
    }
    case Op::kConcat: {
      if (n.inputs.empty()) fail(g, n, "needs at least one input");
      if (n.attrs.axes.size() != 1) fail(g, n, "needs {axis}");
      const Shape& first = in(0).shape;
      check_axes_valid(g, n, first, false);
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      n.shape = first;
      n.shape[axis] = 0;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const Shape& s = in(i).shape;
        if (in(i).dtype != in(0).dtype) fail(g, n, "inputs must share one dtype");
        if (s.size() != first.size()) fail(g, n, "inputs must share one rank");
        for (size_t d = 0; d < s.size(); ++d)
          if (d != axis && s[d] != first[d]) fail(g, n, "extents must match off the concat axis");
        n.shape[axis] += s[axis];
      }
      n.dtype = in(0).dtype;
      return;
    }
    case Op::kSample: {
      const Node& logits = in(0);
      if (logits.dtype != DType::kF32) fail(g, n, "logits must be f32");
      if (logits.shape.empty() || logits.shape.back() < 1)
        fail(g, n, "logits need a last axis of at least one token");
      if (logits.shape.back() > (int64_t{1} << 30))
        fail(g, n, "a vocabulary above 2^30 tokens is not supported");
      if (in(1).dtype != DType::kF32 || in(1).shape != Shape{4})
        fail(g, n, "params must be f32 [4] = {temperature, top_k, top_p, min_p}");
      if (in(2).dtype != DType::kI32 || in(2).shape != Shape{2})
        fail(g, n, "key must be i32 [2] = {seed, counter}");
      n.shape = Shape(logits.shape.begin(), logits.shape.end() - 1);
      n.dtype = DType::kI32;
      return;
    }
    case Op::kUpdateSlice: {
      const Node& dst = in(0);
      const Node& src = in(1);
      const Node& pos = in(2);
      if (n.attrs.axes.size() != 1) fail(g, n, "needs {axis}");
      check_axes_valid(g, n, dst.shape, false);
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      if (src.dtype != dst.dtype) fail(g, n, "source and destination must share one dtype");
      if (src.shape.size() != dst.shape.size()) fail(g, n, "source and destination must share one rank");
      for (size_t d = 0; d < dst.shape.size(); ++d)
        if (d != axis && src.shape[d] != dst.shape[d]) fail(g, n, "extents differ off the updated axis");
      if (src.shape[axis] > dst.shape[axis])
        fail(g, n, "the source is longer than the destination along the axis");
      if (pos.dtype != DType::kI32) fail(g, n, "the offset must be i32");
      const bool per_row = pos.shape.size() == 1 && axis > 0 && pos.shape[0] == dst.shape[0];
      if (!pos.shape.empty() && !per_row)
        fail(g, n, "the offset must be a scalar, or one per index of axis 0 (axis > 0)");
      n.shape = dst.shape;
      n.dtype = dst.dtype;
      return;
    }
    case Op::kGather:
    case Op::kScatterAdd: {
      const Node& x = in(0);
      const Node& idx = in(1);
      if (idx.dtype != DType::kI32) fail(g, n, "indices must be i32");
      if (n.attrs.axes.size() != 1) fail(g, n, "needs {axis}");
      // Gather: out = idx shape, x is the big side. ScatterAdd: src = idx shape, out is big.
      const Shape& big = n.op == Op::kGather ? x.shape : n.shape;
      const Shape& small = n.op == Op::kGather ? idx.shape : x.shape;
      if (n.op == Op::kScatterAdd && x.shape != idx.shape)
        fail(g, n, "source and indices must have one shape");
      if (big.size() != small.size()) fail(g, n, "indices must have the data's rank");
      check_axes_valid(g, n, big, false);
      for (size_t i = 0; i < big.size(); ++i)
        if (static_cast<int64_t>(i) != n.attrs.axes[0] && big[i] != small[i])
          fail(g, n, "extents differ off the indexed axis");
      if (x.dtype != DType::kF32 && n.op == Op::kScatterAdd) fail(g, n, "source must be f32");
      if (n.op == Op::kGather) n.shape = idx.shape;
      n.dtype = x.dtype;
      return;
    }
    case Op::kSoftmax:
    case Op::kLogSoftmax:
      if (in(0).dtype != DType::kF32) fail(g, n, "input must be f32");
      if (n.attrs.axes.size() != 1) fail(g, n, "needs {axis}");
      check_axes_valid(g, n, in(0).shape, false);
      if (n.attrs.causal &&
          (in(0).shape.size() < 2 || n.attrs.axes[0] + 1 != static_cast<int64_t>(in(0).shape.size())))
        fail(g, n, "a causal mask needs rank >= 2 and the last axis");
      if (n.attrs.causal && in(0).shape[in(0).shape.size() - 2] > in(0).shape.back())
        fail(g, n, "a causal mask needs at least as many keys as queries");
      n.shape = in(0).shape;
      n.dtype = DType::kF32;
      return;
    case Op::kCrossEntropy:
    case Op::kCrossEntropyGrad: {
      const Shape& ls = in(0).shape;
      if (ls.size() != 2 || in(0).dtype != DType::kF32) fail(g, n, "logits must be f32 [N, C]");
      if (in(1).dtype != DType::kI32 || in(1).shape != Shape{ls[0]}) fail(g, n, "targets must be i32 [N]");
      if (n.attrs.values.size() != 1) fail(g, n, "needs {ignore_index}");
      if (n.op == Op::kCrossEntropyGrad && (in(2).dtype != DType::kF32 || in(2).shape != Shape{ls[0]}))
        fail(g, n, "the loss gradient must be f32 [N]");
      n.shape = n.op == Op::kCrossEntropy ? Shape{ls[0]} : ls;
      n.dtype = DType::kF32;
      return;
    }
    case Op::kLayerNorm:
    case Op::kRmsNorm:
    case Op::kLayerNormGrad:
    case Op::kRmsNormGrad:
      if (in(0).shape.empty() || in(0).dtype != DType::kF32) fail(g, n, "input must be f32 with rank >= 1");
      if (n.inputs.size() == 2 && (in(1).shape != in(0).shape || in(1).dtype != DType::kF32))
        fail(g, n, "the gradient must match the input");
      if (n.attrs.values.size() != 1 || !(n.attrs.values[0] >= 0)) fail(g, n, "needs {eps >= 0}");
      n.shape = in(0).shape;
      n.dtype = DType::kF32;
      return;
    case Op::kRandom:
    case Op::kDropout: {
      const Node& key = in(n.op == Op::kRandom ? 0 : 1);
      if (key.dtype != DType::kI32 || key.numel() != 1) fail(g, n, "key must be an i32 scalar");
      if (n.op == Op::kDropout) {
        if (in(0).dtype != DType::kF32) fail(g, n, "input must be f32");
        if (n.attrs.values.size() != 1 || !(n.attrs.values[0] >= 0 && n.attrs.values[0] < 1))
          fail(g, n, "needs {p in [0, 1)}");
        n.shape = in(0).shape;
      }
      n.dtype = DType::kF32;
      return;
    }
    case Op::kSelectiveScan:
    case Op::kSelectiveScanGrad: {
      const Shape& u = in(0).shape;
      const Shape& a = in(2).shape;
      const Shape& bm = in(3).shape;
      for (size_t i = 0; i < 7; ++i)
        if (in(i).dtype != DType::kF32) fail(g, n, "operands must be f32");
      if (u.size() != 3) fail(g, n, "u must be [B, D, L]");
      if (in(1).shape != u) fail(g, n, "delta must have u's shape [B, D, L]");
      if (a.size() != 2 || a[0] != u[1]) fail(g, n, "A must be [D, N]");
      if (bm.size() != 4 || bm[0] != u[0] || bm[2] != a[1] || bm[3] != u[2])
        fail(g, n, "B must be [B, G, N, L] (or [B, N, L] at the API)");
      if (in(4).shape != bm) fail(g, n, "C must have B's shape");
      if (bm[1] < 1 || u[1] % bm[1] != 0)
        fail(g, n, "the channels must be a multiple of the groups of B and C");
      if (in(5).shape != Shape{u[1]} || in(6).shape != Shape{u[1]})
        fail(g, n, "D and delta_bias must be [D]");
      if (n.attrs.values.size() != 1) fail(g, n, "needs {softplus}");
      const Shape last{u[0], u[1], a[1]};
      n.results.clear();
      if (n.op == Op::kSelectiveScanGrad) {
        if (in(7).dtype != DType::kF32 || in(7).shape != u) fail(g, n, "dy must have u's shape [B, D, L]");
        if (in(8).dtype != DType::kF32 || in(8).shape != last) fail(g, n, "dlast must be [B, D, N]");
        const ir::Node& saved = in(9);
        if (saved.op != Op::kResult || g.node(saved.inputs[0]).op != Op::kSelectiveScan ||
            saved.attrs.axes.at(0) != 2)
          fail(g, n, "saved must be a selective_scan's third result");
        for (size_t i = 0; i < 7; ++i) n.results.push_back({DType::kF32, in(i).shape});
      } else {
        n.results = {{DType::kF32, u}, {DType::kF32, last}, {DType::kF32, {0}}};
      }
      set_multi_output(n);
      return;
    }
    case Op::kAllReduce: {
      if (n.inputs.empty()) fail(g, n, "needs at least one operand");
      n.results.clear();
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (in(i).dtype != DType::kF32 && in(i).dtype != DType::kI32) fail(g, n, "operands must be f32 or i32");
        n.results.push_back({in(i).dtype, in(i).shape});
      }
      set_multi_output(n);
      return;
    }
    case Op::kReduceScatter: case Op::kAllGather: case Op::kRankShard: {
      if (n.attrs.values.size() != 1 || !(n.attrs.values[0] >= 1) ||
          n.attrs.values[0] != static_cast<double>(static_cast<int64_t>(n.attrs.values[0])))
        fail(g, n, "needs {world}, a whole number of ranks >= 1");
      const auto world = static_cast<int64_t>(n.attrs.values[0]);
      if (in(0).dtype != DType::kF32 || in(0).shape.size() != 1) fail(g, n, "the operand must be f32 [N]");
      const int64_t len = in(0).shape[0];
      if (n.op != Op::kAllGather && len % world != 0)
        fail(g, n, "the operand's length must be a multiple of world (" + std::to_string(world) + ")");
      n.shape = {n.op == Op::kAllGather ? len * world : len / world};
      n.dtype = DType::kF32;
      return;
    }
    case Op::kAttentionAt: {
      const Shape& q = in(0).shape;
      const Shape& k = in(1).shape;
      for (size_t i = 0; i < 3; ++i)
        if (in(i).dtype != DType::kF32 || in(i).shape.size() != 4)
          fail(g, n, "q, k and v must be f32 [B, H, T, D]");
      if (k != in(2).shape) fail(g, n, "k and v must have one shape");
      if (q[0] != k[0] || q[3] != k[3]) fail(g, n, "batch and head size of q and k must match");
      if (k[1] == 0 || q[1] % k[1] != 0) fail(g, n, "q heads must be a multiple of kv heads");
      if (q[2] > k[2]) fail(g, n, "more queries than cache positions");
      if (in(3).dtype != DType::kI32 || in(3).shape != Shape{q[0]})
        fail(g, n, "pos must be i32 [B], one position per sequence");
      if (n.attrs.values.size() != 1) fail(g, n, "needs {scale}");
      n.shape = q;
      n.dtype = DType::kF32;
      return;
    }
    case Op::kAttention:
    case Op::kAttentionGrad: {
      const Shape& q = in(0).shape;
      const Shape& k = in(1).shape;
      // q, k, v (and dout) are all f32, all bf16 or all f16 (mixed precision); out and saved
      // are f32.
      const DType qt = in(0).dtype;
      const size_t operands = n.op == Op::kAttention ? 3 : 6;
      if (n.inputs.size() != operands && n.inputs.size() != operands + 1)
        fail(g, n, "takes q, k, v" + std::string(n.op == Op::kAttention ? "" : ", dout, out, saved") +
                       " and an optional key mask");
      for (size_t i = 0; i < std::min<size_t>(operands, 5); ++i) {
        const DType want = i == 4 ? DType::kF32 : qt;
        if ((qt != DType::kF32 && !is_half(qt)) || in(i).dtype != want || in(i).shape.size() != 4)
          fail(g, n, "operands must be [B, H, T, D], q, k, v and dout all f32, all bf16 or all f16, out f32");
      }
      if (k != in(2).shape) fail(g, n, "k and v must have one shape");
      if (q[0] != k[0] || q[3] != k[3]) fail(g, n, "batch and head size of q and k must match");
      if (k[1] == 0 || q[1] % k[1] != 0) fail(g, n, "q heads must be a multiple of kv heads");
      if (n.attrs.causal && q[2] > k[2]) fail(g, n, "a causal mask needs at least as many keys as queries");
      if (n.attrs.values.size() != 1) fail(g, n, "needs {scale}");
      if (ir::attention_masked(n) && (in(operands).dtype != DType::kBool || in(operands).shape != Shape{q[0], k[2]}))
        fail(g, n, "the key mask must be bool [B, S] = [" + std::to_string(q[0]) + ", " + std::to_string(k[2]) + "]");
      if (n.op == Op::kAttentionGrad) {
        if (in(3).shape != q) fail(g, n, "dout must have q's shape");
        if (in(4).shape != q) fail(g, n, "out must have q's shape");
        const ir::Node& saved = in(5);
        if (saved.op != Op::kResult || g.node(saved.inputs[0]).op != Op::kAttention ||
            saved.attrs.axes.at(0) != 1)
          fail(g, n, "saved must be an attention's second result");
        const ir::Node& fwd = g.node(saved.inputs[0]);
        if (ir::attention_masked(fwd) != ir::attention_masked(n) ||
            (ir::attention_masked(n) && fwd.inputs.back() != n.inputs.back()))
          fail(g, n, "must take its forward's key mask (or none, as the forward)");
        n.results = {{DType::kF32, q}, {DType::kF32, k}, {DType::kF32, k}};
      } else {
        n.results = {{DType::kF32, q}, {DType::kF32, {0}}};
      }
      set_multi_output(n);
      return;
    }
    case Op::kConv2d: case Op::kConv2dGradInput: case Op::kConv2dGradWeight:
    case Op::kMaxPool2d: case Op::kMaxPool2dGrad: case Op::kAvgPool2d: case Op::kAvgPool2dGrad:
      infer_window(g, n);
      return;
    case Op::kGroupedMatmul:
    case Op::kGroupedMatmulGradWeight: {
      // (x [R, K], w [E, N, K] or [E, K, N], offsets [E + 1]) or (x [R, K], dy [R, N], offsets).
      const bool grad = n.op == Op::kGroupedMatmulGradWeight;
      if (n.attrs.axes.size() != 1 || (n.attrs.axes[0] != 1 && n.attrs.axes[0] != 2))
        fail(g, n, "needs attrs.axes {1} or {2} (the weight axis contracted with x's)");
      const Node &x = in(0), &other = in(1), &offsets = in(2);
      if (offsets.dtype != DType::kI32 || offsets.shape.size() != 1 || offsets.shape[0] < 2)
        fail(g, n, "offsets must be i32 [experts + 1] with at least one expert, got " +
                       std::string(dtype_name(offsets.dtype)) + shape_str(offsets.shape));
      if (x.shape.size() != 2) fail(g, n, "x must be [rows, features], got " + shape_str(x.shape));
      if (x.dtype != other.dtype || (x.dtype != DType::kF32 && !is_half(x.dtype)))
        fail(g, n, "operands must be both f32, both bf16 or both f16");
      const int64_t experts = offsets.shape[0] - 1, rows = x.shape[0], k = x.shape[1];
      const bool w_nk = n.attrs.axes[0] == 2;  // w [E, N, K]
      if (grad) {
        if (other.shape.size() != 2 || other.shape[0] != rows)
          fail(g, n, "dy must be [" + std::to_string(rows) + ", N] (x's rows), got " + shape_str(other.shape));
        const int64_t cols = other.shape[1];
        n.shape = w_nk ? Shape{experts, cols, k} : Shape{experts, k, cols};
      } else {
        const Shape& w = other.shape;
        if (w.size() != 3 || w[0] != experts)
          fail(g, n, "w must be [" + std::to_string(experts) + ", ., .] (one matrix per expert of offsets), got " +
                         shape_str(w));
        if (w[static_cast<size_t>(n.attrs.axes[0])] != k)
          fail(g, n, "w " + shape_str(w) + " does not contract with x's " + std::to_string(k) + " features on axis " +
                         std::to_string(n.attrs.axes[0]));
        n.shape = {rows, w[w_nk ? 1 : 2]};
      }
      n.dtype = DType::kF32;
      return;
    }
    case Op::kQuantMatmul: {
      if (n.inputs.size() != 3 && n.inputs.size() != 4)
        fail(g, n, "takes (x, q, scale) or, for 4 bits, (x, q, scale, offset), not " +
                       std::to_string(n.inputs.size()) + " inputs");
      const Node &x = in(0), &q = in(1), &scale = in(2);
      const bool four = n.inputs.size() == 4;
      if (x.shape.empty() || x.shape.back() == 0 || (x.dtype != DType::kF32 && !is_half(x.dtype)))
        fail(g, n, "x must be f32, bf16 or f16 [..., K] with K > 0, got " + std::string(dtype_name(x.dtype)) +
                       shape_str(x.shape));
      const int64_t k = x.shape.back();
      if (four && k % 2 != 0) fail(g, n, "4-bit codes pack two values a byte: K must be even, got " + std::to_string(k));
      if (q.dtype != DType::kI8 || q.shape.size() != 2 || q.shape[1] * (four ? 2 : 1) != k)
        fail(g, n, "q must be i8 [N, " + (four ? std::to_string(k) + " / 2] (4-bit codes, two a byte)" : std::to_string(k) + "]") +
                       ", got " + dtype_name(q.dtype) + shape_str(q.shape));
      if (scale.dtype != DType::kF32 || scale.shape.size() != 2 || scale.shape[0] != q.shape[0] ||
          scale.shape[1] <= 0 || k % scale.shape[1] != 0 || (four && (k / scale.shape[1]) % 2 != 0))
        fail(g, n, "scale must be f32 [" + std::to_string(q.shape[0]) + ", K / group] for K = " + std::to_string(k) +
                       (four ? " (an even group)" : "") + ", got " + dtype_name(scale.dtype) + shape_str(scale.shape));
      if (four && (in(3).dtype != DType::kF32 || in(3).shape != scale.shape))
        fail(g, n, "offset must be f32 " + shape_str(scale.shape) + " as the scales, got " + dtype_name(in(3).dtype) +
                       shape_str(in(3).shape));
      n.shape = x.shape;
      n.shape.back() = q.shape[0];
      n.dtype = DType::kF32;
      return;
    }
    case Op::kMatmul: {
      const Shape& a = in(0).shape;
      const Shape& b = in(1).shape;
      if (a.size() < 2 || b.size() < 2) fail(g, n, "operands must have rank >= 2");
      // Both f32, both bf16 or both f16 (mixed precision: the product accumulates and is
      // stored in f32).
      if (in(0).dtype != in(1).dtype || (in(0).dtype != DType::kF32 && !is_half(in(0).dtype)))
        fail(g, n, "operands must be both f32, both bf16 or both f16");
      if (a[a.size() - 1] != b[b.size() - 2])
        fail(g, n,
             "inner extents differ: " + std::to_string(a.back()) + " vs " + std::to_string(b[b.size() - 2]));
      size_t batch_rank = std::max(a.size(), b.size()) - 2;
      n.shape.assign(batch_rank + 2, 1);
      for (size_t i = 0; i < batch_rank; ++i) {
        int64_t da = i + a.size() >= batch_rank + 2 ? a[i + a.size() - batch_rank - 2] : 1;
        int64_t db = i + b.size() >= batch_rank + 2 ? b[i + b.size() - batch_rank - 2] : 1;
        if (da != db && da != 1 && db != 1) fail(g, n, "batch extents cannot broadcast");
        n.shape[i] = da == 1 ? db : da;
      }
      n.shape[batch_rank] = a[a.size() - 2];
      n.shape[batch_rank + 1] = b.back();
      n.dtype = DType::kF32;
      return;
    }
  }
  // clang-format on
}

}  // namespace tg::ir
