// Dead-code elimination: keeps only what the program's outputs and updates need.
#pragma once
#include <vector>

#include "ir/graph.h"

namespace tg::passes {

/// Returns a copy of `graph` without nodes that no output or update reads, renumbered in
/// the same order. `remap[old_id]` is the new id, or -1 for a removed node. Input leaves
/// are always kept, so a program's inputs do not depend on what its function used.
ir::Graph eliminate_dead_code(const ir::Graph& graph, std::vector<int32_t>& remap);

}  // namespace tg::passes
