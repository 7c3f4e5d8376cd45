// Graph rewrites that leave every result unchanged: common-subexpression elimination and
// algebraic simplification. Each copies the graph forward, renumbering like DCE, and
// `remap[old] = new` says where each old node went (possibly to an earlier, equal node).
// Outputs and updates are carried through the remap; run DCE afterwards to drop what the
// rewrite made unreachable.
#pragma once
#include <vector>

#include "ir/graph.h"

namespace tg::passes {

/// Merges nodes that compute the same thing: same op, dtype, shape, attrs and (already
/// merged) inputs. Input/param/state leaves are never merged (each is its own binding).
ir::Graph eliminate_common_subexpressions(const ir::Graph& graph, std::vector<int32_t>& remap);

/// x·1, 1·x, x+0, 0+x, x−0, x/1 → x; reshape∘reshape → one reshape; a reshape to the input's
/// own shape → the input; permute∘permute → one permute (or nothing when they cancel).
ir::Graph simplify(const ir::Graph& graph, std::vector<int32_t>& remap);

/// remap_ab[i] = remap_b[remap_a[i]] (−1 stays −1): the composition of two passes.
std::vector<int32_t> compose(const std::vector<int32_t>& first, const std::vector<int32_t>& second);

}  // namespace tg::passes
