// Reference kernels of the fused NN primitives (gather/scatter, softmax family,
// cross-entropy, norms, randomness, attention): direct double-precision loops that follow
// each op's definition in ops.def, with the backward primitives computed from their
// textbook formulas rather than from the forward code.
#pragma once
#include <vector>

#include "ir/graph.h"

namespace tg::backend::ref {

using Values = std::vector<double>;

/// Computes node `n` from its inputs' nodes and values; throws InputError for
/// out-of-range indices and targets.
Values compute_nn(const ir::Node& n, const std::vector<const ir::Node*>& in_nodes,
                  const std::vector<const Values*>& in);

/// The window ops (conv2d, the pools and their gradients; ref_conv.cc), likewise.
Values compute_window(const ir::Node& n, const std::vector<const ir::Node*>& in_nodes,
                      const std::vector<const Values*>& in);

}  // namespace tg::backend::ref
