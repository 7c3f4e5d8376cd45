// Fusion: partitions a graph's live nodes into kernel groups and orders them. A group is
// what a backend runs as one kernel:
//   - kElementwise: elementwise nodes (unary/binary/compare rows of ops.def, cast, where) of
//     one shape, run as a single pass over memory; values used only inside the group never
//     touch memory. Only its `outputs` are materialised.
//     A Sum whose input is in the group may join it as a reduction sink (see
//     reduction_sink): the group accumulates that value instead of storing it.
//   - kSingle: any other node (matmul, reduction, norm, attention, view ops, leaves).
// Groups are merged greedily in node order: an elementwise node joins the groups of its
// same-shaped elementwise producers when no path between them leaves the merged set (a path
// through an outside node would make the group both before and after that node). The group
// DAG is then ordered topologically, earliest first node first, so memory behaves like the
// original order. A recompute region's copies (passes/remat.cc) never share a group with
// forward nodes, which would compute them in the forward.
//
// With fusion disabled every live node is its own group (the debug configuration that the
// tests compare against).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace tg::passes {

struct KernelGroup {
  enum class Kind : uint8_t { kElementwise, kSingle };
  Kind kind = Kind::kSingle;
  std::vector<int32_t> nodes;    // ascending ids (a valid order inside the group)
  std::vector<int32_t> outputs;  // nodes read outside the group, by graph outputs or updates
};

struct Fusion {
  std::vector<KernelGroup> groups;  // execution order
  std::vector<int32_t> group_of;    // per node: index into groups, -1 for dead nodes
};

/// Whether `op` can be part of an elementwise group.
bool fusible(ir::Op op);
/// Whether `n` may end an elementwise group as a reduction sink: an f32 Sum whose kept axes
/// (extent > 1) all follow its reduced ones, so that over the group's flat index the value
/// at position i accumulates into output element i mod numel(n.shape); at most 4096 outputs,
/// each the sum of at least 16 values.
bool reduction_sink(const ir::Graph& graph, const ir::Node& n);

/// Live = reachable from graph.outputs or an update value. Leaves (params, inputs, state,
/// constants) are live groups of their own when reachable.
/// `reduction_sinks` false keeps every Sum a group of its own (for backends that do not
/// generate sinks yet).
Fusion fuse(const ir::Graph& graph, bool enabled = true, bool reduction_sinks = true);

}  // namespace tg::passes
