// Common-subexpression elimination, algebraic simplification and the pass pipeline (see
// rewrite.h; constant folding and the unslice-sum rewrite are in fold.cc).
#include "passes/rewrite.h"

#include <bit>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "passes/dce.h"

namespace tg::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::Op;

/// Everything that decides a node's value, in a comparable form. Constant values compare by
/// their bits: NaN would break the map's ordering, and 0.0 and -0.0 are different constants.
using Key = std::tuple<int, int, Shape, std::vector<int32_t>, std::vector<int64_t>, bool,
                       std::vector<uint64_t>, int, bool, bool, uint64_t, ir::Window>;

Key key_of(const Node& n) {
  std::vector<uint64_t> bits(n.attrs.values.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = std::bit_cast<uint64_t>(n.attrs.values[i]);
  return {static_cast<int>(n.op), static_cast<int>(n.dtype), n.shape,         n.inputs,
          n.attrs.axes,           n.attrs.keepdim,           std::move(bits), static_cast<int>(n.attrs.dtype),
          n.attrs.causal,         n.attrs.reverse,           n.attrs.seed,    n.attrs.window};
}

/// If `n` (inputs already in `out`) is an identity by an algebraic rule, the node it equals.
std::optional<int32_t> identity_of(const Graph& out, const Node& n) {
  auto is = [&](size_t i, double v) {
    return ir::constant_value(out, n.inputs[i]) == std::optional<double>(v);
  };
  auto full_range = [&] {  // slice/unslice {start 0, step 1} between equal shapes
    return n.attrs.values[0] == 0.0 && n.attrs.values[1] == 1.0 && out.node(n.inputs[0]).shape == n.shape;
  };
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
    case Op::kNeg:
      if (out.node(n.inputs[0]).op == Op::kNeg) return out.node(n.inputs[0]).inputs[0];
      return std::nullopt;
    case Op::kReshape:
    case Op::kBroadcastTo:
      if (out.node(n.inputs[0]).shape == n.shape) return n.inputs[0];
      return std::nullopt;
    case Op::kCast:
      if (out.node(n.inputs[0]).dtype == n.dtype) return n.inputs[0];
      return std::nullopt;
    case Op::kSlice:
    case Op::kUnslice:
      if (full_range()) return n.inputs[0];
      return std::nullopt;
    default: return std::nullopt;
  }
}

}  // namespace

void carry_roots(const Graph& in, Graph& out, const std::vector<int32_t>& remap) {
  for (int32_t o : in.outputs) out.outputs.push_back(remap[static_cast<size_t>(o)]);
  for (const Graph::Update& u : in.updates)
    out.updates.push_back({remap[static_cast<size_t>(u.target)], remap[static_cast<size_t>(u.value)]});
}

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

/// Whether a permute only swaps the last two axes (a matrix transpose per batch).
bool swaps_last_two(const Node& n) {
  const auto r = n.attrs.axes.size();
  if (r < 2) return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if (n.attrs.axes[i] != static_cast<int64_t>(i)) return false;
  return n.attrs.axes[r - 2] == static_cast<int64_t>(r - 1) &&
         n.attrs.axes[r - 1] == static_cast<int64_t>(r - 2);
}

Graph simplify(const Graph& graph, std::vector<int32_t>& remap, int* rewrites) {
  Graph out;
  int fired = 0;
  remap.assign(static_cast<size_t>(graph.size()), -1);
  std::vector<int> readers(static_cast<size_t>(graph.size()), 0);
  for (const Node& n : graph.nodes())
    for (int32_t in : n.inputs) ++readers[static_cast<size_t>(in)];
  for (int32_t o : graph.outputs) readers[static_cast<size_t>(o)] += 2;
  for (const Graph::Update& u : graph.updates) readers[static_cast<size_t>(u.value)] += 2;
  for (int32_t id = 0; id < graph.size(); ++id) {
    Node n = graph.node(id);
    // (A·B)ᵀ = Bᵀ·Aᵀ: a transposed product read only through its transpose (a weight gradient
    // of x·Wᵀ) is computed in the layout it is read in; the operand transposes are free views.
    if (n.op == Op::kPermute && swaps_last_two(n) && graph.node(n.inputs[0]).op == Op::kMatmul &&
        readers[static_cast<size_t>(n.inputs[0])] == 1) {
      const Node& mm = graph.node(n.inputs[0]);
      out.stage = n.stage;  // Graph::add stamps these on the new nodes
      out.recompute = n.recompute;
      auto transpose = [&](int32_t x) {
        Node t = n;
        t.inputs = {remap[static_cast<size_t>(x)]};
        t.attrs.axes.resize(out.node(t.inputs[0]).shape.size());
        for (size_t i = 0; i < t.attrs.axes.size(); ++i) t.attrs.axes[i] = static_cast<int64_t>(i);
        std::swap(t.attrs.axes[t.attrs.axes.size() - 2], t.attrs.axes.back());
        return out.add(std::move(t));
      };
      const int32_t bt = transpose(mm.inputs[1]), at = transpose(mm.inputs[0]);
      Node product = mm;
      product.inputs = {bt, at};
      remap[static_cast<size_t>(id)] = out.add(std::move(product));
      out.stage = ir::Stage::kForward;
      out.recompute = -1;
      ++fired;
      continue;
    }
    for (int32_t& in : n.inputs) in = remap[static_cast<size_t>(in)];
    // reshape∘reshape = one reshape; broadcast_to∘broadcast_to = one broadcast_to (a
    // broadcast of a broadcast reads the same source element).
    if ((n.op == Op::kReshape || n.op == Op::kBroadcastTo) && out.node(n.inputs[0]).op == n.op) {
      n.inputs[0] = out.node(n.inputs[0]).inputs[0];
      ++fired;
    }
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
      ++fired;
      if (identity) {
        remap[static_cast<size_t>(id)] = n.inputs[0];
        continue;
      }
    }
    if (std::optional<int32_t> same = identity_of(out, n);
        same && out.node(*same).shape == n.shape && out.node(*same).dtype == n.dtype) {
      remap[static_cast<size_t>(id)] = *same;
      ++fired;
      continue;
    }
    remap[static_cast<size_t>(id)] = out.add_checked(std::move(n));
  }
  carry_roots(graph, out, remap);
  if (rewrites != nullptr) *rewrites = fired;
  return out;
}

Graph optimize(const Graph& graph, std::vector<int32_t>& remap) {
  remap.resize(static_cast<size_t>(graph.size()));
  std::iota(remap.begin(), remap.end(), 0);
  Graph g = graph;
  auto apply = [&](auto&& pass) {
    std::vector<int32_t> step;
    g = pass(g, step);
    remap = compose(remap, step);
  };
  // Folding exposes identities (a folded 1 or 0) and simplifying exposes folds (a constant
  // behind a cancelled permute); each round uncovers fewer, so a few rounds reach the fixed point.
  for (int round = 0; round < 4; ++round) {
    int simplified = 0, folded = 0;
    apply([&](const Graph& in, std::vector<int32_t>& r) { return simplify(in, r, &simplified); });
    apply([&](const Graph& in, std::vector<int32_t>& r) { return fold_constants(in, r, &folded); });
    if (simplified + folded == 0) break;
  }
  apply([](const Graph& in, std::vector<int32_t>& r) { return eliminate_dead_code(in, r); });
  apply([](const Graph& in, std::vector<int32_t>& r) { return concat_unslice_sums(in, r); });
  apply([](const Graph& in, std::vector<int32_t>& r) { return eliminate_common_subexpressions(in, r); });
  apply([](const Graph& in, std::vector<int32_t>& r) { return rematerialize(in, r); });
  apply([](const Graph& in, std::vector<int32_t>& r) { return eliminate_dead_code(in, r); });
  apply([](const Graph& in, std::vector<int32_t>& r) { return place_collectives_early(in, r); });
  return g;
}

}  // namespace tg::passes
