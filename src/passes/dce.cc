// Dead-code elimination (see dce.h): a backward sweep marks live nodes, a forward sweep
// copies them with their inputs renumbered.
#include "passes/dce.h"

namespace tg::passes {

ir::Graph eliminate_dead_code(const ir::Graph& graph, std::vector<int32_t>& remap) {
  std::vector<bool> live(static_cast<size_t>(graph.size()), false);
  for (int32_t o : graph.outputs) live[static_cast<size_t>(o)] = true;
  for (const ir::Graph::Update& u : graph.updates) {
    live[static_cast<size_t>(u.target)] = true;
    live[static_cast<size_t>(u.value)] = true;
  }
  for (int32_t id = graph.size() - 1; id >= 0; --id) {
    if (graph.node(id).op == ir::Op::kInput) live[static_cast<size_t>(id)] = true;
    if (!live[static_cast<size_t>(id)]) continue;
    for (int32_t in : graph.node(id).inputs) live[static_cast<size_t>(in)] = true;
  }
  ir::Graph out;
  remap.assign(static_cast<size_t>(graph.size()), -1);
  for (int32_t id = 0; id < graph.size(); ++id) {
    if (!live[static_cast<size_t>(id)]) continue;
    ir::Node n = graph.node(id);
    for (int32_t& in : n.inputs) in = remap[static_cast<size_t>(in)];
    remap[static_cast<size_t>(id)] = out.add_checked(std::move(n));
  }
  for (int32_t o : graph.outputs) out.outputs.push_back(remap[static_cast<size_t>(o)]);
  for (const ir::Graph::Update& u : graph.updates)
    out.updates.push_back({remap[static_cast<size_t>(u.target)], remap[static_cast<size_t>(u.value)]});
  return out;
}

}  // namespace tg::passes
