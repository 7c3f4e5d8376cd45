// Common-subexpression elimination and algebraic simplification (see rewrite.h).
#include "passes/rewrite.h"

#include <map>
#include <optional>
#include <tuple>

namespace tg::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::Op;

/// Everything that decides a node's value, in a comparable form.
using Key = std::tuple<int, int, Shape, std::vector<int32_t>, std::vector<int64_t>, bool, std::vector<double>, int, bool,
                       uint64_t>;

Key key_of(const Node& n) {
  return {static_cast<int>(n.op), static_cast<int>(n.dtype), n.shape, n.inputs, n.attrs.axes, n.attrs.keepdim,
          n.attrs.values, static_cast<int>(n.attrs.dtype), n.attrs.causal, n.attrs.seed};
}

void carry_roots(const Graph& in, Graph& out, const std::vector<int32_t>& remap) {
  for (int32_t o : in.outputs) out.outputs.push_back(remap[static_cast<size_t>(o)]);
  for (const Graph::Update& u : in.updates)
    out.updates.push_back({remap[static_cast<size_t>(u.target)], remap[static_cast<size_t>(u.value)]});
}

/// The scalar value of a constant, looking through broadcasts; nullopt if not one.
std::optional<double> scalar_value(const Graph& g, int32_t id) {
  const Node* n = &g.node(id);
  while (n->op == Op::kBroadcastTo || n->op == Op::kReshape) n = &g.node(n->inputs[0]);
  if (n->op != Op::kConstant || n->attrs.values.size() != 1) return std::nullopt;
  return n->attrs.values[0];
}

/// If `n` (inputs already in `out`) is an identity by an algebraic rule, the node it equals.
std::optional<int32_t> identity_of(const Graph& out, const Node& n) {
  auto is = [&](size_t i, double v) { return scalar_value(out, n.inputs[i]) == std::optional<double>(v); };
  switch (n.op) {
    case Op::kMul:
      if (is(1, 1.0)) return n.inputs[0];
      if (is(0, 1.0)) return n.inputs[1];
      return std::nullopt;
    case Op::kAdd:
      if (is(1, 0.0)) return n.inputs[0];
      if (is(0, 0.0)) return n.inputs[1];
      return std::nullopt;
    case Op::kSub:
      if (is(1, 0.0)) return n.inputs[0];
      return std::nullopt;
    case Op::kDiv:
      if (is(1, 1.0)) return n.inputs[0];
      return std::nullopt;
    case Op::kReshape:
      if (out.node(n.inputs[0]).shape == n.shape) return n.inputs[0];
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

std::vector<int32_t> compose(const std::vector<int32_t>& first, const std::vector<int32_t>& second) {
  std::vector<int32_t> out(first.size(), -1);
  for (size_t i = 0; i < first.size(); ++i)
    if (first[i] >= 0) out[i] = second[static_cast<size_t>(first[i])];
  return out;
}

Graph eliminate_common_subexpressions(const Graph& graph, std::vector<int32_t>& remap) {
  Graph out;
  remap.assign(static_cast<size_t>(graph.size()), -1);
  std::map<Key, int32_t> seen;
  for (int32_t id = 0; id < graph.size(); ++id) {
    Node n = graph.node(id);
    for (int32_t& in : n.inputs) in = remap[static_cast<size_t>(in)];
    const bool binding = n.op == Op::kInput || n.op == Op::kParam || n.op == Op::kState;
    if (!binding) {
      auto [it, fresh] = seen.emplace(key_of(n), -1);
      if (!fresh) {
        remap[static_cast<size_t>(id)] = it->second;
        continue;
      }
      it->second = out.add_checked(std::move(n));
      remap[static_cast<size_t>(id)] = it->second;
      continue;
    }
    remap[static_cast<size_t>(id)] = out.add_checked(std::move(n));
  }
  carry_roots(graph, out, remap);
  return out;
}

Graph simplify(const Graph& graph, std::vector<int32_t>& remap) {
  Graph out;
  remap.assign(static_cast<size_t>(graph.size()), -1);
  for (int32_t id = 0; id < graph.size(); ++id) {
    Node n = graph.node(id);
    for (int32_t& in : n.inputs) in = remap[static_cast<size_t>(in)];
    if (n.op == Op::kReshape && out.node(n.inputs[0]).op == Op::kReshape)
      n.inputs[0] = out.node(n.inputs[0]).inputs[0];  // reshape∘reshape = one reshape
    if (n.op == Op::kPermute && out.node(n.inputs[0]).op == Op::kPermute) {
      // out axis i = inner axis order[i] = source axis inner_order[order[i]].
      const Node& inner = out.node(n.inputs[0]);
      std::vector<int64_t> composed(n.attrs.axes.size());
      bool identity = true;
      for (size_t i = 0; i < composed.size(); ++i) {
        composed[i] = inner.attrs.axes[static_cast<size_t>(n.attrs.axes[i])];
        identity = identity && composed[i] == static_cast<int64_t>(i);
      }
      n.inputs[0] = inner.inputs[0];
      n.attrs.axes = composed;
      if (identity) {
        remap[static_cast<size_t>(id)] = n.inputs[0];
        continue;
      }
    }
    if (std::optional<int32_t> same = identity_of(out, n); same && out.node(*same).shape == n.shape &&
                                                            out.node(*same).dtype == n.dtype) {
      remap[static_cast<size_t>(id)] = *same;
      continue;
    }
    remap[static_cast<size_t>(id)] = out.add_checked(std::move(n));
  }
  carry_roots(graph, out, remap);
  return out;
}

}  // namespace tg::passes
