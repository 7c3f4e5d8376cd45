// Memory planning: every value a program computes gets an offset in one arena, chosen from
// liveness, so buffers whose lifetimes do not overlap share memory. Parameters and optimizer
// state live in their own persistent buffers and are not planned here; inputs, outputs and
// update values are pinned (live for the whole step).
//
// This is the plan the backends' arenas are laid out from; `tests/passes/memory_plan_test.cc`
// simulates it and proves no two live buffers overlap.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace tg::passes {

struct MemoryPlan {
  static constexpr int64_t kAlignment = 64;  // bytes: one cache line, enough for any vector load
  std::vector<int64_t> offset;    // per node: byte offset in the arena, or -1 (persistent / no storage)
  std::vector<int64_t> bytes;     // per node: bytes reserved (aligned), 0 where offset is -1
  std::vector<int32_t> last_use;  // per node: last node id that reads it (size() = the step's end)
  int64_t arena_bytes = 0;        // planned peak
  int64_t total_bytes = 0;        // what one buffer per node would take (the no-reuse baseline)
};

/// A buffer's size and the steps it is live in, inclusive.
struct Interval {
  int64_t bytes = 0;
  int32_t first = 0, last = 0;
};
struct IntervalPlan {
  std::vector<int64_t> offset;  // per interval (aligned bytes), -1 for empty buffers
  int64_t arena_bytes = 0;
  int64_t total_bytes = 0;  // sum of the aligned sizes
};
/// Offsets for buffers given their live steps: at each step, buffers whose last step has
/// passed are freed first, then the buffers starting there take best-fit space. Buffers live
/// at a common step never overlap (tests/passes/memory_plan_test.cc checks it).
IntervalPlan plan_intervals(const std::vector<Interval>& intervals);
/// The step in [0, end] at which the most bytes are live (the first such), for reports of
/// what the arena holds at its peak.
int32_t busiest_step(const std::vector<Interval>& intervals, int32_t end);

/// Plans `graph` (topologically ordered, as every Graph is). Live range of a node: from its
/// own id to its last reader; pinned values to the end. Best-fit over a coalescing free list.
MemoryPlan plan_memory(const ir::Graph& graph);

}  // namespace tg::passes
