// Inference rewrites of how products read their weights, ahead of hoisting (see hoist.h): a
// cast of a transposed weight becomes the transpose of the cast weight, and products that share
// their left operand read one concatenated weight. Both leave each value unchanged (a cast
// commutes with a permute or reshape; a product's columns are independent of each other).
#include <algorithm>
#include <map>
#include <tuple>

#include "passes/hoist.h"
#include "passes/rewrite.h"

namespace tg::passes {

using ir::Graph;
using ir::Node;
using ir::Op;

namespace {

bool layout_view(Op op) { return op == Op::kPermute || op == Op::kReshape; }

}  // namespace

namespace {
/// Whether `n` is computed from parameters, constants and aranges alone, given that of the nodes
/// before it; an i8 (quantized) parameter counts only with `quantized`.
char from_parameters(const Node& n, const std::vector<char>& before, bool quantized) {
  if (n.inputs.empty())
    return (n.op == Op::kParam && (quantized || n.dtype != DType::kI8)) || n.op == Op::kConstant ||
           n.op == Op::kArange;
  bool all = !ir::is_collective(n.op) && n.op != Op::kRandom;
  for (int32_t x : n.inputs) all = all && before[static_cast<size_t>(x)];
  return static_cast<char>(all);
}
}  // namespace

std::vector<char> parameter_only(const Graph& g) {
  // An i8 (quantized) parameter does not count: its dequantized value is recomputed in every run,
  // since holding it would hold the full-precision copy the quantization saves.
  std::vector<char> fixed;
  for (const Node& n : g.nodes()) fixed.push_back(from_parameters(n, fixed, false));
  return fixed;
}

namespace {

/// x [.., k] · wᵀ with w [n, k] a value computed from parameters alone (a weight's bf16 cast):
/// w's id, else -1. A bare f32 parameter, or a bf16/f16-stored one read as f32, is left alone:
/// its concatenation would be a second copy, larger than the weights it comes from.
int32_t weight_of(const Graph& g, const std::vector<char>& fixed, int32_t matmul) {
  const Node& m = g.node(matmul);
  if (m.op != Op::kMatmul || m.inputs[0] == m.inputs[1]) return -1;
  const Node& b = g.node(m.inputs[1]);
  if (b.op != Op::kPermute || b.shape.size() != 2 || b.attrs.axes != std::vector<int64_t>{1, 0}) return -1;
  const int32_t w = b.inputs[0];
  return fixed[static_cast<size_t>(w)] && !g.node(w).inputs.empty() && !ir::is_widened_param(g, w) &&
                 !fixed[static_cast<size_t>(m.inputs[0])]
             ? w
             : -1;
}

}  // namespace

Graph cast_weights_before_views(const Graph& graph, std::vector<int32_t>& remap) {
  Graph out;
  remap.assign(static_cast<size_t>(graph.size()), -1);
  std::map<std::pair<int32_t, DType>, int32_t> casts;  // (weight in out, dtype) → its cast
  // Per node of `out`: computed from parameters (i8 ones included) and constants alone. A
  // quantized weight's dequantized value is such a node: its cast is taken before the views too.
  std::vector<char> weight;
  const auto add = [&](Node node) {
    weight.push_back(from_parameters(node, weight, true));
    return out.add_checked(std::move(node));
  };
  for (int32_t id = 0; id < graph.size(); ++id) {
    Node n = graph.node(id);
    for (int32_t& in : n.inputs) in = remap[static_cast<size_t>(in)];
    if (n.op == Op::kCast) {
      std::vector<int32_t> chain;  // views from the cast's input down to the weight
      int32_t x = n.inputs[0];
      while (layout_view(out.node(x).op)) chain.push_back(x), x = out.node(x).inputs[0];
      if (!chain.empty() && weight[static_cast<size_t>(x)] && out.node(x).dtype == DType::kF32) {
        auto [it, fresh] = casts.emplace(std::pair{x, n.dtype}, -1);
        if (fresh) {
          Node c = n;
          c.inputs = {x};
          c.shape = out.node(x).shape;
          it->second = add(std::move(c));
        }
        int32_t prev = it->second;
        for (auto v = chain.rbegin(); v != chain.rend(); ++v) {
          Node view = out.node(*v);
          view.inputs = {prev};
          view.dtype = n.dtype;
          prev = add(std::move(view));
        }
        remap[static_cast<size_t>(id)] = prev;
        continue;
      }
    }
    remap[static_cast<size_t>(id)] = add(std::move(n));
  }
  carry_roots(graph, out, remap);
  return out;
}

Graph merge_sibling_products(const Graph& graph, std::vector<int32_t>& remap) {
  const std::vector<char> fixed = parameter_only(graph);
  // Products x · wᵢᵀ of one x (same dtype, shape and k), by their first member.
  std::map<std::tuple<int32_t, DType>, std::vector<int32_t>> by_operand;
  for (int32_t id = 0; id < graph.size(); ++id)
    if (const int32_t w = weight_of(graph, fixed, id); w >= 0)
      by_operand[{graph.node(id).inputs[0], graph.node(w).dtype}].push_back(id);
  std::map<int32_t, std::vector<int32_t>> siblings;  // first member → all members
  for (auto& [key, members] : by_operand)
    if (members.size() > 1) siblings[members[0]] = members;

  Graph out;
  remap.assign(static_cast<size_t>(graph.size()), -1);
  // Copies `id` (and, for a fixed value, what it reads) unless already copied.
  auto copy = [&](auto&& self, int32_t id) -> int32_t {
    int32_t& r = remap[static_cast<size_t>(id)];
    if (r >= 0) return r;
    Node n = graph.node(id);
    for (int32_t& in : n.inputs) in = self(self, in);
    r = out.add_checked(std::move(n));
    return r;
  };
  for (int32_t id = 0; id < graph.size(); ++id) {
    if (remap[static_cast<size_t>(id)] >= 0) continue;  // a merged sibling, or pulled ahead
    const auto group = siblings.find(id);
    if (group == siblings.end()) {
      copy(copy, id);
      continue;
    }
    // concat(w₁, w₂, …) along n, transposed, one product, then each member's columns.
    const Node& first = graph.node(id);
    Node cat;
    cat.op = Op::kConcat;
    cat.attrs.axes = {0};
    cat.loc = first.loc;
    cat.stage = first.stage;
    std::vector<int64_t> widths;
    for (int32_t m : group->second) {
      const int32_t w = weight_of(graph, fixed, m);
      cat.inputs.push_back(copy(copy, w));  // fixed: pulled ahead with what it reads
      widths.push_back(graph.node(w).shape[0]);
    }
    Node t = graph.node(first.inputs[1]);
    t.inputs = {out.add(std::move(cat))};
    Node product = first;
    product.inputs = {copy(copy, first.inputs[0]), out.add(std::move(t))};
    const int32_t all = out.add(std::move(product));
    int64_t start = 0;
    for (size_t i = 0; i < widths.size(); ++i) {
      const int32_t m = group->second[i];
      Node s;
      s.op = Op::kSlice;
      s.inputs = {all};
      s.attrs.axes = {static_cast<int64_t>(first.shape.size()) - 1};
      s.attrs.values = {static_cast<double>(start), 1.0};
      s.loc = graph.node(m).loc;
      s.stage = graph.node(m).stage;
      s.shape = graph.node(m).shape;
      s.dtype = graph.node(m).dtype;
      remap[static_cast<size_t>(m)] = out.add_checked(std::move(s));
      start += widths[i];
    }
  }
  carry_roots(graph, out, remap);
  return out;
}

namespace {

/// `id`, or what it casts when it is a cast between float types (f32 and the half types).
int32_t under_float_cast(const Graph& g, int32_t id) {
  const Node& n = g.node(id);
  const auto floating = [](DType t) { return t == DType::kF32 || is_half(t); };
  return n.op == Op::kCast && floating(n.dtype) && floating(g.node(n.inputs[0]).dtype) ? n.inputs[0] : id;
}

/// The f32 parameter [rows, groups] that `v` spreads over [rows, groups, G]: v is (a broadcast of)
/// reshape [rows, groups, 1] of it. Else -1.
int32_t per_group(const Graph& g, int32_t v, int64_t rows, int64_t groups) {
  if (g.node(v).op == Op::kBroadcastTo) v = g.node(v).inputs[0];
  const Node& r = g.node(v);
  if (r.op != Op::kReshape || r.shape != Shape{rows, groups, 1}) return -1;
  const Node& p = g.node(r.inputs[0]);
  return p.op == Op::kParam && p.dtype == DType::kF32 && p.shape == Shape{rows, groups} ? r.inputs[0] : -1;
}

/// The i8 parameter [rows, k / 2] whose 4-bit codes `codes` [rows, groups, G] are, as
/// ir::unpack_int4 computes them: reshape of concat(reshape of low, reshape of high) along the
/// last axis, low = sub(where(lt(s, 0), s + 256, s), ·) and high a cast of a cast, s the cast to
/// f32 of the parameter. Else -1.
int32_t packed_codes(const Graph& g, const Node& codes, int64_t rows, int64_t k) {
  if (codes.op != Op::kReshape) return -1;
  const Node& c = g.node(codes.inputs[0]);
  if (c.op != Op::kConcat || c.inputs.size() != 2 || c.shape != Shape{rows, k / 2, 2}) return -1;
  const Node &lr = g.node(c.inputs[0]), &hr = g.node(c.inputs[1]);
  if (lr.op != Op::kReshape || hr.op != Op::kReshape) return -1;
  const Node &low = g.node(lr.inputs[0]), &high = g.node(hr.inputs[0]);
  if (low.op != Op::kSub || high.op != Op::kCast || g.node(high.inputs[0]).op != Op::kCast) return -1;
  const Node& w = g.node(low.inputs[0]);
  if (w.op != Op::kWhere) return -1;
  const Node& s = g.node(w.inputs[2]);
  if (s.op != Op::kCast || s.dtype != DType::kF32) return -1;
  const Node& q = g.node(s.inputs[0]);
  return q.op == Op::kParam && q.dtype == DType::kI8 && q.shape == Shape{rows, k / 2} ? s.inputs[0] : -1;
}

/// The parameters of a quantized weight as Param::tensor reads it, transposed: `b` is
///   permute{1,0} of reshape [N, K] of mul(codes [N, g, G], broadcast of reshape [N, g, 1] of scale f32 [N,
///   g])
/// with codes the cast to f32 of reshape [N, g, G] of q i8 [N, K] (8 bits), or, for 4 bits, that
/// mul plus the offsets spread alike and the codes unpacked from q i8 [N, K / 2] (ir::unpack_int4);
/// a float cast is allowed above the permute, the reshape, the add and the mul (the precision
/// policy's cast to bf16, wherever the inference rewrites put it). Else all -1.
struct QuantizedWeight {
  int32_t q = -1, scale = -1, offset = -1;
};
QuantizedWeight quantized_weight(const Graph& g, int32_t b) {
  const Node& t = g.node(under_float_cast(g, b));
  if (t.op != Op::kPermute || t.shape.size() != 2 || t.attrs.axes != std::vector<int64_t>{1, 0}) return {};
  const int64_t k = t.shape[0], rows = t.shape[1];
  const Node& r = g.node(under_float_cast(g, t.inputs[0]));
  if (r.op != Op::kReshape || r.shape != Shape{rows, k}) return {};
  const Node* m = &g.node(under_float_cast(g, r.inputs[0]));
  QuantizedWeight out;
  if (m->op == Op::kAdd && m->shape.size() == 3) {  // 4 bits: + offset
    const int64_t groups = m->shape[1];
    out.offset = per_group(g, m->inputs[1], rows, groups);
    m = &g.node(under_float_cast(g, m->inputs[0]));
    if (out.offset < 0) return {};
  }
  if (m->op != Op::kMul || m->shape.size() != 3 || m->shape[0] != rows || m->shape[1] * m->shape[2] != k)
    return {};
  const int64_t groups = m->shape[1];
  out.scale = per_group(g, m->inputs[1], rows, groups);
  const Node& codes = g.node(m->inputs[0]);
  if (out.offset >= 0) {
    out.q = packed_codes(g, codes, rows, k);
  } else if (codes.op == Op::kCast && codes.dtype == DType::kF32) {
    const Node& qr = g.node(codes.inputs[0]);
    const Node& q = g.node(qr.inputs.empty() ? codes.inputs[0] : qr.inputs[0]);
    if (qr.op == Op::kReshape && qr.shape == m->shape && q.op == Op::kParam && q.dtype == DType::kI8 &&
        q.shape == Shape{rows, k})
      out.q = qr.inputs[0];
  }
  return out.q >= 0 && out.scale >= 0 ? out : QuantizedWeight{};
}

}  // namespace

Graph quantized_products(const Graph& graph, std::vector<int32_t>& remap) {
  Graph out;
  remap.assign(static_cast<size_t>(graph.size()), -1);
  for (int32_t id = 0; id < graph.size(); ++id) {
    Node n = graph.node(id);
    for (int32_t& in : n.inputs) in = remap[static_cast<size_t>(in)];
    const Node& orig = graph.node(id);
    if (orig.op == Op::kMatmul) {
      const Shape& a = graph.node(orig.inputs[0]).shape;
      const QuantizedWeight w = quantized_weight(graph, orig.inputs[1]);
      if (w.q >= 0 && numel(a) / a.back() <= kQuantizedProductRows) {
        Node p = n;
        p.op = Op::kQuantMatmul;
        p.inputs = {n.inputs[0], remap[static_cast<size_t>(w.q)], remap[static_cast<size_t>(w.scale)]};
        if (w.offset >= 0) p.inputs.push_back(remap[static_cast<size_t>(w.offset)]);
        remap[static_cast<size_t>(id)] = out.add_checked(std::move(p));
        continue;
      }
    }
    remap[static_cast<size_t>(id)] = out.add_checked(std::move(n));
  }
  carry_roots(graph, out, remap);
  return out;
}

}  // namespace tg::passes
