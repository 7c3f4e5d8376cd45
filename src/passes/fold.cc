// Constant folding and the unslice-sum → concat rewrite (see rewrite.h).
#include <algorithm>
#include <cmath>
#include <optional>

#include "ir/scalar.h"
#include "passes/rewrite.h"

namespace tg::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::Op;
using ir::OpKind;

/// A constant's values as the reference backend holds them: one value for a fill (of any
/// shape), else numel values in row-major order.
using Values = std::vector<double>;

/// The values of node `id` if it is a compile-time constant: a constant or arange leaf, seen
/// through reshapes and broadcasts. nullopt for anything else, and for dense values of more
/// than `limit` elements.
std::optional<Values> constant_values(const Graph& g, int32_t id, int64_t limit) {
  const Node& n = g.node(id);
  switch (n.op) {
    case Op::kConstant: {
      if (n.attrs.values.size() != 1 && n.numel() > limit) return std::nullopt;
      Values v(n.attrs.values.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = ir::to_dtype(n.attrs.values[i], n.dtype);
      return v;
    }
    case Op::kArange: {
      if (n.numel() > limit) return std::nullopt;
      Values v(static_cast<size_t>(n.numel()));
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = ir::to_dtype(n.attrs.values[0] + static_cast<double>(i) * n.attrs.values[1], n.dtype);
      return v;
    }
    case Op::kReshape:  // row-major order is unchanged
      return constant_values(g, n.inputs[0], limit);
    case Op::kBroadcastTo: {
      std::optional<Values> x = constant_values(g, n.inputs[0], limit);
      if (!x || x->size() == 1) return x;  // a broadcast fill is still a fill
      if (n.numel() > limit) return std::nullopt;
      const Shape& xs = g.node(n.inputs[0]).shape;
      const size_t lead = n.shape.size() - xs.size();
      Values v(static_cast<size_t>(n.numel()));
      for (size_t flat = 0; flat < v.size(); ++flat) {
        // Output index → source index: stretched axes (extent 1 in xs) read position 0.
        auto rest = static_cast<int64_t>(flat);
        int64_t src = 0, stride = 1;
        for (size_t i = n.shape.size(); i-- > 0;) {
          const int64_t idx = rest % n.shape[i];
          rest /= n.shape[i];
          if (i < lead) continue;
          const int64_t extent = xs[i - lead];
          src += (extent == 1 ? 0 : idx) * stride;
          stride *= extent;
        }
        v[flat] = (*x)[static_cast<size_t>(src)];
      }
      return v;
    }
    default: return std::nullopt;
  }
}

bool foldable(Op op) {
  const OpKind kind = ir::op_info(op).kind;
  return kind == OpKind::kUnary || kind == OpKind::kBinary || kind == OpKind::kCompare || op == Op::kCast ||
         op == Op::kWhere;
}

/// The constant node `n` (an elementwise node whose inputs are in `out`) folds to, if any.
std::optional<Node> fold(const Graph& out, const Node& n, int64_t limit) {
  if (is_half(n.dtype)) return std::nullopt;  // bf16/f16 values are never leaves (graph.cc)
  std::vector<Values> in;
  bool fill = true;
  for (int32_t id : n.inputs) {
    std::optional<Values> v = constant_values(out, id, limit);
    if (!v) return std::nullopt;
    fill = fill && v->size() == 1;
    in.push_back(std::move(*v));
  }
  if (!fill && n.numel() > limit) return std::nullopt;
  Values result(fill ? 1 : static_cast<size_t>(n.numel()));
  const OpKind kind = ir::op_info(n.op).kind;
  for (size_t i = 0; i < result.size(); ++i) {
    auto at = [&](size_t k) { return in[k].size() == 1 ? in[k][0] : in[k][i]; };
    double r = 0;
    if (kind == OpKind::kUnary)
      r = ir::eval_unary(n.op, at(0));
    else if (kind == OpKind::kBinary || kind == OpKind::kCompare)
      r = ir::eval_binary(n.op, at(0), at(1));
    else if (n.op == Op::kCast)
      r = ir::to_dtype(at(0), n.dtype);
    else
      r = at(0) != 0.0 ? at(1) : at(2);  // where
    // The reference backend keeps out-of-range i32 values in double where the CPU wraps or
    // saturates: leave those to run time so that neither backend's result changes.
    if (n.dtype == DType::kI32 && !(r >= -2147483648.0 && r <= 2147483647.0)) return std::nullopt;
    result[i] = r;
  }
  Node c;
  c.op = Op::kConstant;
  c.dtype = n.dtype;
  c.shape = n.shape;
  c.attrs.values = std::move(result);
  c.loc = n.loc;
  c.stage = n.stage;
  c.recompute = n.recompute;
  return c;
}

/// One unslice of an add tree: the range [start, start + len) of the sum's axis.
struct Piece {
  int64_t start;
  int64_t len;
  int32_t unslice;
};

/// The leaves of an add tree of unslices along `axis`, sorted by start; empty if not one.
struct Tree {
  int64_t axis = -1;
  std::vector<Piece> pieces;
};

}  // namespace

Graph fold_constants(const Graph& graph, std::vector<int32_t>& remap, int* rewrites, int64_t max_elements) {
  Graph out;
  int fired = 0;
  remap.assign(static_cast<size_t>(graph.size()), -1);
  for (int32_t id = 0; id < graph.size(); ++id) {
    Node n = graph.node(id);
    for (int32_t& in : n.inputs) in = remap[static_cast<size_t>(in)];
    if (foldable(n.op)) {
      if (std::optional<Node> c = fold(out, n, max_elements)) {
        remap[static_cast<size_t>(id)] = out.add_checked(std::move(*c));
        ++fired;
        continue;
      }
    }
    remap[static_cast<size_t>(id)] = out.add_checked(std::move(n));
  }
  carry_roots(graph, out, remap);
  if (rewrites != nullptr) *rewrites = fired;
  return out;
}

Graph concat_unslice_sums(const Graph& graph, std::vector<int32_t>& remap, int* rewrites) {
  const auto size = static_cast<size_t>(graph.size());
  // Consumers among live nodes (and the graph's roots): dead copies left by earlier passes
  // must not keep an inner add from being absorbed.
  std::vector<bool> live(size, false);
  std::vector<int> uses(size, 0);
  for (int32_t o : graph.outputs) {
    live[static_cast<size_t>(o)] = true;
    ++uses[static_cast<size_t>(o)];
  }
  for (const Graph::Update& u : graph.updates) {
    live[static_cast<size_t>(u.target)] = live[static_cast<size_t>(u.value)] = true;
    ++uses[static_cast<size_t>(u.value)];
  }
  for (size_t id = size; id-- > 0;) {
    if (graph.node(static_cast<int32_t>(id)).op == Op::kInput) live[id] = true;
    if (!live[id]) continue;
    for (int32_t in : graph.node(static_cast<int32_t>(id)).inputs) {
      live[static_cast<size_t>(in)] = true;
      ++uses[static_cast<size_t>(in)];
    }
  }

  // Bottom-up (ids are topological): each live add's tree, built from its inputs' trees.
  std::vector<Tree> trees(size);
  std::vector<bool> absorbed(size, false);  // an inner add whose tree its consumer took over
  for (size_t id = 0; id < size; ++id) {
    const Node& n = graph.node(static_cast<int32_t>(id));
    if (n.op != Op::kAdd || !live[id]) continue;
    Tree t;
    bool ok = true;
    for (int32_t in : n.inputs) {
      const Node& x = graph.node(in);
      Tree sub;
      if (x.op == Op::kUnslice && x.attrs.values[1] == 1.0) {
        sub.axis = x.attrs.axes[0];
        sub.pieces.push_back({static_cast<int64_t>(x.attrs.values[0]),
                              graph.node(x.inputs[0]).shape[static_cast<size_t>(sub.axis)], in});
      } else if (x.op == Op::kAdd && uses[static_cast<size_t>(in)] == 1 &&
                 !trees[static_cast<size_t>(in)].pieces.empty()) {
        sub = trees[static_cast<size_t>(in)];
      } else {
        ok = false;
        break;
      }
      if (t.axis >= 0 && t.axis != sub.axis) {
        ok = false;
        break;
      }
      t.axis = sub.axis;
      t.pieces.insert(t.pieces.end(), sub.pieces.begin(), sub.pieces.end());
    }
    if (!ok) continue;
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const Piece& a, const Piece& b) { return a.start < b.start; });
    for (size_t i = 1; i < t.pieces.size() && ok; ++i)
      ok = t.pieces[i].start >= t.pieces[i - 1].start + t.pieces[i - 1].len;
    if (!ok) continue;
    for (int32_t in : n.inputs)
      if (graph.node(in).op == Op::kAdd) absorbed[static_cast<size_t>(in)] = true;
    trees[id] = std::move(t);
  }

  Graph out;
  int fired = 0;
  remap.assign(size, -1);
  for (size_t id = 0; id < size; ++id) {
    Node n = graph.node(static_cast<int32_t>(id));
    for (int32_t& in : n.inputs) in = remap[static_cast<size_t>(in)];
    const Tree& t = trees[id];
    if (t.pieces.empty() || absorbed[id]) {
      remap[id] = out.add_checked(std::move(n));
      continue;
    }
    const auto axis = static_cast<size_t>(t.axis);
    std::vector<int32_t> parts;
    auto zeros = [&](int64_t len) {
      Node z;
      z.op = Op::kConstant;
      z.dtype = n.dtype;
      z.shape = n.shape;
      z.shape[axis] = len;
      z.attrs.values = {0.0};
      z.loc = n.loc;
      z.stage = n.stage;
      z.recompute = n.recompute;
      parts.push_back(out.add_checked(std::move(z)));
    };
    int64_t pos = 0;
    for (const Piece& p : t.pieces) {
      if (p.len == 0) continue;
      if (p.start > pos) zeros(p.start - pos);
      parts.push_back(remap[static_cast<size_t>(graph.node(p.unslice).inputs[0])]);
      pos = p.start + p.len;
    }
    if (pos < n.shape[axis] || parts.empty()) zeros(n.shape[axis] - pos);
    ++fired;
    if (parts.size() == 1) {  // one piece spanning the whole axis
      remap[id] = parts[0];
      continue;
    }
    Node c;
    c.op = Op::kConcat;
    c.dtype = n.dtype;
    c.shape = n.shape;
    c.inputs = std::move(parts);
    c.attrs.axes = {t.axis};
    c.loc = n.loc;
    c.stage = n.stage;
    c.recompute = n.recompute;
    remap[id] = out.add_checked(std::move(c));
  }
  carry_roots(graph, out, remap);
  if (rewrites != nullptr) *rewrites = fired;
  return out;
}

}  // namespace tg::passes
