// Collectives as early as their operands allow (see rewrite.h): a bucket's all_reduce right
// after the backward has produced its last gradient, so a backend that runs collectives beside
// the computation overlaps them with the rest of the backward.
#include <algorithm>

#include "passes/rewrite.h"

namespace tg::passes {

using ir::Graph;

namespace {

/// Data movement that may go up with the collective it feeds (ZeRO's flat bucket: gradients
/// reshaped, padded and concatenated before the reduce_scatter).
bool movable(ir::Op op) {
  return op == ir::Op::kReshape || op == ir::Op::kConcat || op == ir::Op::kConstant ||
         op == ir::Op::kBroadcastTo;
}

}  // namespace

Graph place_collectives_early(const Graph& graph, std::vector<int32_t>& remap) {
  remap.assign(static_cast<size_t>(graph.size()), -1);
  // What moves up: the collectives, and data movement that only they (or other such nodes)
  // read, found from the last node back.
  std::vector<std::vector<int32_t>> readers(static_cast<size_t>(graph.size()));
  for (int32_t id = 0; id < graph.size(); ++id)
    for (int32_t in : graph.node(id).inputs) readers[static_cast<size_t>(in)].push_back(id);
  std::vector<char> moves(static_cast<size_t>(graph.size()), 0);
  for (int32_t id = graph.size(); id-- > 0;) {
    const ir::Op op = graph.node(id).op;
    const auto& r = readers[static_cast<size_t>(id)];
    moves[static_cast<size_t>(id)] =
        ir::is_collective(op) ||
        (movable(op) && !r.empty() &&
         std::all_of(r.begin(), r.end(), [&](int32_t x) { return moves[static_cast<size_t>(x)] != 0; }));
  }
  Graph out;
  auto placed = [&](int32_t id) { return remap[static_cast<size_t>(id)] >= 0; };
  auto place = [&](int32_t id) {
    ir::Node n = graph.node(id);
    for (int32_t& in : n.inputs) in = remap[static_cast<size_t>(in)];
    remap[static_cast<size_t>(id)] = out.add_checked(std::move(n));
  };
  std::vector<int32_t> waiting;  // nodes that move up, not placed yet, in graph order
  for (int32_t id = 0; id < graph.size(); ++id)
    if (moves[static_cast<size_t>(id)]) waiting.push_back(id);
  // Each node in order; after each, every waiting node whose operands are all placed (in graph
  // order, so a concat goes before the collective that reads it). A node is placed no later
  // than its own position (its operands come before it), so its readers still follow it and
  // the order stays topological.
  for (int32_t id = 0; id < graph.size(); ++id) {
    if (placed(id)) continue;
    place(id);
    std::erase_if(waiting, [&](int32_t c) {
      const auto& ins = graph.node(c).inputs;
      if (placed(c) || !std::all_of(ins.begin(), ins.end(), placed)) return placed(c);
      place(c);
      return true;
    });
  }
  carry_roots(graph, out, remap);
  return out;
}

}  // namespace tg::passes
