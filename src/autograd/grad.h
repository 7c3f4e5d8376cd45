// Reverse-mode autograd: appends the backward graph to the forward graph it differentiates.
#pragma once
#include <span>
#include <vector>

#include "ir/graph.h"
#include "tensorgrad/tensor.h"

namespace tg::autograd {

/// Appends d(loss)/d(wrt[i]) for every leaf in `wrt` to `graph` and returns their node ids
/// (-1 where `loss` does not depend on that leaf). `loss` must have exactly one element.
/// Gradients of a node with several consumers are summed; `stop_gradient`, comparisons,
/// argmax and integer-valued nodes pass no gradient.
std::vector<int32_t> append_gradients(ir::Graph& graph, int32_t loss, std::span<const int32_t> wrt);

/// The vector-Jacobian product of one node: given dL/d(out), one per result of a multi-output
/// node (invalid where a result receives none) and else exactly one, returns dL/d(input i) for
/// each input (invalid Tensors where an input receives no gradient). Written with other ops.
/// Never called for kResult nodes: append_gradients routes their gradient to their node's.
std::vector<Tensor> vjp(ir::Graph& graph, int32_t node, std::span<const Tensor> douts);

}  // namespace tg::autograd
