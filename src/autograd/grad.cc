// Reverse-mode accumulation over the graph: which nodes need a gradient, the reverse
// topological sweep, and summing contributions from several consumers.
#include "autograd/grad.h"

#include "ir/api_util.h"

namespace tg::autograd {

std::vector<int32_t> append_gradients(ir::Graph& g, int32_t loss, std::span<const int32_t> wrt) {
  const ir::Node loss_node = g.node(loss);  // a copy: appending nodes moves the vector
  if (loss_node.numel() != 1 || loss_node.dtype != DType::kF32)
    throw ShapeError("[grad] the loss must be a single f32 value, got " +
                     std::string(dtype_name(loss_node.dtype)) + shape_str(loss_node.shape) + " (at " +
                     ir::loc_str(loss_node.loc) + ")");
  // Forward sweep: a node needs a gradient if it is a requested leaf or reads one, and
  // carries real numbers through a differentiable op.
  const int32_t count = loss + 1;
  std::vector<bool> needs(static_cast<size_t>(count), false);
  for (int32_t w : wrt)
    if (w < count) needs[static_cast<size_t>(w)] = true;
  for (int32_t id = 0; id < count; ++id) {
    const ir::Node& n = g.node(id);
    // f32, bf16 and f16 values carry gradients (always f32: see the cast VJP).
    const bool real = n.dtype == DType::kF32 || is_half(n.dtype);
    if (!real || n.op == ir::Op::kStopGradient) continue;
    for (int32_t in : n.inputs)
      needs[static_cast<size_t>(id)] = needs[static_cast<size_t>(id)] || needs[static_cast<size_t>(in)];
  }

  std::vector<Tensor> grads(static_cast<size_t>(count));
  // A multi-output node's gradient: one per result, gathered from its kResult nodes.
  std::vector<std::vector<Tensor>> result_grads(static_cast<size_t>(count));
  if (needs[static_cast<size_t>(loss)])
    grads[static_cast<size_t>(loss)] = ir::broadcast_if_needed(
        ir::scalar_constant(g, 1.0, DType::kF32, loss_node.loc), loss_node.shape, loss_node.loc);

  // Reverse sweep. Node ids are topological, so when we reach a node every consumer
  // (which has a larger id) has already added its contribution.
  for (int32_t id = count - 1; id >= 0; --id) {
    const Tensor dout = grads[static_cast<size_t>(id)];
    if (g.node(id).op == ir::Op::kResult) {
      if (!dout.valid()) continue;
      const int32_t of = g.node(id).inputs[0];
      std::vector<Tensor>& rg = result_grads[static_cast<size_t>(of)];
      rg.resize(g.node(of).results.size());
      Tensor& acc = rg[static_cast<size_t>(g.node(id).attrs.axes[0])];
      acc = acc.valid() ? add(acc, dout, g.node(id).loc) : dout;
      continue;
    }
    std::vector<Tensor> douts = result_grads[static_cast<size_t>(id)];
    if (douts.empty() && dout.valid()) douts = {dout};
    if (douts.empty() || g.node(id).inputs.empty()) continue;
    std::vector<Tensor> dins = vjp(g, id, douts);
    const std::vector<int32_t> inputs = g.node(id).inputs;  // a copy: add() below appends nodes
    const Loc loc = g.node(id).loc;
    for (size_t i = 0; i < dins.size(); ++i) {
      const int32_t in = inputs[i];
      if (!dins[i].valid() || !needs[static_cast<size_t>(in)]) continue;
      Tensor& acc = grads[static_cast<size_t>(in)];
      acc = acc.valid() ? add(acc, dins[i], loc) : dins[i];
    }
  }

  std::vector<int32_t> out;
  for (int32_t w : wrt) {
    const bool has = w < count && grads[static_cast<size_t>(w)].valid();
    out.push_back(has ? grads[static_cast<size_t>(w)].id() : -1);
  }
  return out;
}

}  // namespace tg::autograd
