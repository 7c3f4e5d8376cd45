// Graph rewrites that leave every result unchanged: algebraic simplification, constant
// folding, the gradient-of-split rewrite (a sum of unslices → one concat) and
// common-subexpression elimination. Each copies the graph forward, renumbering like DCE, and
// `remap[old] = new` says where each old node went (possibly to an earlier, equal node).
// Outputs and updates are carried through the remap; run DCE afterwards to drop what the
// rewrite made unreachable. `rewrites`, when given, receives how many rewrites fired.
// A node a rewrite makes in place of another takes that node's `stage` and `recompute`, so
// memory reports and recompute regions see it where the node it replaces was.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace tg::passes {

/// Merges nodes that compute the same thing: same op, dtype, shape, attrs and (already
/// merged) inputs. Input/param/state leaves are never merged (each is its own binding).
ir::Graph eliminate_common_subexpressions(const ir::Graph& graph, std::vector<int32_t>& remap);

/// x·1, 1·x, x+0, 0+x, x−0, x/1 → x; neg(neg(x)) → x; reshape∘reshape → one reshape;
/// broadcast_to∘broadcast_to → one broadcast_to; permute∘permute → one permute (or nothing
/// when they cancel); a reshape or broadcast_to to the input's own shape, a cast to the
/// input's own dtype and a slice/unslice of the full range with step 1 → the input.
/// x·0 is deliberately kept: it is NaN, not 0, where x is NaN or ±inf.
ir::Graph simplify(const ir::Graph& graph, std::vector<int32_t>& remap, int* rewrites = nullptr);

/// Dense constants larger than this are neither read nor produced by constant folding.
inline constexpr int64_t kMaxFoldedElements = 4096;

/// Constant folding: an elementwise node (a unary, binary or compare row of ops.def, cast,
/// where) whose inputs are all constants (constant or arange leaves, possibly through
/// reshape/broadcast_to) becomes a constant holding exactly what the reference backend
/// computes for it. When every input is a one-value fill the result stays a fill (one value,
/// any shape); otherwise it is folded only up to `max_elements` values. An i32 result that
/// does not fit in 32 bits is left alone (the backends disagree on overflow). Nothing that
/// reads an input, param, state or random node is ever folded.
ir::Graph fold_constants(const ir::Graph& graph, std::vector<int32_t>& remap, int* rewrites = nullptr,
                         int64_t max_elements = kMaxFoldedElements);

/// The gradient of a split: autograd turns `q, k, v = slice(x)` into
/// add(add(unslice(dq), unslice(dk)), unslice(dv)). An add tree whose leaves are all unslices
/// along one axis with step 1 and pairwise disjoint ranges (its inner adds read by nothing
/// else) becomes one concat of the pieces in order, with zero fills for uncovered gaps.
/// Consumers are counted over the live part of the graph only.
ir::Graph concat_unslice_sums(const ir::Graph& graph, std::vector<int32_t>& remap, int* rewrites = nullptr);

/// Collectives (all_reduce, reduce_scatter, …) moved up to just after their last operand, so a
/// bucket of gradients is sent while the backward goes on. Part of optimize(), last.
ir::Graph place_collectives_early(const ir::Graph& graph, std::vector<int32_t>& remap);

/// The whole rewriting pipeline of a lowering: simplify and fold until neither changes
/// anything (a few rounds at most), DCE, unslice sums → concat, CSE, remat, DCE, collectives early.
ir::Graph optimize(const ir::Graph& graph, std::vector<int32_t>& remap);

/// Backward elementwise nodes that read a forward elementwise value get their own copy of
/// that value's elementwise cone (≤ 24 nodes, resting on at most one full-size stored value),
/// so fusion recomputes it inside the backward group instead of the forward group storing it:
/// a tanh-GELU then keeps its pre-activation alone instead of eleven intermediates. Runs
/// after CSE (which would merge the copies back). Part of optimize().
/// Backward and optimizer nodes that read a value of a recompute region (Node::recompute ≥ 0,
/// tg::Recompute) read a copy instead, computed from the copies of the region values it
/// needs and the stored region inputs, appended before its first reader; the region's
/// outputs (values forward ops outside it read) stay stored.
ir::Graph rematerialize(const ir::Graph& graph, std::vector<int32_t>& remap);

/// remap_ab[i] = remap_b[remap_a[i]] (−1 stays −1): the composition of two passes.
std::vector<int32_t> compose(const std::vector<int32_t>& first, const std::vector<int32_t>& second);

/// Copies `in`'s outputs and updates into `out` through `remap` (for the passes above).
void carry_roots(const ir::Graph& in, ir::Graph& out, const std::vector<int32_t>& remap);

}  // namespace tg::passes
