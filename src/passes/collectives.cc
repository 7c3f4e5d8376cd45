// Collectives as early as their operands allow (see rewrite.h): a bucket's all_reduce right
// after the backward has produced its last gradient, so a backend that runs collectives beside
// the computation overlaps them with the rest of the backward.
#include <algorithm>

#include "passes/rewrite.h"

namespace tg::passes {

using ir::Graph;

Graph place_collectives_early(const Graph& graph, std::vector<int32_t>& remap) {
  remap.assign(static_cast<size_t>(graph.size()), -1);
  Graph out;
  auto placed = [&](int32_t id) { return remap[static_cast<size_t>(id)] >= 0; };
  auto place = [&](int32_t id) {
    ir::Node n = graph.node(id);
    for (int32_t& in : n.inputs) in = remap[static_cast<size_t>(in)];
    remap[static_cast<size_t>(id)] = out.add_checked(std::move(n));
  };
  std::vector<int32_t> waiting;  // collectives not placed yet, in graph order
  for (int32_t id = 0; id < graph.size(); ++id)
    if (ir::is_collective(graph.node(id).op)) waiting.push_back(id);
  // Each node in order; after each, every waiting collective whose operands are all placed.
  // A collective is placed no later than its own position (its operands come before it), so
  // its readers still follow it and the order stays topological.
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
